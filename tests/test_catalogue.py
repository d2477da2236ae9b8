"""The metric catalogue: every figure once, and every place that shows one takes it from there."""
import dataclasses
import re
from html import escape

import pytest
from django.urls import reverse

from benchmarks.advisor import Evidence
from benchmarks.compare import fingerprint, ratio_sentences, sentence
from benchmarks.engine import catalogue
from benchmarks.engine.catalogue import (COMPARED, DISTRIBUTION, HIGHER, LOWER, METRICS, POINT_FIGURES,
                                         RESULTS_TABLE, SCALAR, Figure, figure, shown)
from benchmarks.engine.metrics import PER_REQUEST, RequestResult, summarize_level
from benchmarks.engine.points import Point
from benchmarks.importers.model import FIGURE_FIELDS, ImportedLevel
from factories import endpoint, measured_run


def a_level(slo=None):
    results = [RequestResult(index=i, sent=0.0, prompt_tokens_asked=64, output_tokens_asked=5, first_content=0.05,
                             first_answer=0.06, chunk_times=[0.05 + 0.01 * k for k in range(5)], chunk_tokens=[1] * 5,
                             prompt_tokens=64, output_tokens=5, client_output_tokens=5,
                             timings={"predicted_per_second": 90.0, "prompt_per_second": 900.0})
               for i in range(3)]
    return summarize_level(results, 0.2, slo)


def test_every_metric_the_engine_summarises_is_in_the_catalogue_and_the_other_way_round():
    stored = a_level(slo={"ttft_ms": 100}).to_dict()
    metric_keys = {k for k, v in stored.items() if isinstance(v, dict) and "count" in v}
    metric_keys |= {"aggregate_tok_s", "request_throughput", "goodput", "goodput_ratio"}
    from_requests = {k for k, m in METRICS.items() if m.source == "requests"}
    assert metric_keys == from_requests
    assert set(PER_REQUEST) <= from_requests  # a per-request metric is a catalogued one


@pytest.mark.parametrize("key", list(METRICS))
def test_every_entry_says_its_label_unit_definition_direction_and_summary(key):
    m = METRICS[key]
    assert m.key == key and m.label and m.name and len(m.definition) > 20
    assert m.unit or m.source == "quality"  # only a quality figure may be a pure number
    assert m.better in (HIGHER, LOWER) and m.summary in (DISTRIBUTION, SCALAR)
    assert m.needs in ("", "chat", "slo", "schedule") and m.source in ("requests", "gpu", "quality", "launch", "cost")
    # A distribution is read at its statistics, a scalar as itself.
    assert Figure(key, "p50" if m.summary == DISTRIBUTION else None).metric is m
    with pytest.raises(ValueError):
        Figure(key, None if m.summary == DISTRIBUTION else "p50")


def test_what_each_place_shows_is_catalogued_and_named_once():
    for f in (*POINT_FIGURES, *COMPARED, *catalogue.ADVISOR_FIGURES, *catalogue.THROUGHPUT_CHART,
              *catalogue.LAUNCH_FIGURES):
        assert figure(f.name) == f
    assert {c.key for c in RESULTS_TABLE} <= set(METRICS)
    assert set(catalogue.DISTRIBUTION_CHARTS.values()) | set(catalogue.REQUEST_CSV) <= set(PER_REQUEST)
    # The advisor's evidence has exactly one field per advisor figure, named as the catalogue does.
    fields = {f.name for f in dataclasses.fields(Evidence)}
    assert {f.name for f in catalogue.ADVISOR_FIGURES} <= fields
    assert not fields & {"ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "decode_tok_s"}
    # Imported levels carry their figures under catalogue keys, shaped as the catalogue summarises.
    level = ImportedLevel(label="x")
    for key in FIGURE_FIELDS:
        assert isinstance(getattr(level, key), dict) == (METRICS[key].summary == DISTRIBUTION), key
    assert not {"decode_tok_s_per_stream", "aggregate_output_tok_s"} & {f.name for f in dataclasses.fields(level)}


@pytest.mark.django_db
def test_the_run_page_defines_exactly_the_catalogue_and_heads_its_table_with_it(client):
    run = measured_run([endpoint()], levels=(1,), requests=3)
    page = client.get(run.get_absolute_url()).content.decode()
    definitions = page.split('id="definitions"')[1].split("</details>")[0]
    # The quality figures only for runs with a quality step (tests/test_quality_browser.py), the
    # start-up ones only for runs that started servers (tests/test_compare_lab.py).
    defined = [m for m in catalogue.definitions() if m.source not in ("quality", "launch")]
    assert re.findall(r'<dt id="metric-([\w]+)">', definitions) == [m.key for m in defined]
    for m in defined:
        assert escape(m.definition) in definitions
    head = page.split('id="results"')[1].split("</thead>")[0]
    shown = [c for c in RESULTS_TABLE if not c.metric.needs]  # a completions run without SLOs
    for c in shown:
        assert f'title="{escape(c.metric.definition)}"' in head
    row = page.split(f'id="level-{run.levels.get().public_id}"')[1].split("</tr>")[0]
    assert re.findall(r'data-metric="(\w+)"', row) == [f.key for c in shown for f in c.figures]
    assert "Goodput" not in head and "First answer token" not in head  # only for SLO and chat runs


def series(label, **figures):
    fp = fingerprint(prompt_tokens=512, output_tokens=100, temperature=0.7, api="completions",
                     load_mode="concurrency", gpu="H200", gpu_count=1)
    return {"label": label, "kind": "measured", "fingerprint": fp,
            "levels": [Point(label="c=1", concurrency=1, figures=figures)]}


@pytest.mark.parametrize("f", COMPARED, ids=lambda f: f.name)
def test_a_comparison_sentence_names_the_winner_the_catalogue_s_way(f):
    small, big = series("Small", **{f.name: 10.0}), series("Big", **{f.name: 25.0})
    [s] = ratio_sentences([small, big])
    winner = "Small" if f.metric.better == LOWER else "Big"
    assert s["text"].startswith(winner) and "2.50×" in s["text"] and s["metric"] == f.name
    big, small = shown(f, 25.0), shown(f, 10.0)  # at the catalogue's decimals
    assert s["text"].endswith(f"({big} vs {small} {f.quoted}).") or s["text"].endswith(f"({small} vs {big} {f.quoted}).")


def test_a_lower_is_better_metric_says_sooner_or_lower():
    ttft = figure("ttft_ms_p50")
    assert ttft.metric.better == LOWER
    [s] = ratio_sentences([series("A", ttft_ms_p50=300.0), series("B", ttft_ms_p50=100.0)])
    assert s["text"].startswith("B reaches the first token 3.00× sooner than A")
    # A metric with no phrase of its own says "lower" when lower is better, "higher" else.
    tpot, decode = figure("tpot_ms_p50"), figure("aggregate_tok_s")
    text = sentence(tpot, {"label": "A"}, Point("c", 1, figures={tpot.name: 8.0}), {"label": "B"},
                    Point("c", 1, figures={tpot.name: 4.0}), "at 1 user")["text"]
    assert text.startswith("B has a 2.00× lower TPOT p50 than A at 1 user")
    assert decode.metric.better == HIGHER
