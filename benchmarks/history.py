"""Runs over time: which levels are comparable (a workload fingerprint), each finished run's
regression test against its comparable runs, and what the history page shows of them.

Comparable levels share a fingerprint: the same model and variant, the same GPUs (their names
and count, else the host), the same tensor parallelism and the same workload shape (API, prompt
and output tokens, temperature, load mode and levels, arrivals, cap, requests, duration, warmup
and dataset). The endpoint is not part of it: a new endpoint made for an upgraded server is
compared with the old one. Seeds, SLOs and titles are not either: they do not change the load.
"""
from __future__ import annotations

import hashlib
import hmac
import json

from django.conf import settings
from django.db.models import QuerySet

from benchmarks.engine.catalogue import HISTORY_FIGURES
from benchmarks.engine.server_metrics import StoredIdentity
from benchmarks.engine.regression import LevelTest, RegressionReport, Thresholds, compare_figure
from benchmarks.models import Endpoint, LevelResult, Run

COMPARABLE_STATUSES = (Run.SUCCEEDED, Run.PARTIAL)
MAX_POINTS = 2000  # levels drawn on one history page


def gpu_label(endpoint: Endpoint) -> str:
    """ "2× Tesla V100-SXM2-32GB": the endpoint's GPUs, else its host's, else the host itself."""
    gpus = endpoint.serving_gpus()
    if not gpus:
        return f"host {endpoint.host.name}"
    names: dict[str, int] = {}
    for g in gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in sorted(names.items()))


def workload_shape(run: Run) -> dict:
    return run.plan.comparable_shape()


def workload_fingerprint(run: Run, endpoint: Endpoint) -> str:
    return keyed(workload_digest(run, endpoint))


def workload_digest(run: Run, endpoint: Endpoint) -> str:
    """The unkeyed digest of what makes levels comparable (anyone knowing them could compute it)."""
    variant = endpoint.variant
    identity = {"workload": workload_shape(run), "gpu": gpu_label(endpoint), "tp": endpoint.tensor_parallel_size,
                "model": variant.model.name if variant else endpoint.model_name,
                "variant": [variant.name, variant.quantization] if variant else None}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def keyed(digest: str) -> str:
    """A history's address: the workload's digest under an HMAC with the site's key, so that nobody
    can compute it from what they could guess (the model, the GPU, a default workload). Migration
    0025 keys the digests stored before, with this very formula."""
    return hmac.new(settings.SECRET_KEY.encode(), f"history:{digest}".encode(), hashlib.sha256).hexdigest()[:16]


def thresholds() -> Thresholds:
    return Thresholds(window=settings.REGRESSION_WINDOW, min_history=settings.REGRESSION_MIN_HISTORY,
                      z=settings.REGRESSION_Z, min_change_pct=settings.REGRESSION_MIN_CHANGE_PCT,
                      noise_floor_pct=settings.REGRESSION_NOISE_FLOOR_PCT)


def comparable_levels(level: LevelResult, window: int, same_endpoint: bool = False) -> list[LevelResult]:
    """The last `window` levels comparable with `level` (the same fingerprint and level; with
    `same_endpoint`, of its endpoint alone: a lab recipe's settings share a fingerprint) of
    finished runs queued before its run, oldest first."""
    rows = LevelResult.objects.filter(fingerprint=level.fingerprint, level_index=level.level_index,
                                      run__status__in=COMPARABLE_STATUSES, run__created__lt=level.run.created)
    if same_endpoint:
        rows = rows.filter(endpoint_id=level.endpoint_id)
    rows = (rows.exclude(run_id=level.run_id).select_related("run").defer("gpu_series", "server_series")
            .order_by("-run__created", "-id")[:window])
    return list(reversed(rows))


def regression_report(run: Run) -> RegressionReport:
    """Every fingerprinted level of `run` against its comparable levels, figure by figure
    (catalogue.HISTORY_FIGURES). Nothing is written here: the run's finish stores it."""
    limits = thresholds()
    report = RegressionReport(thresholds=limits)
    levels = (run.levels.exclude(fingerprint="").select_related("endpoint", "run")
              .defer("gpu_series", "server_series").order_by("endpoint__name", "level_index"))
    for level in levels:
        history = comparable_levels(level, limits.window)
        test = LevelTest(endpoint=level.endpoint.name, level_index=level.level_index, load=level.load_label,
                         fingerprint=level.fingerprint, runs=[h.run.public_id for h in history])
        for f in HISTORY_FIGURES:
            value = level.figure(f)
            if value is None:
                continue
            test.figures.append(compare_figure(f.name, value, [h.figure(f) for h in history], limits))
        report.levels.append(test)
    return report


# ---------------------------------------------------------------- the history page
def history_levels(fingerprint: str) -> QuerySet[LevelResult]:
    return (LevelResult.objects.filter(fingerprint=fingerprint, run__status__in=COMPARABLE_STATUSES)
            .select_related("run", "endpoint", "endpoint__host", "endpoint__variant__model")
            .defer("gpu_series", "server_series", "run__server_config", "run__preflight")
            .order_by("run__created", "endpoint__name", "level_index"))


def declared_identity(endpoint: Endpoint) -> dict:
    """What the inventory says of an endpoint's server when a run measures it, kept with the
    run's server identity: its later edits do not rewrite the history."""
    return {"engine_version": endpoint.engine_version, "launch_flags": endpoint.launch_flags or {}}


def engine_version(config: dict) -> str:
    """The server's own version (as its backend reads what it said), else the one the inventory
    declared when the run measured it."""
    stored = StoredIdentity.from_dict(config)
    return stored.version or stored.declared_version or "not reported"


def launch_flags(config: dict) -> str:
    """The flags it was started with as the inventory declared them (and what the server
    reported of its own settings, such as llama.cpp's context and slots)."""
    flags = StoredIdentity.from_dict(config).flags
    return " ".join(f"{k}={v}" for k, v in flags.items()) or "none declared"


HIDDEN_FLAGS = "shown to members"


def history_points(fingerprint: str, *, blank=lambda text: text, hide_flags: bool = False) -> list[dict]:
    """One point per comparable level, oldest first: its run, endpoint, load, headline figures,
    the engine version and flags its server had (`hide_flags`: not the flags, which may name
    paths and addresses, for readers who see no launch commands), and which figures its run's
    test flagged."""
    levels = list(history_levels(fingerprint)[:MAX_POINTS])
    configs = dict(Run.objects.filter(id__in={lv.run_id for lv in levels}).values_list("id", "server_config"))
    points = []
    for lv in levels:
        config = (configs.get(lv.run_id) or {}).get(str(lv.endpoint_id)) or {}
        report = lv.run.regression_report
        flagged = {f.figure for t in (report.levels if report else []) if t.endpoint == lv.endpoint.name
                   and t.level_index == lv.level_index for f in t.regressions}
        points.append({"run": lv.run, "level": lv, "endpoint": lv.endpoint.name, "load": lv.load_label,
                       "level_index": lv.level_index, "created": lv.run.created,
                       "figures": {f.name: lv.figure(f) for f in HISTORY_FIGURES},
                       "cells": [_cell(f, lv.figure(f)) for f in HISTORY_FIGURES],
                       "version": blank(engine_version(config)),
                       "flags": HIDDEN_FLAGS if hide_flags else blank(launch_flags(config)),
                       "regressed": flagged})
    return points


def _cell(figure, value) -> str:
    m = figure.metric
    return "—" if value is None else f"{value * m.scale:.{m.digits}f}"


def history_description(fingerprint: str) -> dict | None:
    """What the fingerprint stands for, in words, from its latest level; None when no level has it."""
    level = history_levels(fingerprint).last()
    if level is None:
        return None
    run, endpoint = level.run, level.endpoint
    variant = endpoint.variant
    return {"model": variant.model.name if variant else (endpoint.model_name or "—"),
            "variant": f"{variant.name} ({variant.get_quantization_display()})" if variant else "—",
            "gpu": gpu_label(endpoint), "tp": endpoint.tensor_parallel_size,
            "workload": f"{run.requests_dataset.label} · {run.get_api_display()} · {run.levels_label} · "
                        f"{run.requests_per_level} requests per level · temperature {run.temperature:g}",
            "endpoints": sorted(set(history_levels(fingerprint).values_list("endpoint__name", flat=True)))}
