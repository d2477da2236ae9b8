"""docs/metrics.md, written from the metric catalogue (`catalogue.py`), so that the reference a
person reads says what the product computes and shows. Django-free.

    python -m benchmarks.engine.metric_reference > docs/metrics.md

`tests/test_metric_reference.py` fails when the page differs from what `markdown()` writes now.
"""
from __future__ import annotations

from benchmarks.engine import catalogue as c

COMMAND = "python -m benchmarks.engine.metric_reference > docs/metrics.md"

# A section per `Metric.source`, in this order: its heading and what its figures are computed from.
GROUPS = {
    "requests": ("Measured from the requests",
                 "Computed by the client from each level's requests (`engine/metrics.py`)."),
    "gpu": ("Read from the GPUs", "Read from NVML while the level ran."),
    "cost": ("Cost at the host's price",
             "A level's wall time and GPU energy at the hourly price staff state for its host (`engine/cost.py`)."),
    "launch": ("Start-up of a server the lab started",
               "One figure per server the lab started from a recipe (`engine/launcher.py`), not per level."),
    "quality": ("Quality through the endpoint",
                "One figure per endpoint and evaluation text (`engine/quality.py`), not per level."),
}
# `Metric.needs`: the run page shows the metric only for such runs (benchmarks/selectors.py).
NEEDS = {"chat": "Only for runs on `/v1/chat/completions`.", "slo": "Only for runs with SLOs.",
         "schedule": "Only for runs in rate mode."}
# Where each figure shows: the catalogue's lists, in the words of their comments.
PLACES = (
    ("results table", tuple(f for col in c.RESULTS_TABLE for f in col.figures)),
    ("comparison table", c.COMPARISON_TABLE),
    ("comparison sentences", c.COMPARED),
    ("throughput chart", c.THROUGHPUT_CHART),
    ("energy chart", c.ENERGY_CHART),
    ("sweep table", c.SWEEP_TABLE),
    ("history and regressions", c.HISTORY_FIGURES),
    ("advisor", c.ADVISOR_FIGURES),
    ("start-up table", c.LAUNCH_FIGURES),
    ("comparison quality table", c.COMPARISON_QUALITY),
    ("quality sentences", c.QUALITY_COMPARED),
)
SERIES_PLACES = (
    ("GPU chart", c.GPU_CHART),
    ("server chart", c.SERVER_CHART),
)


def cell(text: str) -> str:
    """Text as one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def shown_in(m: c.Metric) -> str:
    places = []
    for place, figures in PLACES:
        stats = [f.stat for f in figures if f.key == m.key]
        if stats:
            places.append(f"{place} ({', '.join(stats)})" if stats != [None] else place)
    if m.key in c.DISTRIBUTION_CHARTS.values():
        places.append("distribution chart")
    if m.key in c.REQUEST_CSV:
        places.append("requests CSV (each request)")
    return "; ".join(places) or "—"


def kept(m: c.Metric) -> str:
    return "distribution" if m.summary == c.DISTRIBUTION else "one number"


def metric_table(metrics: list[c.Metric]) -> list[str]:
    lines = ["| metric | unit | better | kept | shown in | definition |", "|---|---|---|---|---|---|"]
    for m in metrics:
        definition = f"{m.definition} {NEEDS[m.needs]}" if m.needs else m.definition
        name = f"**{cell(m.label)}**" + (f": {cell(m.name)}" if m.name != m.label else "")
        lines.append(f"| {name} (`{m.key}`) | {cell(m.unit) or '—'} | {m.better} "
                     f"| {kept(m)} | {cell(shown_in(m))} | {cell(definition)} |")
    return lines


def series_shown_in(s: c.Series) -> str:
    places = [place for place, series in SERIES_PLACES if s in series]
    places += [f"GPUs side by side ({g.stat})" for g in c.GPU_SIDE_BY_SIDE if g.series == s]
    return "; ".join(places) or "—"


def markdown() -> str:
    example = c.Figure("ttft_ms", "p50")
    lines = [
        "# Metric reference", "",
        ("Every figure v100site measures: its name, unit, definition, which direction is better and where it "
         "shows. This page is written from the metric catalogue, `benchmarks/engine/catalogue.py`, by"), "",
        f"    {COMMAND}", "",
        ("so change the catalogue and run that, never this page by hand "
         "(`tests/test_metric_reference.py` fails when the two differ)."), "",
        (f"A metric's key is its one name everywhere: in the level summary the engine stores, imported reports, "
         f"comparison and advisor points, charts and CSVs. A **distribution** keeps, per level, the count and its "
         f"{', '.join(c.STATS)} over the level's requests; a figure is the metric at one of them, "
         f"`{example.name}` (\"{example.title}\"). **One number** is kept per level, unless its section says "
         f"otherwise. **Shown in** lists the places the catalogue's lists name for it, with the statistics shown "
         f"there (\"—\": none); the run page's \"How each number is defined\" gives every definition below."),
    ]
    for source in dict.fromkeys(m.source for m in c.METRICS.values()):
        if source not in GROUPS:
            raise KeyError(f"the catalogue has metrics of source {source!r}: give it a section in "
                           f"metric_reference.GROUPS")
        heading, about = GROUPS[source]
        lines += ["", f"## {heading}", "", about, "",
                  *metric_table([m for m in c.METRICS.values() if m.source == source])]
    lines += ["", "## Sampled over time", "",
              ("What the worker samples over time while levels run: the GPUs (NVML, per GPU) and the server's "
               "own `/metrics`."), "",
              "| series | unit | from | shown in | definition |", "|---|---|---|---|---|"]
    lines += [f"| **{cell(s.label)}** (`{s.key}`) | {cell(s.unit)} | {s.source} | {cell(series_shown_in(s))} "
              f"| {cell(s.definition)} |" for s in c.SERIES.values()]
    lines += ["", "## How a kind of figure is made"]
    for note in (c.ACROSS_TRIALS, c.SLO_SEARCH):
        lines += ["", f"### {note.label}", "", note.definition]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
