"""What the decision page shows of a saved result, and the "measure this next" links.

Saved results are read through `result_from_stored`, which reads every version the advisor has
written (Recommendation.to_dict: 2 names figures as the metric catalogue does; 1, with no
"version", named them ttft_p50_ms, decode_tok_s, ...). Labels and units are the catalogue's.
"""
from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from benchmarks.advisor import PRIORITY
from benchmarks.advisor.facts import WRITEUP
from benchmarks.advisor.performance import METRICS
from benchmarks.decisions.forms import INTERCONNECTS
from benchmarks.decisions.selectors import CANDIDATES, VARIANT_QUANTIZATION, endpoints_for
from benchmarks.engine.catalogue import figure

# Version 1's figure names -> the catalogue's.
_V1_FIGURES = {"ttft_p50_ms": "ttft_ms_p50", "ttft_p90_ms": "ttft_ms_p90", "tpot_p50_ms": "tpot_ms_p50",
               "decode_tok_s": "decode_tok_s_p50"}


def result_from_stored(result: dict) -> dict:
    """A saved Decision.result in the current version's names."""
    if result.get("version", 1) >= 2:
        return result

    def rename(name):
        return _V1_FIGURES.get(name, name)

    ranked = []
    for c in result.get("ranked", []):
        predicted = {rename(m): {**p, "metric": rename(p.get("metric", m))} for m, p in c.get("predicted", {}).items()}
        targets = {k: {**t, "metric": rename(t.get("metric", ""))} for k, t in c.get("meets_targets", {}).items()}
        ranked.append({**c, "predicted": predicted, "meets_targets": targets})
    return {**result, "version": 2, "ranked": ranked}


def _source_of(ref: dict) -> str:
    return WRITEUP if ref.get("kind") == "published" else ""


def decision_display(stored: dict) -> dict:
    """The saved result shaped for the page: each predicted figure (with the catalogue's label
    and unit) beside the evidence rows it was read from, the targets as a list, the flags of
    each candidate's evidence."""
    result = result_from_stored(stored)
    candidates = []
    for c in result["ranked"]:
        refs = {e["id"]: {**e, "source": _source_of(e)} for e in c["evidence"]}
        predicted = [{"metric": m, "label": figure(m).title, "definition": figure(m).metric.definition,
                      "value": p["value"], "how": p["how"], "note": p["note"],
                      "evidence": [refs[i] for i in p["evidence_ids"] if i in refs]}
                     for m in METRICS if (p := c["predicted"].get(m))]  # in the catalogue's order
        candidates.append({
            **c, "predicted_rows": predicted, "evidence_rows": list(refs.values()),
            "targets": list(c["meets_targets"].values()),
            "is_recommended": c["key"] == result["recommended"],
            "flags": sorted({f for e in c["evidence"] for f in e["flags"]}),
        })
    workload = result["workload"]
    gpu = result["gpu"]
    skipped = result.get("evidence_skipped") or {}
    priority = PRIORITY.get(workload["priority"])
    return {
        "result": result,
        "candidates": candidates,
        "recommended": next((c for c in candidates if c["is_recommended"]), None),
        "gpu": {**gpu, "cc": ".".join(str(x) for x in gpu["compute_capability"]),
                "interconnect_label": INTERCONNECTS.get(gpu["interconnect"], gpu["interconnect"])},
        "workload": {**workload, "context": workload["context_tokens"] or
                     workload["prompt_tokens"] + workload["output_tokens"],
                     "priority_label": priority.label if priority else workload["priority"]},
        "skipped": [f"{n} measured level{'s' if n != 1 else ''} not used: {why}." for why, n in skipped.items()],
    }


def measure_next_links(result: dict) -> list[dict]:
    """Each suggested run with the registered endpoints that can measure it and a link that
    pre-fills the run form; `url` is None when no endpoint serves that candidate there."""
    out = []
    gpu = result["gpu"]
    for s in result.get("measure_next", []):
        candidate = CANDIDATES[s["candidate"]]
        levels = [n for n in s["concurrency_levels"] if n <= settings.MAX_CONCURRENCY]
        endpoints = endpoints_for(s["candidate"], s["host_id"], gpu["name"], gpu["compute_capability"])
        title = f"Measure {candidate.label} at {s['prompt_tokens']}/{s['output_tokens']} tokens: {s['why']}"[:200]
        url = None
        if endpoints and levels:
            url = reverse("run-new") + "?" + urlencode(
                [("endpoints", e.name) for e in endpoints]  # names: the page is public, ids are not
                + [("concurrency_levels", ",".join(map(str, levels))), ("prompt_tokens", s["prompt_tokens"]),
                   ("output_tokens", s["output_tokens"]), ("title", title)])
        out.append({**s, "label": candidate.label, "levels": levels, "endpoints": endpoints, "url": url,
                    "capped": len(levels) < len(s["concurrency_levels"]), "backend": candidate.backend,
                    "quantization": VARIANT_QUANTIZATION[candidate.quantization]})
    return out
