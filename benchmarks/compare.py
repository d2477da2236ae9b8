"""Side-by-side comparison of result series (measured runs and imported reports), Django-free.

A series is one server's numbers over load levels:
    {"label", "kind" (measured | imported | published), "url", "backend", "quantization",
     "gpu", "gpu_count", "fingerprint": {...}, "levels": [engine.points.Point]}
Only comparable series belong together: the fingerprint holds what must match. The figures
compared, their units and which of two values wins come from the metric catalogue.
"""
from __future__ import annotations

from benchmarks.engine.catalogue import COMPARED, Figure
from benchmarks.engine.points import Point

FINGERPRINT_FIELDS = {
    "prompt_tokens": "prompt tokens",
    "output_tokens": "output tokens",
    "temperature": "temperature",
    "api": "API",
    "load_mode": "load mode",
    "gpu": "GPU model",
    "gpu_count": "GPU count",
}


def fingerprint(*, prompt_tokens, output_tokens, temperature, api, load_mode, gpu, gpu_count) -> dict:
    return {"prompt_tokens": _round(prompt_tokens), "output_tokens": _round(output_tokens),
            "temperature": temperature, "api": api, "load_mode": load_mode, "gpu": gpu or None,
            "gpu_count": gpu_count}


def _round(v):
    return None if v is None else round(float(v))


def differences(series: list[dict]) -> list[str]:
    """Plain-language warnings for every fingerprint field on which the series disagree.
    Unknown values (None, e.g. a temperature an imported file does not state) are reported
    as unknown rather than silently matched."""
    warnings = []
    for key, name in FINGERPRINT_FIELDS.items():
        values = [s["fingerprint"].get(key) for s in series]
        known = {v for v in values if v is not None}
        if len(known) > 1:
            detail = ", ".join(f"{s['label']}: {s['fingerprint'].get(key) if s['fingerprint'].get(key) is not None else 'unknown'}"
                               for s in series)
            warnings.append(f"Different {name} — {detail}. These numbers are not directly comparable.")
        elif known and None in values:
            missing = ", ".join(s["label"] for s in series if s["fingerprint"].get(key) is None)
            warnings.append(f"{name[0].upper() + name[1:]} unknown for {missing}; the others used {known.pop()}.")
    return warnings


def _level_key(level: Point):
    return ("rate", level.rate) if level.rate is not None else ("c", level.concurrency)


def _load_words(key) -> str:
    kind, value = key
    if kind == "rate":
        return f"at {value:g} requests/s"
    return f"at {value:g} concurrent user" + ("" if value == 1 else "s")


def _times(a: float, b: float) -> str:
    return f"{a / b:.2f}×"


def ratio_sentences(series: list[dict]) -> list[dict]:
    """Ratios in words between the first series and each other at the load levels both have,
    e.g. "llama.cpp decodes 1.75× faster than vLLM at 1 concurrent user". Each sentence keeps
    the two numbers it was computed from."""
    if len(series) < 2:
        return []
    base = series[0]
    base_levels = {_level_key(lv): lv for lv in base["levels"]}
    out = []
    for other in series[1:]:
        for lv in other["levels"]:
            key = _level_key(lv)
            b = base_levels.get(key)
            if b is None:
                continue
            out += [s for f in COMPARED if (s := sentence(f, other, lv, base, b, _load_words(key)))]
    return out


def sentence(f: Figure, x: dict, xl: Point, y: dict, yl: Point, where: str) -> dict | None:
    """One figure of two series at one level, in words: the better value (the catalogue's
    `better`) wins, by how many times, with both values; None when either lacks it."""
    a, b = xl.get(f), yl.get(f)
    if not a or not b:
        return None
    m = f.metric
    x_wins = a <= b if m.lower_is_better else a >= b
    winner, loser = (x, y) if x_wins else (y, x)
    ratio = _times(max(a, b), min(a, b))
    phrase = m.phrase or ("{winner} has a {ratio} lower {what} than {loser}" if m.lower_is_better
                          else "{winner} has a {ratio} higher {what} than {loser}")
    text = phrase.format(winner=winner["label"], loser=loser["label"], ratio=ratio, what=f.label)
    return {"text": f"{text} {where} ({a:.{m.digits}f} vs {b:.{m.digits}f} {f.quoted}).", "metric": f.name,
            "values": [a, b], "labels": [x["label"], y["label"]]}
