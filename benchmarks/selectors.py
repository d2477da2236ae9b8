"""Selectors read: what pages, charts and exports show.

Public pages (permalinks, their charts and exports) name endpoints by name and levels by their
public id, never by database id; with `hide_addresses` (anonymous readers, see
decorators.hides_addresses) they carry no base URL, host:port or launch command either."""
from __future__ import annotations

import io
import re
from dataclasses import replace
from typing import Callable
from urllib.parse import urlsplit

from datetime import datetime, time, timedelta

from django.conf import settings
from django.core.paginator import Page, Paginator
from django.db import connection
from django.db.models import Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from benchmarks import csv_cells
from benchmarks.engine.catalogue import (ACROSS_TRIALS, COMPARED, GPU_SIDE_BY_SIDE, HEADLINE, METRICS, REQUEST_CSV, RESULTS_TABLE, SLO_SEARCH,
                                         Figure, definitions, figure)
from benchmarks.engine.catalogue import number as catalogue_number, shown as catalogue_shown
from benchmarks.engine.client import Finding
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine import load_modes
from benchmarks.engine.load_modes.concurrency import ConcurrencySweep
from benchmarks.engine.load_modes.rate import RateSweep
from benchmarks.engine.datasets import histogram
from benchmarks.engine.gpu import GpuSeries, GpuSummary
from benchmarks.engine.metrics import LevelSummary, RequestResult, request_value, ttft_by_turn
from benchmarks.engine.points import Point, QualityPoint, stated
from benchmarks.engine.server_metrics import ServerSeries, ServerSummary
from benchmarks.engine.stats import Estimate, estimate
from benchmarks.engine.differences import Noise
from benchmarks.engine.validity import CONTENDED, FLAG_NAMES
from benchmarks.models import (ApiToken, Comparison, Decision, DeletedRun, Endpoint, EvaluationText, ImportedReport,
                               LevelResult, QualityMeasurement, RequestRecord, Run, Schedule, ServerRecipe)

# What a permalink answers when no row has its id: the one not-found message of each kind.
NOT_FOUND = {ApiToken: "You have no API token with this id.", Run: "No run has this link.", ImportedReport: "No report has this link.",
             Comparison: "No comparison has this link.", Decision: "No decision has this link.",
             Schedule: "You have no schedule with this id."}
# A public id as models.new_public_id makes them (URL-safe base64): anything else is not looked up.
PUBLIC_ID = re.compile(r"[A-Za-z0-9_-]{1,32}")


class RunGone(Exception):
    """A permalink of a run that was deleted: answered 410 Gone (benchmarks.gone), not 404."""

    def __init__(self, deleted: DeletedRun):
        super().__init__(deleted.note)
        self.deleted = deleted


def by_public_id(queryset: QuerySet, public_id: str):
    """The row of `queryset` behind a permalink, or Http404 with its kind's message: the one way
    every page answers not-found (RunGone for a run that was deleted). An id we could never have
    made (too long, a NUL, stray characters) is answered the same, without a query."""
    if isinstance(public_id, str) and PUBLIC_ID.fullmatch(public_id):
        try:
            return queryset.get(public_id=public_id)
        except queryset.model.DoesNotExist:
            deleted = DeletedRun.objects.filter(public_id=public_id).first() if queryset.model is Run else None
            if deleted is not None:
                raise RunGone(deleted) from None
    raise Http404(NOT_FOUND[queryset.model])


RUN_LINK = re.compile(r"/r/([A-Za-z0-9_-]{1,32})/")


def deleted_runs_linked(data) -> list[DeletedRun]:
    """The deleted runs whose permalinks a stored document (a decision's result) links to: every
    "url" in it, however deep. One query."""
    ids, stack = set(), [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            url = item.get("url")
            if isinstance(url, str) and (m := RUN_LINK.match(url)):
                ids.add(m.group(1))
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return list(DeletedRun.objects.filter(public_id__in=ids)) if ids else []


RUNS_PER_PAGE = 50


def runs_filtered(filters: dict, *, user=None) -> QuerySet[Run]:
    """The runs the list shows for RunFilterForm's cleaned data, newest first in a stable order
    (created, then id). What a run measured is matched through its endpoints with EXISTS, so a
    run of two matching endpoints is one row, without DISTINCT."""
    runs = Run.objects.all()
    archived = filters.get("archived") or ""
    if archived == "only":
        runs = runs.filter(archived__isnull=False)
    elif archived != "include":
        runs = runs.filter(archived__isnull=True)
    if filters.get("q"):
        runs = runs.filter(title__icontains=filters["q"])
    through = Run.endpoints.through.objects.filter(run_id=OuterRef("pk"))
    measured = {"endpoint": "endpoint", "model": "endpoint__variant__model", "variant": "endpoint__variant",
                "host": "endpoint__host", "backend": "endpoint__backend"}
    for name, lookup in measured.items():
        if filters.get(name):
            runs = runs.filter(Exists(through.filter(**{lookup: filters[name]})))
    if filters.get("status"):
        runs = runs.filter(status=filters["status"])
    if filters.get("owner"):
        runs = runs.filter(owner=filters["owner"])
    if filters.get("mine") and user is not None:
        runs = runs.filter(owner=user if user.is_authenticated else None)
    zone = timezone.get_current_timezone()
    if filters.get("created_after"):
        runs = runs.filter(created__gte=datetime.combine(filters["created_after"], time.min, zone))
    if filters.get("created_before"):
        runs = runs.filter(created__lt=datetime.combine(filters["created_before"] + timedelta(days=1), time.min, zone))
    flags = filters.get("flags") or ""
    if flags == "none":
        runs = runs.filter(flags=[])
    elif flags == "any":
        runs = runs.exclude(flags=[])
    elif flags:
        runs = runs.filter(_flagged(flags))
    return runs.order_by("-created", "-id")


def _flagged(code: str) -> Q:
    if connection.vendor == "postgresql":
        return Q(flags__contains=[{"code": code}])  # jsonb @>
    return Q(flags__icontains=f'"code": "{code}"')  # SQLite has no JSON containment: the stored text


def run_list_page(runs: QuerySet[Run], page_number) -> Page:
    """One page of the runs list, with what its rows show (owner, endpoints) read in two queries."""
    runs = runs.select_related("owner").prefetch_related(
        Prefetch("endpoints", queryset=Endpoint.objects.only("id", "name").order_by("name"))).defer(
        "preflight", "server_config", "error", "dataset", "sweep")
    return Paginator(runs, RUNS_PER_PAGE).get_page(page_number)


def runs_picked(public_ids, *, limit: int) -> list[Run]:
    """The runs selected for a comparison, in the order they were picked (at most `limit`, each
    once), with their endpoints for their names."""
    ids = list(dict.fromkeys(p for p in public_ids if isinstance(p, str) and PUBLIC_ID.fullmatch(p)))[:limit]
    if not ids:
        return []
    rows = {r.public_id: r for r in Run.objects.filter(public_id__in=ids).prefetch_related(
        Prefetch("endpoints", queryset=Endpoint.objects.only("id", "name").order_by("name"))).only(
        "id", "public_id", "title", "created", "status", "load_mode", *load_modes.COLUMNS, "trials")}
    return [rows[p] for p in ids if p in rows]


def run_manage_allowed(run: Run, user) -> bool:
    """Who may archive or delete a run: the member who queued it, or staff."""
    return user.is_authenticated and (user.is_staff or run.owner_id == user.pk)


def runs_in_flight(user) -> int:
    return Run.objects.filter(owner=user, status__in=[Run.QUEUED, Run.RUNNING]).count()


def run_by_public_id(public_id: str) -> Run:
    return by_public_id(Run.objects.select_related("owner"), public_id)


def run_levels(run: Run) -> list[LevelResult]:
    # The time series are only for the chart endpoints: never load them for the page.
    return list(run.levels.select_related("endpoint", "endpoint__host", "endpoint__variant")
                .defer("gpu_series", "server_series"))


def run_has_energy(run: Run) -> bool:
    """Whether any level's GPU energy was measured (its page offers the energy chart)."""
    return any(lv.gpu.joules_per_token(1) is not None for lv in run.levels.only("id", "gpu_summary"))


def _shows(metric, run: Run) -> bool:
    return {"": True, "chat": run.api == "chat", "slo": bool(run.slo), "schedule": run.load.sends_at_rates}[metric.needs]


def level_groups(levels: list[LevelResult]) -> list[list[LevelResult]]:
    """The levels grouped by endpoint and level, each group its trials in order (one level for a
    run of one trial), in the order of `levels`."""
    groups: dict[tuple, list[LevelResult]] = {}
    for lv in levels:
        groups.setdefault((lv.endpoint_id, lv.level_index), []).append(lv)
    return [sorted(g, key=lambda lv: lv.trial) for g in groups.values()]


def estimate_cell(f: Figure, est: Estimate | None) -> dict:
    """A figure across trials as a table cell: the mean in the catalogue's decimals and unit
    scale, and with two trials or more its 95 % interval (± its half-width, both bounds in the
    title)."""
    m = f.metric
    if est is None:
        return {"key": f.key, "stat": f.stat or "", "text": "—", "ci": "", "title": ""}
    shown = lambda v: f"{v * m.scale:.{m.digits}f}"
    if est.low is None:
        return {"key": f.key, "stat": f.stat or "", "text": shown(est.mean), "ci": "", "title": ""}
    return {"key": f.key, "stat": f.stat or "", "text": shown(est.mean), "ci": f"± {shown(est.half_width)}",
            "title": f"mean of {est.n} trials; 95 % CI {shown(est.low)} to {shown(est.high)} (Student t, n = {est.n})"}


def run_contention(levels: list[LevelResult]) -> dict | None:
    """The levels measured while something else competed for the host, the client or the
    server (validity.CONTENDED), each with what did: said at the top of the run page, before any
    number. None when there were none."""
    contended = [(lv, [FLAG_NAMES[f["code"]] for f in lv.flags if f.get("code") in CONTENDED]) for lv in levels]
    contended = [{"endpoint": lv.endpoint.name, "load": lv.trial_label, "why": ", ".join(why)}
                 for lv, why in contended if why]
    return {"levels": contended, "of": len(levels)} if contended else None


def results_table(run: Run, levels: list[LevelResult]) -> dict:
    """The run page's results table from the catalogue (RESULTS_TABLE): its column groups and,
    per endpoint and level, each figure formatted with the catalogue's decimals and unit scale:
    across a run's trials their mean and 95 % interval (stats.estimate), counts summed."""
    columns = [c for c in RESULTS_TABLE if _shows(c.metric, run)]
    rows = []
    for group in level_groups(levels):
        stats = [lv.stats for lv in group]
        flags = {f["code"]: f for lv in group for f in lv.flags}
        rows.append({
            "level": group[0], "trials": len(group), "summary": stats[0],
            "completed": sum(s.completed for s in stats), "failed": sum(s.failed for s in stats),
            "output_tokens": sum(s.output_tokens for s in stats),
            "client_output_tokens": sum(s.client_output_tokens for s in stats),
            "token_mismatch": sum(s.token_mismatch for s in stats), "flags": list(flags.values()),
            "cells": [estimate_cell(f, estimate(s.figure(f) for s in stats)) for c in columns for f in c.figures],
            "headline": [estimate_cell(f, estimate(s.figure(f) for s in stats)) for f in HEADLINE]})
    return {"columns": columns, "stats": [f for c in columns if len(c.figures) > 1 for f in c.figures],
            "rows": rows, "trials": run.trials, "headline": HEADLINE}


def slo_answers(run: Run) -> list[dict]:
    """Per endpoint its SLO search, as the run page says it: "serves N concurrent users within
    TTFT p99 ≤ 2000 ms" (or "sustains R req/s"), each probe (its load, met or what it missed),
    and at the answer's load the targeted percentiles and the throughput across the trials
    (`at_best`: cells with their 95 % intervals from two trials on)."""
    if not run.is_search:
        return []
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    levels = run.levels.filter(endpoint_id__in=[int(k) for k in endpoints]).only(
        "endpoint_id", "concurrency", "rate", "trial", "summary")
    probes: dict[tuple, list[LevelResult]] = {}
    for lv in levels:
        probes.setdefault((str(lv.endpoint_id), run.probe_load(lv)), []).append(lv)
    out = []
    for key, search in sorted(run.searches().items(), key=lambda kv: endpoints[kv[0]].name if kv[0] in endpoints else ""):
        if key not in endpoints:
            continue
        figures = [Figure(k, f"p{search.target.percentile}") for k in search.target.limits] + [
            Figure("request_throughput"), Figure("aggregate_tok_s")]
        measured = [lv.stats for lv in probes.get((key, search.best), [])] if search.best is not None else []
        at_best = [{"label": f.label, "unit": f.metric.unit, **estimate_cell(f, estimate(s.figure(f) for s in measured))}
                   for f in figures] if measured else []
        out.append({"endpoint": endpoints[key], "search": search, "words": search.words,
                    "probes": [{"load": search.load_words(p.load), "met": p.met, "misses": p.misses}
                               for p in sorted(search.probes, key=lambda p: p.load)],
                    "at_best": at_best, "best_load": search.load_words(search.best) if measured else "",
                    "trials": len(measured)})
    return out


def run_cancel_allowed(run: Run, user) -> bool:
    """Who may cancel a run: the member who queued it, or staff."""
    return user.is_authenticated and (user.is_staff or run.owner_id == user.pk)


ADDRESS_HIDDEN = "[address hidden]"
PATH_HIDDEN = "[path hidden]"


def address_hider(endpoints, hide: bool = True) -> Callable:
    """A function that blanks the endpoints' addresses (base URL, host:port, and a host name
    with a dot or an IP address) in a string, or in the strings of nested lists and dicts:
    error texts and server notes quote the URL they failed on. The model path of a server the
    lab started from a recipe is blanked too (its log, server notes and served model id quote
    it). Identity when not `hide`."""
    if not hide:
        return lambda value: value
    texts, recipe_ids = set(), set()
    for e in endpoints:
        parts = urlsplit(e.base_url)
        texts |= {e.base_url.rstrip("/"), parts.netloc}
        if parts.hostname and ("." in parts.hostname or ":" in parts.hostname):
            texts.add(parts.hostname)
        if getattr(e, "recipe_id", None):
            recipe_ids.add(e.recipe_id)
    paths = {p.rstrip("/") for p in ServerRecipe.objects.filter(id__in=recipe_ids).values_list(
        "model_path", flat=True) if p and p.rstrip("/")} if recipe_ids else set()
    texts.discard("")
    if not texts and not paths:
        return lambda value: value
    pattern = re.compile(r"(?<![\w.-])(?:%s)(?![\w-])" % "|".join(
        re.escape(t) for t in sorted(texts | paths, key=len, reverse=True)), re.IGNORECASE)
    folded = {p.lower() for p in paths}

    def one(match) -> str:
        return PATH_HIDDEN if match.group(0).lower() in folded else ADDRESS_HIDDEN

    def blank(value):
        if isinstance(value, str):
            return pattern.sub(one, value)
        if isinstance(value, (list, tuple)):
            return [blank(v) for v in value]
        if isinstance(value, dict):
            return {k: blank(v) for k, v in value.items()}
        return value

    return blank


def run_failures(run: Run, *, limit: int = 200, hide_addresses: bool = False) -> list[RequestRecord]:
    records = list(RequestRecord.objects.filter(level__run=run).exclude(error="")
                   .select_related("level__endpoint").order_by("level__endpoint__name", "level__concurrency", "index")
                   .defer("chunk_times")[:limit])
    if hide_addresses:
        blank = address_hider(run.endpoints.all())
        for r in records:
            r.error = blank(r.error)
    return records


def run_error(run: Run, *, hide_addresses: bool = False) -> str:
    return address_hider(run.endpoints.all(), hide_addresses)(run.error) if run.error else ""


def run_length_histograms(run: Run) -> list[dict]:
    """Per endpoint, the prompt and output lengths its measured requests had by the server's own
    usage (what was actually sent and generated), as histograms with bars scaled to the largest
    bin: [{"endpoint", "requests", "prompt": [...], "output": [...]}], a bar {"low", "high",
    "count", "percent"}. Failed requests and those without usage are left out."""
    by_endpoint: dict = {}
    rows = (RequestRecord.objects.filter(level__run=run, error="", prompt_tokens__isnull=False)
            .values_list("level__endpoint", "prompt_tokens", "output_tokens"))
    for endpoint_id, prompt, output in rows:
        lengths = by_endpoint.setdefault(endpoint_id, ([], []))
        lengths[0].append(prompt)
        if output is not None:
            lengths[1].append(output)
    endpoints = {e.id: e for e in run.endpoints.filter(id__in=by_endpoint)}
    out = []
    for endpoint_id, (prompts, outputs) in sorted(by_endpoint.items(), key=lambda kv: endpoints[kv[0]].name):
        out.append({"endpoint": endpoints[endpoint_id], "requests": len(prompts),
                    "prompt": _bars(histogram(prompts)), "output": _bars(histogram(outputs))})
    return out


def _bars(h: dict) -> list[dict]:
    if not h:
        return []
    top = max(h["counts"])
    edges = h["edges"]
    return [{"low": edges[k], "high": (edges[k + 1] - 1 if k + 1 < len(edges) - 1 else edges[-1]),
             "count": c, "percent": round(100 * c / top)} for k, c in enumerate(h["counts"])]


def run_ttft_by_turn(run: Run) -> list[dict]:
    """Conversation mode: per endpoint and level, TTFT (ms) by turn over its completed requests,
    formatted with the catalogue's decimals: [{"level", "turns": [{"turn" (1 = the first),
    "count", "p50", "p90", "p99"}]}]."""
    if run.load.arguments()["conversation"] is None:
        return []
    by_level = run_results_by_level(run)
    out = []
    for level in run_levels_with_endpoint(run):
        turns = ttft_by_turn(by_level.get(level.id, []))
        out.append({"level": level, "turns": [
            {"turn": turn + 1, "count": d.count,
             **{stat: catalogue_shown(Figure("ttft_ms", stat), d.get(stat)) for stat in ("p50", "p90", "p99")}}
            for turn, d in turns.items()]})
    return [row for row in out if row["turns"]]


def run_failure_count(run: Run) -> int:
    return RequestRecord.objects.filter(level__run=run).exclude(error="").count()


def run_preflight(run: Run, *, hide_addresses: bool = False) -> list[tuple[Endpoint, list[Finding]]]:
    """Per endpoint the preflight checked, in the order it checked them, what it found."""
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    blank = address_hider(endpoints.values(), hide_addresses)
    checked = [(endpoints[k], run.preflight_findings(k)) for k in run.preflight if k in endpoints]
    return [(e, [replace(f, detail=blank(f.detail)) for f in found]) for e, found in checked if found is not None]


def config_text(value) -> str:
    """A value of what a server reported, in words rather than Python's repr: {'count': 4,
    'n_ctx': 1024} reads "count 4, n_ctx 1024", [] reads "none", True "yes"."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {config_text(v)}" for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        sep = "; " if any(isinstance(v, (dict, list, tuple)) for v in value) else ", "
        return sep.join(config_text(v) for v in value)
    return str(value)


def server_config_shown(config, hide_addresses: bool):
    """A stored server identity as a reader sees it: the launch flags the inventory declared (which
    may name paths and addresses) only for those who see launch commands."""
    if not hide_addresses or not isinstance(config, dict) or "declared" not in config:
        return config
    declared = {k: v for k, v in (config.get("declared") or {}).items() if k != "launch_flags"}
    return {**config, "declared": declared}


def run_server_config(run: Run, *, hide_addresses: bool = False) -> list[tuple[Endpoint, list[tuple[str, str]]]]:
    """Per endpoint, what its server reported about itself as (key, value in words), without the
    raw props document."""
    endpoints = {str(e.id): e for e in run.endpoints.all()}
    blank = address_hider(endpoints.values(), hide_addresses)
    return [(endpoints[k], [(key, config_text(value)) for key, value in
                            blank(server_config_shown(v, hide_addresses)).items() if key != "props"])
            for k, v in run.server_config.items() if k in endpoints and isinstance(v, dict)]


def _ids_by_name(qs: QuerySet, names: list[str]) -> list[int]:
    """The ids of these names in qs (links that pre-fill the run form). A name PostgreSQL cannot
    even compare (a NUL) names nothing."""
    names = [n for n in names[:100] if "\x00" not in n]
    return list(qs.filter(name__in=names).values_list("id", flat=True))


def endpoint_ids_by_name(names: list[str]) -> list[int]:
    return _ids_by_name(Endpoint.objects.filter(enabled=True), names)


def recipe_ids_by_name(names: list[str]) -> list[int]:
    return _ids_by_name(ServerRecipe.objects.filter(enabled=True), names)


def inventory() -> dict:
    """The inventory as members read it: hosts with their GPUs and what their worker may start,
    models with their variants, endpoints and recipes, each with what a run needs of it."""
    from benchmarks.models import Host, Model

    return {
        "hosts": Host.objects.prefetch_related("gpus").order_by("name"),
        "models": Model.objects.prefetch_related("variants").order_by("name"),
        "endpoints": Endpoint.objects.filter(recipe__isnull=True).select_related("host", "variant__model")
                                     .order_by("-enabled", "name"),
        "recipes": ServerRecipe.objects.select_related("host", "variant__model").order_by("-enabled", "name"),
    }


def endpoints_for_runs() -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(enabled=True).select_related("host", "variant__model")


def recipes_for_runs() -> QuerySet[ServerRecipe]:
    return ServerRecipe.objects.filter(enabled=True).select_related("host", "variant__model")


def evaluation_texts() -> QuerySet[EvaluationText]:
    """The uploaded evaluation texts a run may use, without their text."""
    return EvaluationText.objects.defer("text").order_by("name", "created")


# ---------------------------------------------------------------- the quality step
QUALITY_FIGURES = tuple(Figure(k) for k, m in METRICS.items() if m.source == "quality")  # catalogue order
QUALITY_METHODS = {  # method -> (short, in words)
    "prompt_logprobs": ("prompt logprobs", "vLLM's prompt_logprobs: the log-probability of every token of a window, "
                                           "one request per window"),
    "teacher_forcing": ("teacher forcing", "one request per position with the window so far as the prompt, the actual "
                                           "next token forced (logit_bias) and its raw log-probability read with the "
                                           "top-k (n_probs)"),
    "llama_perplexity": ("llama-perplexity", "the host's llama-perplexity on the GGUF file the server was started "
                                             "from, on the same text and windows; KL over the whole vocabulary "
                                             "against the reference recipe's file (--kl-divergence)"),
}


def run_definitions(run: Run) -> list:
    """The run page's "How each number is defined": the catalogue's entries, the quality figures
    only for a run with a quality step, the start-up ones only for a run that started servers."""
    launches = run.launches.exists()
    notes = [n for n, shown in ((ACROSS_TRIALS, run.trials > 1), (SLO_SEARCH, run.is_search)) if shown]
    return notes + [d for d in definitions() if (d.source != "quality" or run.quality)
                    and (d.source != "launch" or launches)]


def run_quality(run: Run) -> list[QualityMeasurement]:
    return list(run.quality_results.select_related("endpoint", "endpoint__variant").order_by("endpoint__name"))


def quality_problems(run: Run) -> list[tuple[str, str]]:
    """(endpoint name, reason) for each endpoint whose quality step gave no figures, or whose
    comparison with the reference was refused."""
    problems = []
    for row in run.quality_results.select_related("endpoint").order_by("endpoint__name"):
        if row.error:
            problems.append((row.endpoint.name, row.error))
        elif row.figures is not None and row.figures.reference_refused:
            problems.append((row.endpoint.name, f"not compared with the reference: {row.figures.reference_refused}"))
    return problems


def quality_section(run: Run, *, hide_addresses: bool = False) -> dict | None:
    """The run page's Quality section: per endpoint its figures as the catalogue formats them,
    what they were measured on (text, windows, method) and, against the reference, how the
    comparison went; errors in words. None for a run without a quality step."""
    if not run.quality:
        return None
    endpoints = list(run.endpoints.select_related("variant").order_by("name"))
    blank = address_hider(endpoints, hide_addresses)
    stored = {row.endpoint_id: row for row in run_quality(run)}
    rows, texts = [], {}
    for e in endpoints:
        row = stored.get(e.id)
        r = row.figures if row else None
        is_reference = e.id == run.quality_reference_id or bool(
            run.quality_reference_recipe_id and e.recipe_id == run.quality_reference_recipe_id)
        entry = {"endpoint": e, "is_reference": is_reference, "result": r,
                 "error": blank(row.error) if row else "", "pending": row is None}
        if r is not None:
            digits = METRICS["perplexity"].digits
            ref = r.reference or {}
            greedy = ref.get("greedy") or {}
            parts = greedy.get("first_difference") or []
            method = QUALITY_METHODS.get(r.method, (r.method, r.method))
            entry.update(
                cells=[{"key": f.key, "text": catalogue_shown(f, r.value(f.key))} for f in QUALITY_FIGURES
                       if f.key != "perplexity"],
                perplexity=f"{catalogue_number(r.perplexity, digits)} ± {catalogue_number(r.perplexity_stderr, digits)}",
                reference_perplexity=(catalogue_number(ref["perplexity"], digits)
                                      if isinstance(ref.get("perplexity"), (int, float)) else ""),
                method=method[0], method_words=method[1], windows=r.settings, comparison=ref, greedy=greedy,
                # Where each continuation first parted from the reference's, counted from 1.
                first_differences=[i + 1 for i in parts if i is not None],
                missing_percent=(None if ref.get("reference_top_k_missing_share") is None
                                 else 100 * ref["reference_top_k_missing_share"]),
                refused=blank(r.reference_refused),
                text_tokens=f"{r.text['tokens']:,}" if r.text.get("tokens") else "")
            text = texts.setdefault((r.text.get("sha256"), r.text.get("tokens")), {
                **r.text, "endpoints": [], "chars_text": f"{r.text.get('chars') or 0:,}",
                "tokens_text": f"{r.text['tokens']:,}" if r.text.get("tokens") else ""})
            text["endpoints"].append(e.name)
        rows.append(entry)
    reference = next((e for e in endpoints if e.id == run.quality_reference_id), None) or run.quality_reference_recipe
    return {"rows": rows, "texts": list(texts.values()), "reference": reference, "figures": QUALITY_FIGURES,
            "asked": {"name": run.quality_text.name if run.quality_text_id else "built-in: Python's documentation",
                      "n_ctx": run.quality_ctx, "chunks": run.quality_chunks,
                      "llama_perplexity": f"-c {run.quality_ctx} --chunks {run.quality_chunks}"}}


def quality_export(run: Run, *, hide_addresses: bool = False) -> dict | None:
    """The quality step as the run's export holds it: what was asked and, per endpoint, its
    stored result read by its one reader and written by its one writer (every stored version
    comes out as the newest), or its error."""
    if not run.quality:
        return None
    blank = address_hider(run.endpoints.all(), hide_addresses)
    text = run.quality_text
    return {
        "text": ({"name": text.name, "sha256": text.sha256, "chars": len(text.text)} if text
                 else {"name": "built-in", "sha256": None}),
        "reference": (run.quality_reference.name if run.quality_reference_id else
                      run.quality_reference_recipe.name if run.quality_reference_recipe_id else None),
        "n_ctx": run.quality_ctx, "chunks": run.quality_chunks,
        "results": [{"endpoint": row.endpoint.name, "measured_at": row.measured_at.isoformat(),
                     "result": blank(row.figures.to_dict()) if row.figures else None,
                     "error": blank(row.error)} for row in run_quality(run)],
    }


def quality_csv(run: Run, *, hide_addresses: bool = False) -> str:
    """One row per endpoint: what it was measured on, then every catalogue quality figure under
    its catalogue title (in the catalogue's unit: shares in %), then its errors."""
    blank = address_hider(run.endpoints.all(), hide_addresses)
    out = io.StringIO()
    writer = csv_cells.writer(out)
    writer.writerow(["endpoint", "reference", "text", "text sha256", "text tokens", "windows",
                     "llama-perplexity", "method", "tokens scored", "perplexity stderr",
                     *(f.title for f in QUALITY_FIGURES), "reference top-k missing (%)", "error"])
    for row in run_quality(run):
        r = row.figures
        if r is None:
            writer.writerow([row.endpoint.name, "", "", "", "", "", "", "", "", "",
                             *("" for _ in QUALITY_FIGURES), "", blank(row.error)])
            continue
        missing = (r.reference or {}).get("reference_top_k_missing_share")
        values = ((r.value(f.key), f.metric) for f in QUALITY_FIGURES)
        writer.writerow([row.endpoint.name, (r.reference or {}).get("name", ""), r.text.get("name"),
                         r.text.get("sha256"), r.text.get("tokens"), r.settings.get("windows"),
                         r.settings.get("llama_perplexity"), r.method, r.tokens_scored, r.perplexity_stderr,
                         *("" if v is None else round(v * m.scale, 6) for v, m in values),
                         "" if missing is None else round(100 * missing, 3), blank(r.reference_refused)])
    return out.getvalue()


# ---------------------------------------------------------------- series for charts and comparisons
def endpoint_gpu(endpoint: Endpoint) -> tuple[str | None, int]:
    """GPU model and count an endpoint runs on: its own GPUs if set, else its host's."""
    gpus = endpoint.serving_gpus()
    if not gpus:
        return None, endpoint.tensor_parallel_size or 1
    used = len(endpoint.gpus.all()) or endpoint.tensor_parallel_size or 1
    return gpus[0].name, used


def level_point(level: LevelResult, trials: list[LevelResult] | None = None) -> Point:
    """A measured level as a comparison point, read from its stored summaries: of its `trials`
    (the level's repetitions, itself among them) when given."""
    endpoint_gpus = [g.index for g in level.endpoint.gpus.all()]
    summaries = [lv.stats for lv in trials] if trials else level.stats
    return Point.measured(summaries, label=level.load_label, id=level.public_id,
                          concurrency=level.concurrency if level.rate is None else None, rate=level.rate,
                          flags=list(dict.fromkeys(f["code"] for lv in (trials or [level]) for f in lv.flags)),
                          gpu=level.gpu, gpu_indices=endpoint_gpus,
                          trial_gpus=[lv.gpu for lv in trials] if trials else None)


def endpoint_label(e: Endpoint) -> str:
    """How comparisons name an endpoint: its name and its variant's quantization. Expects the
    variant selected."""
    return e.name if not e.variant else f"{e.name} ({e.variant.get_quantization_display()})"


def run_series(run: Run) -> list[dict]:
    from benchmarks.compare import fingerprint

    levels = list(run.levels.select_related("endpoint__host", "endpoint__variant__model")
                  .prefetch_related("endpoint__gpus", "endpoint__host__gpus").defer("gpu_series", "server_series")
                  .order_by("endpoint__name", "level_index", "trial"))
    # A server the lab started for this run: its start-up and memory after load, per series.
    launches = {lc.endpoint_id: lc for lc in run.launches.filter(endpoint__isnull=False)}
    by_endpoint: dict[int, dict] = {}
    for group in level_groups(levels):
        lv = group[0]
        e = lv.endpoint
        if e.id not in by_endpoint:
            gpu, count = endpoint_gpu(e)
            by_endpoint[e.id] = {
                "label": endpoint_label(e),
                "kind": "measured", "url": run.get_absolute_url(), "run": run.title or None,
                "date": f"{timezone.localtime(run.created):%Y-%m-%d %H:%M}", "backend": e.backend,
                "model": e.variant.model.name if e.variant else None, "tool": "serving",
                "quantization": e.variant.quantization if e.variant else None, "gpu": gpu, "gpu_count": count,
                "fingerprint": fingerprint(prompt_tokens=run.prompt_tokens, output_tokens=run.output_tokens,
                                           temperature=run.temperature, api=run.api, load_mode=run.load_mode,
                                           gpu=gpu, gpu_count=count),
                "levels": [], "launch": launches[e.id].figures if e.id in launches else None}
        by_endpoint[e.id]["levels"].append(replace(level_point(lv, group), noise=history_noise(lv)))
    return list(by_endpoint.values())


def history_noise(level: LevelResult, figures=COMPARED) -> dict:
    """Per figure (comparison figures by default), how much the level's endpoint varied over its
    last comparable runs (the same endpoint, workload fingerprint and level, before this run):
    differences.Noise, where there are enough of them."""
    from benchmarks.history import comparable_levels

    if not level.fingerprint:
        return {}
    earlier = comparable_levels(level, settings.REGRESSION_WINDOW, same_endpoint=True)
    floor = settings.REGRESSION_NOISE_FLOOR_PCT
    return {f.name: noise for f in figures
            if (noise := Noise.of_history([lv.figure(f) for lv in earlier], floor)) is not None}


def report_series(report) -> dict:
    from benchmarks.compare import fingerprint

    data = report.data
    first = data.levels[0] if data.levels else None
    meta = data.raw_meta
    return {"label": report.title, "kind": "published" if report.kind == "published" else "imported",
            "url": report.get_absolute_url(), "backend": report.backend or data.backend,
            "model": data.model, "tool": data.kind if data.kind == "llama-bench" else "serving",
            "run": None, "date": None, "quantization": report.quantization or None, "gpu": report.gpu or data.gpu, "gpu_count": 1,
            "fingerprint": fingerprint(prompt_tokens=first and first.prompt_tokens,
                                       output_tokens=first and first.output_tokens,
                                       temperature=meta.get("temperature"), api=meta.get("api"),
                                       load_mode=(RateSweep if data.rate_mode else ConcurrencySweep).name,
                                       gpu=report.gpu or data.gpu, gpu_count=1),
            "levels": data.points()}


def run_quality_entries(run: Run, rows: list[QualityMeasurement] | None = None, *,
                        hide_addresses: bool = False) -> list[dict]:
    """A run's quality step as comparison entries (see compare.py), one per endpoint it measured
    or tried to: its figures as a QualityPoint (the base model its variant's, the reference named
    as the comparison names that endpoint), or why it could not be measured. `rows`: the run's
    QualityMeasurements with their endpoints' variants and models, when already read."""
    if rows is None:
        rows = list(run.quality_results.select_related("endpoint__variant__model").order_by("endpoint__name"))
    if not rows:
        return []
    reference = run.quality_reference
    blank = address_hider(run.endpoints.all(), hide_addresses)
    entries = []
    # The reference first: what the others' figures are read against.
    for row in sorted(rows, key=lambda row: row.endpoint_id != run.quality_reference_id):
        e, result = row.endpoint, row.figures
        label = endpoint_label(e)
        point = None
        if result is not None:
            point = QualityPoint.measured(result, label=label, model=e.variant.model.name if e.variant else None,
                                          reference=endpoint_label(reference) if reference else None)
            point = replace(point, note=blank(point.note))
        entries.append({"label": label, "kind": "measured", "url": run.get_absolute_url(), "quality": point,
                        "error": blank(row.error), "is_reference": e.id == run.quality_reference_id,
                        "run": run.title or None, "date": f"{timezone.localtime(run.created):%Y-%m-%d %H:%M}"})
    return entries


def report_quality_entries(report) -> list[dict]:
    """The quality figures an imported or published report states, as a comparison entry."""
    data = report.data
    if data.quality is None:
        return []
    kind = "published" if report.kind == "published" else "imported"
    return [{"label": report.title, "kind": kind, "url": report.get_absolute_url(), "error": "",
             "is_reference": False, "quality": data.quality.point(label=report.title, kind=kind, model=data.model)}]


def report_rows(report) -> list[dict]:
    """The report page's table, one row per level, numbers already formatted: Django's floatformat
    costs ~40 µs a cell, too much for the MAX_IMPORT_LEVELS × 9 cells of the largest import.
    Figures and their decimals are the catalogue's."""
    def num(value, digits: int) -> str:
        return "—" if value is None else f"{value:.{digits}f}"

    rows = []
    for lv in report.data.levels:
        values = lv.values()

        def shown(name: str) -> str:
            f = figure(name)
            return num(stated(values, f), f.metric.digits)

        rows.append({
            "label": lv.label, "concurrency": num(lv.concurrency, 0),
            "rate": "—" if lv.request_rate is None else f"{lv.request_rate:g}",
            "tokens": f"{num(lv.prompt_tokens, 0)} / {num(lv.output_tokens, 0)}",
            "ttft": " / ".join(shown(f"ttft_ms_{q}") for q in ("p50", "p90", "p99")),
            "tpot": shown("tpot_ms_p50"), "decode": shown("decode_tok_s_p50"),
            "aggregate": shown("aggregate_tok_s"), "prefill": shown("prefill_tok_s_p50"),
            "notes": " ".join(lv.notes)})
    return rows


RESULT_COLUMNS = ("level_id", "index", "sent", "scheduled", "first_content", "first_answer", "end", "prompt_tokens",
                  "output_tokens", "client_output_tokens", "timings", "error", "turn", "conversation")


def _as_result(row):
    _, index, sent, scheduled, first, answer, end, p_tok, o_tok, c_tok, timings, error, turn, conversation = row
    return RequestResult(index=index, sent=sent, prompt_tokens_asked=0, output_tokens_asked=0, first_content=first,
                         first_answer=answer, chunk_times=[end] if end is not None else [], prompt_tokens=p_tok,
                         output_tokens=o_tok, client_output_tokens=c_tok, timings=timings, error=error,
                         scheduled=scheduled, turn=turn, conversation=conversation)


def level_results(level: LevelResult):
    """The level's requests as engine RequestResults (without chunk times), so every derived
    figure uses the one definition in engine.metrics."""
    rows = RequestRecord.objects.filter(level=level).order_by("index").values_list(*RESULT_COLUMNS)
    return [_as_result(row) for row in rows]


def run_results_by_level(run: Run) -> dict[int, list]:
    """All of a run's requests as RequestResults, grouped by level id, in one query."""
    out: dict[int, list] = {}
    rows = RequestRecord.objects.filter(level__run=run).order_by("level_id", "index").values_list(*RESULT_COLUMNS)
    for row in rows:
        out.setdefault(row[0], []).append(_as_result(row))
    return out


def gpus_side_by_side(levels: list[LevelResult]) -> dict | None:
    """Per level, each GPU it sampled with catalogue.GPU_SIDE_BY_SIDE's figures (peak memory,
    mean utilization, memory busy), the GPUs as column groups: what a server spread over several
    GPUs did on each. None when no level sampled more than one GPU."""
    sampled = [lv for lv in levels if lv.gpu.samples and len(lv.gpu.gpus) > 1]
    if not sampled:
        return None
    indices = sorted({g.index for lv in sampled for g in lv.gpu.gpus})
    rows = []
    for lv in sampled:
        by_index = {g.index: g for g in lv.gpu.gpus}
        cells = []
        for i in indices:
            for f in GPU_SIDE_BY_SIDE:
                stored = getattr(by_index[i], f.field, None) if i in by_index else None
                value = None if stored is None else stored * f.series.scale
                cells.append({"gpu": i, "key": f.field, "value": value,
                              "text": "—" if value is None else catalogue_number(value, f.digits)})
        rows.append({"level": lv, "label": f"{lv.endpoint.name} · {lv.load_label}", "cells": cells})
    return {"gpus": indices, "figures": GPU_SIDE_BY_SIDE, "rows": rows}


def run_levels_with_endpoint(run: Run) -> list[LevelResult]:
    return list(run.levels.select_related("endpoint").defer("gpu_series", "server_series")
                .order_by("endpoint__name", "level_index"))


def telemetry_levels(run: Run, field: str) -> list[dict]:
    """Per level: label, offset from the first level's start, and its stored series."""
    levels = list(run.levels.select_related("endpoint").only("id", "run", "started_at", "concurrency", "rate",
                                                             "endpoint__name", field).order_by("started_at"))
    if not levels:
        return []
    t0 = levels[0].started_at
    read = SERIES_READERS[field]
    return [{"label": f"{lv.endpoint.name} {lv.trial_label}", "offset_s": (lv.started_at - t0).total_seconds(),
             "series": read(getattr(lv, field))} for lv in levels]


SERIES_READERS = {"gpu_series": GpuSeries.from_dict, "server_series": ServerSeries.from_dict}
# Each stored JSON field of a level and the shape that reads and writes it.
STORED_SHAPES = {"summary": LevelSummary, "gpu_summary": GpuSummary, "gpu_series": GpuSeries,
                 "server_summary": ServerSummary, "server_series": ServerSeries, "client": ClientFigures}


def _conversation(conversation) -> dict | None:
    return conversation.to_dict() if conversation else None


def _stored(level: LevelResult, field: str) -> dict:
    """A level's stored field, read by its reader and written by its writer: an export holds the
    newest version of it whatever version the row was stored in. Nothing stored stays {}."""
    data = getattr(level, field)
    return STORED_SHAPES[field].from_dict(data).to_dict() if data else {}


# ---------------------------------------------------------------- export
# 6: each level's energy per token, tokens per joule and cost per million tokens at its host's
# stated price (`energy_and_cost`); 5: the lab's launches (start-up, memory, how each server ended); 4: trials (a level's "trial")
# and SLO searches; 3: the quality step; 2: endpoints keyed by name, levels by public id (1: ids)
EXPORT_VERSION = 6
REQUEST_FIELDS = ("index", "sent", "scheduled", "conversation", "turn", "first_content", "first_answer", "end", "prompt_tokens",
                  "output_tokens", "client_output_tokens", "finish_reason", "status_code", "error", "error_kind")


def run_export(run: Run, *, hide_addresses: bool = False, with_requests: bool = True) -> dict:
    """Everything about a run as one JSON document: configuration, servers, levels with their
    telemetry, and every request (chunk times included). Endpoints are keyed by name, levels
    carry their public id. Never the endpoints' API keys; with `hide_addresses`, no base URL,
    launch command or flags, and addresses blanked in errors and server notes. Without
    `with_requests` the levels carry no requests (the API pages them separately)."""
    levels = list(run.levels.select_related("endpoint__host", "endpoint__variant__model").order_by(
        "endpoint__name", "level_index"))
    run_endpoints = list(run.endpoints.select_related("host", "variant__model"))
    blank = address_hider(run_endpoints, hide_addresses)
    records: dict[int, list] = {lv.id: [] for lv in levels}
    rows = RequestRecord.objects.filter(level__run=run).order_by("level_id", "index").values(
        "level_id", "chunk_times", "timings", *REQUEST_FIELDS)
    for rec in rows if with_requests else ():
        records[rec.pop("level_id")].append(request_row(rec, blank))
    endpoints = {}
    for e in run_endpoints:
        endpoints[e.name] = {"name": e.name, "backend": e.backend,
                             "base_url": None if hide_addresses else e.base_url,
                             "model_name": e.model_name, "host": e.host.name,
                             "variant": str(e.variant) if e.variant else None,
                             "quantization": e.variant.quantization if e.variant else None,
                             "engine_version": e.engine_version,
                             "launch_command": None if hide_addresses else e.launch_command_shown,
                             "launch_flags": None if hide_addresses else e.launch_flags,
                             "tensor_parallel_size": e.tensor_parallel_size,
                             "server_config": blank(server_config_shown(run.server_config.get(str(e.id)),
                                                                        hide_addresses)),
                             "preflight": blank(None if (found := run.preflight_findings(e.id)) is None
                                                else [f.to_dict() for f in found])}
    return {
        "format": "v100site-run", "version": EXPORT_VERSION, "public_id": run.public_id, "title": run.title,
        "status": run.status, "created": run.created.isoformat(),
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        "workload": {k: getattr(run, k) for k in (
            "prompt_tokens", "output_tokens", "temperature", "api", "load_mode", "concurrency_levels",
            "request_rates", "arrivals", "max_concurrency", "requests_per_level", "duration_s",
            "warmup_requests", "seed", "load_processes", "load_workers", "trials", "slo_percentile")} | {
                "slo": run.slo, "arrival_pattern": run.arrival_settings.to_dict(),
                "conversation": _conversation(run.load.arguments()["conversation"])},
        "slo_search": {name: search.to_dict() for name, search in _searches_by_name(run, run_endpoints).items()},
        "flags": run.flags, "endpoints": endpoints, "quality": quality_export(run, hide_addresses=hide_addresses),
        "launches": launches_export(run, blank, hide_addresses),
        "levels": [{"id": lv.public_id, "endpoint": lv.endpoint.name, "level_index": lv.level_index, "trial": lv.trial,
                    "load": lv.load_label,
                    "concurrency": lv.concurrency, "rate": lv.rate, "started_at": lv.started_at.isoformat(),
                    "wall_s": lv.wall_s, "flags": lv.flags,
                    **{field: _stored(lv, field) for field in STORED_SHAPES},
                    "energy_and_cost": lv.energy_and_cost(),
                    **({"requests": records[lv.id]} if with_requests else {})} for lv in levels],
    }


def launches_export(run: Run, blank, hide_addresses: bool) -> list[dict]:
    """The servers the run started from recipes: per recipe and setting its endpoint and what its
    start showed (LaunchReport, every stored version read by its one reader): start-up times, GPU
    memory before, after load, at peak and after the stop, whether it was given back; without
    `hide_addresses`, its command."""
    out = []
    for launch in run.launches.select_related("recipe", "endpoint").order_by("recipe__name", "setting_index"):
        report = launch.figures.to_dict()
        if hide_addresses:
            report["command"] = None
        out.append({"recipe": launch.recipe.name, "setting": launch.setting, "status": launch.status,
                    "endpoint": launch.endpoint.name if launch.endpoint_id else None,
                    "report": blank(report)})
    return out


# The requests CSV's columns: (stored field, header). Every time is in seconds from the level's
# start (the stored first_content/first_answer/end count from `sent`: shifted here), so that
# one column can be plotted against another without knowing how they are stored.
FROM_LEVEL_START = ("first_content", "first_answer", "end")
def request_row(rec: dict, blank=lambda value: value) -> dict:
    """A stored request as every export shows it (the API's pages, the JSON export, the CSV),
    one convention each: times in seconds from its level's start, a conversation's turns
    numbered from 1, addresses blanked in its error."""
    out = dict(rec)
    for name in FROM_LEVEL_START:
        if out.get(name) is not None and out.get("sent") is not None:
            out[name] = round(out["sent"] + out[name], 6)
    if out.get("turn") is not None:
        out["turn"] += 1
    if out.get("error"):
        out["error"] = blank(out["error"])
    return out


REQUEST_CSV_COLUMNS = (
    ("index", "request"), ("sent", "sent (s from the level start)"),
    ("scheduled", "scheduled (s from the level start)"), ("conversation", "conversation"),
    ("turn", "turn (1 = the first)"),
    ("first_content", "first content (s from the level start)"),
    ("first_answer", "first answer (s from the level start)"), ("end", "end (s from the level start)"),
    ("prompt_tokens", "prompt tokens (server)"), ("output_tokens", "output tokens (server)"),
    ("client_output_tokens", "output tokens (counted here)"), ("finish_reason", "finish reason"),
    ("status_code", "HTTP status"), ("error", "error"), ("error_kind", "error kind"))


def _searches_by_name(run: Run, endpoints) -> dict:
    names = {str(e.id): e.name for e in endpoints}
    return {names[k]: v for k, v in run.searches().items() if k in names}


def run_headlines(run: Run) -> list[dict]:
    """Per level (and trial), the results table's figures (named as catalogue.Figure.name), each
    with its unit, which direction is better and, for a percentile, its 95 % interval over the
    level's requests (None: too few requests, or not a percentile): what a script compares with
    a baseline."""
    figures = [f for c in RESULTS_TABLE for f in c.figures]
    return [{"level": lv.public_id, "endpoint": lv.endpoint.name, "level_index": lv.level_index, "trial": lv.trial,
             "load": lv.load_label, "concurrency": lv.concurrency, "rate": lv.rate,
             "completed": lv.completed, "failed": lv.failed, "flags": lv.flags,
             "figures": {f.name: {"value": lv.stats.figure(f), "unit": f.metric.unit, "better": f.metric.better,
                                  "interval": list(i) if (i := lv.stats.interval(f)) else None}
                         for f in figures}}
            for lv in run_levels(run)]


def run_estimates(run: Run) -> list[dict]:
    """Per endpoint and level, each results-table figure across the run's trials: n, mean and
    the 95 % interval (None bounds with one trial), as the run page shows them."""
    figures = [f for c in RESULTS_TABLE for f in c.figures]
    out = []
    for group in level_groups(run_levels(run)):
        lv = group[0]
        values = {}
        for f in figures:
            e = estimate(t.stats.figure(f) for t in group)
            values[f.name] = None if e is None else {"n": e.n, "mean": e.mean, "low": e.low, "high": e.high}
        out.append({"endpoint": lv.endpoint.name, "level_index": lv.level_index, "load": lv.load_label,
                    "trials": [t.public_id for t in group], "figures": values})
    return out


def run_requests_csv(run: Run, *, hide_addresses: bool = False) -> str:
    """Every request of the run, one row each: its times in seconds from its level's start and
    its per-request metrics (catalogue.REQUEST_CSV) with their units in the headers."""
    blank = address_hider(run.endpoints.all(), hide_addresses)
    fields = [name for name, _ in REQUEST_CSV_COLUMNS]
    out = io.StringIO()
    writer = csv_cells.writer(out)
    writer.writerow(["endpoint", "load", *(header for _, header in REQUEST_CSV_COLUMNS),
                     *(f"{METRICS[key].label} ({METRICS[key].unit})" for key in REQUEST_CSV)])
    for level in run_levels_with_endpoint(run):
        rows = RequestRecord.objects.filter(level=level).order_by("index").values_list(*fields)
        results = {r.index: r for r in level_results(level)}
        for row in rows:
            r = results[row[0]]
            shown = request_row(dict(zip(fields, row)), blank)
            values = [shown[name] for name in fields]
            metrics = (request_value(key, r) for key in REQUEST_CSV)
            writer.writerow([level.endpoint.name, level.trial_label, *values,
                             *(None if v is None else round(v, 3) for v in metrics)])
    return out.getvalue()


def run_has_telemetry(run: Run, field: str) -> bool:
    return run.levels.exclude(**{field: {}}).exists()


def report_list():
    return ImportedReport.objects.select_related("uploaded_by").defer("report")[:200]


def report_by_public_id(public_id: str) -> ImportedReport:
    return by_public_id(ImportedReport.objects.all(), public_id)


def comparison_by_public_id(public_id: str) -> Comparison:
    return by_public_id(Comparison.objects.all(), public_id)


def decision_by_public_id(public_id: str) -> Decision:
    return by_public_id(Decision.objects.select_related("owner"), public_id)


def comparison_members(comparison) -> tuple[list[Run], list[ImportedReport]]:
    """Its runs and reports, oldest first: read once for a page of both series and quality."""
    return (list(comparison.runs.select_related("quality_reference__variant").order_by("created")),
            list(comparison.reports.order_by("created")))


def comparison_series(comparison, members: tuple | None = None) -> list[dict]:
    """Measured series first (each run's endpoints), then imported and published reports; two
    of one label told apart by what differs (compare.distinct_labels)."""
    from benchmarks.compare import distinct_labels

    runs, reports = members or comparison_members(comparison)
    series = []
    for run in runs:
        series += run_series(run)
    for report in reports:
        series.append(report_series(report))
    return distinct_labels(series)


def comparison_quality(comparison, members: tuple | None = None, *, hide_addresses: bool = False) -> list[dict]:
    """Quality entries in the order of comparison_series: measured runs first, then reports;
    every run's quality rows in one query; two of one label told apart as the series are."""
    from benchmarks.compare import distinct_labels

    runs, reports = members or comparison_members(comparison)
    rows: dict[int, list[QualityMeasurement]] = {run.id: [] for run in runs}
    if runs:
        for row in (QualityMeasurement.objects.filter(run__in=runs).select_related("endpoint__variant__model")
                    .order_by("endpoint__name")):
            rows[row.run_id].append(row)
    entries = []
    for run in runs:
        entries += run_quality_entries(run, rows[run.id], hide_addresses=hide_addresses)
    for report in reports:
        entries += report_quality_entries(report)
    return distinct_labels(entries)


def api_tokens_of(user) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(owner=user)


# ---------------------------------------------------------------- schedules and regressions
def schedules_of(user) -> QuerySet[Schedule]:
    """The schedules a member sees: their own; staff see every one."""
    rows = Schedule.objects.select_related("owner").order_by("name", "created")
    return rows if user.is_staff else rows.filter(owner=user)


def schedule_for(user, public_id: str) -> Schedule:
    """A schedule its owner (or staff) may see and act on; anyone else is answered not-found."""
    return by_public_id(schedules_of(user), public_id)


def schedule_runs(schedule: Schedule, limit: int = 50) -> list[Run]:
    return list(schedule.runs.order_by("-created")[:limit])


def run_regression(run: Run) -> dict | None:
    """The run page's and API's view of its regression test: each level's figures, which
    regressed, and its history page."""
    report = run.regression_report
    if report is None:
        return None
    return {"regressed": report.regressed, "tested": report.tested, "thresholds": report.thresholds,
            "levels": report.levels, "regressions": report.regressions()}
