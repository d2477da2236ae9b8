"""Plotly figures (as plain dicts) for the result pages, Django-free.

Every figure comes with the table of the numbers it draws — the same rows the CSV download
serves — and is downsampled so that a payload stays well under 1 MB whatever the run size.
"""
from __future__ import annotations

import csv
import io
import random

MAX_POINTS = 2000  # per trace
MAX_BARS = 1500  # requests drawn in a timeline

GPU_METRICS = [  # key in gpu_series, axis title, scale
    ("memory_used_mib", "GPU memory (GiB)", 1 / 1024),
    ("utilization_gpu", "utilization (%)", 1),
    ("temperature_c", "temperature (°C)", 1),
    ("power_w", "power (W)", 1),
]
SERVER_METRICS = [("running", "running requests"), ("waiting", "waiting requests"),
                  ("kv_cache_usage", "KV cache use (0–1)")]


def figure(data, layout, columns, rows) -> dict:
    base = {"margin": {"t": 40, "r": 20, "b": 90, "l": 60},
            "legend": {"orientation": "h", "yanchor": "top", "y": -0.25},  # below the x-axis title
            "hovermode": "closest"}
    base.update(layout)
    return {"data": data, "layout": base, "table": {"columns": columns, "rows": rows}}


def to_csv(fig: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
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
def throughput_figure(series: list[dict]) -> dict:
    """Aggregate output tok/s (solid, left axis) and per-stream decode tok/s (dotted, right
    axis) against the load level, one colour per series."""
    data, rows = [], []
    rate_mode = any(lv.get("rate") is not None for s in series for lv in s["levels"])
    for s in series:
        levels = sorted(s["levels"], key=lambda lv: (lv.get("rate") or 0, lv.get("concurrency") or 0))
        xs = [lv.get("rate") if rate_mode else lv.get("concurrency") for lv in levels]
        name = s["label"] + ("" if s.get("kind", "measured") == "measured" else f" ({s['kind']})")
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} — aggregate",
                     "legendgroup": name, "x": xs, "y": [lv.get("aggregate_tok_s") for lv in levels]})
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{name} — per stream",
                     "legendgroup": name, "line": {"dash": "dot"}, "yaxis": "y2",
                     "x": xs, "y": [lv.get("decode_tok_s") for lv in levels]})
        for x, lv in zip(xs, levels):
            rows.append([s["label"], s.get("kind", "measured"), x, _r(lv.get("aggregate_tok_s"), 2),
                         _r(lv.get("decode_tok_s"), 2)])
    xtitle = "request rate (req/s)" if rate_mode else "concurrent requests"
    return figure(data, {
        "title": {"text": "Throughput vs load"},
        "xaxis": {"title": {"text": xtitle}, "type": "log" if not rate_mode else "linear"},
        "yaxis": {"title": {"text": "aggregate output tok/s"}, "rangemode": "tozero"},
        "yaxis2": {"title": {"text": "decode tok/s per stream"}, "overlaying": "y", "side": "right",
                   "rangemode": "tozero"},
    }, ["series", "kind", xtitle, "aggregate output tok/s", "decode tok/s per stream (p50)"], rows)


# ---------------------------------------------------------------- distributions
def distribution_figure(title: str, unit: str, groups: list[dict]) -> dict:
    """One box per level with p50/p90/p99 marked. groups: {"name", "values", "stats"} where
    stats are the level's full-data percentiles (from engine.metrics), so the marks stay exact
    even when the drawn values are a sample."""
    data, rows = [], []
    rng = random.Random(0)
    for g in groups:
        values = g["values"]
        drawn = values if len(values) <= MAX_POINTS else rng.sample(values, MAX_POINTS)
        data.append({"type": "box", "name": g["name"], "y": [_r(v) for v in drawn], "boxpoints": False,
                     "showlegend": False})
        stats = g["stats"]
        marks = [(q, stats.get(q)) for q in ("p50", "p90", "p99") if stats.get(q) is not None]
        data.append({"type": "scatter", "mode": "markers+text", "x": [g["name"]] * len(marks),
                     "y": [_r(v) for _, v in marks], "text": [q for q, _ in marks], "textposition": "middle right",
                     "marker": {"symbol": "line-ew-open", "size": 18}, "showlegend": False,
                     "hovertemplate": "%{text}: %{y:.2f} " + unit + "<extra></extra>"})
        rows.append([g["name"], stats.get("count", 0), _r(stats.get("mean")), _r(stats.get("p50")),
                     _r(stats.get("p90")), _r(stats.get("p99")), _r(stats.get("min")), _r(stats.get("max"))])
    return figure(data, {"title": {"text": title}, "yaxis": {"title": {"text": unit}, "rangemode": "tozero"}},
                  ["level", "count", "mean", "p50", "p90", "p99", "min", "max"], rows)


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
                         "yaxis": {"autorange": "reversed", "showticklabels": len(drawn) <= 64},
                         "height": max(300, min(900, 16 * len(drawn) + 120))},
                  ["request", "sent (s)", wait_name + " (ms)", "prefill (ms)", "decode (ms)"], rows)


# ---------------------------------------------------------------- telemetry over time
def _level_points(levels: list[dict], values) -> list[tuple]:
    """(t from the first level, level label, [values]) per sample, downsampled per level, with
    an empty point after each level so that lines do not join across the gap between levels."""
    points = []
    per_level = max(2, MAX_POINTS // max(len(levels), 1))
    for lv in levels:
        s = lv["series"]
        ts = s.get("t") or []
        rows = [(lv["offset_s"] + t, lv["label"], values(s, i)) for i, t in enumerate(ts)]
        if rows:
            points += stride(rows, per_level)
            points.append((rows[-1][0], None, [None] * len(rows[-1][2])))
    return points


def _boundaries(levels: list[dict]) -> tuple[list, list]:
    shapes, notes = [], []
    for lv in levels:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": lv["offset_s"], "x1": lv["offset_s"],
                       "y0": 0, "y1": 1, "line": {"dash": "dot", "width": 1, "color": "#888"}})
        notes.append({"xref": "x", "yref": "paper", "x": lv["offset_s"], "y": 1.02, "text": lv["label"],
                      "showarrow": False, "font": {"size": 10}, "xanchor": "left"})
    return shapes, notes


def gpu_figure(levels: list[dict]) -> dict:
    """GPU memory, utilization, temperature and power over the run, one panel each, with the
    level boundaries. levels: {"label", "offset_s", "series": {"t": [...], "gpus": {i: {...}}}}."""
    data, rows = [], []
    n = len(GPU_METRICS)
    layout = {"title": {"text": "GPU over time"}, "height": 200 * n + 80,
              "xaxis": {"title": {"text": "seconds from the first level"}, "anchor": f"y{n}"}}
    for k, (key, title, _) in enumerate(GPU_METRICS, start=1):
        axis = "yaxis" if k == 1 else f"yaxis{k}"
        top = 1 - (k - 1) / n
        layout[axis] = {"title": {"text": title}, "domain": [max(0, top - 1 / n + 0.04), top], "rangemode": "tozero"}
    gpus = sorted({g for lv in levels for g in (lv["series"].get("gpus") or {})})
    for g in gpus:
        points = _level_points(levels, lambda s, i: [_at(((s.get("gpus") or {}).get(g) or {}).get(key), i)
                                                     for key, _, _ in GPU_METRICS])
        xs = [_r(p[0]) for p in points]
        for k, (key, title, scale) in enumerate(GPU_METRICS, start=1):
            data.append({"type": "scatter", "mode": "lines", "name": f"GPU {g} {title}", "x": xs,
                         "y": [None if p[2][k - 1] is None else _r(p[2][k - 1] * scale, 3) for p in points],
                         "yaxis": "y" if k == 1 else f"y{k}", "legendgroup": f"gpu{g}", "showlegend": k == 1})
        rows += [[g, _r(p[0]), p[1], *p[2]] for p in points if p[1] is not None]
    shapes, notes = _boundaries(levels)
    layout.update(shapes=shapes, annotations=notes)
    return figure(data, layout, ["gpu", "t (s)", "level", *[key for key, _, _ in GPU_METRICS]], rows)


def server_figure(levels: list[dict]) -> dict:
    """The server's own queue depth and KV-cache use (scraped /metrics) over the run."""
    data = []
    points = _level_points(levels, lambda s, i: [_at(s.get(key), i) for key, _ in SERVER_METRICS])
    xs = [_r(p[0]) for p in points]
    for k, (key, title) in enumerate(SERVER_METRICS):
        ys = [p[2][k] for p in points]
        if any(v is not None for v in ys):
            data.append({"type": "scatter", "mode": "lines", "name": title, "x": xs, "y": ys,
                         "yaxis": "y2" if key == "kv_cache_usage" else "y"})
    rows = [[_r(p[0]), p[1], *p[2]] for p in points if p[1] is not None]
    shapes, notes = _boundaries(levels)
    return figure(data, {"title": {"text": "Server queue and KV cache (its /metrics)"},
                         "xaxis": {"title": {"text": "seconds from the first level"}},
                         "yaxis": {"title": {"text": "requests"}, "rangemode": "tozero"},
                         "yaxis2": {"title": {"text": "KV cache use"}, "overlaying": "y", "side": "right",
                                    "range": [0, 1]},
                         "shapes": shapes, "annotations": notes},
                  ["t (s)", "level", *[key for key, _ in SERVER_METRICS]], rows)
