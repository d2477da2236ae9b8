"""Regression tests of each finished run against its comparable runs: the detector on simulated
history (a planted slowdown is flagged, noise of the same spread is not), and through the run's
finish with real engine output from simulators whose decode is slower by a known factor."""
import asyncio
import random
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks import history, services
from benchmarks.engine.catalogue import HIGHER, LOWER, figure
from benchmarks.engine.client import Load, Session, Target, Timeouts, Workload
from benchmarks.engine.regression import RegressionReport, Thresholds, compare_figure
from benchmarks.models import Run
from benchmarks.services import level_store
from factories import endpoint, measured_run

THRESHOLDS = Thresholds(window=10, min_history=3, z=3.0, min_change_pct=5.0, noise_floor_pct=1.0)
TRIALS = 400


def _history(rng, mean, spread, n=10):
    return [rng.gauss(mean, spread) for _ in range(n)]


@pytest.mark.parametrize("name", ["tpot_ms_p50", "aggregate_tok_s"])
def test_a_planted_slowdown_is_flagged_and_noise_of_the_same_spread_is_not(name):
    """History: 10 runs with 2 % noise. A release 20 % slower (10 noise widths) is flagged in
    every trial; a run drawn from the same noise is flagged about as often as a 3-sigma test
    allows (the one-sided tail of t with 9 degrees of freedom beyond 3/sqrt(1.1): under 1 %)."""
    rng = random.Random(19)
    better = figure(name).metric.better
    slower = 1.2 if better == LOWER else 1 / 1.2
    caught = false_alarms = 0
    for _ in range(TRIALS):
        runs = _history(rng, 100.0, 2.0)
        caught += compare_figure(name, rng.gauss(100.0 * slower, 2.0), runs, THRESHOLDS).regressed
        false_alarms += compare_figure(name, rng.gauss(100.0, 2.0), runs, THRESHOLDS).regressed
    assert caught == TRIALS
    assert false_alarms <= 0.015 * TRIALS, false_alarms


def test_a_change_as_large_as_the_noise_is_not_a_regression():
    """Noisy history (20 % spread): a run 20 % worse is one standard deviation out, not flagged;
    the same 20 % against a quiet history (1 %) is."""
    rng = random.Random(7)
    noisy = _history(rng, 100.0, 20.0)
    quiet = _history(rng, 100.0, 1.0)
    mean_noisy = sum(noisy) / len(noisy)
    assert not compare_figure("ttft_ms_p50", mean_noisy * 1.2, noisy, THRESHOLDS).regressed
    assert compare_figure("ttft_ms_p50", sum(quiet) / len(quiet) * 1.2, quiet, THRESHOLDS).regressed


def test_direction_comes_from_the_catalogue_and_improvements_are_never_flagged():
    runs = [100.0, 101.0, 99.0, 100.5, 99.5]
    assert figure("ttft_ms_p50").metric.better == LOWER and figure("aggregate_tok_s").metric.better == HIGHER
    assert compare_figure("ttft_ms_p50", 130.0, runs, THRESHOLDS).regressed  # slower first token
    assert not compare_figure("ttft_ms_p50", 70.0, runs, THRESHOLDS).regressed  # faster
    assert compare_figure("aggregate_tok_s", 70.0, runs, THRESHOLDS).regressed  # less throughput
    assert not compare_figure("aggregate_tok_s", 130.0, runs, THRESHOLDS).regressed


def test_too_little_history_tests_nothing_and_identical_runs_use_the_noise_floor():
    short = compare_figure("ttft_ms_p50", 500.0, [100.0, 100.0], THRESHOLDS)
    assert not short.regressed and short.mean is None
    # Identical figures (std 0): the spread is taken as 1 % of the mean, so 4 % worse is z = 4
    # but under the 5 % minimum change, and 6 % worse is flagged.
    same = [100.0] * 5
    assert compare_figure("ttft_ms_p50", 104.0, same, THRESHOLDS).z == pytest.approx(4.0)
    assert not compare_figure("ttft_ms_p50", 104.0, same, THRESHOLDS).regressed
    assert compare_figure("ttft_ms_p50", 106.0, same, THRESHOLDS).regressed


def test_the_report_reads_back_what_it_wrote():
    test = compare_figure("tpot_ms_p50", 12.0, [10.0, 10.2, 9.8, 10.1], THRESHOLDS)
    from benchmarks.engine.regression import LevelTest

    report = RegressionReport(THRESHOLDS, [LevelTest("e", 0, "1 concurrent", "0123456789abcdef", [test], ["a"])])
    again = RegressionReport.from_dict(report.to_dict())
    assert again.to_dict() == report.to_dict()
    assert again.regressed and again.regressions()[0][1].figure == "tpot_ms_p50"
    assert RegressionReport.from_dict({}) is None


# ---------------------------------------------------------------- through the run's finish
def _finish_through_the_service(run: Run) -> Run:
    """The worker's last step: the run was running; its finish stores the regression test."""
    Run.objects.filter(id=run.id).update(status=Run.RUNNING)
    services._finish(run, Run.SUCCEEDED)
    run.refresh_from_db()
    return run


def _run_on(sim, e, *, requests: int, tokens: int, prompt_tokens: int = 64) -> Run:
    """A finished run of one level (1 user) measured anew by the engine's Session on the
    simulator `sim` and stored through the real service, as factories.measured_run stores its
    own (whose simulators all take 20 ms of prefill: here the prefill is the test's)."""
    run = Run.objects.create(prompt_tokens=prompt_tokens, output_tokens=tokens, temperature=0.7, concurrency_levels=[1],
                             requests_per_level=requests, warmup_requests=1, status=Run.SUCCEEDED,
                             progress_total=requests)
    run.endpoints.set([e])

    async def measure():
        load = Load(concurrency=1, requests=requests)
        session = Session(Target(sim.url, e.backend), Workload(prompt_tokens=prompt_tokens, output_tokens=tokens,
                                                               temperature=0.7, warmup_requests=1),
                          Timeouts(connect=5, first_byte=30, total=60), loads=[load])
        try:
            preflight = await session.preflight()
            assert preflight.ok, preflight.cause
            await session.prepare(preflight.model)
            return await session.measure(load)
        finally:
            await session.close()
    with ThreadPoolExecutor(1) as pool:  # an event loop of its own, as the worker's
        outcome = pool.submit(asyncio.run, measure()).result()
    level_store(run=run, endpoint=e, outcome=outcome, level_index=0)
    return run


@pytest.mark.django_db(transaction=True)  # the finish closes stale connections, as a worker's does
def test_a_release_with_a_slower_decode_is_flagged_on_its_run_and_the_same_server_is_not(settings, simulator):
    """Three runs on a server of 120 ms prefill decoding at 10 ms per token, then one run on the
    same server and one on a server decoding at 20 ms (a planted slowdown, as a release that
    broke a kernel): the slow one is flagged on TPOT and per-stream decode, the same server is
    not. The endpoints differ, the model, variant, GPU and workload do not: they are comparable.

    Each run: 6 requests, one at a time, of 10 tokens: TTFT 120 ms, TPOT 10 ms (20 ms on the slow
    server), a request 120 + 9 × 10 = 210 ms (300 ms), 60 tokens in 1.26 s (1.8 s). A figure is
    flagged 25 % worse than its history's mean (and 3 of its standard deviations, at least 1 % of
    the mean each), so the slow server's TPOT (+100 %) and decode speed (-50 %) are, whatever a
    stall does to one of its requests (the figures are medians over 6 requests, and a stall only
    makes the slow run slower). The same server is not flagged unless a figure moves 25 %, which
    the busy machine's stalls cannot do: TTFT, TPOT and decode are medians of 6 requests, each
    request's tokens scheduled on absolute times, so one stall moves one request, not the median
    (the TTFT median would need 3 of 6 requests 30 ms late); aggregate throughput counts every
    stall, but one of S ms makes it S / (1.26 s + S) worse: 25 % takes S = 420 ms."""
    settings.REGRESSION_MIN_HISTORY = 3
    settings.REGRESSION_MIN_CHANGE_PCT = 25  # real timings wander by several percent; the slowdown is 100 %
    fast_sim = simulator(prefill_ms=120, decode_ms=10)
    slow_sim = simulator(prefill_ms=120, decode_ms=20)
    fast = endpoint(fast_sim.url, name="vllm-0.9")
    slow = endpoint(slow_sim.url, name="vllm-0.10")
    kwargs = dict(requests=6, tokens=10)
    first = [_run_on(fast_sim, fast, **kwargs) for _ in range(3)]
    assert len({lv.fingerprint for r in first for lv in r.levels.all()}) == 1
    same = _finish_through_the_service(_run_on(fast_sim, fast, **kwargs))
    report = same.regression_report
    assert report.tested and not report.regressed, (
        "the same server was flagged: " + "; ".join(f.sentence for lv in report.levels for f in lv.figures))
    slower = _finish_through_the_service(_run_on(slow_sim, slow, **kwargs))
    flagged = {f.figure for _, f in slower.regression_report.regressions()}
    assert {"tpot_ms_p50", "decode_tok_s_p50"} <= flagged, (
        f"a decode twice as slow flagged only {sorted(flagged)}: "
        + "; ".join(f.sentence for lv in slower.regression_report.levels for f in lv.figures))
    assert slower.levels.get().fingerprint == first[0].levels.get().fingerprint


@pytest.mark.django_db
def test_another_workload_or_variant_is_not_comparable():
    """Comparable levels share a fingerprint: the same model, variant, GPUs and workload shape,
    whatever the endpoint, seed, title or SLO (history's docstring). The oracle is that rule,
    written out: a run of the same shape on another endpoint of the same variant and host,
    with another seed, title and SLO, shares the first run's fingerprint (and its history);
    more output tokens or another variant (AWQ) do not."""
    base = endpoint(name="a")
    other_variant = endpoint(name="b", url="http://127.0.0.1:8", quantization="awq")
    elsewhere = endpoint(name="c", url="http://127.0.0.1:7")  # the same model, variant and host as "a"
    run = measured_run([base], levels=(1,), requests=3, tokens=8, prompt_tokens=64)
    rerun = measured_run([elsewhere], levels=(1,), requests=3, tokens=8, prompt_tokens=64, seed=5,
                         title="the same load again", slo_ttft_ms=500)
    more_tokens = measured_run([base], levels=(1,), requests=3, tokens=16, prompt_tokens=64)
    awq = measured_run([other_variant], levels=(1,), requests=3, tokens=8, prompt_tokens=64)
    prints = {name: r.levels.get().fingerprint for name, r in
              (("run", run), ("rerun", rerun), ("more tokens", more_tokens), ("awq", awq))}
    assert all(re.fullmatch(r"[0-9a-f]{16}", p) for p in prints.values()), prints  # the /history/ URL's form
    assert prints["rerun"] == prints["run"], f"the same workload on another endpoint is not comparable: {prints}"
    assert len({prints["run"], prints["more tokens"], prints["awq"]}) == 3, (
        f"another workload or variant shares a fingerprint: {prints}")
    in_history = {lv.run_id for lv in history.history_levels(prints["run"])}
    assert in_history == {run.id, rerun.id}, (
        f"the history of the first run's fingerprint holds runs {sorted(in_history)}, not {run.id} and {rerun.id}")


def test_the_verdict_says_unchanged_and_when_z_counts_the_noise_floor():
    """An unchanged figure does not read "0.0 % worse"; with identical history z is the change
    in noise floors, and is said to be so, not read as a measured spread."""
    same = compare_figure("ttft_ms_p50", 100.0, [100.0] * 5, THRESHOLDS)
    assert same.change_words == "unchanged" and "0.0 %" not in same.sentence
    floored = compare_figure("ttft_ms_p50", 106.0, [100.0] * 5, THRESHOLDS)
    assert floored.floored and floored.change_words == "6.0 % worse"
    assert "+6.0 noise floors" in floored.z_words and "1 % floor" in floored.z_words
    noisy = compare_figure("ttft_ms_p50", 140.0, [80.0, 100.0, 120.0, 100.0], THRESHOLDS)
    assert not noisy.floored and noisy.z_words == f"{noisy.z:+.1f}" and noisy.change_words == "40.0 % worse"
    assert compare_figure("aggregate_tok_s", 110.0, [100.0] * 5, THRESHOLDS).change_words == "10.0 % better"
