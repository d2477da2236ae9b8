"""A level split over load-generator processes against the simulator: the same records and
metrics as one process, one start for every shard, a crashed shard and a cancel stop the level,
and each shard's own client figures are kept (stored shape with its reader)."""
import asyncio
import os
import signal
import time

import pytest

from benchmarks.engine.client import Cancelled, Load, Session, Target, Workload
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine.metrics import summarize_level
from benchmarks.engine.shards import (CHUNKS_PER_S_PER_PROCESS, ShardedLevel, ShardFailed, measure_level,
                                      processes_for)
from benchmarks.engine.validity import level_flags
from cpu_waits import CpuWaits

PREFILL_MS, DECODE_MS, OUTPUT = 30.0, 10.0, 12
# The simulator writes the first chunk PREFILL_MS after it read the request and never early; on
# this shared 2-core machine a busy moment may add a few ms (its own schedule lag).
SLACK_MS = 25.0


def prepared(url, load, **workload):
    async def go():
        session = Session(Target(url, "vllm"), Workload(prompt_tokens=32, output_tokens=OUTPUT, warmup_requests=1,
                                                        seed=7, **workload), loads=[load])
        pf = await session.preflight()
        assert pf.ok, pf.cause
        await session.prepare(pf.model)
        return session
    return go()


def run(url, load, processes, **kw):
    async def go():
        session = await prepared(url, load)
        try:
            if processes == 1:
                await session.open_connections(session.streams_for(load))
            return await measure_level(session, load, processes, **kw)
        finally:
            await session.close()
    return asyncio.run(go())


@pytest.fixture
def sim(simulator):
    return simulator(dialect="vllm", prefill_ms=PREFILL_MS, decode_ms=DECODE_MS, slots=256)


def test_sharded_level_keeps_every_record_and_the_same_metrics(sim):
    load = Load(concurrency=6, requests=24)
    one = run(sim.url, load, 1)
    three = run(sim.url, load, 3)
    for outcome in (one, three):
        assert [r.index for r in outcome.results] == list(range(24))
        assert all(r.ok for r in outcome.results), [r.error for r in outcome.results if not r.ok]
        assert all(r.output_tokens == r.client_output_tokens == OUTPUT for r in outcome.results)
        summary = summarize_level(outcome.results, outcome.wall_s)
        ttft = summary.value("ttft_ms")
        assert PREFILL_MS - 1 <= ttft.p50 <= PREFILL_MS + SLACK_MS
        tpot = summary.value("tpot_ms")
        assert DECODE_MS - 0.5 <= tpot.p50 <= DECODE_MS + 3
        # 24 requests over 6 streams: 4 rounds, each a prefill and 11 decode steps at least.
        assert outcome.wall_s >= 4 * (PREFILL_MS + (OUTPUT - 1) * DECODE_MS) / 1000 * 0.95
    figures = ClientFigures.from_dict(three.client)
    assert figures.processes == 3 and len(figures.shards) == 3
    assert sorted(s.requests for s in figures.shards) == [8, 8, 8]
    assert len({s.pid for s in figures.shards}) == 3 and os.getpid() not in {s.pid for s in figures.shards}


def test_shards_start_together_on_the_shared_clock(sim):
    # As many shards as this machine has cores: more would wait for a core, not for the barrier.
    with CpuWaits() as waits:
        outcome = run(sim.url, Load(concurrency=4, requests=8), 2)
    figures = ClientFigures.from_dict(outcome.client)
    firsts = [s.first_send_ms for s in figures.shards]
    assert len(firsts) == 2 and all(f is not None for f in firsts)
    # Released at one start time (the level's t0): each shard's first send a few ms after it at
    # most, not counting the time the kernel kept the shard waiting for a CPU meanwhile (a busy
    # machine's doing; the shard's own sleeping or work past the start counts).
    waited = [waits.between(s.pid, outcome.t0, outcome.t0 + s.first_send_ms / 1000) for s in figures.shards]
    why = f"first sends {firsts} ms after the start, of which {waited} ms waiting for a CPU"
    assert all(0.0 <= f < 8.0 + w for f, w in zip(firsts, waited)), why
    assert max(firsts) - min(firsts) < 5.0 + max(waited), why
    assert min(r.sent for r in outcome.results) >= 0.0


def test_open_loop_schedule_is_dealt_out_and_kept(sim):
    load = Load(concurrency=0, rate=40.0, arrivals="constant", requests=20)

    async def go():
        session = await prepared(sim.url, load)
        try:
            expected = session.schedule(load)
            outcome = await measure_level(session, load, 2)
            return expected, outcome
        finally:
            await session.close()
    expected, outcome = asyncio.run(go())
    assert [r.index for r in outcome.results] == list(range(20))
    assert [r.scheduled for r in outcome.results] == expected
    assert all(r.ok for r in outcome.results)
    lags = sorted(r.send_lag for r in outcome.results)
    assert lags[0] >= 0.0 and lags[len(lags) // 2] < 0.02  # left on schedule (a busy moment may delay one)


def test_a_crashed_shard_fails_the_level_with_its_cause(sim):
    load = Load(concurrency=4, requests=400)  # long enough to be killed in the middle

    async def go():
        session = await prepared(sim.url, load)
        level = ShardedLevel(session, load, 2)
        task = asyncio.ensure_future(level.run())
        while level.t0 is None:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # measuring
        os.kill(level.pids[1], signal.SIGKILL)
        try:
            with pytest.raises(ShardFailed, match=r"shard 2 of 2 stopped \(exit code -9\)"):
                await task
        finally:
            await session.close()
        return level.pids
    pids = asyncio.run(go())
    for pid in pids:  # every shard process is gone, the surviving one included
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_cancel_stops_every_shard(sim):
    load = Load(concurrency=4, requests=10_000)
    asked = []

    async def go():
        session = await prepared(sim.url, load)
        level = ShardedLevel(session, load, 2)
        started = [None]

        def should_stop():
            if started[0] is None:
                started[0] = time.perf_counter()
            asked.append(1)
            return time.perf_counter() - started[0] > 2.0

        t = time.perf_counter()
        try:
            with pytest.raises(Cancelled):
                await level.run(should_stop=should_stop)
        finally:
            await session.close()
        return level.pids, time.perf_counter() - t
    pids, took = asyncio.run(go())
    assert took < 12.0  # not the 10,000 requests (about 300 s)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")


def test_processes_follow_the_expected_chunk_rate():
    slow = Load(concurrency=8, requests=8)
    assert processes_for(slow, 25.0, 100, cores=16)[0] == 1
    wide = Load(concurrency=1024, requests=1024)
    n, why = processes_for(wide, 100.0, 100, cores=16)
    assert n == min(16, -(-1024 * 100 // CHUNKS_PER_S_PER_PROCESS)) and "chunks/s" in why
    assert processes_for(wide, 100.0, 100, cores=2)[0] == 2
    assert processes_for(Load(concurrency=3, requests=3), 10_000.0, 100, cores=16)[0] == 3  # a stream each
    assert processes_for(wide, None, 100, cores=16)[0] == 1
    open_loop = Load(concurrency=0, rate=10.0, requests=100)
    assert processes_for(open_loop, 1000.0, 100, cores=16)[0] == max(1, -(-10 * 100 // CHUNKS_PER_S_PER_PROCESS))


def test_client_figures_per_shard_and_old_rows():
    old = {"cpu_percent": 40.0, "loop_lag_ms_p99": 2.0, "loop_lag_ms_max": 3.0, "host_cpus": 2}
    figures = ClientFigures.from_dict(old)
    assert figures.processes == 1 and len(figures.shards) == 1
    assert figures.shards[0].cpu_percent == 40.0 and figures.loop_lag_ms_p99 == 2.0
    assert ClientFigures.from_dict(figures.to_dict()) == figures
    assert ClientFigures.from_dict({}).shards == ()
    stored = {"version": 2, "processes": 2, "machines": 1, "shards": [
        {"shard": 0, "cpu_percent": 50.0, "loop_lag_ms_p99": 1.0},
        {"shard": 1, "cpu_percent": 60.0, "loop_lag_ms_p99": 30.0}]}
    figures = ClientFigures.from_dict(stored)
    assert figures.loop_lag_ms_p99 == 30.0 and figures.cpu_percent == 60.0 and figures.cpu_percent_total == 110.0
    flags = [f for f in level_flags(summarize_level([], 0.0), client=stored) if f.code == "client_saturated"]
    assert len(flags) == 1 and flags[0].reason.startswith("Shard 2 of 2: ")
    calm = {**stored, "shards": [{"shard": 0, "loop_lag_ms_p99": 1.0}, {"shard": 1, "loop_lag_ms_p99": 2.0}]}
    assert not [f for f in level_flags(summarize_level([], 0.0), client=calm) if f.code == "client_saturated"]
