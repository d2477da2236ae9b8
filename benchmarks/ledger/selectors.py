"""Reading the ledger: a prediction with its pairs, a run's pairs in words, the accuracy per GPU ×
engine × figure (with the scatter and the CSV), and the corrections the advisor reads for a host."""
from __future__ import annotations

import io
import math
import statistics

from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from benchmarks import csv_cells
from benchmarks.advisor.backends import ENGINES
from benchmarks.advisor.correction import (CORRECTED, Correction, Pair, accuracy, band_said,
                                           leave_one_run_out, said)
from benchmarks.advisor.facts import fmt
from benchmarks.charts import PALETTE, figure as chart
from benchmarks.engine import backends
from benchmarks.engine.catalogue import figure
from benchmarks.models import Prediction, PredictionPair, Run

QUERY_FIELDS = ("gpu", "engine", "metric")


def prediction_by_public_id(public_id: str) -> Prediction:
    p = Prediction.objects.filter(public_id=public_id).select_related("decision", "host").first()
    if p is None:
        raise Http404("No such prediction.")
    return p


def _pairs() -> QuerySet[PredictionPair]:
    return PredictionPair.objects.select_related("prediction", "run", "level", "report")


def _as_pair(row: PredictionPair) -> Pair:
    return Pair(run=f"run-{row.run_id}" if row.run_id else f"report-{row.report_id}", metric=row.metric,
                estimated=row.estimated, measured=row.measured, band=row.band, raw=row.raw)


def _unit(metric: str) -> str:
    return figure(metric).metric.unit


def pair_row(row: PredictionPair) -> dict:
    """A pair as the pages and the API show it."""
    f = figure(row.metric)
    p = _as_pair(row)
    return {"prediction": row.prediction.public_id, "predicted_on": row.prediction.created.isoformat(),
            "candidate": row.candidate, "engine": row.backend, "gpu": row.gpu_name, "metric": row.metric,
            "title": f.title, "unit": f.metric.unit, "estimated": row.estimated, "before_correction": row.raw,
            "band": list(row.band) if row.band else None, "measured": row.measured, "error": p.error,
            "in_band": p.in_band, "level": row.level_label, "measured_at": row.measured_at,
            "kind": "measured" if row.run_id else "imported",
            "text": {"estimated": fmt(row.estimated), "band": band_said(row.band) if row.band else "—",
                     "measured": fmt(row.measured), "error": said(p.error)}}


def prediction_detail(p: Prediction) -> dict:
    """The prediction's estimates (a row per candidate and figure) and the runs that measured them."""
    estimates = [{**e, "engine": backends.label(e["backend"]) if e["backend"] else "",
                  "rows": [{"metric": m, "title": figure(m).title, "unit": _unit(m), "value": fmt(v["value"]),
                            "band": band_said(v["band"]) if v.get("band") else "—",
                            "raw": fmt(v["raw"]) if v.get("raw") is not None else "—"}
                           for m in CORRECTED if (v := e["metrics"].get(m))]}
                 for e in p.estimates]
    pairs = [pair_row(row) for row in _pairs().filter(prediction=p).order_by("created", "source", "metric")]
    return {"estimates": estimates, "pairs": pairs}


def prediction_json(p: Prediction, *, absolute) -> dict:
    """GET /api/v1/predictions/<id>/: the prediction as stored, with the runs that measured it."""
    detail = prediction_detail(p)
    return {"public_id": p.public_id, "created": p.created.isoformat(), "permalink": absolute(p.get_absolute_url()),
            "advisor_version": p.advisor_version, "gpu": p.gpu_name, "gpu_count": p.gpu_count,
            "model": p.model_name, "users": p.users, "prompt_tokens": p.prompt_tokens,
            "output_tokens": p.output_tokens, "inputs": p.inputs, "estimates": p.estimates,
            "decision": absolute(p.decision.get_absolute_url()) if p.decision else None,
            "pairs": [{**{k: v for k, v in row.items() if k != "text"}, "measured_at": absolute(row["measured_at"])}
                      for row in detail["pairs"]]}


def run_pairs_said(run: Run) -> list[str]:
    """The run page's lines: "the decision page predicted X tok/s (band a–b) on <date>; measured Y: +Z %"."""
    lines = []
    for row in _pairs().filter(run=run).order_by("prediction__created", "source", "metric"):
        unit, pair = _unit(row.metric), _as_pair(row)
        when = timezone.localtime(row.prediction.created).strftime("%Y-%m-%d")
        band = f" (band {band_said(row.band)})" if row.band else ""
        lines.append({"text": f"{row.level_label}, {figure(row.metric).title}: the decision page predicted "
                              f"{fmt(row.estimated)} {unit}{band} on {when}; measured {fmt(row.measured)} {unit}: "
                              f"{said(pair.error)}.",
                      "prediction": row.prediction.get_absolute_url(), "in_band": pair.in_band})
    return lines


# --- accuracy --------------------------------------------------------------------------------

class QueryError(ValueError):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


def accuracy_query(params) -> dict:
    """?gpu=&engine=&metric= judged: each blank or a value the ledger knows. Raises QueryError
    naming the field."""
    unknown = sorted(set(params) - set(QUERY_FIELDS))
    if unknown:
        raise QueryError(unknown[0], f"unknown query field; known: {', '.join(QUERY_FIELDS)}")
    q = {k: str(params.get(k, "")).strip() for k in QUERY_FIELDS}
    if q["engine"] and q["engine"] not in ENGINES:
        raise QueryError("engine", f"{q['engine'][:50]!r} is not an engine the advisor estimates; one of "
                                   f"{', '.join(ENGINES)}")
    if q["metric"] and q["metric"] not in CORRECTED:
        raise QueryError("metric", f"{q['metric'][:50]!r} is not an estimated figure; one of {', '.join(CORRECTED)}")
    if len(q["gpu"]) > 200:
        raise QueryError("gpu", "a GPU's name is at most 200 characters")
    if any(not ch.isprintable() for ch in q["gpu"]):
        raise QueryError("gpu", "a GPU's name holds no control characters")
    if q["gpu"] and not PredictionPair.objects.filter(gpu_name__iexact=q["gpu"]).exists():
        known = sorted(set(PredictionPair.objects.values_list("gpu_name", flat=True)))
        raise QueryError("gpu", f"no pair on a GPU named {q['gpu'][:50]!r}; GPUs with pairs: "
                                f"{', '.join(known) or 'none yet'}")
    return q


def _filtered(q: dict) -> list[PredictionPair]:
    rows = _pairs()
    if q.get("gpu"):
        rows = rows.filter(gpu_name__iexact=q["gpu"])
    if q.get("engine"):
        rows = rows.filter(backend=q["engine"])
    if q.get("metric"):
        rows = rows.filter(metric=q["metric"])
    return list(rows.order_by("gpu_name", "backend", "metric", "created"))


def _grouped(rows: list[PredictionPair]) -> dict[tuple, list[PredictionPair]]:
    """The pairs per (GPU, engine, figure), in the order the query gives them."""
    groups: dict[tuple, list[PredictionPair]] = {}
    for row in rows:
        groups.setdefault((row.gpu_name, row.backend, row.metric), []).append(row)
    return groups


def accuracy_groups(q: dict) -> list[dict]:
    """Per GPU × engine × figure: pairs, median |error|, share inside the band; and, per host,
    the median |error| before and after the correction (leave-one-run-out)."""
    out = []
    for (gpu, engine, metric), rows in _grouped(_filtered(q)).items():
        pairs = [_as_pair(r) for r in rows]
        by_host: dict[int, list[Pair]] = {}
        for r, p in zip(rows, pairs):
            if r.host_id:
                by_host.setdefault(r.host_id, []).append(p)
        corrected = [leave_one_run_out(ps) for ps in by_host.values()]
        corrected = [c for c in corrected if c["runs"] >= 2]
        before = [c["before"] for c in corrected]
        after = [c["after"] for c in corrected]
        read = {**accuracy(pairs), "corrected_before": statistics.median(before) if before else None,
                "corrected_after": statistics.median(after) if after else None}
        out.append({"gpu": gpu, "engine": engine, "engine_label": backends.label(engine), "metric": metric,
                    "title": figure(metric).title, **read, "runs": len({p.run for p in pairs}),
                    "corrected_hosts": len(corrected),
                    "text": {k: _pct(v, signed=k == "median_error") for k, v in read.items() if k != "pairs"}})
    return out


def _pct(share: float | None, signed: bool = False) -> str:
    if share is None:
        return "—"
    return said(share) if signed else f"{share * 100:.0f} %"


def accuracy_figure(q: dict) -> dict:
    """One figure's predicted against measured on log axes in its unit (the query's `metric`;
    decode speed when it names none), a trace per GPU × engine, the identity line, the bands as
    whiskers; each point's customdata its run's permalink (a click opens it)."""
    metric = q.get("metric") or CORRECTED[0]
    groups = _grouped(_filtered({**q, "metric": metric}))
    data, table = [], []
    values = []
    for n, ((gpu, engine, _), group) in enumerate(groups.items()):
        colour = PALETTE[n % len(PALETTE)]
        xs = [r.measured for r in group]
        ys = [r.estimated for r in group]
        values += xs + ys + [b for r in group if r.band for b in r.band]
        data.append({"type": "scatter", "mode": "markers", "name": f"{gpu} · {backends.label(engine)}",
                     "x": xs, "y": ys, "marker": {"color": colour, "size": 9, "symbol": n // len(PALETTE)},
                     "error_y": {"type": "data", "symmetric": False, "color": colour, "thickness": 1,
                                 "array": [(r.band_high - r.estimated) if r.band else 0 for r in group],
                                 "arrayminus": [(r.estimated - r.band_low) if r.band else 0 for r in group]},
                     "customdata": [[r.level_label, r.measured_at] for r in group],
                     "hovertemplate": "%{customdata[0]}<br>measured %{x:.3g}<br>predicted %{y:.3g}"
                                      f" {_unit(metric)}<extra></extra>"})
        table += [[r.prediction.public_id, gpu, engine, metric, _unit(metric), r.estimated,
                   r.band_low, r.band_high, r.measured, round(_as_pair(r).error * 100, 1), r.measured_at]
                  for r in group]
    axis = {"type": "log"}
    if values:
        lo, hi = min(v for v in values if v > 0) / 1.5, max(values) * 1.5
        data.append({"type": "scatter", "mode": "lines", "name": "predicted = measured", "x": [lo, hi], "y": [lo, hi],
                     "line": {"color": "#888", "dash": "dot"}, "hoverinfo": "skip"})
        # The same range on both (the identity is the diagonal), labelled at 1, 2 and 5 of each decade
        # in full: Plotly's own log labels write 20 as a small "2".
        ticks = [m * 10 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                 for m in (1, 2, 5) if lo <= m * 10 ** e <= hi]
        axis.update(range=[math.log10(lo), math.log10(hi)], tickmode="array", tickvals=ticks,
                    ticktext=[f"{t:g}" for t in ticks])
    unit = _unit(metric)
    return chart(data, {
        "title": {"text": f"{figure(metric).title}: predicted against measured"},
        "xaxis": {"title": {"text": f"measured ({unit})"}, **axis},
        "yaxis": {"title": {"text": f"predicted, with its band ({unit})"}, **axis},
        "meta": {"opens": 1},  # charts.js: a click on a point opens customdata[1], its run
    }, ["prediction", "GPU", "engine", "figure", "unit", "predicted", "band low", "band high", "measured",
        "error (%)", "measured at"], table, plot_px=360)


CSV_COLUMNS = ("prediction", "predicted on (UTC)", "GPU", "engine", "candidate", "figure", "unit", "predicted",
               "band low", "band high", "predicted before correction", "measured", "error (%)", "in band",
               "measured at", "level", "kind")


def ledger_csv(q: dict, *, absolute) -> str:
    """Every pair, with units: what /accuracy/ shows, row by row."""
    out = io.StringIO()
    w = csv_cells.writer(out)
    w.writerow(CSV_COLUMNS)
    for row in _filtered(q):
        r = pair_row(row)
        band = r["band"] or (None, None)
        w.writerow([r["prediction"], row.prediction.created.strftime("%Y-%m-%d %H:%M:%S"), r["gpu"], r["engine"],
                    r["candidate"], r["metric"], r["unit"], r["estimated"], band[0], band[1], r["before_correction"],
                    r["measured"], round(r["error"] * 100, 2),
                    "" if r["in_band"] is None else ("yes" if r["in_band"] else "no"),
                    absolute(r["measured_at"]), r["level"], r["kind"]])
    return out.getvalue()


# --- corrections -----------------------------------------------------------------------------

def corrections_for(host_id) -> dict[str, Correction]:
    """Per engine, the correction the team's measured pairs on this host give (none without)."""
    if not host_id:
        return {}
    by_engine: dict[str, list[Pair]] = {}
    for row in PredictionPair.objects.filter(host_id=int(host_id), run__isnull=False).only(
            "run_id", "report_id", "metric", "estimated", "measured", "band_low", "band_high", "raw", "backend"):
        by_engine.setdefault(row.backend, []).append(_as_pair(row))
    out = {}
    for engine, pairs in by_engine.items():
        c = Correction.of(str(host_id), pairs)
        if c is not None and any(not math.isclose(k, 1.0) for k in c.factors.values()):
            out[engine] = c
    return out
