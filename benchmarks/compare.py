"""Side-by-side comparison of result series (measured runs and imported reports), Django-free.

A series is one server's numbers over load levels:
    {"label", "kind" (measured | imported | published), "url", "backend", "model", "quantization",
     "tool" (what measured it: "serving" here, an importer's kind), "run", "date", "gpu", "gpu_count",
     "fingerprint": {...}, "levels": [engine.points.Point],
     "launch": engine.launcher.LaunchReport | None}   # a server the lab started for the run
Only comparable series belong together: the fingerprint holds what must match. The figures
compared, their units and which of two values wins come from the metric catalogue.

Quality is one figure set per series, not per level: a quality entry is
    {"label", "kind", "url", "quality": engine.points.QualityPoint | None, "error": str,
     "is_reference": bool}
and two of its figures are compared only where `points.not_comparable` finds nothing against
it (the same text, windows, base model and reference); otherwise the sentence says why not.
"""
from __future__ import annotations

from benchmarks import csv_cells
import io

from benchmarks.advisor.backends import candidate_for
from benchmarks.advisor.facts import ineligible_reasons
from benchmarks.advisor.gpus import peak_of
from benchmarks.engine.catalogue import COMPARED, COMPARISON_QUALITY, LAUNCH_FIGURES, QUALITY_COMPARED, Figure, shown
from benchmarks.engine.points import AGAINST_REFERENCE, Point, QualityPoint, not_comparable
from benchmarks.engine.differences import Noise, judge
from benchmarks.engine.validity import CONTENDED, FLAG_NAMES


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


def _grouped(series: list[dict], value) -> str:
    """Each distinct value once with the series that have it: "100 for A and B; 128 for C"."""
    groups: dict = {}
    for s in series:
        v = value(s)
        groups.setdefault("unknown" if v is None else v, []).append(s["label"])
    return "; ".join(f"{v} for {_and(labels)}" for v, labels in groups.items())


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def model_differences(series: list[dict]) -> list[str]:
    """A different model, or variant of one model, said first: no ratio between them measures a
    server alone. A series' "model" is its base model's name (None: not stated), its
    "quantization" the variant's."""
    warnings = []
    models = {s.get("model") for s in series if s.get("model")}
    if len(models) > 1:
        warnings.append(f"Different models — {_grouped(series, lambda s: s.get('model'))}. The ratios below compare "
                        "different models (size and architecture), not only the servers.")
    elif models and any(not s.get("model") for s in series):
        missing = _and([s["label"] for s in series if not s.get("model")])
        warnings.append(f"Model not stated for {missing}; the others served {next(iter(models))}: "
                        "the ratios below may compare different models.")
    variants = {s.get("quantization") for s in series if s.get("quantization")}
    if len(variants) > 1:
        warnings.append(f"Different variants (quantization) — {_grouped(series, lambda s: s.get('quantization'))}: "
                        "speed and quality change with the variant as well as with the server.")
    return warnings


# What an offline benchmark's decode figure is, said once when it sits beside serving figures.
OFFLINE_TOOLS = {
    "llama-bench": "llama-bench's tg figures (e.g. tg128) time one sequence decoding in-process: no HTTP server, "
                   "no tokenization or sampling, no other request in flight. Serving decode per stream is read "
                   "from streamed responses over HTTP under load, so llama-bench is expected to be faster; the two "
                   "compare only at 1 concurrent user, and even there the gap is the serving overhead.",
}


def method_differences(series: list[dict]) -> list[str]:
    offline = {s.get("tool") for s in series if s.get("tool") in OFFLINE_TOOLS}
    serving = [s for s in series if s.get("tool") not in OFFLINE_TOOLS]
    if not offline or not serving:
        return []
    return [f"{_and([s['label'] for s in series if s.get('tool') == tool])}: {OFFLINE_TOOLS[tool]}"
            for tool in sorted(offline)]


def differences(series: list[dict]) -> list[str]:
    """Plain-language warnings: a different model or variant first, then a different method of
    measuring, then every fingerprint field on which the series disagree, each distinct value
    once with its series. Unknown values (None, e.g. a temperature an imported file does not
    state) are reported as unknown rather than silently matched."""
    warnings = model_differences(series) + method_differences(series) + start_warnings(series)
    for key, name in FINGERPRINT_FIELDS.items():
        values = [s["fingerprint"].get(key) for s in series]
        known = {v for v in values if v is not None}
        if len(known) > 1:
            detail = _grouped(series, lambda s: s["fingerprint"].get(key))
            warnings.append(f"Different {name} — {detail}. These numbers are not directly comparable.")
        elif known and None in values:
            missing = ", ".join(s["label"] for s in series if s["fingerprint"].get(key) is None)
            warnings.append(f"{name[0].upper() + name[1:]} unknown for {missing}; the others used {known.pop()}.")
    return warnings


def start_warnings(series: list[dict]) -> list[str]:
    """Beside figures of an engine and quantization that cannot start on the series' GPU (the
    advisor's facts, with their sources): the decision page refuses them, so the comparison says
    so too, e.g. a published vLLM FP8 figure on a V100."""
    out = []
    for s in series:
        candidate = candidate_for().get((s.get("backend"), s.get("quantization")))
        peak = peak_of(s.get("gpu") or "")
        if candidate is None or peak is None:
            continue
        reasons = ineligible_reasons(candidate, peak.compute_capability)
        if reasons:
            out.append(f"{s['label']}: {candidate.label} {reasons[0][0].lower()}{reasons[0][1:]} "
                       f"Its figures cannot come from upstream {candidate.label.split()[0]} on a {peak.name}.")
    return out


def distinct_labels(series: list[dict]) -> list[dict]:
    """Series of one label (two runs of one endpoint) told apart by what differs: each run's
    title, or its date when untitled; then the date; then a number. Labels that are already
    distinct stay as they are."""
    def clash(items):
        seen: dict = {}
        for s in items:
            seen.setdefault(s["label"], []).append(s)
        return [group for group in seen.values() if len(group) > 1]

    for name in (lambda s: s.get("run") or s.get("date"), lambda s: s.get("date")):
        for group in clash(series):
            if len({name(s) for s in group}) > 1:
                for s in group:
                    if name(s):
                        s["label"] = f"{s['label']} · {name(s)}"
    for group in clash(series):
        for n, s in enumerate(group, start=1):
            s["label"] = f"{s['label']} #{n}"
    return series


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
    `better`) wins, by how many times, with both values; None when either lacks it. With
    trials on both sides a winner is named only when Welch's t-test finds the difference
    significant at 5 % (`significant` True); otherwise the sentence says there is no
    significant difference, with n. With one trial on each side a winner is named only beyond
    the run-to-run noise (engine/differences.py), said as untested (`significant` None). A level
    measured while the host, the client or the server was contended names no winner."""
    a, b = xl.get(f), yl.get(f)
    if not a or not b:
        return None
    m = f.metric
    x_wins = a <= b if m.lower_is_better else a >= b
    (winner, w), (loser, lo) = ((x, a), (y, b)) if x_wins else ((y, b), (x, a))
    ratio = _times(max(a, b), min(a, b))
    base = {"metric": f.name, "values": [a, b], "labels": [x["label"], y["label"]], "significant": None}
    nx, ny = xl.trials, yl.trials
    both = f"{a:.{m.digits}f} vs {b:.{m.digits}f} {f.quoted}"
    busy = [(s["label"], FLAG_NAMES[flag]) for s, pt in ((x, xl), (y, yl)) for flag in CONTENDED if flag in pt.flags]
    if busy:
        said = "; ".join(f"{label}: {words}" for label, words in busy)
        return {**base, "significant": False,
                "text": f"No winner named for {f.label} between {x['label']} and {y['label']} {where} ({both}): "
                        f"measured while something else competed ({said}), so the figures are not comparable."}
    if ratio == _times(1, 1):  # within half a percent: no winner to name
        return {**base, "text": f"{f.label} is the same for {x['label']} and {y['label']} {where} "
                                f"({a:.{m.digits}f} vs {b:.{m.digits}f} {f.quoted})."}
    noise = Noise.wider(xl.noise.get(f.name), yl.noise.get(f.name))
    d = judge(_trial_values(xl, f, a), _trial_values(yl, f, b), noise.pct,
              intervals=(xl.intervals.get(f.name), yl.intervals.get(f.name)))
    if d is None:  # no positive figure on a side: nothing to compare
        return None
    if d.significant is False:
        return {**base, "significant": False,
                "text": f"No significant difference in {f.label} between {x['label']} and {y['label']} {where} "
                        f"({a:.{m.digits}f} vs {b:.{m.digits}f} {f.quoted}, means of n={nx} and n={ny} trials; "
                        f"Welch's t-test, 5 %)."}
    if not d.clear:
        published = [s["label"] for s in (x, y) if s.get("kind") in ("published", "imported")]
        unknown = (f"; the {'published' if len(published) == 1 else 'imported'} figure's own uncertainty is not known"
                   if published else "")
        return {**base, "significant": False,
                "text": f"No clear difference in {f.label} between {x['label']} and {y['label']} {where} "
                        f"({_times(max(a, b), min(a, b))}, {both}): {d.why(noise)}{unknown}; "
                        f"{'more requests per level' if d.overlap else 'several trials a side'} would settle it."}
    phrase = m.phrase or ("{winner} has a {ratio} lower {what} than {loser}" if m.lower_is_better
                          else "{winner} has a {ratio} higher {what} than {loser}")
    text = phrase.format(winner=winner["label"], loser=loser["label"], ratio=ratio, what=f.label)
    note = f"; significant, {d.why()}" if d.significant else (f"; {d.why()}" if d.why() else "")
    # The numbers in the order the phrase names the series: the winner's first.
    return {**base, "significant": d.significant,
            "text": f"{text} {where} ({w:.{m.digits}f} vs {lo:.{m.digits}f} {f.quoted}{note}).",
            "values": [w, lo], "labels": [winner["label"], loser["label"]]}


def _trial_values(point: Point, f: Figure, value: float) -> list[float]:
    """A side's value per trial where it has several, else its one value."""
    samples = [v for v in point.samples.get(f.name, ()) if v is not None]
    return samples if point.trials > 1 and len(samples) > 1 else [value]


# ---------------------------------------------------------------- start-up
def launch_values(report) -> dict:
    """A LaunchReport's figures of catalogue.LAUNCH_FIGURES, by name, in their units."""
    mib = report.memory_loaded.server_mib
    return {"health_s": report.health_s, "first_token_s": report.first_token_s,
            "memory_loaded_gib": None if mib is None else mib / 1024}


def startup_table(series: list[dict]) -> list[dict]:
    """Beside the comparison table: a row per series whose server the lab started for its run, its
    start-up times and memory after load (catalogue.LAUNCH_FIGURES), memory said to be GPU memory
    (NVML) or, with no GPU, resident memory. [] when no series was started by the lab."""
    rows = []
    for s in series:
        report = s.get("launch")
        if report is None:
            continue
        values = launch_values(report)
        cells = []
        for f in LAUNCH_FIGURES:
            text = shown(f, values[f.key])
            if f.key == "memory_loaded_gib" and values[f.key] is not None:
                text += " GPU" if report.memory_loaded.source == "gpu" else " RSS"
            cells.append({"name": f.name, "text": text})
        rows.append({"label": s["label"], "url": s["url"], "cells": cells,
                     "memory_note": report.memory_loaded.note})
    return rows


# ---------------------------------------------------------------- quality
SOURCE = {"measured": "measured here", "published": "published, not measured here",
          "imported": "imported, not measured here"}


def quality_table(entries: list[dict]) -> list[dict]:
    """The comparison's quality table: a row per entry, its figures (catalogue.COMPARISON_QUALITY)
    formatted, with the text, windows and reference they were measured on."""
    rows = []
    for e in entries:
        q: QualityPoint | None = e["quality"]
        cells = []
        for f in COMPARISON_QUALITY:
            value = q.get(f) if q else None
            text = shown(f, value)
            if f.key == "perplexity" and value is not None and q.perplexity_stderr is not None:
                text += f" ± {q.perplexity_stderr:,.{f.metric.digits}f}"
            cells.append({"name": f.name, "text": text})
        reference = ("this is the reference" if e.get("is_reference")
                     else (q.reference if q and q.reference else "none"))
        rows.append({"label": e["label"], "url": e.get("url"), "kind": e["kind"], "source": SOURCE[e["kind"]],
                     "text": q.text_words if q else "—", "windows": q.windows_words if q else "—",
                     "reference": reference, "cells": cells,
                     "note": e.get("error") and f"Not measured: {e['error']}" or (q.note if q else "")})
    return rows


def _difference(f: Figure, loser: float, winner: float) -> str:
    """How far the loser's value is from the winner's, relative to the winner's: "2.1 %"; a share
    in percentage points; with the unit when the winner's value is 0 (no percentage of nothing)."""
    m = f.metric
    gap = abs(loser - winner)
    if m.unit == "%":
        return f"{gap * m.scale:,.{m.digits}f} percentage points"
    if winner == 0:
        return f"{gap * m.scale:,.{m.digits}f} {m.unit}".strip()
    return f"{100 * gap / abs(winner):,.1f} %"


def _where(f: Figure, q: QualityPoint) -> str:
    where = "on the same text and windows"
    return f"{where}, against {q.reference}" if f.key in AGAINST_REFERENCE else where


def quality_sentence(f: Figure, x: dict, y: dict) -> dict:
    """One quality figure of two comparable entries in words, the one that loses by the catalogue's
    `better` named first and its value first: "Q4_K_M's perplexity is 2.1 % above FP8's on the
    same text and windows (6.280 vs 6.150)"."""
    m = f.metric
    a, b = x["quality"].get(f), y["quality"].get(f)
    unit = f" {m.unit}" if m.unit else ""
    where = _where(f, x["quality"])
    if a == b:
        return {"text": f"{m.label} is the same for {x['label']} and {y['label']} {where} ({shown(f, a)}{unit}).",
                "metric": f.name, "compared": True, "values": [a, b], "labels": [x["label"], y["label"]]}
    x_wins = a < b if m.lower_is_better else a > b
    (winner, w), (loser, lo) = ((x, a), (y, b)) if x_wins else ((y, b), (x, a))
    phrase = m.phrase or ("{loser}'s {what} is {ratio} above {winner}'s" if m.lower_is_better
                          else "{loser}'s {what} is {ratio} below {winner}'s")
    text = phrase.format(loser=loser["label"], winner=winner["label"], ratio=_difference(f, lo, w), what=m.label)
    return {"text": f"{text} {where} ({shown(f, lo)} vs {shown(f, w)}{unit}).", "metric": f.name, "compared": True,
            "values": [lo, w], "labels": [loser["label"], winner["label"]]}


def quality_sentences(entries: list[dict]) -> list[dict]:
    """Each quality figure (catalogue.QUALITY_COMPARED) of every entry that has it against the first
    entry that has it, in words; where two are not comparable, one sentence per pair says why
    (never a ratio)."""
    out, refused = [], {}
    having_quality = [e for e in entries if e["quality"] is not None]
    for f in QUALITY_COMPARED:
        having = [e for e in having_quality if e["quality"].get(f) is not None]
        if len(having) < 2:
            continue
        base = having[0]
        for e in having[1:]:
            reason = not_comparable(e["quality"], base["quality"], f.key)
            if reason:
                refused.setdefault((e["label"], base["label"], reason), []).append(f.metric.label)
            else:
                out.append(quality_sentence(f, e, base))
    for (x, y, reason), labels in refused.items():
        what = labels[0] if len(labels) == 1 else ", ".join(labels[:-1]) + " and " + labels[-1]
        verb = "is" if len(labels) == 1 else "are"
        out.append({"text": f"{what} of {x} and {y} {verb} not compared: {reason}.", "compared": False,
                    "metric": None, "values": [], "labels": [x, y]})
    return out


def quality_csv(entries: list[dict]) -> str:
    """The quality table as CSV: what each figure was measured on, then the figures under their
    catalogue titles, in the catalogue's units (shares in %)."""
    out = io.StringIO()
    writer = csv_cells.writer(out)
    writer.writerow(["series", "source", "text", "text sha256", "windows", "reference", "perplexity stderr",
                     *(f.title for f in COMPARISON_QUALITY), "note"])
    for e, row in zip(entries, quality_table(entries)):
        q: QualityPoint | None = e["quality"]
        values = [None if q is None or q.get(f) is None else round(q.get(f) * f.metric.scale, 6)
                  for f in COMPARISON_QUALITY]
        writer.writerow([e["label"], row["source"], q.text["name"] if q and q.text else "",
                         q.text["sha256"] if q and q.text else "", q.windows_words if q and q.windows else "",
                         row["reference"], "" if q is None or q.perplexity_stderr is None else q.perplexity_stderr,
                         *("" if v is None else v for v in values), row["note"]])
    return out.getvalue()
