"""The SLO search (engine/slo_search.py): bisection bounds and answers on a known knee, its stored
shape, and the search against the simulator, whose queueing model says where its knee is."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.engine.client import Load, Session, Target, Timeouts, Workload
from benchmarks.engine.metrics import Distribution, LevelSummary, summarize_level
from benchmarks.engine.slo_search import SloSearch, SloTarget, max_probes


def level(ttft_p99: float, failed: int = 0) -> LevelSummary:
    return LevelSummary(requests=10, completed=10 - failed, failed=failed,
                        values={"ttft_ms": Distribution(count=10, mean=ttft_p99, p50=ttft_p99, p90=ttft_p99,
                                                        p99=ttft_p99)})


def search_on(knee: int, low: int = 1, high: int = 64) -> SloSearch:
    """A server that keeps TTFT p99 at 50 ms up to `knee` users and 500 ms above."""
    search = SloSearch(SloTarget(99, ttft_ms=100), low=low, high=high)
    while (c := search.next_probe()) is not None:
        search.record(c, [level(50 if c <= knee else 500)])
    return search


@pytest.mark.parametrize("knee", [1, 2, 5, 37, 63])
def test_bisection_finds_the_knee_within_its_bound_of_probes(knee):
    search = search_on(knee)
    assert search.status == "found" and search.best == knee
    assert len(search.probes) <= max_probes(1, 64) == 8  # 2 + log2(63) rounded up
    assert f"serves {knee} concurrent user" in search.words and "TTFT p99 ≤ 100 ms" in search.words


def test_the_ends_of_the_range_and_failed_requests():
    top = search_on(knee=100)
    assert (top.status, top.best, [p.concurrency for p in top.probes]) == ("at_least", 64, [1, 64])
    bottom = search_on(knee=0)
    assert (bottom.status, bottom.best, len(bottom.probes)) == ("none", None, 1)
    assert "misses TTFT p99 ≤ 100 ms even at 1 concurrent user" in bottom.words
    # A level with a failed request misses, whatever its latency; every trial must meet.
    search = SloSearch(SloTarget(99, ttft_ms=100), low=1, high=4)
    probe = search.record(1, [level(50), level(50, failed=1)])
    assert not probe.met and "1 of 10 requests failed" in probe.misses


def test_the_stored_search_reads_back_as_it_was_written():
    search = search_on(knee=9, high=16)
    again = SloSearch.from_dict(search.to_dict())
    assert (again.best, again.status, again.probes, again.target) == (9, "found", search.probes, search.target)
    assert SloSearch.from_dict({}).status == "unfinished"
    with pytest.raises(ValueError):
        SloTarget(95, ttft_ms=1)


def _measure_search(url: str, high: int, requests: int) -> SloSearch:
    async def run():
        loads = [Load(concurrency=high, requests=requests)]
        session = Session(Target(url, "vllm"), Workload(prompt_tokens=16, output_tokens=20, temperature=0.0,
                                                        warmup_requests=1),
                          Timeouts(connect=5, first_byte=30, total=60), loads=loads)
        search = SloSearch(SloTarget(99, ttft_ms=100), low=1, high=high)
        try:
            preflight = await session.preflight()
            assert preflight.ok, preflight.cause
            await session.prepare(preflight.model)
            while (c := search.next_probe()) is not None:
                outcome = await session.measure(Load(concurrency=c, requests=requests))
                search.record(c, [summarize_level(outcome.results, outcome.wall_s)])
        finally:
            await session.close()
        return search

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


def test_the_search_finds_the_simulators_slot_count(simulator):
    """The simulator serves `slots` requests at once; a request beyond them waits for a whole
    request: prefill 5 ms + 20 tokens × 10 ms = 205 ms. So up to 6 users (its slots) TTFT is
    the 5 ms prefill plus the client's overhead, and at 7 at least one request of every round
    of 16 waits 205 ms, which p99 over 16 requests cannot hide (it weighs the slowest by 0.85):
    with a 100 ms target the highest load within it is 6, exactly."""
    sim = simulator(slots=6, prefill_ms=5, decode_ms=10)
    search = _measure_search(sim.url, high=16, requests=16)
    assert search.status == "found", search.to_dict()
    assert search.best == 6, search.to_dict()
    assert {p.concurrency: p.met for p in search.probes}[7] is False
