"""Each figure of a level, and each term of the speed model, against a value worked out by hand on
data chosen so that plausible bugs change the answer: requests sent at different times, a mean
that is not the median, failed requests that carry tokens, limits tried exactly at their bound.
(docs/contributing.md's mutation run lists the bugs these tests catch.)"""

import pytest

from benchmarks.advisor.steptime import Params, Setup, decode_step_s, predict
from benchmarks.engine import load_modes
from benchmarks.engine.metrics import RequestResult, distribution, level_wall_time, summarize_level
from benchmarks.engine.plan import Limits, RunPlan


def _request(index, sent, chunks, tokens=None, error="", prompt=100):
    """A request sent at `sent` (seconds after the level start) whose content chunks came
    `chunks` seconds after its send, one token each unless `tokens` says otherwise."""
    tokens = tokens if tokens is not None else len(chunks)
    return RequestResult(index=index, sent=sent, prompt_tokens_asked=prompt, output_tokens_asked=tokens,
                         first_content=chunks[0] if chunks else None, chunk_times=list(chunks),
                         chunk_tokens=[1] * len(chunks), prompt_tokens=prompt, output_tokens=tokens,
                         client_output_tokens=len(chunks), error=error, error_kind="http" if error else "")


# Three completed requests, sent at 0.5, 1.0 and 2.0 s; and one that failed after streaming 3 chunks.
OK = [
    _request(0, 0.5, [0.1, 0.2, 0.3, 0.4, 0.5]),      # TTFT 100 ms, gaps of 100 ms, ends at 1.0
    _request(1, 1.0, [0.2, 0.4, 0.6]),                # TTFT 200 ms, gaps of 200 ms, ends at 1.6
    _request(2, 2.0, [0.9, 1.0, 1.1, 1.2, 1.3]),      # TTFT 900 ms, gaps of 100 ms, ends at 3.3
]
FAILED = _request(3, 0.7, [0.1, 0.2, 0.3], tokens=3, error="HTTP 500 after 3 chunks")


def test_the_wall_time_runs_from_the_first_send_not_the_level_start():
    # listed out of order, the first send at 0.5 s: 3.3 - 0.5
    assert level_wall_time([OK[2], FAILED, OK[0], OK[1]]) == pytest.approx(2.8)


def test_a_level_counts_only_completed_requests_and_their_tokens():
    s = summarize_level(OK + [FAILED], wall_s=2.8)
    assert (s.requests, s.completed, s.failed) == (4, 3, 1)
    assert s.output_tokens == 13  # 5 + 3 + 5: the failed request's 3 tokens are not output
    assert s.stat("aggregate_tok_s") == pytest.approx(13 / 2.8)
    assert s.stat("request_throughput") == pytest.approx(3 / 2.8)
    assert s.prompt_tokens == 300


def test_each_distribution_is_its_own_statistic_in_its_own_unit():
    s = summarize_level(OK + [FAILED], wall_s=2.8)
    ttft = s.value("ttft_ms")
    assert ttft.count == 3
    assert ttft.mean == pytest.approx(400.0)  # (100 + 200 + 900) / 3: not the median
    assert ttft.get("p50") == pytest.approx(200.0)
    assert ttft.min == pytest.approx(100.0) and ttft.max == pytest.approx(900.0)
    # the gaps between chunks, in ms: four of 100, two of 200, four of 100 (the failed one's left out)
    itl = s.value("itl_ms")
    assert itl.count == 10
    assert itl.mean == pytest.approx(1200.0 / 10)
    assert itl.max == pytest.approx(200.0)
    # time per output token: (e2e - ttft) / (tokens - 1), in ms
    tpot = s.value("tpot_ms")
    assert sorted([tpot.min, tpot.max]) == [pytest.approx(100.0), pytest.approx(200.0)]
    assert tpot.mean == pytest.approx((100 + 200 + 100) / 3)
    assert s.value("e2e_ms").mean == pytest.approx((500 + 600 + 1300) / 3)


def test_a_mean_and_a_median_differ_where_the_data_is_skewed():
    d = distribution([1.0, 2.0, 3.0, 10.0])
    assert d.mean == pytest.approx(4.0)
    assert d.get("p50") == pytest.approx(2.5)
    assert d.count == 4


def test_goodput_counts_only_requests_that_met_every_slo():
    # TTFT limit 250 ms: requests 0 and 1 meet it, request 2 (900 ms) and the failed one do not
    s = summarize_level(OK + [FAILED], wall_s=2.8, slo={"ttft_ms": 250})
    assert s.good_requests == 2
    assert s.stat("goodput") == pytest.approx(2 / 2.8)
    assert s.stat("goodput_ratio") == pytest.approx(2 / 4)
    # a limit exactly at a request's value is met
    assert summarize_level(OK, wall_s=2.8, slo={"ttft_ms": 200}).good_requests == 2


def _plan(requests_per_level, levels):
    return RunPlan.from_arguments(prompt_tokens=100, output_tokens=10, temperature=0.0,
                                  requests_per_level=requests_per_level, warmup_requests=0,
                                  load_mode=load_modes.DEFAULT, concurrency_levels=levels)


def test_the_request_limits_hold_exactly_at_their_bound():
    limits = Limits(max_requests_per_level=50, max_requests_per_run=200, run_time_limit_s=3600)
    assert _plan(50, [1, 2]).problems(limits, measured=2) == []  # 2 endpoints x 2 levels x 50 = 200
    fields = [f for f, _ in _plan(51, [1]).problems(limits, measured=1)]
    assert fields == ["requests_per_level"]
    over = _plan(50, [1, 2, 4]).problems(limits, measured=1)  # 150 fine
    assert over == []
    over = _plan(50, [1, 2, 4, 8, 16]).problems(limits, measured=1)  # 250 > 200
    assert [f for f, _ in over] == [None] and "250 requests" in over[0][1] and "200" in over[0][1]


# The speed model's terms on round numbers: a 10 GB model read at 1,000 GB/s, every efficiency
# 1 and every fixed cost 0, so each term is a plain quotient.
PLAIN = Params({"bw_eff_16": 1.0, "bw_eff_8": 1.0, "bw_eff_4": 1.0, "kv_eff": 1.0, "per_layer_us": 0.0,
                "step_ms": 0.0, "per_sequence_ms": 0.0, "mma_eff": 1.0, "pf_eff": 1.0,
                "attn_eff": 1.0, "per_request_ms": 0.0, "allreduce_nvlink_us": 0.0, "allreduce_pcie_us": 0.0,
                "hop_us": 0.0})


def _setup(**kw):
    base = dict(weight_bytes=10e9, kv_bytes_per_token=1e5, params_b=5.0, layers=32, attention_width=4096, bits=16,
                bandwidth_gbs=1000.0, decode_tflops=1000.0, prefill_tflops=1000.0, arch="Ampere")
    return Setup(**{**base, **kw})


def test_a_decode_step_reads_the_weights_once_and_every_users_kv_cache():
    s = _setup()
    one = decode_step_s(PLAIN, s, users=1, context=1000, arch_bw=1.0)
    eight = decode_step_s(PLAIN, s, users=8, context=1000, arch_bw=1.0)
    # 10 GB of weights + 1,000 tokens x 100 kB per user, at 1,000 GB/s
    assert one == pytest.approx((10e9 + 1 * 1000 * 1e5) / 1e12)
    assert eight == pytest.approx((10e9 + 8 * 1000 * 1e5) / 1e12)


def test_tensor_parallel_over_nvlink_shares_the_reads_between_cards():
    alone = decode_step_s(PLAIN, _setup(), users=1, context=1000, arch_bw=1.0)
    two = decode_step_s(PLAIN, _setup(gpus=2, split="tp", link="nvlink"), users=1, context=1000, arch_bw=1.0)
    # half the bytes per card, plus the two all-reduces per layer moving 2 x (1/2) x 4,096 16-bit
    # activations at 300 GB/s (their latency set to 0 here)
    moved = 2 * 32 * (2 * 0.5 * 1 * 4096 * 2) / 300e9
    assert two == pytest.approx(alone / 2 + moved)
    # a layer split reads one card after the other: no faster than one card
    split = decode_step_s(PLAIN, _setup(gpus=2, split="layer-split", link="pcie"), users=1, context=1000,
                          arch_bw=1.0)
    assert split == pytest.approx(alone)


def test_a_step_beyond_the_bandwidth_is_bound_by_compute():
    # 4,096 users x 2 x 5 G parameters = 41 TFLOP at 1,000 TFLOP/s = 41 ms, above the 10 ms of reads
    s = _setup(kv_bytes_per_token=0.0, attention_width=0)
    assert decode_step_s(PLAIN, s, users=4096, context=0, arch_bw=1.0) == pytest.approx(4096 * 2 * 5e9 / 1e15)
    assert decode_step_s(PLAIN, s, users=256, context=0, arch_bw=1.0) == pytest.approx(10e9 / 1e12)


def test_a_closed_loop_serves_users_in_turn():
    # one user, no prompt: 128 tokens at 10 ms a step, and the (empty) prefill still reads the
    # weights once: 10 ms more per request
    p = predict(PLAIN, _setup(users=1, prompt_tokens=0, output_tokens=128, kv_bytes_per_token=0.0))
    assert p.decode_tok_s == pytest.approx(100.0)
    assert p.output_tok_s == pytest.approx(128 / (128 * 0.010 + 0.010))
    # four users share each step: four times the output, each stream slowed by the others' prefills
    p = predict(PLAIN, _setup(users=4, prompt_tokens=0, output_tokens=128, kv_bytes_per_token=0.0))
    assert p.output_tok_s == pytest.approx(4 * 128 / (128 * 0.010 + 4 * 0.010))
    assert p.tpot_ms == pytest.approx((128 * 10 + 3 * 10) / 128)
