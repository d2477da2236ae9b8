"""Before a run the worker checks that its host is quiet (engine.host_check): other work on the
CPUs waits the run (bounded), and a run that started on a busy host says so first."""
import multiprocessing
import os
import time

import pytest

from benchmarks.engine.host_check import HostCheck, wait_for_quiet
from factories import endpoint, execute_in_process, queue_run, user


class FakeHost:
    """/proc/stat's cpu line advancing by a given busy share per read: user, nice, system, idle,
    iowait, irq, softirq, steal (in jiffies), with a clock that sleeps move."""

    def __init__(self, busy_shares, steal_share=0.0):
        self.busy_shares, self.steal_share = list(busy_shares), steal_share
        self.counters, self.now, self.windows = [0] * 8, 0.0, 0

    def read(self):
        return list(self.counters)

    def sleep(self, seconds):
        share = self.busy_shares[min(self.windows, len(self.busy_shares) - 1)]
        ticks = 1000
        busy, steal = round(ticks * share), round(ticks * self.steal_share)
        self.counters[0] += busy - steal
        self.counters[7] += steal
        self.counters[3] += ticks - busy
        self.now += seconds
        self.windows += 1

    def clock(self):
        return self.now


def check(host, bound_s, notes=None, should_stop=lambda: False):
    return wait_for_quiet(bound_s, 1.0, should_stop=should_stop, note=(notes if notes is not None else []).append, sleep=host.sleep,
                          counters=host.read, clock=host.clock)


def test_a_host_busy_with_other_work_waits_the_run_until_it_quiets():
    notes = []
    host = FakeHost([0.80, 0.60, 0.10])
    found = check(host, 60, notes)
    assert found.quiet and found.waited_s == pytest.approx(2.0) and found.busy_percent == pytest.approx(10.0)
    assert len(notes) == 2 and "80 % busy with other work" in notes[0] and "up to 60 s more" in notes[0]
    assert "after waiting 2 s" in found.sentence


def test_a_host_that_stays_busy_starts_the_run_after_the_bound_and_says_so():
    found = check(FakeHost([0.95]), 5)
    assert not found.quiet and found.waited_s == pytest.approx(5.0)
    assert "still busy when the run started, 5 s later" in found.sentence and "95 % busy" in found.sentence
    assert found.busy_percent == pytest.approx(95.0)


def test_with_no_wait_the_run_reads_once_and_warns():
    host = FakeHost([0.95])
    found = check(host, 0)
    assert host.windows == 1 and not found.quiet and "did not wait" in found.sentence


def test_cpu_steal_is_other_work_too_and_a_cancel_ends_the_wait():
    found = check(FakeHost([0.10], steal_share=0.08), 0)
    assert not found.quiet and "8 % CPU steal" in found.sentence
    assert check(FakeHost([0.95]), 60, should_stop=lambda: True) is None


def test_just_under_the_threshold_is_quiet_and_just_over_is_not():
    # THRESHOLDS["host_busy_before_run_percent"] is 25: a quarter of the CPUs busy with other work
    assert check(FakeHost([0.24]), 0).quiet and not check(FakeHost([0.26]), 0).quiet


def test_the_stored_shape_reads_back_and_an_unchecked_run_reads_none():
    found = check(FakeHost([0.95]), 0)
    assert HostCheck.from_dict(found.to_dict()) == found
    assert HostCheck.from_dict({}) is None and HostCheck.from_dict(None) is None


def _spin(stop_at):
    while time.monotonic() < stop_at:
        pass


@pytest.mark.django_db(transaction=True)
def test_a_run_on_a_host_other_work_keeps_busy_waits_then_says_so_first(client, simulator, settings):
    """Real CPUs: one spinning process per CPU keeps the host over the threshold whatever else
    runs here, so the run waits its bound, starts, and its page and API say why."""
    settings.RUN_HOST_CHECK_S, settings.RUN_HOST_QUIET_WAIT_S = 0.3, 1.0
    settings.HOST_QUEUES = True  # its host's queue has no worker: this process measures it, with these settings
    sim = simulator(dialect="vllm")
    spinners = [multiprocessing.Process(target=_spin, args=(time.monotonic() + 60,), daemon=True)
                for _ in range(os.cpu_count() or 1)]
    for p in spinners:
        p.start()
    try:
        run = execute_in_process(queue_run(owner=user(), endpoints=[endpoint(sim.url, host="quiet-check")],
                                           prompt_tokens=16,
                                           output_tokens=4, temperature=0.0, concurrency_levels=[1],
                                           requests_per_level=2, warmup_requests=0))
    finally:
        for p in spinners:
            p.kill()
    found = run.host_checked
    assert found is not None and not found.quiet, run.host_check
    assert found.waited_s >= 1.0 and found.busy_percent > 25
    assert run.levels.count() == 1  # it started anyway
    client.force_login(run.owner)
    page = client.get(run.get_absolute_url()).content.decode()
    assert page.index('id="host-busy-banner"') < page.index('id="progress"')
    assert "still busy when the run started, 1 s later" in page
    api = client.get(f"/api/v1/runs/{run.public_id}/").json()["host_check"]
    assert api["quiet"] is False and api["waited_s"] >= 1.0 and api["sentence"] == found.sentence


@pytest.mark.django_db(transaction=True)
def test_with_the_check_off_nothing_is_read_or_said(client, simulator, settings):
    settings.RUN_HOST_CHECK_S = 0
    settings.HOST_QUEUES = True
    sim = simulator(dialect="vllm")
    run = execute_in_process(queue_run(owner=user(), endpoints=[endpoint(sim.url, host="quiet-check")],
                                       prompt_tokens=16,
                                       output_tokens=4, temperature=0.0, concurrency_levels=[1],
                                       requests_per_level=2, warmup_requests=0))
    assert run.host_check == {} and run.host_checked is None
    client.force_login(run.owner)
    assert 'id="host-busy-banner"' not in client.get(run.get_absolute_url()).content.decode()
    assert client.get(f"/api/v1/runs/{run.public_id}/").json()["host_check"] is None
