"""docs/metrics.md is written from the metric catalogue (benchmarks/engine/metric_reference.py) and
kept in step with it."""
import pytest
from conftest import ROOT

from benchmarks.engine import catalogue, metric_reference

PAGE = ROOT / "docs" / "metrics.md"


def test_docs_metrics_is_what_the_catalogue_writes_now():
    assert PAGE.read_text() == metric_reference.markdown(), (
        f"docs/metrics.md differs from the metric catalogue: regenerate it with `{metric_reference.COMMAND}`")


def row(text: str, key: str) -> str:
    rows = [line for line in text.splitlines() if line.startswith("|") and f"(`{key}`)" in line]
    assert len(rows) == 1, f"{key}: {len(rows)} rows in docs/metrics.md"
    return rows[0]


@pytest.mark.parametrize("key", list(catalogue.METRICS))
def test_every_catalogue_metric_has_its_row(key):
    m = catalogue.METRICS[key]
    cells = [c.strip() for c in row(PAGE.read_text(), key).split(" | ")]
    assert cells[0].startswith(f"| **{metric_reference.cell(m.label)}**")
    assert cells[1:4] == [m.unit or "—", m.better, "distribution" if m.summary == catalogue.DISTRIBUTION
                          else "one number"]
    assert metric_reference.cell(m.definition) in cells[5]


@pytest.mark.parametrize("key", list(catalogue.SERIES))
def test_every_sampled_series_has_its_row(key):
    s = catalogue.SERIES[key]
    assert metric_reference.cell(s.definition) in row(PAGE.read_text(), key)


def test_a_percentile_shown_in_the_results_table_is_named_in_its_row():
    ttft = row(PAGE.read_text(), "ttft_ms")
    assert "results table (p50, p90, p99)" in ttft and "sweep table (p99)" in ttft


def test_a_bar_in_a_definition_does_not_split_its_cell():
    kl = row(PAGE.read_text(), "kl_mean")
    assert "KL(reference \\|\\| endpoint)" in kl and kl.replace("\\|", "").count("|") == 7


def test_a_catalogue_source_without_a_section_is_refused(monkeypatch):
    monkeypatch.setitem(catalogue.METRICS, "toy", catalogue.Metric(
        "toy", "Toy", "A toy figure", "ms", "Made up for this test.", catalogue.LOWER, catalogue.SCALAR,
        source="toy"))
    with pytest.raises(KeyError, match="metric_reference.GROUPS"):
        metric_reference.markdown()
