"""A level spread over two real load-generator Celery workers (their own queue) against the
simulator: one start for both on the shared start time, every record merged, each shard's clock
offset measured, a cancel stopping both."""
import asyncio
import os
import time

import pytest
from django.test import override_settings

from benchmarks import loadgen
from benchmarks.engine.client import Cancelled, Load, Session, Target, Workload
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine.metrics import summarize_level
from conftest import spawn_worker, stop_worker, worker_env
from cpu_waits import CpuWaits

PREFILL_MS, DECODE_MS, OUTPUT = 30.0, 10.0, 12
QUEUE = f"loadgen-test-{os.getpid()}"


@pytest.fixture(scope="module")
def loadgen_workers(django_db_setup, django_db_blocker):
    from v100site.celery import app
    app.control.purge()
    env = worker_env(LOADGEN_QUEUE=QUEUE)
    procs = [spawn_worker(env, name=f"loadgen{k}", queue=QUEUE) for k in (1, 2)]
    yield procs
    for proc in procs:
        stop_worker(proc)


def prepared(url, load):
    async def go():
        session = Session(Target(url, "vllm"), Workload(prompt_tokens=32, output_tokens=OUTPUT, warmup_requests=1,
                                                        seed=5), loads=[load])
        pf = await session.preflight()
        assert pf.ok, pf.cause
        await session.prepare(pf.model)
        return session
    return go()


def spread(url, load, **kw):
    """A prepared session's level over the two workers."""
    async def go():
        session = await prepared(url, load)
        try:
            return await loadgen.over_workers(session, load, 2, **kw)
        finally:
            await session.close()
    return asyncio.run(go())


@override_settings(LOADGEN_QUEUE=QUEUE, LOADGEN_START_LEAD_S=4.0)
def test_level_over_two_workers(loadgen_workers, simulator):
    sim = simulator(dialect="vllm", prefill_ms=PREFILL_MS, decode_ms=DECODE_MS, slots=256)
    worker_pids = {p.pid for p in loadgen_workers}
    with CpuWaits(worker_pids) as waits:
        outcome = spread(sim.url, Load(concurrency=4, requests=16))
    assert [r.index for r in outcome.results] == list(range(16))
    assert all(r.ok and r.output_tokens == OUTPUT for r in outcome.results), [r.error for r in outcome.results]
    ttft = summarize_level(outcome.results, outcome.wall_s).value("ttft_ms")
    assert PREFILL_MS - 1 <= ttft.p50 <= PREFILL_MS + 25
    figures = ClientFigures.from_dict(outcome.client)
    assert len(figures.shards) == 2
    assert {s.pid for s in figures.shards} == worker_pids  # one shard on each worker
    # One machine here: the measured offsets between the two clocks are tiny, and the shards,
    # released on the shared start time, sent their first requests within 15 ms of it, not
    # counting the time the kernel kept a shard waiting for a CPU meanwhile (a busy machine's
    # doing; a shard's own sleeping or work past the start counts).
    assert all(abs(s.clock_offset_ms) < 5.0 and s.clock_rtt_ms < 50.0 for s in figures.shards)
    for s in figures.shards:
        waited = waits.between(s.pid, outcome.t0, outcome.t0 + s.first_send_ms / 1000)
        assert -2.0 <= s.first_send_ms < 15.0 + waited, (
            f"shard {s.shard}: first send {s.first_send_ms:.1f} ms after the start, of which at most "
            f"{waited:.1f} ms waiting for a CPU")
    assert abs(outcome.started_at - (time.time() - outcome.wall_s)) < 30


@override_settings(LOADGEN_QUEUE=QUEUE, LOADGEN_START_LEAD_S=4.0)
def test_cancel_stops_the_worker_shards(loadgen_workers, simulator):
    sim = simulator(dialect="vllm", prefill_ms=PREFILL_MS, decode_ms=DECODE_MS, slots=256)
    began = time.monotonic()
    with pytest.raises(Cancelled):
        spread(sim.url, Load(concurrency=4, requests=10_000), should_stop=lambda: time.monotonic() - began > 9.0)
    # Both workers are free again: a short level over them completes.
    began = time.monotonic()
    outcome = spread(sim.url, Load(concurrency=2, requests=4))
    assert len(outcome.results) == 4 and time.monotonic() - began < 20
