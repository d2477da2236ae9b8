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


def _measure_search(url: str, high: int, requests: int, ttft_ms: float) -> SloSearch:
    async def run():
        loads = [Load(concurrency=high, requests=requests)]
        session = Session(Target(url, "vllm"), Workload(prompt_tokens=16, output_tokens=20, temperature=0.0,
                                                        warmup_requests=1),
                          Timeouts(connect=5, first_byte=30, total=60), loads=loads)
        search = SloSearch(SloTarget(99, ttft_ms=ttft_ms), low=1, high=high)
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
    """The simulator serves `slots` = 4 requests at once; each holds its slot for its prefill and
    its decode: 20 ms + (20 - 1) tokens × 15 ms = 305 ms (its first token is written when its
    prefill ends, the k-th k × 15 ms later). The target, TTFT p99 ≤ 250 ms, sits far from the
    latencies on both sides of the answer, so that one stall of 100-200 ms on a busy machine
    cannot move it:

    - up to 4 users no request waits for a slot: every TTFT is the 20 ms prefill plus delivery.
      A stall of S ms (the simulator's, or a late wake-up) adds at most S to the requests it
      catches, so p99 stays within 250 ms for any S up to about 225 ms: 4 users meet.
    - 5 users, 9 requests: the fifth of the first five waits for the first slot freed, a whole
      request (305 ms: TTFT ≈ 325 ms); when the first four finish, their users send the last
      four requests, three take the free slots and one waits for the fifth to finish (another
      ≈ 305 ms). Two of 9 requests wait a whole request, and p99 over 9 (linear interpolation
      at rank 0.99 × 8 = 7.92) lies between those two: ≈ 325 ms. A stall only lengthens a wait,
      except one of the client between two sends, which can shorten one of them; p99 is still
      0.92 of the other: ≥ 300 ms. 5 users miss.
    - more users wait as long or longer: latency grows with load, and the answer is 4.

    Bisection between 1 and 8 probes 1 (met), 8 (missed), 4 (met), 6 (missed), 5 (missed):
    the highest load within the target is 4, the slot count, exactly. Time: the probes of 9
    requests take 9 rounds of 305 ms at 1 user and 3 at each of 4, 5, 6 and 8: about 6.4 s."""
    sim = simulator(slots=4, prefill_ms=20, decode_ms=15)
    search = _measure_search(sim.url, high=8, requests=9, ttft_ms=250)
    met = {p.concurrency: p.met for p in search.probes}
    assert [p.concurrency for p in search.probes] == [1, 8, 4, 6, 5] and met == {
        1: True, 8: False, 4: True, 6: False, 5: False}, (
        f"probes (users: met) {met}, in that order; expected 1 and 4 within TTFT p99 ≤ 250 ms (20 ms prefill, "
        f"no wait), 5, 6 and 8 past it (requests wait 305 ms for a slot): {search.to_dict()}")
    assert (search.status, search.best) == ("found", 4), (
        f"the search found {search.best!r} ({search.status}), not the simulator's 4 slots: {search.to_dict()}")
    assert search.words == "serves 4 concurrent users within TTFT p99 ≤ 250 ms (5 concurrent users miss)", search.words


def test_the_rate_grid_steps_by_its_percentage_from_the_lowest_to_the_highest():
    from benchmarks.engine.slo_search import MAX_RATE_GRID, rate_grid
    grid = rate_grid(4, 32, 25)
    assert grid[0] == 4 and grid[-1] == 32 and list(grid) == sorted(set(grid))
    # Each rate 25 % above the last (to 4 significant figures), but the highest, which may be closer.
    assert all(abs(b / a - 1.25) < 1e-3 for a, b in zip(grid, grid[1:-1]))
    assert 1 < grid[-1] / grid[-2] <= 1.25
    with pytest.raises(ValueError, match=f"at most {MAX_RATE_GRID}"):
        rate_grid(0.01, 1000, 1)  # 1,160 rates
    with pytest.raises(ValueError):
        rate_grid(8, 4, 25)


def rate_search_on(knee_rate: float, rates) -> SloSearch:
    """A server that keeps TTFT p99 at 50 ms up to `knee_rate` req/s and 500 ms above."""
    search = SloSearch(SloTarget(99, ttft_ms=100), rates=tuple(rates))
    while (r := search.next_probe()) is not None:
        assert r in rates
        search.record(r, [level(50 if r <= knee_rate else 500)])
    return search


@pytest.mark.parametrize("knee_rate", [0.5, 1.3, 7.0, 11.0, 31.9])
def test_a_search_by_rate_finds_the_highest_rate_of_its_grid_under_the_knee(knee_rate):
    from benchmarks.engine.slo_search import rate_grid
    rates = rate_grid(0.5, 32, 20)
    search = rate_search_on(knee_rate, rates)
    expected = max(r for r in rates if r <= knee_rate)
    assert search.status == "found" and search.best == expected
    # Within one step: the next rate up missed.
    assert search.missed_above == rates[rates.index(expected) + 1] and search.missed_above > knee_rate
    assert len(search.probes) <= max_probes(0, len(rates) - 1)
    assert f"sustains {expected:g} req/s within TTFT p99 ≤ 100 ms ({search.missed_above:g} req/s misses)" == search.words
    again = SloSearch.from_dict(search.to_dict())
    assert (again.by, again.best, again.status, again.probes, again.rates) == ("rate", expected, "found",
                                                                                search.probes, rates)


def test_a_rate_search_s_ends_and_a_stored_concurrency_search_of_the_first_version():
    from benchmarks.engine.slo_search import rate_grid
    rates = rate_grid(1, 8, 50)
    top = rate_search_on(100, rates)
    assert (top.status, top.best, [p.load for p in top.probes]) == ("at_least", 8, [1, 8])
    assert "sustains at least 8 req/s" in top.words and "the highest rate searched" in top.words
    assert rate_search_on(0.1, rates).words == "misses TTFT p99 ≤ 100 ms even at 1 req/s"
    # What version 1 wrote (concurrency probes, no "by"): read as the concurrency search it was.
    old = {"version": 1, "target": {"percentile": 99, "ttft_ms": 100}, "low": 1, "high": 8,
           "probes": [{"concurrency": 1, "met": True, "misses": []}, {"concurrency": 8, "met": False,
                                                                        "misses": ["TTFT p99 500.0 ms > 100 ms"]}],
           "stopped": "", "best": 1, "status": "unfinished"}
    search = SloSearch.from_dict(old)
    assert (search.by, search.best, search.next_probe()) == ("concurrency", 1, 4)


def rate_level(rate: float, n: int, *, gaps, e2e, sent_at=None) -> LevelSummary:
    """A level at `rate`: request i due at the sum of the first i `gaps` (seconds), sent at
    `sent_at(i, due)` (default: on time) and answered in `e2e(i)` seconds (2 output tokens)."""
    from benchmarks.engine.metrics import RequestResult

    results, due = [], 0.0
    for i in range(n):
        due = due + gaps(i) if i else 0.0
        sent = sent_at(i, due) if sent_at else due
        took = e2e(i)
        results.append(RequestResult(index=i, sent=sent, scheduled=due, prompt_tokens_asked=8, output_tokens_asked=2,
                                     first_content=took / 2, chunk_times=[took / 2, took], chunk_tokens=[1, 1],
                                     output_tokens=2, client_output_tokens=2))
    end = max(r.finished for r in results)
    return summarize_level(results, wall_s=end - min(r.sent for r in results))


def test_a_rate_probe_whose_requests_left_late_misses_however_fast_each_was_answered():
    """A client allowed 1 request in flight at 10 req/s offered, a server that answers each in
    0.25 s: the 20 requests finish 4 a second, 5 s, not the 1.9 s + 0.25 s their schedule takes (+ 10 ms a client keeping time may lag).
    TPOT (the only target) is met; the probe is not, since 10 req/s was never delivered."""
    search = SloSearch(SloTarget(99, tpot_ms=1000), rates=(5.0, 10.0), gap_cv=0.0)
    capped = rate_level(10, 20, gaps=lambda i: 0.1, e2e=lambda i: 0.25, sent_at=lambda i, due: i * 0.25)
    probe = search.record(10.0, [capped])
    assert not probe.met and probe.misses == (
        "delivered 4.00 req/s of the 10 offered (the level took 5.0 s; sent on schedule it ends within 2.2 s)",)
    on_time = rate_level(10, 20, gaps=lambda i: 0.1, e2e=lambda i: 0.25)
    assert search.record(10.0, [on_time]).met


def test_a_kept_poisson_schedule_is_almost_never_called_undelivered():
    """1,000 Poisson levels of 32 requests at 9 req/s, each answered in 0.1 to 0.5 s, all sent on
    time: an undelivered miss is the schedule running 3 standard deviations long (about 1 in 700)."""
    import random

    rng = random.Random(7)
    search = SloSearch(SloTarget(99, tpot_ms=1000), rates=(9.0,), gap_cv=1.0)
    missed = sum(not search.record(9.0, [rate_level(9, 32, gaps=lambda i: rng.expovariate(9),
                                                    e2e=lambda i: rng.uniform(0.1, 0.5))]).met
                 for _ in range(1000))
    assert missed <= 10, f"{missed} of 1,000 kept schedules called undelivered"
    assert SloSearch.from_dict(search.to_dict()).gap_cv == 1.0
