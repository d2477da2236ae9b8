"""Plotly figures (as plain dicts) for the result pages, Django-free.

Every figure comes with the table of the numbers it draws — the same rows the CSV download
serves — and is downsampled so that a payload stays well under 1 MB whatever the run size.
Axis titles, units and column names come from the metric catalogue (engine/catalogue.py).
"""
from __future__ import annotations

import io
import random

from benchmarks import csv_cells
from benchmarks.engine.catalogue import (
    GPU_CHART,
    SERVER_CHART,
    SWEEP_TABLE,
    THROUGHPUT_CHART,
    ENERGY_CHART,
    Metric,
)

MAX_POINTS = 2000  # per trace
MAX_BARS = 1500  # requests drawn in a timeline
LEGEND_ROW_PX = 22
BELOW_PX = 75  # under the plot: the x axis' tick labels and its title


def figure(data, layout, columns, rows, *, plot_px: int, below_px: int = BELOW_PX) -> dict:
    """A figure with the table of its numbers, its text laid out one way whatever the chart: the
    title in the top margin; each y axis' tick labels and title in a side margin Plotly sizes to
    them (automargin); the x axis' tick labels and title in `below_px` under the plot; under them
    the legend, one entry a row (a row of several would wrap by the page's width), in a bottom
    margin that grows with it, so the plot keeps `plot_px` however many entries. The legend is
    placed from the figure's bottom edge (yref "container"), not as a fraction of the plot, so
    nothing that changes the plot's height can move it onto the axis title."""
    entries = sum(1 for t in data if t.get("showlegend", True))
    legend_px = LEGEND_ROW_PX * entries + 10 if entries else 0
    margin = {"t": 40, "r": 20, "l": 60, **layout.get("margin", {}), "b": below_px + legend_px}
    height = margin["t"] + plot_px + margin["b"]
    base = {"hovermode": "closest", "showlegend": entries > 0,
            "legend": {"orientation": "v", "x": 0, "xanchor": "left", "yref": "container", "yanchor": "top",
                       "y": legend_px / height, "tracegroupgap": 0}}  # no gap between legend groups
    base.update(layout, margin=margin, height=height)
    for key, axis in base.items():
        if key.startswith("yaxis"):
            base[key] = {"automargin": True, **axis}
    return {"data": data, "layout": base, "table": {"columns": columns, "rows": rows}}


def to_csv(fig: dict) -> str:
    out = io.StringIO()
    writer = csv_cells.writer(out)
    writer.writerow(fig["table"]["columns"])
    writer.writerows(fig["table"]["rows"])
    return out.getvalue()


def stride(items: list, most: int) -> list:
    """Evenly spaced subset, keeping the first and last item."""
    if len(items) <= most:
        return list(items)
    step = (len(items) - 1) / (most - 1)
    return [items[round(i * step)] for i in range(most)]


def _at(values, i):
    return values[i] if values and i < len(values) else None


def _r(v, digits=3):
    return None if v is None else round(v, digits)


# ---------------------------------------------------------------- throughput
# Distinct colours, one per series (Tableau 10, then ten more as distinct from them and from each
# other as we could find): a comparison of up to 20 series never repeats one.
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#1f3d7a", "#8c564b", "#17becf", "#bcbd22", "#7f7f7f", "#d62728", "#2ca02c", "#9467bd",
           "#e377c2", "#000000")
PANEL_PX = 250  # the height of each panel's plot area


def series_name(s: dict) -> str:
    """A series' label, with where its numbers come from unless measured here or already said."""
    kind = s.get("kind", "measured")
    return s["label"] + ("" if kind == "measured" or kind in s["label"].lower() else f" ({kind})")


def throughput_figure(series: list[dict]) -> dict:
    """Aggregate output tok/s and per-stream decode tok/s against the load level, in two panels
    of one axis each (the two are different quantities on different scales), one colour per
    series and one legend entry per series. The x axis ticks at the measured levels only. When
    every level is at one load (e.g. llama-bench's pp and tg tests, all at concurrency 1), there
    is no axis of load to draw: bars per series and level instead. A series' "levels" are
    engine.points.Point."""
    return load_figure(series, THROUGHPUT_CHART, "Throughput")


def energy_figure(series: list[dict]) -> dict | None:
    """Output tokens per joule of GPU energy against the load level (catalogue ENERGY_CHART), as
    the throughput chart draws its figures; None when no level's energy was measured."""
    if not any(p.get(f) is not None for f in ENERGY_CHART for s in series for p in s["levels"]):
        return None
    return load_figure(series, ENERGY_CHART, "Energy efficiency")


def load_figure(series: list[dict], figures, title: str) -> dict:
    """`figures` against the load level, a panel each (see throughput_figure)."""
    # A panel only for a figure some series has: llama-bench's tg tests state no aggregate.
    panels = [f for f in figures if any(p.get(f) is not None for s in series for p in s["levels"])]
    panels = panels or list(figures[:1])
    rate_mode = any(p.rate is not None for s in series for p in s["levels"])
    xtitle = "request rate (req/s)" if rate_mode else "concurrent requests"
    axis_title = xtitle if rate_mode else "concurrency (requests in flight)"

    def x_of(p):
        return p.rate if rate_mode else p.concurrency

    loads = sorted({x_of(p) for s in series for p in s["levels"] if x_of(p) is not None})
    one_load = len(loads) <= 1
    data, rows = [], []
    for n, s in enumerate(series):
        levels = sorted(s["levels"], key=lambda p: (p.rate or 0, p.concurrency or 0))
        name, colour = series_name(s), PALETTE[n % len(PALETTE)]
        xs = [p.label for p in levels] if one_load else [x_of(p) for p in levels]
        for k, f in enumerate(panels, start=1):
            trace = {"name": name, "legendgroup": name, "showlegend": k == 1, "x": xs,
                     "y": [p.get(f) for p in levels], "xaxis": "x" if k == 1 else f"x{k}",
                     "yaxis": "y" if k == 1 else f"y{k}",
                     "hovertemplate": f"{name}<br>%{{x}}: %{{y:.{f.metric.digits}f}} {f.metric.unit}<extra></extra>"}
            if one_load:
                trace.update(type="bar", marker={"color": colour})
            else:
                trace.update(type="scatter", mode="lines+markers", line={"color": colour},
                             marker={"color": colour, "symbol": n // len(PALETTE)})
            data.append(trace)
        for x, p in zip(xs, levels):
            rows.append([s["label"], s.get("kind", "measured"), x_of(p), p.label, *(_r(p.get(f), 2) for f in panels)])
    layout = {"title": {"text": f"{title} vs load" if not one_load else f"{title} at one load"},
              "grid": {"rows": len(panels), "columns": 1, "pattern": "independent", "roworder": "top to bottom",
                       "ygap": 0.25},
              "margin": {"l": 70}}
    if one_load:
        layout["barmode"] = "group"
    for k, f in enumerate(panels, start=1):
        suffix = "" if k == 1 else str(k)
        x = {"title": {"text": axis_title if not one_load else f"level (all at {_load_words(rate_mode, loads)})"}}
        if one_load:
            x["type"] = "category"
        else:
            # Ticks at the measured levels only: no minor log ticks between them.
            x.update(type="log" if not rate_mode else "linear", tickmode="array", tickvals=loads,
                     ticktext=[f"{v:g}" for v in loads])
        layout["xaxis" + suffix] = x
        layout["yaxis" + suffix] = {"title": {"text": f.title}, "rangemode": "tozero"}
    return figure(data, layout, ["series", "kind", xtitle, "level", *(f.title for f in panels)], rows,
                  plot_px=len(panels) * PANEL_PX + 60)


def _load_words(rate_mode: bool, loads: list) -> str:
    if not loads:
        return "one load"
    return f"{loads[0]:g} req/s" if rate_mode else f"concurrency {loads[0]:g}"



# ---------------------------------------------------------------- sweep (servers started from recipes)
def sweep_figure(series: list[dict], x_title: str) -> dict:
    """The sweep's figures (catalogue.SWEEP_TABLE: aggregate throughput solid on the left axis,
    p99 TTFT dotted on the right) against the swept setting, one line per recipe and load level.
    A series is {"label", "points": [(x, {figure name: value})]}; x is the swept value, or the
    setting's label when a recipe sweeps several parameters. A server setting is discrete (there
    is no --parallel 2.5 between 2 and 3): the axis is categorical, its values the labels, in
    their natural order (numbers ascending, labels as the sweep gave them)."""
    left, right = SWEEP_TABLE
    data, rows = [], []
    numeric = all(isinstance(x, (int, float)) and not isinstance(x, bool) for s in series for x, _ in s["points"])
    order = sorted({x for s in series for x, _ in s["points"]}) if numeric else \
        list(dict.fromkeys(x for s in series for x, _ in s["points"]))
    label = (lambda x: f"{x:g}") if numeric else str
    for s in series:
        points = sorted(s["points"], key=lambda p: order.index(p[0]))
        xs = [label(x) for x, _ in points]
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{s['label']} — {left.label.lower()}",
                     "legendgroup": s["label"], "x": xs, "y": [v.get(left.name) for _, v in points]})
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{s['label']} — {right.label}",
                     "legendgroup": s["label"], "line": {"dash": "dot"}, "yaxis": "y2",
                     "x": xs, "y": [v.get(right.name) for _, v in points]})
        rows += [[s["label"], x, _r(v.get(left.name), 2), _r(v.get(right.name), 2)] for x, v in points]
    return figure(data, {
        "title": {"text": "The sweep: throughput and p99 TTFT per setting"},
        "xaxis": {"title": {"text": x_title}, "type": "category", "categoryorder": "array",
                  "categoryarray": [label(x) for x in order]},
        "yaxis": {"title": {"text": left.title}, "rangemode": "tozero"},
        "yaxis2": {"title": {"text": right.title}, "overlaying": "y", "side": "right", "rangemode": "tozero",
                   "showgrid": False},
    }, ["series", x_title, left.title, right.title], rows, plot_px=300)

# ---------------------------------------------------------------- distributions
PERCENTILE_MARKS = {"p50": ("line-ns-open", "#1f3d7a"), "p90": ("triangle-up-open", "#f28e2b"),
                    "p99": ("x-thin-open", "#e15759")}
def distribution_figure(metric: Metric, groups: list[dict], title: str = "") -> dict:
    """One horizontal box per level (levels down the side, their names on one line each, so that
    no label meets another however many levels), with p50/p90/p99 marked. groups: {"name",
    "values", "stats"} where stats are the level's full-data percentiles (a
    metrics.Distribution, or its stored dict), so the marks stay exact even when the drawn values
    are a sample."""
    data, rows, marks = [], [], {q: ([], []) for q in PERCENTILE_MARKS}
    rng = random.Random(0)
    unit = metric.unit
    for g in groups:
        values = g["values"]
        drawn = values if len(values) <= MAX_POINTS else rng.sample(values, MAX_POINTS)
        data.append({"type": "box", "orientation": "h", "name": g["name"], "x": [_r(v) for v in drawn],
                     "boxpoints": False, "showlegend": False, "marker": {"color": "#8a94a6"}})
        stats = g["stats"]
        for q in PERCENTILE_MARKS:
            if stats.get(q) is not None:
                marks[q][0].append(_r(stats.get(q)))
                marks[q][1].append(g["name"])
        rows.append([g["name"], stats.get("count") or 0, _r(stats.get("mean")), _r(stats.get("p50")),
                     _r(stats.get("p90")), _r(stats.get("p99")), _r(stats.get("min")), _r(stats.get("max"))])
    # The exact percentiles as marks of their own colour and shape, named once in the legend:
    # text beside each mark overlapped where p90 and p99 lie close.
    for q, (xs, ys) in marks.items():
        if xs:
            symbol, colour = PERCENTILE_MARKS[q]
            data.append({"type": "scatter", "mode": "markers", "name": q, "x": xs, "y": ys,
                         "marker": {"symbol": symbol, "size": 12, "color": colour, "line": {"width": 2, "color": colour}},
                         "hovertemplate": q + " %{y}: %{x:.2f} " + unit + "<extra></extra>"})
    return figure(data, {"title": {"text": title or f"{metric.name} per level"},
                         "xaxis": {"title": {"text": f"{metric.label} ({unit})"}, "rangemode": "tozero"},
                         "yaxis": {"type": "category", "autorange": "reversed"},
                         "margin": {"l": 20}},
                  ["level", "count", *(f"{stat} ({unit})" for stat in ("mean", "p50", "p90", "p99", "min", "max"))],
                  rows, plot_px=34 * max(len(groups), 3) + 60)


# ---------------------------------------------------------------- timeline
def timeline_figure(title: str, requests: list[dict]) -> dict:
    """Each request as a horizontal bar from when it was sent: waiting (queued in the server
    before its prompt was processed), prefill, decode. The split uses the server's own
    prompt time (llama.cpp `timings.prompt_ms`) when reported; otherwise the part before the
    first token is drawn as one "waiting + prefill" segment. Long prefills that hold up the
    other requests show up as bars whose decode starts late."""
    ok = [r for r in requests if r.get("ttft") is not None and r.get("e2e") is not None]
    drawn = stride(sorted(ok, key=lambda r: r["index"]), MAX_BARS)
    has_prefill = any(r.get("prompt_ms") is not None for r in drawn)
    ys = [f"#{r['index']}" for r in drawn]
    waiting, prefill, decode, rows = [], [], [], []
    for r in drawn:
        ttft_s = r["ttft"]
        pre = (r["prompt_ms"] / 1000.0) if r.get("prompt_ms") is not None else None
        pre = min(pre, ttft_s) if pre is not None else None
        wait = ttft_s - pre if pre is not None else ttft_s
        waiting.append(wait)
        prefill.append(pre or 0.0)
        decode.append(r["e2e"] - ttft_s)
        rows.append([r["index"], _r(r["sent"], 4), _r(wait * 1000, 2), _r((pre or 0) * 1000, 2) if pre is not None else None,
                     _r((r["e2e"] - ttft_s) * 1000, 2)])
    bases = [r["sent"] for r in drawn]
    wait_name = "waiting" if has_prefill else "waiting + prefill"
    data = [{"type": "bar", "orientation": "h", "name": wait_name, "y": ys, "x": [_r(v, 4) for v in waiting],
             "base": [_r(b, 4) for b in bases], "marker": {"color": "#c9ced8"}}]
    if has_prefill:
        data.append({"type": "bar", "orientation": "h", "name": "prefill", "y": ys, "x": [_r(v, 4) for v in prefill],
                     "base": [_r(b + w, 4) for b, w in zip(bases, waiting)], "marker": {"color": "#f0a202"}})
    data.append({"type": "bar", "orientation": "h", "name": "decode", "y": ys, "x": [_r(v, 4) for v in decode],
                 "base": [_r(b + w + p, 4) for b, w, p in zip(bases, waiting, prefill)], "marker": {"color": "#2f5bd3"}})
    note = "" if len(drawn) == len(ok) else f" ({len(drawn)} of {len(ok)} requests drawn)"
    return figure(data, {"title": {"text": title + note}, "barmode": "overlay",
                         "xaxis": {"title": {"text": "seconds from the level start"}},
                         "yaxis": {"type": "category", "title": {"text": "request (in send order)"},
                                   "autorange": "reversed", "showticklabels": len(drawn) <= 64}},
                  ["request", "sent (s)", wait_name + " (ms)", "prefill (ms)", "decode (ms)"], rows,
                  plot_px=max(180, min(780, 16 * len(drawn))))


# ---------------------------------------------------------------- telemetry over time
def _level_points(levels: list[dict], values) -> list[tuple]:
    """(t from the first level, level label, [values]) per sample, downsampled per level, with
    an empty point after each level so that lines do not join across the gap between levels.
    A level's "series" is a GpuSeries or ServerSeries."""
    points = []
    per_level = max(2, MAX_POINTS // max(len(levels), 1))
    for lv in levels:
        s = lv["series"]
        rows = [(lv["offset_s"] + t, lv["label"], values(s, i)) for i, t in enumerate(s.t)]
        if rows:
            points += stride(rows, per_level)
            points.append((rows[-1][0], None, [None] * len(rows[-1][2])))
    return points


def _boundaries(levels: list[dict]) -> tuple[list, list]:
    shapes, notes = [], []
    for lv in levels:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": lv["offset_s"], "x1": lv["offset_s"],
                       "y0": 0, "y1": 1, "line": {"dash": "dot", "width": 1, "color": "#888"}})
        # Upright along its boundary, inside the plot: side by side, labels of short levels
        # would run into each other.
        notes.append({"xref": "x", "yref": "paper", "x": lv["offset_s"], "y": 1, "text": lv["label"],
                      "showarrow": False, "font": {"size": 10, "color": "#555"}, "textangle": -90,
                      "xanchor": "left", "yanchor": "top"})
    return shapes, notes


def gpu_figure(levels: list[dict]) -> dict:
    """GPU memory, utilization, temperature and power over the run, one panel each, with the
    level boundaries. levels: {"label", "offset_s", "series": GpuSeries}."""
    data, rows = [], []
    n = len(GPU_CHART)
    layout = {"title": {"text": "GPU over time"},
              "xaxis": {"title": {"text": "seconds from the first level"}, "anchor": f"y{n}", "ticks": "outside"}}
    for k, metric in enumerate(GPU_CHART, start=1):
        axis = "yaxis" if k == 1 else f"yaxis{k}"
        top = 1 - (k - 1) / n
        layout[axis] = {"title": {"text": metric.title}, "domain": [max(0, top - 1 / n + 0.04), top],
                        "rangemode": "tozero"}
    gpus = sorted({g for lv in levels for g in lv["series"].gpus}, key=lambda g: (len(g), g))
    for j, g in enumerate(gpus):
        points = _level_points(levels, lambda s, i: [_at(s.column(g, m.key), i) for m in GPU_CHART])
        xs = [_r(p[0]) for p in points]
        for k, metric in enumerate(GPU_CHART, start=1):
            # One colour per GPU in every panel, so GPU 1's memory and its utilization read as one GPU.
            data.append({"type": "scatter", "mode": "lines", "name": f"GPU {g}", "x": xs,
                         "line": {"color": PALETTE[j % len(PALETTE)]},
                         "y": [None if p[2][k - 1] is None else _r(p[2][k - 1] * metric.scale, 3) for p in points],
                         "yaxis": "y" if k == 1 else f"y{k}", "legendgroup": f"gpu{g}", "showlegend": k == 1})
        rows += [[g, _r(p[0]), p[1], *p[2]] for p in points if p[1] is not None]
    shapes, notes = _boundaries(levels)
    layout.update(shapes=shapes, annotations=notes)
    return figure(data, layout, ["gpu", "t (s)", "level", *[m.key for m in GPU_CHART]], rows, plot_px=230 * n - 20)


def gpus_figure(side: dict) -> dict:
    """The GPUs side by side (selectors.gpus_side_by_side): per level, one bar per GPU for each
    figure of catalogue.GPU_SIDE_BY_SIDE, one panel each; a GPU keeps its colour in every panel."""
    figures = side["figures"]
    n = len(figures)
    labels = [row["label"] for row in side["rows"]]
    layout = {"title": {"text": "The GPUs side by side, per level"}, "barmode": "group",
              "xaxis": {"anchor": f"y{n}", "type": "category", "automargin": True, "tickangle": -30}}
    for k, f in enumerate(figures, start=1):
        top = 1 - (k - 1) / n
        layout["yaxis" if k == 1 else f"yaxis{k}"] = {"title": {"text": f.title}, "rangemode": "tozero",
                                                       "domain": [max(0, top - 1 / n + 0.06), top - 0.02]}
    data, rows = [], []
    for j, gpu in enumerate(side["gpus"]):
        colour = PALETTE[j % len(PALETTE)]
        for k, f in enumerate(figures, start=1):
            ys = [next((c["value"] for c in row["cells"] if c["gpu"] == gpu and c["key"] == f.field), None)
                  for row in side["rows"]]
            data.append({"type": "bar", "name": f"GPU {gpu}", "x": labels, "y": [_r(y, 3) for y in ys],
                         "marker": {"color": colour}, "legendgroup": f"gpu{gpu}", "showlegend": k == 1,
                         "yaxis": "y" if k == 1 else f"y{k}", "offsetgroup": str(gpu)})
        rows += [[row["label"], gpu, *[_r(next((c["value"] for c in row["cells"] if c["gpu"] == gpu
                                                 and c["key"] == f.field), None), 3) for f in figures]]
                 for row in side["rows"]]
    # Room below for the level names, slanted.
    return figure(data, layout, ["level", "gpu", *[f.title for f in figures]], rows, plot_px=200 * n,
                  below_px=30 + min(160, 5 * max(len(lb) for lb in labels)))


def server_figure(levels: list[dict]) -> dict:
    """The server's own queue depth and KV-cache use (scraped /metrics) over the run; a series
    the server does not export is not drawn, and the title says which are missing.
    levels: {"label", "offset_s", "series": ServerSeries}."""
    data, missing = [], []
    points = _level_points(levels, lambda s, i: [_at(s.column(m.key), i) for m in SERVER_CHART])
    xs = [_r(p[0]) for p in points]
    counts = [m for m in SERVER_CHART if m.unit == "requests"]
    share = next(m for m in SERVER_CHART if m not in counts)
    for k, metric in enumerate(SERVER_CHART):
        ys = [p[2][k] for p in points]
        if any(v is not None for v in ys):
            data.append({"type": "scatter", "mode": "lines", "name": metric.label, "x": xs,
                         "y": [None if v is None else _r(v * metric.scale, 4) for v in ys],
                         "yaxis": "y" if metric in counts else "y2"})
        else:
            missing.append(metric)
    rows = [[_r(p[0]), p[1], *p[2]] for p in points if p[1] is not None]
    shapes, notes = _boundaries(levels)
    title = "Server queue and KV cache (its /metrics)"
    if missing:
        title += "<br><sub>No " + " and no ".join(f"{m.label} line" for m in missing) + \
                 ": the server's /metrics exports none</sub>"
    # Outside ticks keep the x axis' "0" clear of the y axis' "0" in the corner.
    layout = {"title": {"text": title}, "xaxis": {"title": {"text": "seconds from the first level"}, "ticks": "outside"},
              "yaxis": {"title": {"text": "requests"}, "rangemode": "tozero"}, "shapes": shapes,
              "annotations": notes, "margin": {"t": 70 if missing else 40}}
    if share not in missing:
        layout["yaxis2"] = {"title": {"text": share.title}, "overlaying": "y", "side": "right",
                            "range": [0, share.scale],
                            "tickmode": "linear", "tick0": 0, "dtick": share.scale / 4, "showgrid": False}
    return figure(data, layout, ["t (s)", "level", *[m.key for m in SERVER_CHART]], rows, plot_px=300)


# ---------------------------------------------------------------- history
def time_ticks(times: list, most: int = 6) -> tuple[list[str], list[str]]:
    """Tick positions and labels for a time axis, taken from the sorted `times` themselves: the
    first, then each time at least 1/most of the span after the last tick, so no two labels
    (about a seventh of a 1366 px chart wide at most) can meet; labels as precise as the span
    needs, and a label equal to the previous one dropped."""
    if not times:
        return [], []
    span = (times[-1] - times[0]).total_seconds()
    chosen = [times[0]]
    for t in times[1:]:
        if (t - chosen[-1]).total_seconds() >= span / most:
            chosen.append(t)
    if span >= 3 * 86400:
        shape = "%b %-d"
    elif span >= 3 * 3600:
        shape = "%b %-d %H:%M"
    else:
        shape = "%b %-d %H:%M:%S"
    vals, texts = [], []
    for t in chosen:
        text = t.strftime(shape)
        if not texts or text != texts[-1]:
            vals.append(t.isoformat())
            texts.append(text)
    return vals, texts


def history_figure(shown, points: list[dict]) -> dict:
    """One headline figure (a catalogue Figure) over time: a line per endpoint and load level,
    each point's hover naming its run, engine version and launch flags; the points a run's
    regression test flagged marked with a red cross, and a dotted line where the engine version
    changed. points: history.history_points, oldest first."""
    series: dict[tuple, list[dict]] = {}
    for p in points:
        if p["figures"].get(shown.name) is not None:
            series.setdefault((p["endpoint"], p["level_index"], p["load"]), []).append(p)
    unit = shown.metric.unit
    data, rows, shapes = [], [], []
    for n, ((endpoint, _, load), drawn) in enumerate(sorted(series.items(), key=lambda kv: kv[0][:2])):
        drawn = stride(drawn, MAX_POINTS)
        name, colour = f"{endpoint} · {load}", PALETTE[n % len(PALETTE)]
        xs = [p["created"].isoformat() for p in drawn]
        data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": xs,
                     "y": [_r(p["figures"][shown.name] * shown.metric.scale, 3) for p in drawn],
                     "line": {"color": colour}, "marker": {"color": colour, "symbol": n // len(PALETTE)},
                     "customdata": [[str(p["run"]), p["version"], p["flags"]] for p in drawn],
                     "hovertemplate": "%{customdata[0]}<br>%{x}<br>%{y:.2f} " + unit
                                      + "<br>engine %{customdata[1]}<br>flags %{customdata[2]}<extra></extra>"})
        for before, after in zip(drawn, drawn[1:]):
            if before["version"] != after["version"]:
                shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": xs[drawn.index(after)],
                               "x1": xs[drawn.index(after)], "y0": 0, "y1": 1,
                               "line": {"dash": "dot", "width": 1, "color": colour}})
        rows += [[endpoint, load, p["run"].public_id, p["created"].isoformat(), p["version"], p["flags"],
                  _r(p["figures"][shown.name] * shown.metric.scale, 3), "yes" if shown.name in p["regressed"] else ""]
                 for p in drawn]
    flagged = [p for p in points if shown.name in p["regressed"] and p["figures"].get(shown.name) is not None]
    if flagged:
        data.append({"type": "scatter", "mode": "markers", "name": "flagged as a regression",
                     "x": [p["created"].isoformat() for p in flagged],
                     "y": [_r(p["figures"][shown.name] * shown.metric.scale, 3) for p in flagged],
                     "marker": {"symbol": "x-thin-open", "size": 16, "color": "#d62728", "line": {"width": 3}},
                     "hoverinfo": "skip"})
    tickvals, ticktext = time_ticks(sorted({p["created"] for p in points if p["figures"].get(shown.name) is not None}))
    return figure(data, {
        "title": {"text": f"{shown.metric.name} over time"},
        # Ticks at runs' own times, a sixth of the span apart at least, drawn right of their tick:
        # Plotly's automatic date ticks put several identical labels into one second when runs
        # are close, and its two-line default reaches left into the y axis's "0".
        "xaxis": {"title": {"text": "run queued (UTC)"}, "type": "date", "tickmode": "array",
                  "tickvals": tickvals, "ticktext": ticktext,
                  "ticklabelposition": "outside right", "automargin": True},
        "yaxis": {"title": {"text": shown.title}, "rangemode": "tozero"},
        "shapes": shapes,
        "margin": {"l": 70},
    }, ["endpoint", "load", "run", "queued", "engine version", "launch flags", shown.title, "flagged"], rows,
        plot_px=270, below_px=80)
