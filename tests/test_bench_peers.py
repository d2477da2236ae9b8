"""scripts/bench_accuracy.py's peer comparison, against the real simulator: ours sharded over
processes and the naive aiohttp client have every request found in the simulator's truth, on
the one clock; a client's CPU is counted over all its processes (children included)."""
import argparse
import subprocess
import sys
import time

import pytest

from scripts import bench_accuracy as bench

ARGS = argparse.Namespace(prompt_tokens=32, output_tokens=6, tool_timeout=120.0)


def check(result, n):
    assert result["matched"] == n and result["unmatched"] == 0
    # On the one monotonic clock: a client's TTFT is within tens of ms of the truth on a busy
    # 2-core machine; a clock mix-up (wall clock against monotonic) would be off by years.
    assert abs(result["ttft_error_ms"]["p50"]) < 50
    info = result["info"]
    assert info["measured_span_s"] > 0 and info["measured_cpu_s"] > 0
    assert info["client_processes_busy"] >= 1


def test_ours_sharded_over_two_processes_is_matched_request_by_request(tmp_path):
    result = bench.measure("ours ×2", "ours", 2, 4, 12, ARGS, None, tmp_path, print)
    check(result, 12)
    assert result["info"]["processes"] == 2
    assert result["info"]["loop_lag_ms"]["p99"] is not None


@pytest.fixture(scope="module")
def naive_venv():
    """The naive client's own virtualenv (aiohttp from PyPI), made once and cached as the
    benchmark script makes it."""
    lines = []
    if bench.ensure_venv("naive", lines.append) is None:
        pytest.fail("could not make the naive client's virtualenv: " + "\n".join(lines))


def test_naive_client_is_matched_and_reports_its_loop_lag(naive_venv, tmp_path):
    result = bench.measure("naive", "naive", 0, 4, 12, ARGS, None, tmp_path, print)
    check(result, 12)
    lag = result["info"]["loop_lag_ms"]
    assert lag["p50"] is not None and lag["p50"] <= lag["p99"] <= lag["max"]


def test_tree_cpu_counts_a_busy_grandchild_and_only_inside_the_span():
    # A child that starts a grandchild, which burns CPU for 0.6 s and then sleeps.
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\ntime.sleep(1.5)"
    child = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"])
    sampler = bench.TreeCPU(child.pid, interval=0.05)
    started = time.perf_counter()
    child.wait(30)
    ended = time.perf_counter()
    sampler.stop()
    used = sampler.per_process(started, ended)
    assert len(used) >= 2  # the child and its grandchild
    assert 0.45 <= sum(used.values()) <= 1.2
    # The last second was sleep: nothing counted there.
    assert sum(sampler.per_process(ended - 1.0, ended).values()) < 0.1


def test_a_process_that_ran_in_a_short_span_is_counted_busy_though_its_share_is_under_a_tick():
    # Samples 0.2 s apart; the span is 20 ms inside them. Process 1 used one tick (10 ms) between
    # the samples, process 2 none: interpolation gives process 1 1 ms, yet it ran.
    sampler = object.__new__(bench.TreeCPU)
    sampler.series = {1: [(0.0, 0.5), (0.2, 0.51)], 2: [(0.0, 0.3), (0.2, 0.3)]}
    assert sampler.per_process(0.09, 0.11)[1] < 0.01
    assert sampler.ran(0.09, 0.11) == [1]
