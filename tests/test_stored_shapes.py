"""Every JSON blob a level, an imported report or a decision stores has one writer and one reader
side by side; rows written by earlier versions read as the current version does."""
import asyncio

import pytest

from benchmarks.engine import gpu
from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.gpu import GpuSeries, GpuSummary
from benchmarks.engine.metrics import LevelSummary
from benchmarks.engine.observe import measure_observed
from benchmarks.engine.server_metrics import ServerSeries, ServerSummary
from benchmarks.importers import ImportedReport, parse_report, v100_writeup_reports
from factories import gpu_samples


def engine_level(url: str, dialect: str):
    """One level as the engine measures it against a server: the outcome and the server's telemetry."""
    async def run():
        load = Load(concurrency=4, requests=12)
        session = Session(Target(url, dialect), Workload(prompt_tokens=32, output_tokens=8, warmup_requests=1),
                          loads=[load])
        try:
            preflight = await session.preflight()
            await session.prepare(preflight.model)
            return await measure_observed(session, load)
        finally:
            await session.close()
    return asyncio.run(run())


@pytest.fixture(scope="module")
def measured():
    from benchmarks.engine.simulator import SimConfig, SimulatorProcess

    with SimulatorProcess(SimConfig(dialect="vllm", decode_ms=2, prefill_ms=5)) as sim:
        outcome, _, server = engine_level(sim.url, "vllm")
    from benchmarks.engine.metrics import summarize_level

    samples = gpu_samples(peak_mib=7000.0, process_mib={31337: 6500.0}, temperatures=(55, 71), ticks=4)
    return {"summary": summarize_level(outcome.results, outcome.wall_s, {"ttft_ms": 1000}),
            "gpu": gpu.summary(samples), "gpu_series": gpu.series(samples),
            "server": server.summary, "server_series": server.series}


@pytest.mark.parametrize("name, shape", [("summary", LevelSummary), ("gpu", GpuSummary), ("gpu_series", GpuSeries),
                                         ("server", ServerSummary), ("server_series", ServerSeries)])
def test_what_the_engine_measured_reads_back_as_it_was_written(measured, name, shape):
    value = measured[name]
    stored = value.to_dict()
    # The GPU's shapes are at version 3 (the level's energy); the others at 2.
    assert stored["version"] == (3 if name.startswith("gpu") else 2) and shape.from_dict(stored) == value
    # A row written before versions were stored (no "version" key) reads the same.
    old = {k: v for k, v in stored.items() if k != "version"}
    assert shape.from_dict(old) == value


def test_the_engine_measured_every_figure_the_level_summary_has(measured):
    s = measured["summary"]
    assert s.completed == 12 and s.failed == 0 and s.good_requests == 12
    assert s.stat("ttft_ms", "p50") > 0 and s.stat("decode_tok_s", "p50") > 0 and s.stat("aggregate_tok_s") > 0
    server = measured["server"]
    assert server.samples >= 2 and server.deltas["generation_tokens"] == 12 * 8 and server.max_running is not None


def test_a_first_summary_row_lacking_later_metrics_reads_them_as_not_measured(measured):
    stored = measured["summary"].to_dict()
    first = {k: v for k, v in stored.items()
             if k not in ("version", "answer_ms", "itl_per_token_ms", "goodput", "goodput_ratio", "good_requests",
                          "slo", "request_throughput", "prompt_drift", "server_usage_missing")}
    old = LevelSummary.from_dict(first)
    assert old.stat("ttft_ms", "p50") == measured["summary"].stat("ttft_ms", "p50")
    assert old.stat("goodput") is None and old.value("answer_ms").count == 0 and old.good_requests == 0


def test_the_first_gpu_summary_rows_a_list_per_gpu_read_as_the_current_shape(measured):
    """The first engine stored gpu_summary as a list of per-GPU rows: read, the across-GPU
    figures are worked out from it, so peak memory reads from either."""
    current = measured["gpu"]
    first = [g.to_dict() for g in current.gpus]
    old = GpuSummary.from_dict(first)
    assert old.gpus == current.gpus
    assert (old.peak_memory_used_mib, old.max_temperature_c, old.samples) == (7000.0, 71, 4)
    assert old.peak_memory_gib() == current.peak_memory_gib() == 7000.0 / 1024
    assert old.peak_memory_gib([0]) == 7000.0 / 1024 and old.peak_memory_gib([3]) is None


def test_an_empty_series_is_stored_as_nothing():
    assert GpuSeries().to_dict() == {} and ServerSeries().to_dict() == {}
    assert GpuSeries.from_dict({}) == GpuSeries() and ServerSeries.from_dict({}) == ServerSeries()


def test_an_imported_report_of_schema_1_reads_as_the_current_schema():
    current = parse_report(open("tests/data/imports/vllm_bench_serve_c8_detailed.json", "rb").read())
    stored = current.to_dict()
    assert stored["schema_version"] == 3
    v1 = {**stored, "schema_version": 1, "levels": []}
    for lv in stored["levels"]:
        old = {k: v for k, v in lv.items() if k not in ("decode_tok_s", "aggregate_tok_s", "prefill_tok_s")}
        v1["levels"].append({**old, "decode_tok_s_per_stream": lv["decode_tok_s"]["p50"],
                             "aggregate_output_tok_s": lv["aggregate_tok_s"], "prefill_tok_s": None})
    del v1["schema_version"]  # the first rows stored no schema_version at all
    assert ImportedReport.from_dict(v1) == ImportedReport.from_dict(stored) == current
    # llama-bench and the write-up stated their per-stream decode as a mean.
    for report in v100_writeup_reports():
        stored = report.to_dict()
        v1 = {**stored, "schema_version": 1, "levels": [
            {**{k: v for k, v in lv.items() if k not in ("decode_tok_s", "aggregate_tok_s")},
             "decode_tok_s_per_stream": lv["decode_tok_s"].get("mean"), "aggregate_output_tok_s": lv["aggregate_tok_s"],
             "prefill_tok_s": None} for lv in stored["levels"]]}
        assert ImportedReport.from_dict(v1) == report
        assert [p.get("decode_tok_s_p50") for p in report.points()] == [lv.decode_tok_s.get("mean")
                                                                         for lv in report.levels]
