"""What the run page shows of the servers a run started from recipes: each recipe x setting with
its start-up, memory and what it did at each load level (the sweep table), why the ones that did
not start did not, and each recipe's best setting."""
from __future__ import annotations

from benchmarks.engine import catalogue
from benchmarks.engine.differences import Noise, judge
from benchmarks.engine.launcher import MemoryReading
from benchmarks.engine.stats import estimate
from benchmarks.models import LevelResult, Run
from benchmarks.selectors import history_noise

HEALTH, FIRST_TOKEN, MEMORY = catalogue.LAUNCH_FIGURES  # the table's start-up columns, as defined there


def memory_text(reading: MemoryReading) -> str:
    """ "8 815 MiB GPU (its processes) · 9 430 MiB on the device" / "352 MiB RSS"; "—" when not
    read. On a GPU both: NVML's figure per process, and the device's used memory, which also
    counts the driver's own reserve (and anything else on the GPU)."""
    if reading.server_mib is None:
        return "—"
    if reading.source != "gpu":
        return f"{reading.server_mib:,.0f} MiB RSS".replace(",", " ")
    text = f"{reading.server_mib:,.0f} MiB GPU (its processes)"
    if reading.device_total_mib is not None:
        text += f" · {reading.device_total_mib:,.0f} MiB on the device"
    return text.replace(",", " ")


def run_lab(run: Run, *, blank=lambda value: value, hide_addresses: bool = False) -> dict | None:
    """The run's launches as rows, the load levels as columns, and each recipe's best setting:
    the highest goodput among its measured levels when the run has SLOs, else the highest
    aggregate throughput, named only beyond the noise against the next setting (`_best_row`).
    None for a run without recipes. `blank` hides addresses in log lines."""
    launches = list(run.launches.select_related("recipe", "endpoint"))
    if not launches:
        return None
    # Per endpoint and level its trials (one for a run of one trial): each figure their mean.
    levels: dict[int, dict[int, list[LevelResult]]] = {}
    for level in LevelResult.objects.filter(run=run, endpoint__recipe__isnull=False).defer(
            "gpu_series", "server_series").order_by("trial"):
        levels.setdefault(level.endpoint_id, {}).setdefault(level.level_index, []).append(level)
    best_figure = catalogue.SWEEP_BEST_SLO if run.slo else catalogue.SWEEP_BEST
    loads = [load.label for load in run.loads()]
    rows, tops = [], {}  # recipe -> launch -> its highest level: (launch, value, level, its trials)
    for launch in launches:
        f = launch.figures
        by_index = levels.get(launch.endpoint_id, {})
        cells = []
        for index in range(len(loads)):
            trials = by_index.get(index, [])
            level = trials[0] if trials else None
            for fig in catalogue.SWEEP_TABLE:
                value = _mean(trials, fig)
                cells.append("—" if value is None else f"{value * fig.metric.scale:.{fig.metric.digits}f}")
            if level is not None:
                value = _mean(trials, best_figure)
                if value is not None and value > tops.setdefault(launch.recipe_id, {}).get(
                        launch.id, (None, -1.0))[1]:
                    tops[launch.recipe_id][launch.id] = (launch, value, level, trials)
        rows.append({
            "launch": launch, "recipe": launch.recipe.name, "setting": launch.label or "as the recipe says",
            "report": f, "cells": cells, "starts": len(f.earlier_starts) + (1 if f.pid else 0),
            "memory_loaded": memory_text(f.memory_loaded),
            "health": catalogue.shown(HEALTH, f.health_s),
            "first_token": catalogue.shown(FIRST_TOKEN, f.first_token_s),
            "memory_peak": memory_text(f.memory_peak), "memory_note": f.memory_loaded.note,
            "command": "" if hide_addresses else f.command, "log_tail": blank(f.log_tail),
            "cause_line": blank(f.cause.line), "refusal": blank(f.refusal), "failure": blank(f.failure),
            "failed": launch.status in ("refused", "did_not_start")})
    best_rows = [_best_row(sorted(by_launch.values(), key=lambda t: -t[1]), best_figure)
                 for by_launch in tops.values()]
    named = {b["launch_id"] for b in best_rows if b["clear"]}
    for row in rows:
        row["best"] = row["launch"].id in named
    return {"rows": rows, "loads": loads, "figures": catalogue.SWEEP_TABLE, "best": best_rows,
            "startup": {"health": HEALTH, "first_token": FIRST_TOKEN, "memory": MEMORY},
            "best_figure": best_figure, "unstarted": [r for r in rows if r["failed"]]}


def _best_row(ranked: list[tuple], fig: catalogue.Figure) -> dict:
    """A recipe's best setting: its settings ranked by their highest level's `fig`, the top one
    named best only when it beats the next beyond the noise the trials carry
    (engine/differences.py); else both, and why no best is named."""
    m = fig.metric

    def said(launch, value, level) -> dict:
        return {"setting": launch.label or "as the recipe says", "load": level.load_label,
                "value": f"{value * m.scale:.{m.digits}f}", "level_id": level.public_id}

    launch, value, level, trials = ranked[0]
    row = {"recipe": launch.recipe.name, "launch_id": launch.id, **said(launch, value, level), "clear": True,
           "runner_up": None, "why": ""}
    if len(ranked) > 1:
        other, other_value, other_level, other_trials = ranked[1]
        # With one trial a side, the settings' own run-to-run noise where earlier runs give it.
        noise = Noise.wider(*(history_noise(lv, (fig,)).get(fig.name) for lv in (level, other_level)))
        d = judge([lv.stats.stat(fig.key, fig.stat) for lv in trials],
                  [lv.stats.stat(fig.key, fig.stat) for lv in other_trials], noise_pct=noise.pct)
        if d is not None:
            why = d.why(noise) or noise.said(within=False)  # a clear one-trial difference: against what
            row.update(clear=d.clear, runner_up=said(other, other_value, other_level), why=why,
                       ratio=f"{d.ratio:.2f}×")
    return row


def _mean(trials: list[LevelResult], fig: catalogue.Figure) -> float | None:
    e = estimate(lv.stats.stat(fig.key, fig.stat) for lv in trials)
    return None if e is None else e.mean


def sweep_series(run: Run) -> tuple[list[dict], str] | None:
    """What the sweep chart draws: per recipe and load level, each measured setting's figures of
    catalogue.SWEEP_TABLE, and the x-axis title (the swept flag, when every recipe sweeps the
    same one). None when no setting was measured."""
    launches = [lc for lc in run.launches.select_related("recipe") if lc.endpoint_id]
    flags = {tuple(lc.setting) for lc in launches}
    one_flag = len(flags) == 1 and len(next(iter(flags), ())) == 1
    x_title = next(iter(flags))[0] if one_flag else "setting"
    loads = run.loads()
    by_series: dict[str, list] = {}
    levels = LevelResult.objects.filter(run=run, endpoint__in=[lc.endpoint_id for lc in launches]).defer(
        "gpu_series", "server_series")
    by_endpoint = {}
    for level in levels:
        by_endpoint.setdefault(level.endpoint_id, []).append(level)
    for launch in launches:
        x = next(iter(launch.setting.values())) if one_flag else (launch.label or "as the recipe says")
        by_index: dict[int, list[LevelResult]] = {}
        for level in sorted(by_endpoint.get(launch.endpoint_id, []), key=lambda lv: (lv.level_index, lv.trial)):
            by_index.setdefault(level.level_index, []).append(level)
        for trials in by_index.values():
            level = trials[0]
            load = loads[level.level_index].label if level.level_index < len(loads) else level.load_label
            values = {f.name: _mean(trials, f) for f in catalogue.SWEEP_TABLE}
            by_series.setdefault(f"{launch.recipe.name} at {load}", []).append((x, values))
    if not by_series:
        return None
    return [{"label": label, "points": points} for label, points in by_series.items()], x_title
