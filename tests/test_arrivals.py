"""Arrivals, trace replay, coordinated omission and conversations, in the engine: schedules follow
their distributions (fixed seeds; expectations from the distributions' own moments and CDFs),
and against the simulator (its truth: when it received each request, what each chat request
carried) requests leave at their times, a client held back shows its wait from the schedule
and is flagged, and conversation turns carry their history."""
import asyncio
import math
import random
import statistics

import pytest

from benchmarks.engine.arrivals import (ArrivalPattern, Trace, TraceError, expected_span_s, parse_trace,
                                        send_times)
from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.conversations import Conversation
from benchmarks.engine.metrics import summarize_level, ttft_by_turn
from benchmarks.engine.validity import THRESHOLDS, level_flags

SIM_CHAT_TEMPLATE = 8  # tokens the simulator adds to every chat prompt (simulator.Simulator.generate)


def gaps(times):
    return [b - a for a, b in zip(times, times[1:])]


def ks_distance(sample, cdf) -> float:
    xs = sorted(sample)
    n = len(xs)
    return max(max((i + 1) / n - cdf(x), cdf(x) - i / n) for i, x in enumerate(xs))


# ---------------------------------------------------------------- schedules
@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_keep_the_mean_and_have_the_coefficient_of_variation_of_their_burstiness(burstiness):
    rate = 10.0
    g = gaps(send_times("gamma", rate, 8001, random.Random(11), burstiness=burstiness))
    mean, cv = statistics.fmean(g), statistics.pstdev(g) / statistics.fmean(g)
    assert mean == pytest.approx(1 / rate, rel=0.05)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


@pytest.mark.parametrize("burstiness, cdf", [
    (1.0, lambda x, r: 1 - math.exp(-r * x)),  # exponential: Poisson arrivals
    (2.0, lambda x, r: 1 - math.exp(-2 * r * x) * (1 + 2 * r * x)),  # gamma of shape 2, scale 1/(2r)
])
def test_gamma_gaps_pass_a_kolmogorov_smirnov_test_against_their_distribution(burstiness, cdf):
    rate = 5.0
    g = gaps(send_times("gamma", rate, 4001, random.Random(3), burstiness=burstiness))
    # The 1 % critical value of the KS statistic for n samples is about 1.63 / sqrt(n).
    assert ks_distance(g, lambda x: cdf(x, rate)) < 1.63 / math.sqrt(len(g))


def test_poisson_and_constant_arrivals_are_as_before():
    poisson = gaps(send_times("poisson", 4.0, 4001, random.Random(5)))
    assert ks_distance(poisson, lambda x: 1 - math.exp(-4.0 * x)) < 1.63 / math.sqrt(len(poisson))
    assert send_times("constant", 4.0, 5, random.Random(5)) == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])


def test_a_linear_ramp_sends_at_the_rate_of_its_progress():
    n, r0, r1 = 6001, 2.0, 20.0
    g = gaps(send_times("ramp", r0, n, random.Random(8), ramp_to=r1))
    # Gap i (before request i + 1) is drawn at r0 + (r1 - r0) (i + 1) / (n - 1): in each tenth of the
    # requests the mean gap is the mean of 1 / rate over that tenth.
    for tenth in range(10):
        part = range(tenth * 600, (tenth + 1) * 600)
        expected = statistics.fmean(1 / (r0 + (r1 - r0) * (i + 1) / (n - 1)) for i in part)
        assert statistics.fmean(g[i] for i in part) == pytest.approx(expected, rel=0.12)
    # The expected span (the run time check's) is the sum of those means.
    span = expected_span_s(ArrivalPattern("ramp", ramp_to=r1), r0, n)
    assert sum(g) == pytest.approx(span, rel=0.05)


def test_a_duration_cuts_the_schedule():
    times = send_times("poisson", 10.0, None, random.Random(1), duration_s=30.0)
    assert times[0] == 0 and max(times) < 30.0 and len(times) == pytest.approx(300, rel=0.15)


# ---------------------------------------------------------------- trace files
MOONCAKE = "\n".join([
    '{"timestamp": 0, "input_length": 40, "output_length": 5, "hash_ids": [1]}',
    '{"timestamp": 400, "input_length": 30, "output_length": 4}',
    "",
    '{"timestamp": 200, "input_length": 60, "output_length": 6, "hash_ids": [1]}',
    '{"timestamp": 1200, "input_length": 20, "output_length": 3}',
])
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,30,4,34,Conversation log\n"
            "5.5,ChatGPT,20,0,20,Conversation log\n"
            "6.25,GPT-4,25,8,33,API log\n")


def test_a_mooncake_trace_reads_its_times_in_milliseconds_in_time_order():
    trace = parse_trace(MOONCAKE, "m.jsonl")
    assert trace.format == "mooncake"
    assert [r.at_s for r in trace.requests] == [0, 0.2, 0.4, 1.2]
    assert [(r.input_tokens, r.output_tokens, r.line) for r in trace.requests] == [
        (40, 5, 1), (60, 6, 4), (30, 4, 2), (20, 3, 5)]
    assert trace.requests[1].hash_ids == (1,)
    assert Trace.from_dict(trace.to_dict()) == trace
    # 4 requests over 1.2 s: 3 gaps; at twice the speed 0.6 s.
    assert trace.mean_rate(speedup=2) == pytest.approx(3 / 0.6)


def test_a_burstgpt_trace_reads_seconds_and_leaves_its_failed_rows_out():
    trace = parse_trace(BURSTGPT, "b.csv")
    assert trace.format == "burstgpt" and trace.skipped == 1
    assert [(r.at_s, r.input_tokens, r.output_tokens, r.line) for r in trace.requests] == [(0, 30, 4, 2),
                                                                                             (1.25, 25, 8, 4)]


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("hello\n", "line 1 is neither"),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{"timestamp": 1, "input_length": 5}', 'line 2 has no "output_length"'),
    ('{"timestamp": 0, "input_length": 5, "output_length": 2}\n{oops', "line 2 is not JSON"),
    ('{"timestamp": -3, "input_length": 5, "output_length": 2}', 'line 1: "timestamp" (milliseconds) must be a number'),
    ('{"timestamp": 0, "input_length": 0, "output_length": 2}', 'line 1: "input_length" must be a whole number'),
    ('{"timestamp": 0, "input_length": 5000, "output_length": 2}', "above the limit of 4096 tokens"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 2, "hash_ids": [1, 2, 3]}', "more than its 600"),
    ('{"timestamp": 0, "input_length": 6, "output_length": 2, "hash_ids": "x"}', '"hash_ids" must be a list'),
    ("Timestamp,Model,Request tokens\n1,a,2\n", "the header lacks Response tokens"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,2,3\nsoon,a,2,3\n", "line 3: Timestamp (seconds) 'soon'"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,2,3\n2,a\n", "line 3 has 2 columns"),
    ("Timestamp,Model,Request tokens,Response tokens\n1,a,2,0\n", "holds no request"),
])
def test_a_malformed_trace_is_refused_with_its_line(text, message):
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_trace(text, "t", max_tokens=4096)


def test_a_trace_over_the_request_bound_is_refused(monkeypatch):
    from benchmarks.engine import arrivals
    monkeypatch.setattr(arrivals, "MAX_TRACE_REQUESTS", 3)
    with pytest.raises(TraceError, match="more than 3 requests"):
        parse_trace(MOONCAKE, "t")


# ---------------------------------------------------------------- against the simulator
def run_levels(url, loads, dialect="vllm", timeouts=None, **workload):
    """Each load measured by the engine's Session, after its preflight and preparation."""
    async def go():
        session = Session(Target(url, dialect), Workload(**workload), timeouts, loads=loads)
        try:
            pf = await session.preflight()
            assert pf.ok, pf.cause
            await session.prepare(pf.model)
            return [await session.measure(load) for load in loads]
        finally:
            await session.close()
    return asyncio.run(go())


def measured_truth(sim, outcome):
    """The simulator's log of the level's requests (those it received after the level began), in order."""
    return sorted((t for t in sim.truth() if t["received"] >= outcome.t0), key=lambda t: t["received"])


def test_gamma_requests_reach_the_server_on_their_schedule(simulator):
    sim = simulator(decode_ms=1, prefill_ms=1, truth=True)
    load = Load(concurrency=0, rate=40.0, arrivals="gamma", burstiness=0.5, requests=120)
    [outcome] = run_levels(sim.url, [load], prompt_tokens=16, output_tokens=2, seed=4, warmup_requests=1)
    truth = measured_truth(sim, outcome)
    assert len(truth) == 120 and all(r.ok for r in outcome.results)
    due = sorted(r.scheduled for r in outcome.results)
    late = [t["received"] - outcome.t0 - at for t, at in zip(truth, due)]
    # Never received before its time; on a 2-core machine shared with other work, the median within
    # 30 ms of it and nine in ten within 100 ms.
    assert min(late) > -0.002 and statistics.median(late) < 0.03 and sum(x > 0.1 for x in late) <= 12
    # What reached the server is as bursty as asked: the CV of its gaps near 1/sqrt(0.5) = 1.41.
    g = gaps([t["received"] for t in truth])
    assert statistics.pstdev(g) / statistics.fmean(g) == pytest.approx(1 / math.sqrt(0.5), rel=0.25)


def test_a_replayed_trace_is_sent_at_its_times_scaled_with_its_lengths(simulator):
    sim = simulator(decode_ms=1, prefill_ms=1, truth=True)
    trace = parse_trace(MOONCAKE, "m.jsonl")
    load = Load(concurrency=0, rate=trace.mean_rate(speedup=2), arrivals="trace", trace=trace, speedup=2.0, requests=3)
    [outcome] = run_levels(sim.url, [load], prompt_tokens=16, output_tokens=2, seed=4, warmup_requests=1)
    truth = measured_truth(sim, outcome)
    assert len(truth) == 3  # the cap on requests
    first = truth[0]["received"]
    assert [t["received"] - first for t in truth] == pytest.approx([0, 0.1, 0.2], abs=0.03)
    # Each request as long as its trace line says (the server's own count; vLLM adds no BOS).
    assert [(r.prompt_tokens, r.output_tokens) for r in outcome.results] == [(40, 5), (60, 6), (30, 4)]
    # Lines sharing a hash id start with the same 512-token block (cut to their length here).
    assert [t["prompt_tokens"] for t in truth] == [40, 60, 30]


def test_a_client_held_back_shows_its_wait_from_the_schedule_and_is_flagged(simulator):
    # 20 req/s but one request in flight, each taking ~100 ms: the client falls behind its schedule.
    sim = simulator(decode_ms=10, prefill_ms=5, truth=True)
    load = Load(concurrency=1, rate=20.0, arrivals="constant", requests=12)
    [outcome] = run_levels(sim.url, [load], prompt_tokens=16, output_tokens=10, warmup_requests=1)
    summary = summarize_level(outcome.results, outcome.wall_s)
    for r in outcome.results:
        assert r.ttft_from_schedule == pytest.approx(r.sent - r.scheduled + r.ttft)
    # Request i is due at i / 20 s but can leave only after the i before it took ~105 ms each:
    # the last one waited about 11 × (0.105 - 0.05) s.
    last = outcome.results[-1]
    assert last.sent - last.scheduled > 11 * (0.105 - 0.05) * 0.8
    actual, scheduled = summary.stat("ttft_ms", "p99"), summary.stat("ttft_from_schedule_ms", "p99")
    assert scheduled > actual + 300
    flags = level_flags(summary, client=outcome.client, capped=True)
    assert "coordinated_omission" in [f.code for f in flags]
    # The client's own send lag flag stays quiet: the cap was asked for.
    assert "client_saturated" not in [f.code for f in flags if "schedule" in f.reason]


def test_a_client_that_keeps_its_schedule_is_not_flagged(simulator):
    sim = simulator(decode_ms=1, prefill_ms=1)
    load = Load(concurrency=0, rate=20.0, arrivals="poisson", requests=40)
    [outcome] = run_levels(sim.url, [load], prompt_tokens=16, output_tokens=3, seed=2, warmup_requests=1)
    summary = summarize_level(outcome.results, outcome.wall_s)
    gap = summary.stat("ttft_from_schedule_ms", "p50") - summary.stat("ttft_ms", "p50")
    assert 0 <= gap < THRESHOLDS["schedule_gap"]["ms"]
    assert "coordinated_omission" not in [f.code for f in level_flags(summary, client=outcome.client)]


def test_conversation_turns_carry_their_history_and_the_servers_replies(simulator):
    sim = simulator(decode_ms=1, prefill_ms=1, truth=True)
    turns, think = 3, 0.15
    load = Load(concurrency=2, requests=12, conversation=Conversation(turns=turns, think_s=think))
    [outcome] = run_levels(sim.url, [load], api="chat", prompt_tokens=20, output_tokens=6, seed=9, warmup_requests=1)
    results = outcome.results
    assert len(results) == 12 and all(r.ok for r in results)
    assert sorted((r.conversation, r.turn) for r in results) == [(s, k) for s in range(4) for k in range(turns)]
    truth = measured_truth(sim, outcome)
    for t in truth:
        roles = [m[0] for m in t["messages"]]
        k = len(roles) // 2
        assert roles == ["user", "assistant"] * k + ["user"]
        # Every assistant message is the reply the server streamed: 6 tokens.
        assert all(n == 6 for role, n in t["messages"] if role == "assistant")
    assert sorted(len(t["messages"]) for t in truth) == sorted([1, 3, 5] * 4)
    by_session = {}
    for r in results:
        by_session.setdefault(r.conversation, []).append(r)
    for session in by_session.values():
        session.sort(key=lambda r: r.turn)
        new_message = session[0].prompt_tokens - SIM_CHAT_TEMPLATE
        for before, after in zip(session, session[1:]):
            # The prompt grows by the previous reply and a new message of the same length.
            assert after.prompt_tokens == before.prompt_tokens + before.output_tokens + new_message
            # The session thought before its next turn.
            assert after.sent - (before.sent + before.e2e) >= think - 0.005
    by_turn = ttft_by_turn(results)
    assert list(by_turn) == [0, 1, 2] and all(d.count == 4 for d in by_turn.values())
    # Prompt drift reads first turns only: later ones carry template tokens per message of history.
    first_turns_off = sum(r.prompt_tokens != r.prompt_tokens_asked for r in results if r.turn == 0)
    assert summarize_level(results, outcome.wall_s).prompt_drift == first_turns_off


def test_exponential_think_times_are_seeded_and_have_their_mean():
    c = Conversation(turns=2, think_s=2.0, think="exponential")
    draws = [c.think_time(7, s, 1) for s in range(4000)]
    assert draws[:5] == [c.think_time(7, s, 1) for s in range(5)]
    assert statistics.fmean(draws) == pytest.approx(2.0, rel=0.05)
    assert statistics.pstdev(draws) == pytest.approx(2.0, rel=0.08)  # an exponential's sd is its mean


def test_the_context_check_counts_a_traces_longest_line_and_a_conversations_last_turn():
    trace = parse_trace(MOONCAKE, "m.jsonl")
    trace_load = Load(concurrency=0, rate=1.0, arrivals="trace", trace=trace, requests=2)
    talk = Load(concurrency=1, requests=6, conversation=Conversation(turns=3))
    # 100 + 20 per synthetic request; the trace's first 2 lines: 40 + 5 and 60 + 6; 3 turns: 3 × 120.
    assert [Session.longest_request(load, 120) for load in (trace_load, talk, Load())] == [66, 360, 120]
    assert Session.longest_request(talk, 120, prefix=50) == 3 * 70 + 50
