"""Importers for vllm bench serve, GuideLLM and llama-bench result files, and the published
V100 write-up figures. Django-free: run with `pytest -p no:django tests/test_importers.py`."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.importers import (
    MAX_BYTES, MAX_LEVELS, MAX_VALUES, ImportedLevel, ImportedReport, ReportFormatError, detect_kind, parse_report,
    v100_writeup_reports)
from benchmarks.importers._fields import load_documents

DATA = Path(__file__).parent / "data" / "imports"
GOOD = ["vllm_bench_serve_c8_detailed.json", "vllm_bench_serve_appended_c1_c8.jsonl",
        "guidellm_sync_concurrent8.json", "guidellm_v0_2_poisson.json",
        "llama_bench_pp512_tg128.json"]


def raw(name: str) -> bytes:
    return (DATA / name).read_bytes()


def doc(name: str):
    return json.loads(raw(name))


def dump(value) -> bytes:
    return json.dumps(value).encode()


def error_of(data, kind=None, filename="", **limits) -> str:
    with pytest.raises(ReportFormatError) as info:
        parse_report(data, filename=filename, kind=kind, **limits)
    return str(info.value)


# --- vllm bench serve ---------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    ({"p99_ttft_ms": 1e308}, "ttft_ms p99 is 1e+308, outside 0 to 8.64e+07"),
    ({"p99_ttft_ms": 100.0}, "ttft_ms p99 (100) is below its p90 (683.427): percentiles cannot fall"),
    ({"output_throughput": 1e12}, "aggregate_tok_s is 1000000000000.0, outside 0 to 1e+07"),
])
def test_absurd_or_inconsistent_figures_are_refused_with_their_level_and_field(change, words):
    src = {**doc("vllm_bench_serve_c8_detailed.json"), **change}
    message = error_of(dump(src))
    assert "level" in message and words in message, message

def test_vllm_detailed_result_maps_to_one_level():
    src = doc("vllm_bench_serve_c8_detailed.json")
    report = parse_report(raw("vllm_bench_serve_c8_detailed.json"), "run.json")
    assert report.kind == "vllm-bench-serve"
    assert report.model == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert report.backend is None and report.gpu is None  # the file states neither
    assert report.created == "2025-12-03T14:15:22"
    assert report.raw_meta["metadata"] == {"gpu": "Tesla V100-PCIE-16GB"}  # --metadata kept
    [level] = report.levels
    assert level.label == "concurrency 8"
    assert (level.concurrency, level.request_rate) == (8.0, None)
    assert (level.completed, level.failed) == (8, 0)
    assert (level.prompt_tokens, level.output_tokens) == (512.0, 100.0)
    for ours, theirs in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"),
                         ("e2e_ms", "e2el")):
        assert getattr(level, ours) == {
            "mean": src[f"mean_{theirs}_ms"], "p50": src[f"median_{theirs}_ms"],
            "p90": src[f"p90_{theirs}_ms"], "p99": src[f"p99_{theirs}_ms"]}
    assert level.ttft_ms["mean"] == 519.011
    assert level.aggregate_tok_s == 154.359
    assert level.request_throughput == 1.54359
    assert level.decode_tok_s == {"p50": pytest.approx(1000 / 41.2599)}
    assert level.prefill_tok_s == {}  # the file states no prefill speed
    assert any("1000 / median TPOT" in n for n in level.notes)


def test_vllm_appended_results_become_levels():
    report = parse_report(raw("vllm_bench_serve_appended_c1_c8.jsonl"))
    assert report.tool_label == "vllm bench serve (v100-fp16)"
    assert [lv.label for lv in report.levels] == ["concurrency 1", "concurrency 8"]
    one, eight = report.levels
    assert one.tpot_ms == {"mean": 37.46, "p50": 37.40, "p99": 38.52}  # default: only p99
    assert one.e2e_ms == {}  # e2el not in the default --percentile-metrics
    assert (eight.completed, eight.failed) == (31, 1)
    assert eight.prompt_tokens == pytest.approx(15872 / 31)
    assert eight.decode_tok_s == {"p50": pytest.approx(1000 / 49.20)}


def test_vllm_rate_and_failed_from_errors_in_older_files():
    src = doc("vllm_bench_serve_c8_detailed.json")
    del src["failed"]  # benchmarks/benchmark_serving.py never wrote it
    src["errors"] = ["", "", "ReadTimeout", "", "", "", "", ""]
    src["request_rate"], src["max_concurrency"] = 2.5, None
    [level] = parse_report(dump(src)).levels
    assert level.failed == 1
    assert (level.label, level.request_rate, level.concurrency) == ("2.5 req/s", 2.5, None)


def test_vllm_inf_rate_without_cap_is_not_a_concurrency_level():
    src = json.loads(raw("vllm_bench_serve_appended_c1_c8.jsonl").splitlines()[0])
    src["max_concurrency"] = None
    [level] = parse_report(dump(src)).levels
    assert level.label == "all requests at once" and level.concurrency is None


def test_vllm_all_failed_has_nothing_to_chart():
    src = json.loads(raw("vllm_bench_serve_appended_c1_c8.jsonl").splitlines()[0])
    src.update(completed=0, failed=32, request_throughput=0.0, output_throughput=0.0,
               total_output_tokens=0, total_input_tokens=0)
    assert "nothing to chart" in error_of(dump(src))


# --- GuideLLM -----------------------------------------------------------------------------

def test_guidellm_v04_report():
    src = doc("guidellm_sync_concurrent8.json")
    report = parse_report(raw("guidellm_sync_concurrent8.json"))
    assert report.kind == "guidellm" and report.tool_label == "GuideLLM 0.4.0"
    assert report.model == "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"
    assert report.created.startswith("2025-12-03T")
    sync, conc = report.levels
    assert (sync.label, sync.concurrency, sync.completed) == ("synchronous", 1.0, 8)
    assert (conc.label, conc.concurrency, conc.completed) == ("concurrent@8", 8.0, 16)
    m = src["benchmarks"][1]["metrics"]
    ok = lambda name: m[name]["successful"]  # noqa: E731
    assert conc.ttft_ms == {"mean": ok("time_to_first_token_ms")["mean"],
                            "p50": ok("time_to_first_token_ms")["percentiles"]["p50"],
                            "p90": ok("time_to_first_token_ms")["percentiles"]["p90"],
                            "p95": ok("time_to_first_token_ms")["percentiles"]["p95"],
                            "p99": ok("time_to_first_token_ms")["percentiles"]["p99"]}
    # inter_token_latency_ms is (last - first) / (n - 1): our TPOT. No chunk-gap ITL exists.
    assert conc.tpot_ms["mean"] == ok("inter_token_latency_ms")["mean"]
    assert conc.itl_ms == {}
    assert conc.e2e_ms["p50"] == pytest.approx(ok("request_latency")["percentiles"]["p50"] * 1000)
    assert conc.decode_tok_s == {"p50": pytest.approx(
        1000 / ok("inter_token_latency_ms")["percentiles"]["p50"])}
    assert conc.aggregate_tok_s == ok("output_tokens_per_second")["mean"]
    assert conc.request_throughput == ok("requests_per_second")["mean"]
    assert (conc.prompt_tokens, conc.output_tokens) == (512.0, 100.0)
    assert conc.prefill_tok_s == {}
    assert any("time_per_output_token_ms includes TTFT" in n for n in report.notes)


def test_guidellm_v02_layout_poisson():
    report = parse_report(raw("guidellm_v0_2_poisson.json"))
    [level] = report.levels
    assert report.raw_meta["layout"] == "v0.2–v0.3 (args.strategy)"
    assert report.model == "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"  # worker.backend_model
    assert (level.label, level.request_rate, level.concurrency) == ("poisson@2 req/s", 2.0, None)
    assert (level.completed, level.failed) == (11, 1)
    assert level.aggregate_tok_s == 190.0


@pytest.mark.parametrize("strategy, label, conc, rate", [
    ({"type_": "throughput", "max_concurrency": 64}, "throughput (max load)", None, None),
    ({"type_": "constant", "rate": 4.0}, "constant@4 req/s", None, 4.0),
    ({"type_": "concurrent", "streams": 2}, "concurrent@2", 2.0, None),
])
def test_guidellm_strategies(strategy, label, conc, rate):
    src = doc("guidellm_sync_concurrent8.json")
    src["benchmarks"][0]["config"]["strategy"] = strategy
    level = parse_report(dump(src)).levels[0]
    assert (level.label, level.concurrency, level.request_rate) == (label, conc, rate)


def test_guidellm_empty_distribution_is_no_figure():
    src = doc("guidellm_sync_concurrent8.json")
    dist = src["benchmarks"][0]["metrics"]["request_latency"]["successful"]
    dist.update(count=0, mean=0.0)
    assert parse_report(dump(src)).levels[0].e2e_ms == {}


# --- llama-bench --------------------------------------------------------------------------

def test_llama_bench_pp_and_tg():
    report = parse_report(raw("llama_bench_pp512_tg128.json"))
    assert report.kind == "llama-bench" and report.backend == "llamacpp"
    assert report.tool_label == "llama-bench (build 6320, 3f1d7c2a)"
    assert report.gpu == "Tesla V100-PCIE-16GB"
    assert report.model == "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf"
    assert report.created == "2025-12-03T13:58:41Z"
    pp, tg = report.levels
    assert (pp.label, pp.concurrency, pp.prompt_tokens, pp.prefill_tok_s) == (
        "pp512", 1.0, 512.0, {"mean": 2850.609004})
    assert pp.decode_tok_s == {}
    assert (tg.label, tg.concurrency, tg.output_tokens, tg.decode_tok_s) == (
        "tg128", 1.0, 128.0, {"mean": 97.338109})
    assert tg.prefill_tok_s == {} and tg.tpot_ms == {}


def test_llama_bench_jsonl_and_single_line():
    entries = doc("llama_bench_pp512_tg128.json")
    jsonl = "\n".join(json.dumps(e) for e in entries).encode() + b"\n"
    assert parse_report(jsonl).levels == parse_report(raw("llama_bench_pp512_tg128.json")).levels
    [tg] = parse_report(dump(entries[1])).levels
    assert tg.decode_tok_s == {"mean": 97.338109}


def test_llama_bench_sweep_depth_and_pg():
    base = doc("llama_bench_pp512_tg128.json")[1]
    a, b = copy.deepcopy(base), copy.deepcopy(base)
    b.update(n_gpu_layers=20, n_depth=512)
    pg = dict(copy.deepcopy(base), n_prompt=512, n_gen=128, avg_ts=300.0)
    report = parse_report(dump([a, b, pg]))
    assert [lv.label for lv in report.levels] == [
        "tg128 [n_gpu_layers=99]", "tg128 @ d512 [n_gpu_layers=20]",
        "pp512+tg128 [n_gpu_layers=99]"]
    assert not report.levels[2].has_figures()  # pp+tg t/s is neither prefill nor decode
    assert "nothing to chart" in error_of(dump([pg]))


# --- detection ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, kind", [
    ("vllm_bench_serve_c8_detailed.json", "vllm-bench-serve"),
    ("vllm_bench_serve_appended_c1_c8.jsonl", "vllm-bench-serve"),
    ("guidellm_sync_concurrent8.json", "guidellm"),
    ("guidellm_v0_2_poisson.json", "guidellm"),
    ("llama_bench_pp512_tg128.json", "llama-bench"),
])
def test_detection_is_by_content(name, kind):
    assert detect_kind(load_documents(raw(name))) == kind
    assert parse_report(raw(name), filename="results.txt").kind == kind
    assert parse_report(raw(name), kind=kind).kind == kind


@pytest.mark.parametrize("name, kind, message", [
    ("llama_bench_pp512_tg128.json", "guidellm",
     "GuideLLM JSON: top level must be an object with 'benchmarks', got array"),
    ("guidellm_sync_concurrent8.json", "llama-bench",
     "llama-bench JSON: top level must be an array of entries, got object"),
    ("guidellm_sync_concurrent8.json", "vllm-bench-serve",
     "vllm bench serve JSON: missing field 'completed'"),
])
def test_explicit_kind_mismatch(name, kind, message):
    assert error_of(raw(name), kind=kind) == message


# --- malformed input ----------------------------------------------------------------------

def _vllm(**changes):
    src = json.loads(raw("vllm_bench_serve_appended_c1_c8.jsonl").splitlines()[1])
    for key, value in changes.items():
        if value is ...:
            del src[key]
        else:
            src[key] = value
    return json.dumps(src).encode()


def _guidellm(mutate):
    src = doc("guidellm_sync_concurrent8.json")
    mutate(src)
    return dump(src)


def _llama(mutate):
    src = doc("llama_bench_pp512_tg128.json")
    mutate(src)
    return dump(src)


BAD = [
    # files
    (raw("bad_console_output.txt"), "not JSON: Expecting value at line 1 column 1"),
    (raw("bad_truncated_vllm.json"), "(the file looks truncated)"),
    (raw("bad_vllm_missing_ttft.json"), "vllm bench serve JSON: missing field 'mean_ttft_ms'"),
    (raw("bad_llama_no_avg_ts.json"), "llama-bench JSON: entry 2 has no 'avg_ts'"),
    (raw("bad_guidellm_empty.json"), "GuideLLM JSON: 'benchmarks' is empty"),
    (raw("bad_top_level_string.json"), "unrecognised JSON: top level is string"),
    # bytes and JSON syntax
    (b"", "empty file"),
    (b" \n\t ", "empty file"),
    (b"\xff\xfe{}", "not UTF-8 text"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"[" + b"9" * 5000 + b"]", "not usable JSON"),
    (b'{"completed": 1}\n{"completed": ]}\n', "not JSON: line 2"),
    (raw("vllm_bench_serve_c8_detailed.json") * 2, "not JSON: Extra data at line 1"),
    # top level
    (b"42", "top level is number"),
    (b"null", "top level is null"),
    (b"[]", "empty JSON array: nothing to import"),
    (b"{}", "unrecognised JSON object with no keys"),
    (b'{"foo": 1}', "unrecognised JSON object with keys foo"),
    (b"[1, 2]", "unrecognised JSON array (first item is number)"),
    (dump(doc("llama_bench_pp512_tg128.json")[0]) + b"\n"
     + raw("vllm_bench_serve_appended_c1_c8.jsonl").splitlines()[0], "mixes formats"),
    # vllm bench serve fields
    (_vllm(completed=...), "vllm bench serve JSON: missing field 'completed'"),
    (_vllm(duration=...), "vllm bench serve JSON: missing field 'duration'"),
    (_vllm(completed="31"), "field 'completed' must be a number, got string"),
    (_vllm(completed=True), "field 'completed' must be a number, got boolean"),
    (_vllm(completed=2.5), "field 'completed' must be a whole number, got 2.5"),
    (_vllm(duration=0), "field 'duration' must be greater than 0, got 0"),
    (_vllm(p99_ttft_ms=-3.0), "field 'p99_ttft_ms' must not be negative, got -3.0"),
    (_vllm().replace(b'"mean_tpot_ms": 49.85', b'"mean_tpot_ms": NaN'),
     "field 'mean_tpot_ms' is NaN"),
    (_vllm().replace(b'"output_throughput": 147.2', b'"output_throughput": Infinity'),
     "field 'output_throughput' is infinite"),
    (_vllm().replace(b'"duration": 21.06', b'"duration": 1e400'), "field 'duration' is infinite"),
    (_vllm(total_input_tokens=10 ** 400), "field 'total_input_tokens' is too large"),
    (_vllm(request_rate="fast"), "field 'request_rate' must be a number or \"inf\""),
    (_vllm(max_concurrency=0), "field 'max_concurrency' must be greater than 0"),
    (_vllm(ttfts={"0": 0.1}), "field 'ttfts' must be an array, got object"),
    (_vllm(date=20251203), "field 'date' must be a string, got number"),
    (dump([]), "empty JSON array"),
    # GuideLLM
    (_guidellm(lambda d: d.update(benchmarks={})),
     "GuideLLM JSON: field 'benchmarks' must be an array, got object"),
    (_guidellm(lambda d: d["benchmarks"].append(3)),
     "GuideLLM JSON: benchmark 3: expected an object, got number"),
    (_guidellm(lambda d: d["benchmarks"][0].pop("metrics")),
     "GuideLLM JSON: benchmark 1 has no 'metrics'"),
    (_guidellm(lambda d: d["benchmarks"][1]["config"].pop("strategy")),
     "GuideLLM JSON: benchmark 2 has no scheduling strategy"),
    (_guidellm(lambda d: d["benchmarks"][1]["config"]["strategy"].pop("streams")),
     "GuideLLM JSON: benchmark 2.config.strategy has no 'streams'"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"].pop("request_totals")),
     "GuideLLM JSON: benchmark 1 has no 'request_totals'"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"].pop("time_to_first_token_ms")),
     "GuideLLM JSON: benchmark 1.metrics has no 'time_to_first_token_ms'"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"]["time_to_first_token_ms"].pop(
        "successful")),
     "GuideLLM JSON: benchmark 1.metrics.time_to_first_token_ms has no 'successful'"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"]["time_to_first_token_ms"][
        "successful"].pop("mean")),
     "benchmark 1.metrics.time_to_first_token_ms.successful: missing field 'mean'"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"]["request_latency"]["successful"][
        "percentiles"].update(p99=-1.0)),
     "request_latency.successful.percentiles: field 'p99' must not be negative"),
    (_guidellm(lambda d: d["benchmarks"][0]["metrics"]["request_totals"].update(
        successful="8")),
     "field 'successful' must be a number, got string"),
    # llama-bench
    (_llama(lambda d: d[0].update(avg_ts=-5)),
     "llama-bench JSON: entry 1: field 'avg_ts' must not be negative, got -5"),
    (_llama(lambda d: d[1].update(avg_ts=0)),
     "llama-bench JSON: entry 2: field 'avg_ts' must be greater than 0, got 0"),
    (_llama(lambda d: d[0].pop("n_prompt")), "llama-bench JSON: entry 1 has no 'n_prompt'"),
    (_llama(lambda d: d.append("pp512")), "llama-bench JSON: entry 3: expected an object"),
    (_llama(lambda d: d[0].update(n_prompt=0)), "entry 1 has n_prompt = 0 and n_gen = 0"),
    (_llama(lambda d: d[0].update(samples_ts="fast")),
     "entry 1: field 'samples_ts' must be an array, got string"),
    (_llama(lambda d: d[1].update(n_gen=-128)), "field 'n_gen' must not be negative"),
]


@pytest.mark.parametrize("data, message", BAD, ids=range(len(BAD)))
def test_malformed_input_names_the_problem(data, message):
    assert message in error_of(data)


def test_size_limit_is_said_in_the_unit_it_is_set_in():
    assert error_of(b" " * (MAX_BYTES + 1)) == "file is 20,971,521 bytes; the limit is 20 MiB"
    assert error_of(b" " * (25 * 2**20)) == "file is 25 MiB; the limit is 20 MiB"
    assert error_of(b"[1]" * 600, max_bytes=1024) == "file is 1.8 KiB; the limit is 1 KiB"


@pytest.mark.parametrize("kind, message", [
    ("nonsense", "unknown kind 'nonsense'"),
    ("published", "kind 'published' is built in"),
])
def test_bad_kind(kind, message):
    assert message in error_of(raw("llama_bench_pp512_tg128.json"), kind=kind)


@pytest.mark.parametrize("kind, data, message", [
    ("llama-bench", b"[]", "llama-bench JSON: empty array, no test entries"),
    ("vllm-bench-serve", b"[]", "vllm bench serve JSON: empty array, no results"),
    ("vllm-bench-serve", b"[1]", "vllm bench serve JSON: top level must be an object, got number"),
    ("guidellm", b'{"benchmarks": [{}]}', "GuideLLM JSON: benchmark 1 has no 'metrics'"),
])
def test_explicit_kind_errors(kind, data, message):
    assert error_of(data, kind=kind) == message


def test_yaml_upload_gets_a_hint():
    assert "only JSON is read" in error_of(b"benchmarks:\n  - x: 1\n", filename="report.yaml")


# --- bounds: what one import may hold, and only text a database can store -----------------

def _llama_entries(n: int) -> bytes:
    entry = {"n_prompt": 0, "n_gen": 128, "avg_ts": 56.2}
    return dump([entry] * n)


def test_the_200000_entry_llama_bench_file_is_refused_before_its_entries_are_read():
    data = _llama_entries(200_000)
    assert len(data) > 7_000_000
    assert error_of(data) == ("llama-bench JSON: 200,000 test entries; one import holds at most "
                              f"{MAX_LEVELS:,} — split the file")


def test_the_level_limit_is_exact_and_holds_for_every_format():
    assert len(parse_report(_llama_entries(MAX_LEVELS)).levels) == MAX_LEVELS
    assert "1,001 test entries" in error_of(_llama_entries(MAX_LEVELS + 1))
    assert "3 test entries; one import holds at most 2" in error_of(_llama_entries(3), max_levels=2)
    jsonl = raw("vllm_bench_serve_appended_c1_c8.jsonl")
    assert error_of(jsonl, max_levels=1) == ("vllm bench serve JSON: 2 results; one import holds at "
                                             "most 1 — split the file")
    assert "GuideLLM JSON: 2 benchmarks; one import holds at most 1" in error_of(
        raw("guidellm_sync_concurrent8.json"), max_levels=1)


def test_a_file_of_a_million_tiny_values_is_refused_before_it_is_parsed():
    over = b"[" + b"{}," * MAX_VALUES + b"{}]"  # ~70 bytes of memory per 3 bytes of file
    assert len(over) < MAX_BYTES
    assert error_of(over).startswith(f"the file holds about {2 * MAX_VALUES + 2:,} JSON values; one import "
                                     f"reads at most {MAX_VALUES:,}")
    assert "JSON values" in error_of(b"[" + b"0," * MAX_VALUES + b"0]")
    assert "JSON values" not in error_of(b"[" + b"0," * (MAX_VALUES - 1) + b"0]")  # parsed, then not a format


@pytest.mark.parametrize("data, message", [
    (_vllm(model_id="Qwen\u0000"), "vllm bench serve JSON: the model name contains a NUL character (\\u0000)"),
    (_vllm(model_id="\ud800"), "vllm bench serve JSON: the model name contains a lone surrogate (\\ud800)"),
    (_vllm(model_id="m" * 5_000_000),
     "vllm bench serve JSON: the model name is 5,000,000 characters long; at most 200 are accepted"),
    (_vllm(label="x" * 201), "the tool name is 220 characters long; at most 200 are accepted"),
    (_llama(lambda d: [e.update(gpu_info="V100\udfff") for e in d]),
     "llama-bench JSON: the GPU name contains a lone surrogate (\\udfff), which is not valid Unicode text"),
    (_llama(lambda d: d[0].update(cpu_info="Xeon\u0000")),
     "llama-bench JSON: the file details.cpu_info contains a NUL character"),
    (_llama(lambda d: d[0].update(test_time="2025" * 100)), "the date is 400 characters long; at most 64"),
    (_llama(lambda d: d[1].update(n_gpu_layers="9" * 400)), "the level 2 label is 4"),
    (_guidellm(lambda d: d["benchmarks"][0]["config"]["strategy"].update(type_="\ud83d")),
     "GuideLLM JSON: the level 1 label contains a lone surrogate"),
])
def test_text_that_cannot_be_stored_is_refused_with_its_place(data, message):
    assert message in error_of(data)


def test_a_title_made_from_long_names_is_cut_to_the_column_and_long_keys_are_skipped():
    report = parse_report(_llama(lambda d: [e.update(model_filename="m" * 200, gpu_info="g" * 200) for e in d]))
    assert len(report.title) == 300 and report.title.endswith("…") and report.model == "m" * 200
    extra = parse_report(_vllm(**{"k" * 101: "v", "site": "lab"}))
    assert extra.raw_meta["metadata"] == {"site": "lab"}


def test_more_than_20_percentiles_of_one_metric_are_refused():
    many = {f"p{i}_ttft_ms": float(i) for i in range(1, 22)}
    assert "more than 20 percentiles of ttft; at most 20 are read" in error_of(_vllm(**many))
    assert len(parse_report(_vllm(**dict(list(many.items())[:19]))).levels[0].ttft_ms) >= 20


# --- published write-up -------------------------------------------------------------------

def test_published_v100_writeup():
    fp8, q4, awq = v100_writeup_reports()
    for report in (fp8, q4, awq):
        assert report.kind == "published"
        assert report.gpu == "Tesla V100-PCIE-16GB"
        assert report.model == "DeepSeek-R1-Distill-Qwen-7B"
        assert any("published" in n.lower() and "not measured here" in n for n in report.notes)
        assert [lv.concurrency for lv in report.levels] == [1.0, 8.0]
        for lv in report.levels:
            assert (lv.prompt_tokens, lv.output_tokens) == (512.0, 100.0)
            assert lv.ttft_ms == {} and lv.tpot_ms == {} and lv.prefill_tok_s == {}
    assert (fp8.backend, q4.backend, awq.backend) == ("vllm", "llamacpp", "vllm")
    figures = lambda r: [(lv.decode_tok_s.get("mean"), lv.aggregate_tok_s)  # noqa: E731
                         for lv in r.levels]
    assert figures(fp8) == [(32.0, None), (18.7, 150.0)]
    assert figures(q4) == [(56.0, None), (29.4, 235.0)]
    assert figures(awq) == [(48.0, None), (None, None)]
    for report in (fp8, awq):
        note = next(n for n in report.notes if "upstream vLLM refuses" in n)
        assert "8.0" in note and "7.5" in note and "PR #29901" in note and "AWQ" in note
    assert not any("upstream vLLM refuses" in n for n in q4.notes)
    assert any("--quantization fp8" in n for n in fp8.notes)
    assert any("-ngl 99" in n for n in q4.notes)


# --- storage round trip -------------------------------------------------------------------

def _all_reports() -> list[ImportedReport]:
    return [parse_report(raw(n), filename=n) for n in GOOD] + v100_writeup_reports()


@pytest.mark.parametrize("report", _all_reports(), ids=lambda r: r.title[:40])
def test_to_dict_from_dict_round_trip(report):
    stored = json.dumps(report.to_dict(), allow_nan=False)  # strict JSON: no NaN/inf stored
    again = ImportedReport.from_dict(json.loads(stored))
    assert again == report
    assert again.to_dict() == report.to_dict()


def test_from_dict_rejects_garbage():
    with pytest.raises(ReportFormatError):
        ImportedReport.from_dict({"kind": "nope", "tool_label": "x", "title": "t"})
    with pytest.raises(ReportFormatError):
        ImportedLevel.from_dict({"concurrency": 1})


# --- fuzzing: nothing but ReportFormatError, and never the catch-all ----------------------

def _must_only_raise_format_errors(data: bytes, kind: str | None = None) -> None:
    try:
        report = parse_report(data, kind=kind)
    except ReportFormatError as exc:
        assert "could not read the file" not in str(exc), f"validation gap: {exc}"
        return
    stored = json.dumps(report.to_dict(), allow_nan=False)  # a parsed report is always storable:
    assert "\\u0000" not in stored  # PostgreSQL's jsonb refuses NUL
    json.dumps(report.to_dict(), ensure_ascii=False).encode("utf-8")  # and lone surrogates


# Any character, lone surrogates and NUL included (st.text leaves surrogates out by default).
any_text = st.text(st.characters(categories=["Cs", "Cc", "Cf", "L", "M", "N", "P", "S", "Z"]), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | any_text,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(any_text, children, max_size=5),
    max_leaves=30)
kinds = st.sampled_from([None, "vllm-bench-serve", "guidellm", "llama-bench"])
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=2000), kinds)
def test_fuzz_arbitrary_bytes(data, kind):
    _must_only_raise_format_errors(data, kind)


@FUZZ
@given(json_values, kinds)
def test_fuzz_arbitrary_json(value, kind):
    _must_only_raise_format_errors(json.dumps(value).encode(), kind)


def _paths(node, prefix=()):
    """Every (container path, key) in a JSON document, to mutate one place at a time."""
    if isinstance(node, dict):
        for key, child in node.items():
            yield prefix, key
            yield from _paths(child, prefix + (key,))
    elif isinstance(node, list):
        for i, child in enumerate(node[:3]):
            yield prefix, i
            yield from _paths(child, prefix + (i,))


SEEDS = [json.loads(raw(n)) for n in GOOD if not n.endswith(".jsonl")]
SEED_PATHS = [list(_paths(s)) for s in SEEDS]


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_mutated_real_files(data):
    """Replace or delete one field somewhere in a real sample: the deep paths get exercised."""
    i = data.draw(st.integers(0, len(SEEDS) - 1))
    tree = copy.deepcopy(SEEDS[i])
    prefix, key = data.draw(st.sampled_from(SEED_PATHS[i]))
    parent = tree
    for step in prefix:
        parent = parent[step]
    if data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[key]
    else:
        parent[key] = data.draw(json_values)
    _must_only_raise_format_errors(json.dumps(tree).encode(), data.draw(kinds))


def _at(tree, prefix):
    for step in prefix:
        tree = tree[step]
    return tree


SEED_TEXT_PATHS = [[(p, k) for p, k in paths if isinstance(_at(seed, p)[k], str)]
                   for seed, paths in zip(SEEDS, SEED_PATHS)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzz_any_text_in_a_real_file_is_stored_or_refused(data):
    """Every string field of a real sample set to any text (NUL, lone surrogates, ...): the report
    is storable in PostgreSQL or the file is refused with a format error."""
    i = data.draw(st.integers(0, len(SEEDS) - 1))
    tree = copy.deepcopy(SEEDS[i])
    prefix, key = data.draw(st.sampled_from(SEED_TEXT_PATHS[i]))
    _at(tree, prefix)[key] = data.draw(st.text(st.characters(categories=["Cs", "Cc", "L", "N"]), min_size=1,
                                               max_size=8))
    _must_only_raise_format_errors(json.dumps(tree).encode())
