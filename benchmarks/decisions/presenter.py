"""What the decision page shows of a saved result, and the "measure this next" links.

Saved results are read through `result_from_stored`, which reads every version the advisor has
written (Recommendation.to_dict: 9 adds each candidate's step-time estimate as the prediction
ledger stores it, shown or not; 8 adds each candidate's energy per output token and cost per
million output tokens, the price and the comparison with a rented GPU; 5 adds each candidate's
measured start, launches, start-up and measured memory after load; 4 adds the verdict's three
reasons, each candidate's launch command, estimate, releases and capacity; 3 adds each
candidate's quality and the quality basis; 2 names figures as the metric catalogue does; 1, with
no "version", named them ttft_p50_ms, decode_tok_s, ...). Labels and units are the catalogue's.
"""
from __future__ import annotations

import json
import os
import shlex
from urllib.parse import urlencode

from django.conf import settings
from django.urls import reverse

from benchmarks.advisor import PRIORITY
from benchmarks.advisor.economics import joules, money
from benchmarks.advisor.facts import WRITEUP
from benchmarks.advisor.performance import METRICS
from benchmarks.compare import shown
from benchmarks.decisions.forms import INTERCONNECTS
from benchmarks.decisions.selectors import CANDIDATES, VARIANT_QUANTIZATION, endpoints_for, recipes_for
from benchmarks.engine import backends
from benchmarks.engine.catalogue import COMPARISON_QUALITY, LAUNCH_FIGURES, figure
from benchmarks.engine.cost import HourlyPrice
from benchmarks.importers.published import QUALITY_LABEL

# Version 1's figure names -> the catalogue's.
_V1_FIGURES = {"ttft_p50_ms": "ttft_ms_p50", "ttft_p90_ms": "ttft_ms_p90", "tpot_p50_ms": "tpot_ms_p50",
               "decode_tok_s": "decode_tok_s_p50"}


def result_from_stored(result: dict) -> dict:
    """A saved Decision.result in the current version's names and shape. A result saved before
    version 3 read no quality: its candidates' quality is None (not "not measured")."""
    version = result.get("version", 1)
    if version < 2:
        def rename(name):
            return _V1_FIGURES.get(name, name)

        ranked = []
        for c in result.get("ranked", []):
            predicted = {rename(m): {**p, "metric": rename(p.get("metric", m))}
                         for m, p in c.get("predicted", {}).items()}
            targets = {k: {**t, "metric": rename(t.get("metric", ""))} for k, t in c.get("meets_targets", {}).items()}
            ranked.append({**c, "predicted": predicted, "meets_targets": targets})
        result = {**result, "ranked": ranked}
    if version < 3:
        result = {**result, "quality_basis": result.get("quality_basis"),
                  "ranked": [{**c, "quality": c.get("quality")} for c in result["ranked"]]}
    if version < 4:  # no verdict lines, launch commands, estimates or capacity: the page leaves them out
        result = {**result, "why": result.get("why") or [],
                  "ranked": [{"launch": None, "estimate": "", "releases": "", **c} for c in result["ranked"]]}
    if version < 5:  # decided before the lab's launches were read
        result = {**result, "ranked": [{"started": None, "launches": [], "startup": None, "contradiction": "",
                                        "memory_measured": "", **c} for c in result["ranked"]]}
    if version < 6:  # decided before "one card or two?": its note is among the hardware notes
        result = {**result, "cards": None}
    if version < 7:  # decided before the priors named their figures and the capacity answer
        result = {**result, "capacity": result.get("capacity") or [],
                  "ranked": [{"estimate_sources": [], **c,
                              "fit": {"tensor_parallel_refused": [], **(c.get("fit") or {})}}
                             for c in result["ranked"]]}
    if version < 8:  # decided before energy and cost were read
        result = {**result, "price": None, "ranked": [{"energy": None, "cost": None, **c} for c in result["ranked"]]}
    if version < 9:  # decided before the prediction ledger: no step-time estimate kept beside the figures
        result = {**result, "ranked": [{"model_estimate": {}, **c} for c in result["ranked"]]}
    return {"price_source": "", "price_comparison": None, **result, "version": 9}


def _quality(q: dict | None) -> dict | None:
    """A candidate's quality row as the page shows it: each figure with the catalogue's title,
    unit scale and decimals, and its source in words."""
    if q is None:
        return None
    rows = []
    for f in COMPARISON_QUALITY:  # in the catalogue's order (a stored JSON object keeps none)
        value = q["figures"].get(f.key)
        if value is None:
            continue
        text = shown(f, value)
        if f.key == "perplexity" and q.get("perplexity_stderr") is not None:
            text += f" ± {q['perplexity_stderr']:,.{f.metric.digits}f}"
        rows.append({"key": f.key, "title": f.title, "definition": f.metric.definition, "text": text})
    source = {"measured": "measured here", "published": QUALITY_LABEL}.get(q["how"], "not measured")
    return {**q, "rows": rows, "source": source}


def _startup(s: dict | None) -> list[dict]:
    """A candidate's measured start-up as rows of the catalogue's start-up figures; memory says
    whether it is GPU memory or, with no GPU, resident memory."""
    if not s:
        return []
    values = {"health_s": s.get("health_s"), "first_token_s": s.get("first_token_s"),
              "memory_loaded_gib": s.get("memory_loaded_gib")}
    rows = []
    for f in LAUNCH_FIGURES:
        value = values.get(f.key)
        text = "—" if value is None else f"{value:,.{f.metric.digits}f}"
        if f.key == "memory_loaded_gib" and value is not None:
            text += " GPU" if s.get("memory_source") == "gpu" else " RSS (no GPU: not GPU memory)"
        rows.append({"key": f.key, "title": f.title, "definition": f.metric.definition, "text": text})
    return rows


def _economy(read: dict) -> dict:
    """A candidate's energy or cost read as the page shows it: its words, and a short form for the
    ranked table ("0.27 to 0.33 USD/M tok, estimated")."""
    f = figure(read["figure"])
    short = "—"
    if read.get("value") is not None:
        unit = f"{read['currency']}/M tok" if read["figure"] == "cost_per_mtok" else f.metric.unit
        low, high = read.get("band") or (read["value"], read["value"])
        said = money if read["figure"] == "cost_per_mtok" else joules
        number = said(low) if low == high else f"{said(low)} to {said(high)}"
        short = f"{number} {unit}, {read['how']}"
    return {**read, "title": f.metric.name, "short": short}


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
                      "value": p["value"], "how": p["how"], "note": p["note"], "band": p.get("band"),
                      "evidence": [refs[i] for i in p["evidence_ids"] if i in refs]}
                     for m in METRICS if (p := c["predicted"].get(m))]  # in the catalogue's order
        candidates.append({
            **c, "predicted_rows": predicted, "evidence_rows": list(refs.values()),
            "targets": list(c["meets_targets"].values()),
            "is_recommended": c["key"] == result["recommended"],
            "flags": sorted({f for e in c["evidence"] for f in e["flags"]}),
            "quality_row": _quality(c["quality"]),
            "startup_rows": _startup(c.get("startup")),
            "economy": [_economy(read) for read in (c.get("energy"), c.get("cost")) if read],
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
        "slo_capacity": stored.get("slo_capacity") or [],
        "price": HourlyPrice(**result["price"]).said() if result.get("price") else "",
        "comparison": result["price_comparison"],
    }


def _levels(users: int) -> list[int]:
    """1, powers of two, and the workload's own level (as the advisor suggests them)."""
    levels, n = {1, users}, 2
    while n < users:
        levels.add(n)
        n *= 2
    return sorted(levels)


def _link(result: dict, suggestion: dict) -> dict:
    """A suggested run with the registered endpoints and server recipes that can measure it and a
    link that pre-fills the run form (its fields: endpoints, recipes, concurrency_levels,
    prompt_tokens, output_tokens, title, quality); `url` is None when nothing serves or starts that
    candidate there. Without either, `recipe_add` pre-fills a recipe (staff) from its launch command."""
    gpu = result["gpu"]
    s = suggestion
    candidate = CANDIDATES[s["candidate"]]
    levels = [n for n in s["concurrency_levels"] if n <= settings.MAX_CONCURRENCY]
    endpoints = endpoints_for(s["candidate"], s["host_id"], gpu["name"], gpu["compute_capability"])
    recipes = recipes_for(s["candidate"], s["host_id"], gpu["name"], gpu["compute_capability"])
    title = f"Measure {candidate.label} at {s['prompt_tokens']}/{s['output_tokens']} tokens: {s['why']}"[:200]
    url = None
    if (endpoints or recipes) and levels:
        url = reverse("run-new") + "?" + urlencode(
            [("endpoints", e.name) for e in endpoints]  # names: the page is public, ids are not
            + [("recipes", r.name) for r in recipes]
            + [("concurrency_levels", ",".join(map(str, levels))), ("prompt_tokens", s["prompt_tokens"]),
               ("output_tokens", s["output_tokens"]), ("title", title)]
            + ([("quality", "on")] if s.get("quality") else []))
    launch = next((c.get("launch") for c in result.get("ranked", []) if c.get("key") == s["candidate"]), None)
    return {**s, "label": candidate.label, "levels": levels, "endpoints": endpoints, "recipes": recipes, "url": url,
            "capped": len(levels) < len(s["concurrency_levels"]), "backend": candidate.backend,
            "quantization": VARIANT_QUANTIZATION.get(candidate.quantization, candidate.quantization),
            "recipe_add": None if (endpoints or recipes) else recipe_add_link(result, candidate, launch)}


def recipe_add_link(result: dict, candidate, launch: dict | None) -> str | None:
    """The inventory's "add server recipe" form pre-filled from a launch command: the backend, the
    model path and the arguments with the worker's placeholders ({port}, {model}, {host}), and the
    host with the executable its worker allows under that name (the decision's host, else the first
    host whose worker allows one), the model's file under that worker's first model folder. Where no
    worker allows it, the executable is left as the command names it and the notes say so."""
    if not launch or not launch.get("command"):
        return None
    words = shlex.split(launch["command"])
    while words and "=" in words[0] and not words[0].startswith("-"):  # CUDA_VISIBLE_DEVICES=...: the lab
        words.pop(0)  # gives a recipe's server its GPUs itself
    executable = words[0]
    model_path, args = backends.get(candidate.backend).with_model_placeholder(words[1:])
    if "--port" in args:
        args[args.index("--port") + 1] = "{port}"
    else:
        args += ["--port", "{port}"]
    args += ["--host", "{host}"]
    notes = f"From the decision page's launch command: {launch['command']}"
    host, allowed = lab_host_for(executable, result["gpu"].get("host_id"))
    if allowed:
        executable = allowed
        if host.lab_model_dirs and not any(model_path.startswith(d.rstrip("/") + "/") for d in host.lab_model_dirs):
            model_path = os.path.join(host.lab_model_dirs[0], os.path.basename(model_path.rstrip("/")))
    else:
        notes += (f". No host's worker allows an executable named {executable} (LAB_EXECUTABLES): give its "
                  "absolute path on the host, and add it to that worker's LAB_EXECUTABLES.")
    params = {"name": f"{candidate.label} ({result['model']['name']})"[:100], "backend": candidate.backend,
              "executable": executable, "model_path": model_path, "args": json.dumps(args), "notes": notes}
    if host is not None:
        params["host"] = host.pk
    return reverse("admin:benchmarks_serverrecipe_add") + "?" + urlencode(params)


def lab_host_for(executable: str, host_id=None):
    """(the host, the executable its worker allows under that name): the decision's host (with
    "" when its worker allows none), else the first host whose worker does; (None, "")."""
    from benchmarks.models import Host

    if host_id:
        host = Host.objects.filter(id=host_id).first()
        return host, host.allowed_executable(executable) if host else ""
    for host in Host.objects.exclude(lab_executables=[]).order_by("name"):
        if allowed := host.allowed_executable(executable):
            return host, allowed
    return None, ""


def measure_next_links(result: dict) -> list[dict]:
    """Each suggested run, with its endpoints and pre-filled run link."""
    return [_link(result, s) for s in result.get("measure_next", [])]


def measure_this_link(result: dict) -> dict | None:
    """"Measure this" for the recommendation: its suggested run when it has one, else a run of it at
    the decision's load and lengths (to confirm what was recommended); None with no recommendation."""
    key = result.get("recommended")
    if not key or key not in CANDIDATES:
        return None
    suggested = next((s for s in result.get("measure_next", []) if s["candidate"] == key), None)
    if suggested is None:
        w = result["workload"]
        suggested = {"candidate": key, "concurrency_levels": _levels(w["users"]), "prompt_tokens": w["prompt_tokens"],
                     "output_tokens": w["output_tokens"], "host_id": result["gpu"].get("host_id"),
                     "why": "confirm the recommendation", "quality": False}
    return _link(result, suggested)
