"""What the run page shows of the servers a run started from recipes: each recipe x setting with
its start-up, memory and what it did at each load level (the sweep table), why the ones that did
not start did not, and each recipe's best setting."""
from __future__ import annotations

from benchmarks.engine import catalogue
from benchmarks.engine.launcher import MemoryReading
from benchmarks.models import LevelResult, Run


def memory_text(reading: MemoryReading) -> str:
    """ "14 900 MiB GPU" / "352 MiB RSS"; "—" when not read."""
    if reading.server_mib is None:
        return "—"
    return f"{reading.server_mib:,.0f} MiB {'GPU' if reading.source == 'gpu' else 'RSS'}".replace(",", " ")


def run_lab(run: Run, *, blank=lambda value: value, hide_addresses: bool = False) -> dict | None:
    """The run's launches as rows, the load levels as columns, and each recipe's best setting:
    the highest goodput among its measured levels when the run has SLOs, else the highest
    aggregate throughput. None for a run without recipes. `blank` hides addresses in log lines."""
    launches = list(run.launches.select_related("recipe", "endpoint"))
    if not launches:
        return None
    levels: dict[int, dict[int, LevelResult]] = {}
    for level in LevelResult.objects.filter(run=run, endpoint__recipe__isnull=False).defer(
            "gpu_series", "server_series"):
        levels.setdefault(level.endpoint_id, {})[level.level_index] = level
    best_figure = catalogue.SWEEP_BEST_SLO if run.slo else catalogue.SWEEP_BEST
    loads = [load.label for load in run.loads()]
    rows, best = [], {}
    for launch in launches:
        f = launch.figures
        by_index = levels.get(launch.endpoint_id, {})
        cells = []
        for index in range(len(loads)):
            level = by_index.get(index)
            for fig in catalogue.SWEEP_TABLE:
                value = level.stats.stat(fig.key, fig.stat) if level else None
                cells.append("—" if value is None else f"{value * fig.metric.scale:.{fig.metric.digits}f}")
            if level is not None:
                value = level.stats.stat(best_figure.key, best_figure.stat)
                if value is not None and value > best.get(launch.recipe_id, (None, -1.0, None))[1]:
                    best[launch.recipe_id] = (launch, value, level)
        rows.append({
            "launch": launch, "recipe": launch.recipe.name, "setting": launch.label or "as the recipe says",
            "report": f, "cells": cells, "memory_loaded": memory_text(f.memory_loaded),
            "memory_peak": memory_text(f.memory_peak), "memory_note": f.memory_loaded.note,
            "command": "" if hide_addresses else f.command, "log_tail": blank(f.log_tail),
            "cause_line": blank(f.cause.line), "failed": launch.status in ("refused", "did_not_start")})
    best_rows = []
    for launch, value, level in best.values():
        m = best_figure.metric
        best_rows.append({"recipe": launch.recipe.name, "setting": launch.label or "as the recipe says",
                          "load": level.load_label, "value": f"{value * m.scale:.{m.digits}f}",
                          "level_id": level.public_id})
    for row in rows:
        row["best"] = any(b[0].id == row["launch"].id for b in best.values())
    return {"rows": rows, "loads": loads, "figures": catalogue.SWEEP_TABLE, "best": best_rows,
            "best_figure": best_figure, "unstarted": [r for r in rows if r["failed"]]}
