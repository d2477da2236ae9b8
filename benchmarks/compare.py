"""Side-by-side comparison of result series (measured runs and imported reports), Django-free.

A series is one server's numbers over load levels:
    {"label", "kind" (measured | imported | published), "url", "backend", "quantization",
     "gpu", "gpu_count", "fingerprint": {...}, "levels": [{"concurrency", "rate", "ttft_p50",
     "ttft_p90", "ttft_p99", "tpot_p50", "decode_tok_s", "aggregate_tok_s"}]}
Only comparable series belong together: the fingerprint holds what must match.
"""
from __future__ import annotations

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


def _level_key(level: dict):
    return ("rate", level["rate"]) if level.get("rate") is not None else ("c", level.get("concurrency"))


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
            out += _compare_level(other, lv, base, b, _load_words(key))
    return out


def _compare_level(x: dict, xl: dict, y: dict, yl: dict, where: str) -> list[dict]:
    sentences = []

    def add(metric, higher_is_better, verb_more, verb_less, unit):
        a, b = xl.get(metric), yl.get(metric)
        if not a or not b:
            return
        if higher_is_better:
            winner, loser, hi, lo = (x, y, a, b) if a >= b else (y, x, b, a)
            text = f"{winner['label']} {verb_more} {_times(hi, lo)} {verb_less} {loser['label']} {where}"
        else:
            winner, loser, lo, hi = (x, y, a, b) if a <= b else (y, x, b, a)
            text = f"{winner['label']} {verb_more} {_times(hi, lo)} {verb_less} {loser['label']} {where}"
        sentences.append({"text": text + f" ({a:.1f} vs {b:.1f} {unit}).", "metric": metric,
                          "values": [a, b], "labels": [x["label"], y["label"]]})

    add("decode_tok_s", True, "decodes", "faster than", "tok/s per stream")
    add("aggregate_tok_s", True, "delivers", "the aggregate output throughput of", "tok/s")
    add("ttft_p50", False, "reaches the first token", "sooner than", "ms TTFT p50")
    return sentences
