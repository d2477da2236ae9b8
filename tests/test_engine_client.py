"""The load generator against the simulated server: known latencies come back, every kind of
server fault becomes a recorded error with its cause, never an exception."""
import asyncio
import importlib.metadata
import re
import time
from pathlib import Path

import pytest

from benchmarks.engine.client import (OPEN_LOOP_MAX_IN_FLIGHT, SPARE_CONNECTIONS, Load, Session, Target, Timeouts,
                                      Workload)
from benchmarks.engine import transport
from benchmarks.engine.metrics import percentile, summarize_level
from conftest import free_port
from scripts.bench_accuracy import TracedSession  # notes each request's prompt, to find it in the truth

# Timing checks hold on a loaded 2-core machine: they compare what the client measured with
# what the simulator logged it did (its truth, on the same monotonic clock), or rest on what
# the simulator guarantees (it never writes a chunk before it is due), never on how quickly
# a busy machine happened to run. A chunk reaches the client (the kernel's receive time)
# after it was due and before the simulator notes it has written it; converting that
# timestamp between clocks can make a single one look early when the reading thread is
# preempted in between, so lower bounds are checked on medians.
CLOCK_EPS = 0.001


def measure(url, backend="vllm", levels=(1,), n=8, timeouts=None, model="", **workload):
    async def go():
        loads = [Load(concurrency=c, requests=n) for c in levels]
        session = TracedSession(Target(url, backend, model=model), Workload(**workload), timeouts, loads=loads)
        try:
            pf = await session.preflight()
            if not pf.ok:
                return pf, []
            await session.prepare(pf.model)
            outcomes = []
            for load in loads:
                session.prompt_of = {}
                outcome = await session.measure(load)
                outcome.prompt_of = session.prompt_of
                outcomes.append(outcome)
            return pf, outcomes
        finally:
            await session.close()
    return asyncio.run(go())


def with_truth(outcome, truth):
    """Each measured request beside what the simulator logged for it (matched by prompt)."""
    by_prompt = {t["prompt"]: t for t in truth}
    return [(r, by_prompt[outcome.prompt_of[r.index]]) for r in outcome.results]


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_known_latencies_come_back_within_tolerance(simulator, dialect):
    sim = simulator(dialect=dialect, prefill_ms=40, prefill_ms_per_token=0.05, decode_ms=8, truth=True)
    _, outcomes = measure(sim.url, dialect, levels=(1, 4), n=8, prompt_tokens=200, output_tokens=30)
    truth = sim.truth()
    for outcome in outcomes:
        s = summarize_level(outcome.results, outcome.wall_s)
        assert s.failed == 0
        assert all(r.prompt_tokens == 200 and r.output_tokens == 30 for r in outcome.results)
        # Prefill takes 40 + 200 * 0.05 = 50 ms and the simulator is never early: TTFT cannot
        # be shorter, however busy the machine.
        assert s.stat("ttft_ms", "p50") >= 50 - CLOCK_EPS * 1000
        before_arrival, first_late, first_early, last_early, tpot_error, late = [], [], [], [], [], []
        for r, t in with_truth(outcome, truth):
            sent = outcome.t0 + r.sent
            first, last = sent + r.ttft, sent + r.e2e
            before_arrival.append((t["arrived"] or t["received"]) - sent)
            # The first and last chunks are timed when they reached us, right after the
            # simulator wrote them (a client starved of CPU may time one late: judged on the
            # median below, so that one stall on a loaded machine does not fail the test)...
            late.append(max(first - t["chunks"][0], last - t["chunks"][-1]))
            first_late.append(t["chunks"][0] - first)
            # ... and not before they were due.
            first_early.append(first - t["due"])
            last_early.append(last - (t["due"] + (len(t["chunks"]) - 1) * t["step"]))
            true_tpot = (t["chunks"][-1] - t["chunks"][0]) / (len(t["chunks"]) - 1)
            tpot_error.append(r.tpot - true_tpot)
        assert percentile(before_arrival, 50) >= -CLOCK_EPS  # sent before the server had it
        assert percentile(first_early, 50) >= -CLOCK_EPS and percentile(last_early, 50) >= -CLOCK_EPS
        # Timed when they arrived, not when the client got round to them: typically within a
        # few microseconds of the write (scripts/bench_accuracy.py measures it precisely).
        assert percentile(first_late, 50) < CLOCK_EPS
        assert percentile(late, 50) < 0.005
        assert abs(percentile(tpot_error, 50)) < 0.0003  # TPOT as the simulator wrote it


def test_prompts_are_exact_even_when_the_server_adds_a_bos_token(simulator):
    sim = simulator(dialect="llamacpp", decode_ms=1)
    _, [outcome] = measure(sim.url, "llamacpp", n=4, prompt_tokens=77, output_tokens=3)
    assert [r.prompt_tokens for r in outcome.results] == [77] * 4


def test_every_request_gets_a_fresh_prompt(simulator):
    sim = simulator(decode_ms=1)

    async def go():
        s = Session(Target(sim.url, "vllm"), Workload(prompt_tokens=50))
        await s.prepare((await s.preflight()).model)
        prompts = [s.prompts.make(50) for _ in range(20)]
        await s.close()
        return prompts
    prompts = asyncio.run(go())
    assert len({tuple(p) for p in prompts}) == 20


def test_closed_loop_keeps_the_asked_concurrency(simulator):
    sim = simulator(decode_ms=5, slots=64)
    _, [outcome] = measure(sim.url, levels=(4,), n=12, output_tokens=10)
    # 12 requests over 4 streams: exactly 4 in flight at the busiest moment, never 12 and not
    # one after another (times on the client's one clock, so a busy machine cannot change it).
    spans = [(r.sent, r.finished) for r in outcome.results]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 4
    # Three rounds of at least 5 + 9 * 5 ms each (the simulator is never early).
    assert outcome.wall_s >= 3 * 0.050 - CLOCK_EPS


def test_a_dead_server_fails_preflight_with_the_cause():
    pf, _ = measure(f"http://127.0.0.1:{free_port()}")
    assert not pf.ok and "unreachable" in pf.cause


def test_a_wrong_model_fails_preflight_with_the_models_served(simulator):
    sim = simulator(model="served-model")
    pf, _ = measure(sim.url, model="other-model")
    assert not pf.ok and "served-model" in pf.cause and "other-model" in pf.cause


def one_level(url, **kw):
    _, [outcome] = measure(url, n=4, output_tokens=10, **kw)
    return outcome.results


@pytest.mark.parametrize("fault, kind, text", [
    ("http500", "http", "HTTP 500"),
    ("reset", "protocol", "connection lost"),
    ("malformed", "protocol", "not JSON"),
    ("error_chunk", "server", "simulated failure in stream"),
    ("truncate", "protocol", "stream ended early"),
])
def test_server_faults_are_recorded_per_request(simulator, fault, kind, text):
    sim = simulator(decode_ms=2, fault=fault, fault_every=2)
    results = one_level(sim.url, warmup_requests=0)
    failed = [r for r in results if not r.ok]
    assert failed, "every second request should fail"
    assert all(r.error_kind == kind and text in r.error for r in failed)
    assert any(r.ok for r in results)


def test_a_stalled_stream_times_out_with_the_cause(simulator):
    sim = simulator(decode_ms=2, fault="stall")
    results = one_level(sim.url, warmup_requests=0, timeouts=Timeouts(connect=2, first_byte=0.5, total=5))
    assert all(r.error_kind == "timeout" for r in results)


def test_a_slow_drip_of_split_chunks_still_completes(simulator):
    sim = simulator(decode_ms=2, fault="slow_drip")
    results = one_level(sim.url)
    assert all(r.ok and r.output_tokens == 10 for r in results)
    assert all(r.client_output_tokens == 20 for r in results)  # two chunks per token


def test_a_keepalive_connection_closed_by_the_server_is_retried(simulator):
    # The simulator drops, without a byte of response, every request that arrives on a
    # connection which already served one: like a server that closed an idle keep-alive
    # connection just as the client reused it.
    sim = simulator(decode_ms=1, max_keepalive_requests=1)
    results = one_level(sim.url)
    assert all(r.ok for r in results), [r.error for r in results]
    # The retry really ran: every measured request after the first met a dropped connection
    # (the first takes a fresh one: the pool's opening request found its connection dropped).
    assert sim.stats()["dropped"] >= len(results) - 1


def test_a_level_reuses_its_pooled_connections_and_closing_the_session_closes_them(simulator):
    sim = simulator(decode_ms=1)
    _, outcomes = measure(sim.url, levels=(1, 4), n=8, output_tokens=5)
    assert all(r.ok for outcome in outcomes for r in outcome.results)
    stats = sim.stats()
    # Preflight, prompts, warmup and the level of 1 share one connection; the level of 4 holds
    # four open at once: 4 connections for 26 requests (3 to check and tokenize, 2 warmups, the
    # pool's 1 + 4 opening requests, 16 measured), not one per request.
    assert stats["requests"] >= 26 and stats["connections"] == 4, stats
    deadline = time.monotonic() + 5
    while sim.stats()["open_connections"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.stats()["open_connections"] == 0  # the server saw every one of them closed


def test_the_pool_is_sized_from_the_loads_a_closed_loop_of_12_opens_exactly_12_connections(simulator):
    sim = simulator(decode_ms=5)
    _, [outcome] = measure(sim.url, levels=(12,), n=36, output_tokens=10)
    assert len(outcome.results) == 36 and all(r.ok for r in outcome.results)
    spans = [(r.sent, r.finished) for r in outcome.results]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) == 12
    # Preflight, prompts and warmup on one connection, which the level then reuses among its 12.
    assert sim.stats()["connections"] == 12, sim.stats()


def test_each_kind_of_load_sizes_the_pool_for_the_requests_it_can_have_in_flight():
    def pool(*loads):
        return Session(Target("http://127.0.0.1:9", "vllm"), Workload(), loads=loads).max_connections
    assert pool(Load(concurrency=1), Load(concurrency=40), Load(concurrency=8)) == 40 + SPARE_CONNECTIONS
    assert pool(Load(concurrency=6, rate=50)) == 6 + SPARE_CONNECTIONS  # the cap bounds an open loop
    assert pool(Load(concurrency=0, rate=2)) == OPEN_LOOP_MAX_IN_FLIGHT + SPARE_CONNECTIONS  # no cap: the ceiling
    assert pool() == 1 + SPARE_CONNECTIONS


def test_a_load_wider_than_the_sessions_pool_is_refused_before_any_request(simulator):
    sim = simulator(decode_ms=1)

    async def go():
        s = Session(Target(sim.url, "vllm"), Workload(output_tokens=3, warmup_requests=0),
                    loads=[Load(concurrency=4, requests=4)])
        try:
            await s.prepare((await s.preflight()).model)
            sent = sim.stats()["requests"]
            with pytest.raises(ValueError, match="12 concurrent needs 12 connections; this session's pool holds 4"):
                await s.measure(Load(concurrency=12, requests=12))
            return sent
        finally:
            await s.close()
    sent = asyncio.run(go())
    assert sim.stats()["requests"] == sent  # not a level quietly capped at the pool's size


def test_requests_that_stop_short_are_flagged(simulator):
    sim = simulator(decode_ms=1, eos_after=4)

    async def go():
        s = Session(Target(sim.url, "vllm"), Workload(output_tokens=10, warmup_requests=0))
        await s.prepare((await s.preflight()).model)
        body = s.body(s.prompts.make(10), 10)
        body.pop("ignore_eos")
        s.body = lambda prompt, n: body
        r = await s.send(0, [], 10, 0.0)
        await s.close()
        return r
    r = asyncio.run(go())
    assert r.ok and r.output_tokens == 4 and r.stopped_short


def run_load(url, load, backend="vllm", **workload):

    async def go():
        s = Session(Target(url, backend), Workload(**workload), loads=[load])
        await s.prepare((await s.preflight()).model)
        out = await s.measure(load)
        await s.close()
        return out
    return asyncio.run(go())


def test_a_constant_rate_sends_on_schedule(simulator):
    # Each request takes ~55 ms, longer than the 20 ms between sends: a client that waited for
    # answers would fall further behind with every request (0.6 s by the last).
    sim = simulator(decode_ms=10)
    out = run_load(sim.url, Load(concurrency=0, rate=50, arrivals="constant", requests=20), output_tokens=5)
    assert len(out.results) == 20 and all(r.ok for r in out.results)
    assert [r.scheduled for r in out.results] == pytest.approx([i / 50 for i in range(20)])
    lags = sorted(r.send_lag for r in out.results)
    assert lags[0] >= -CLOCK_EPS  # never before its time
    # On time, with room for a busy machine's late wake-ups (which the lag figures record).
    assert lags[len(lags) // 2] < 0.01 and lags[-1] < 0.25, lags
    assert out.rate == 50 and "send_lag_ms_p99" in out.client and "loop_lag_ms_p99" in out.client


def test_poisson_arrivals_average_the_asked_rate_and_respect_the_duration(simulator):
    sim = simulator(decode_ms=1)
    out = run_load(sim.url, Load(concurrency=0, rate=100, duration_s=1.0), output_tokens=3, seed=7)
    sched = [r.scheduled for r in out.results]
    assert all(t < 1.0 for t in sched)
    assert 60 < len(sched) < 140  # 100 expected; Poisson spread
    gaps = {round(b - a, 6) for a, b in zip(sched, sched[1:])}
    assert len(gaps) > 10  # not constant


def test_a_concurrency_cap_bounds_requests_in_flight(simulator):
    sim = simulator(decode_ms=10)
    out = run_load(sim.url, Load(concurrency=2, rate=200, arrivals="constant", requests=10), output_tokens=5)
    spans = [(r.sent, r.finished) for r in out.results]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 2
    assert max(r.send_lag for r in out.results) > 0.05  # waiting for a place shows as lag


def test_a_closed_loop_bounded_by_duration_stops_sending(simulator):
    sim = simulator(decode_ms=5)
    out = run_load(sim.url, Load(concurrency=2, duration_s=0.5), output_tokens=5)
    assert len(out.results) >= 6
    # No request is started after 0.5 s: each was handed to the HTTP client (sent minus its
    # dispatch delay) right after its stream checked the clock. At most one per stream leaves
    # after the bound (checked just before it; a busy machine may delay its bytes).
    assert all(r.sent - r.dispatch_delay < 0.5 + 0.05 for r in out.results)
    assert sum(1 for r in out.results if r.sent >= 0.5) <= 2


def test_chat_with_reasoning_reports_the_first_answer_token_separately(simulator):
    sim = simulator(decode_ms=5, prefill_ms=10, reasoning_tokens=4, truth=True)
    _, [out] = measure(sim.url, n=3, output_tokens=10, api="chat")
    gaps, least = [], []
    for r, t in with_truth(out, sim.truth()):
        assert r.ok and r.reasoning_chunks == 4
        # TTFT counts the reasoning (the first chunk); the answer starts at the fifth chunk.
        assert r.ttft == r.chunk_times[0] and r.first_answer == r.chunk_times[4]
        # Four tokens of 5 ms apart, as the simulator did it: each chunk reached us after it
        # was due and before the simulator noted it had written it (same clock).
        due = [t["due"] + k * t["step"] for k in range(len(t["chunks"]))]
        gaps.append(r.first_answer - r.ttft)
        assert gaps[-1] <= t["chunks"][4] - due[0] + CLOCK_EPS
        least.append(due[4] - t["chunks"][0])
    assert percentile(gaps, 50) >= percentile(least, 50) - CLOCK_EPS


def test_the_installed_httpcore_is_the_one_whose_pool_internals_the_transport_overrides():
    # transport._Pool replaces httpcore's private pool bookkeeping: another httpcore may have
    # moved what it relies on. Moving the pin means reading that version's connection pool.
    assert importlib.metadata.version("httpcore") == transport.HTTPCORE_VERSION
    requirements = (Path(__file__).parent.parent / "requirements.txt").read_text()
    assert re.findall(r"^httpcore==(\S+)$", requirements, re.M) == [transport.HTTPCORE_VERSION]
