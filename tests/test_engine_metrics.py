import math

import pytest

from benchmarks.engine.metrics import RequestResult, distribution, level_wall_time, percentile, summarize_level


def make(index=0, sent=0.0, ttft=0.1, gap=0.01, tokens=10, usage=True, error=""):
    chunks = [ttft + gap * i for i in range(tokens)] if not error else []
    return RequestResult(index=index, sent=sent, prompt_tokens_asked=512, output_tokens_asked=tokens,
                         first_content=None if error else ttft, chunk_times=chunks, chunk_tokens=[1] * len(chunks),
                         prompt_tokens=512 if usage and not error else None,
                         output_tokens=tokens if usage and not error else None,
                         client_output_tokens=len(chunks), error=error)


def test_percentile_matches_linear_interpolation():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10], 99) == 10
    assert percentile(list(range(101)), 90) == 90
    assert percentile([], 50) is None


def test_distribution_ignores_missing_values():
    d = distribution([1.0, None, 3.0, float("nan")])
    assert d.count == 2 and d.mean == 2.0 and d.min == 1.0 and d.max == 3.0


def test_tpot_is_decode_time_over_tokens_minus_one():
    r = make(ttft=0.2, gap=0.05, tokens=11)
    assert r.e2e == pytest.approx(0.2 + 0.5)
    assert r.tpot == pytest.approx(0.05)


def test_tpot_uses_server_usage_over_chunk_count():
    r = make(ttft=0.1, gap=0.02, tokens=5)
    r.output_tokens = 9  # a server that packed several tokens into some chunks
    assert r.tpot == pytest.approx((r.e2e - r.ttft) / 8)


def test_single_token_has_no_tpot():
    assert make(tokens=1).tpot is None


def test_it_flags_requests_that_stopped_short():
    r = make(tokens=10)
    r.output_tokens = 7
    assert r.stopped_short


def test_level_summary_counts_failures_and_aggregate_throughput():
    results = [make(i, sent=0.0, ttft=0.1, gap=0.01, tokens=11) for i in range(3)] + [make(9, error="HTTP 500")]
    wall = level_wall_time(results)
    assert wall == pytest.approx(0.2)
    s = summarize_level(results, wall)
    assert (s.completed, s.failed, s.requests) == (3, 1, 4)
    assert s.stat("aggregate_tok_s") == pytest.approx(33 / 0.2)
    assert s.stat("ttft_ms", "p50") == pytest.approx(100)
    assert s.stat("tpot_ms", "p99") == pytest.approx(10)
    assert s.stat("decode_tok_s", "p50") == pytest.approx(100)
    assert s.stat("prefill_tok_s", "p50") == pytest.approx(5120)
    assert s.value("itl_ms").count == 30


def test_server_timings_are_summarized_beside_ours():
    r = make()
    r.timings = {"predicted_per_second": 72.5, "prompt_per_second": 900.0}
    s = summarize_level([r], 1.0)
    assert s.stat("server_decode_tok_s", "p50") == 72.5 and s.stat("server_prefill_tok_s", "p50") == 900.0


def test_all_failed_level_has_empty_distributions():
    s = summarize_level([make(error="cannot connect")], 0.0)
    assert s.completed == 0 and s.value("ttft_ms").to_dict() == {"count": 0} and s.stat("aggregate_tok_s") is None
    assert not math.isnan(s.wall_s)


def test_goodput_counts_failed_requests_in_the_denominator():
    fast = make(0, ttft=0.05, gap=0.01, tokens=11)
    slow = make(1, ttft=0.5, gap=0.01, tokens=11)
    failed = make(2, error="HTTP 500")
    s = summarize_level([fast, slow, failed], 1.0, slo={"ttft_ms": 100})
    assert s.good_requests == 1 and s.stat("goodput") == 1.0 and s.stat("goodput_ratio") == pytest.approx(1 / 3)
    s = summarize_level([fast, slow], 1.0, slo={"tpot_ms": 5})
    assert s.good_requests == 0


def test_token_accounting_flags_mismatch_and_drift():
    r = make(tokens=10)
    r.output_tokens = 12
    r.prompt_tokens = 511
    s = summarize_level([r], 1.0)
    assert s.token_mismatch == 1 and s.prompt_drift == 1 and s.client_output_tokens == 10


def test_answer_time_is_reported_beside_ttft_for_reasoning_models():
    r = make(ttft=0.1, tokens=10)
    r.first_answer = 0.3
    s = summarize_level([r], 1.0)
    assert s.stat("ttft_ms", "p50") == pytest.approx(100) and s.stat("answer_ms", "p50") == pytest.approx(300)
