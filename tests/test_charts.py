"""Every figure's data: what is drawn, the table beside it, and the payload bounds."""
import json

import pytest

from benchmarks import charts
from benchmarks.engine.catalogue import metric
from benchmarks.engine.gpu import GpuSeries
from benchmarks.engine.points import Point
from benchmarks.engine.server_metrics import ServerSeries


def point(concurrency, aggregate, decode):
    return Point(label=f"c={concurrency}", concurrency=concurrency,
                 figures={"aggregate_tok_s": aggregate, "decode_tok_s_p50": decode})


def test_throughput_draws_two_panels_of_one_axis_each_one_colour_and_legend_entry_per_series():
    fig = charts.throughput_figure([
        {"label": "llama", "kind": "measured", "levels": [point(1, 56, 56), point(8, 235, 29.4)]},
        {"label": "V100 write-up", "kind": "published", "levels": [point(8, 150, 18.7)]},
    ])
    aggregate, per_stream, pub_aggregate, pub_per_stream = fig["data"]
    assert [t["name"] for t in fig["data"] if t["showlegend"]] == ["llama", "V100 write-up (published)"]
    assert aggregate["x"] == [1, 8] and aggregate["y"] == [56, 235] and aggregate["yaxis"] == "y"
    assert per_stream["y"] == [56, 29.4] and per_stream["yaxis"] == "y2" and per_stream["xaxis"] == "x2"
    assert aggregate["line"]["color"] == per_stream["line"]["color"] != pub_aggregate["line"]["color"]
    layout = fig["layout"]
    assert "overlaying" not in layout["yaxis2"]  # a panel of its own, not a second scale over the first
    assert layout["yaxis"]["title"]["text"] == "Aggregate output (tok/s)"
    assert layout["yaxis2"]["title"]["text"] == "Decode per stream p50 (tok/s)"
    for axis in ("xaxis", "xaxis2"):  # ticks at the measured levels only: no minor log ticks
        assert layout[axis]["type"] == "log" and layout[axis]["tickvals"] == [1, 8]
    assert fig["table"]["rows"][1] == ["llama", "measured", 8, "c=8", 235, 29.4]
    said = charts.throughput_figure([{"label": "V100 write-up (published): vLLM FP8", "kind": "published",
                                      "levels": [point(8, 150, 18.7)]}])
    assert said["data"][0]["name"] == "V100 write-up (published): vLLM FP8"  # not "(published)" twice


def test_throughput_colours_stay_distinct_and_the_figure_grows_with_its_legend():
    many = [{"label": f"s{i}", "levels": [point(1, 10 + i, 10), point(4, 20 + i, 8)]} for i in range(7)]
    fig = charts.throughput_figure(many)
    colours = [t["line"]["color"] for t in fig["data"] if t["showlegend"]]
    assert len(set(colours)) == 7
    assert fig["layout"]["height"] - charts.throughput_figure(many[:1])["layout"]["height"] >= 6 * 20


def test_a_single_load_is_drawn_as_bars_not_a_lone_point_on_an_empty_axis():
    bench = {"label": "llama-bench", "kind": "imported",
             "levels": [Point(label="pp512", concurrency=1, figures={}),
                        Point(label="tg128", concurrency=1, figures={"decode_tok_s_p50": 80.0})]}
    fig = charts.throughput_figure([bench])
    assert {t["type"] for t in fig["data"]} == {"bar"}
    assert fig["data"][0]["x"] == ["pp512", "tg128"] and fig["layout"]["xaxis"]["type"] == "category"
    # Only the decode panel: no series states an aggregate figure, so no empty panel for it.
    assert "all at concurrency 1" in fig["layout"]["xaxis"]["title"]["text"]
    assert "yaxis2" not in fig["layout"] and fig["layout"]["yaxis"]["title"]["text"] == "Decode per stream p50 (tok/s)"


def test_distribution_marks_exact_percentiles_even_when_values_are_sampled():
    values = list(range(10000))
    stats = {"count": 10000, "p50": 4999.5, "p90": 8999.1, "p99": 9899.01, "mean": 4999.5, "min": 0, "max": 9999}
    fig = charts.distribution_figure(metric("ttft_ms"), [{"name": "c=8", "values": values, "stats": stats}])
    box, *marks = fig["data"]
    assert len(box["x"]) == charts.MAX_POINTS and box["orientation"] == "h"
    # One legend entry per percentile, a mark each, no text beside the marks to overlap.
    assert [m["name"] for m in marks] == ["p50", "p90", "p99"] and [m["x"] for m in marks] == [[4999.5], [8999.1], [9899.01]]
    assert all("text" not in m for m in marks) and len({m["marker"]["symbol"] for m in marks}) == 3
    assert fig["table"]["rows"][0][:3] == ["c=8", 10000, 4999.5]


def test_timeline_splits_waiting_prefill_and_decode_with_server_timings():
    reqs = [{"index": 0, "sent": 0.0, "ttft": 0.5, "e2e": 1.5, "prompt_ms": 400.0},
            {"index": 1, "sent": 0.1, "ttft": 0.9, "e2e": 2.0, "prompt_ms": 300.0}]
    fig = charts.timeline_figure("t", reqs)
    waiting, prefill, decode = fig["data"]
    assert [t["name"] for t in fig["data"]] == ["waiting", "prefill", "decode"]
    assert waiting["x"] == [pytest.approx(0.1), pytest.approx(0.6)]  # request 1 waited behind request 0
    assert prefill["base"] == [pytest.approx(0.1), pytest.approx(0.7)]
    assert decode["base"] == [pytest.approx(0.5), pytest.approx(1.0)] and decode["x"] == [1.0, 1.1]


def test_timeline_without_server_timings_draws_one_segment_before_the_first_token():
    fig = charts.timeline_figure("t", [{"index": 0, "sent": 0.0, "ttft": 0.2, "e2e": 1.0, "prompt_ms": None}])
    assert [t["name"] for t in fig["data"]] == ["waiting + prefill", "decode"]


def test_timeline_is_downsampled_and_says_so():
    reqs = [{"index": i, "sent": i * 0.01, "ttft": 0.1, "e2e": 0.5} for i in range(10000)]
    fig = charts.timeline_figure("t", reqs)
    assert len(fig["data"][-1]["y"]) == charts.MAX_BARS
    assert "1500 of 10000 requests drawn" in fig["layout"]["title"]["text"]
    assert len(json.dumps(fig)) < 1_000_000


def test_gpu_figure_has_level_boundaries_and_one_panel_per_metric():
    series = GpuSeries([0.0, 0.2, 0.4], {"0": {"memory_used_mib": [1024, 2048, 2048], "utilization_gpu": [0, 90, 95],
                                               "temperature_c": [40, 50, 55], "power_w": [60, 250, 260]}})
    fig = charts.gpu_figure([{"label": "c=1", "offset_s": 0.0, "series": series},
                             {"label": "c=8", "offset_s": 5.0, "series": series}])
    mem = fig["data"][0]
    # A gap (None) after each level keeps the lines of two levels apart.
    assert mem["x"] == [0.0, 0.2, 0.4, 0.4, 5.0, 5.2, 5.4, 5.4] and mem["y"][1] == 2.0  # GiB
    assert mem["y"][3] is None and len(fig["table"]["rows"]) == 6
    assert len(fig["data"]) == 4 and [s["x0"] for s in fig["layout"]["shapes"]] == [0.0, 5.0]
    assert fig["table"]["rows"][0] == ["0", 0.0, "c=1", 1024, 0, 40, 60]


def test_server_figure_skips_metrics_the_server_does_not_report():
    fig = charts.server_figure([{"label": "c=1", "offset_s": 0,
                                 "series": ServerSeries([0, 1], {"running": [0, 3], "waiting": [0, 1]})}])
    assert [t["name"] for t in fig["data"]] == ["Running requests", "Waiting requests"]
    # Said, not an empty legend entry or a second axis of nothing.
    assert "No KV cache use line: the server's /metrics exports none" in fig["layout"]["title"]["text"]
    assert "yaxis2" not in fig["layout"]


def test_csv_has_the_table():
    fig = charts.throughput_figure([{"label": "a", "levels": [point(1, 10.0, 10.0)]}])
    assert charts.to_csv(fig).splitlines() == [
        "series,kind,concurrent requests,level,Aggregate output (tok/s),Decode per stream p50 (tok/s)",
        "a,measured,1,c=1,10.0,10.0"]


def test_time_ticks_are_the_runs_own_times_a_sixth_of_the_span_apart_with_distinct_labels():
    from datetime import datetime, timedelta, timezone

    from benchmarks.charts import time_ticks
    start = datetime(2026, 12, 1, 18, 20, 2, 100000, tzinfo=timezone.utc)
    # Five runs inside two seconds (a test's history): Plotly's own ticks gave five labels of one second.
    close = [start + timedelta(milliseconds=400 * i) for i in range(5)]
    vals, texts = time_ticks(close)
    assert texts == ["Dec 1 18:20:02", "Dec 1 18:20:03"]
    assert vals[0] == close[0].isoformat() and set(vals) <= {t.isoformat() for t in close}
    # A month of nightly runs: dates only, no two ticks closer than a sixth of the span.
    nightly = [start + timedelta(days=i) for i in range(30)]
    vals, texts = time_ticks(nightly)
    assert texts[0] == "Dec 1" and len(texts) == len(set(texts)) <= 7
    chosen = [datetime.fromisoformat(v) for v in vals]
    assert all((b - a) >= (nightly[-1] - nightly[0]) / 6 for a, b in zip(chosen, chosen[1:]))
    # A day of hourly runs: hours and minutes; nothing for no runs.
    assert time_ticks([start + timedelta(hours=i) for i in range(24)])[1][1] == "Dec 1 22:20"  # 4 h after the first: the first run past 23 h / 6
    assert time_ticks([]) == ([], [])
