"""A worker that measures run after run keeps its resources: every run closes the connections
it opened, a cancel stops every step of a run (a stuck warmup included) within seconds, and a
server that streams without ever ending an event is refused with a cause — with a real worker
process, PostgreSQL and Redis."""
import os
import time

import pytest
from celery import Celery

from benchmarks import services
from benchmarks.models import Run
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint
from test_fault_tolerance import create_run, finished

pytestmark = pytest.mark.django_db(transaction=True)
QUEUE = "resources"
SMALL = dict(prompt_tokens=16, output_tokens=4, concurrency_levels=[1, 4], requests_per_level=8, warmup_requests=1)


@pytest.fixture
def worker(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = QUEUE
    Celery(broker=settings.CELERY_BROKER_URL, set_as_current=False).connection().default_channel.queue_purge(QUEUE)
    proc = spawn_worker(worker_env(CELERY_DEFAULT_QUEUE=QUEUE, RUN_HEARTBEAT_S=0.3), "resources")
    yield proc
    stop_worker(proc)


def open_sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass  # closed meanwhile
    return count


def test_runs_close_every_connection_they_open(worker, simulator):
    sim = simulator(decode_ms=1)
    e = endpoint(sim.url)
    # The first run opens what a worker keeps for good (broker, database, the reader's epoll).
    assert finished(create_run([e], **SMALL), 60).status == Run.SUCCEEDED
    before = open_sockets(worker.pid)
    for _ in range(10):
        run = finished(create_run([e], **SMALL), 60)
        assert run.status == Run.SUCCEEDED, run.error
    after = open_sockets(worker.pid)
    # Each run opens 4+ connections to the server (the pool of its widest level, preflight,
    # metrics): a leak shows as 40 or more. A couple may come and go with the broker.
    assert after - before <= 2, (before, after)


def test_a_cancel_stops_a_warmup_that_the_server_never_finishes(worker, simulator):
    stuck = simulator(decode_ms=1, fault="stall", fault_after_tokens=1)
    run = create_run([endpoint(stuck.url)], **{**SMALL, "warmup_requests": 1})
    deadline = time.monotonic() + 30
    while "warming up" not in Run.objects.get(id=run.id).progress_note:
        assert time.monotonic() < deadline, "the run never reached its warmup"
        time.sleep(0.1)
    time.sleep(0.5)  # the warmup request is now stalled mid-stream, its read timeout 300 s away
    assert Run.objects.get(id=run.id).status == Run.RUNNING
    assert services.run_cancel(run=run)
    cancelled_at = time.monotonic()
    # The worker is free again at once: a new run is claimed and measured.
    healthy = endpoint(simulator(decode_ms=1).url, name="healthy")
    nxt = finished(create_run([healthy], concurrency_levels=[1], requests_per_level=2), 30)
    assert nxt.status == Run.SUCCEEDED, nxt.error
    assert time.monotonic() - cancelled_at < 15
    run.refresh_from_db()
    assert run.status == Run.CANCELLED and run.levels.count() == 0
    assert (nxt.started - run.finished).total_seconds() < 5  # claimed right after the cancel


def test_a_server_streaming_one_endless_event_fails_its_requests_with_the_cause(worker, simulator):
    endless = simulator(decode_ms=1, fault="endless", fault_after_tokens=1)
    run = finished(create_run([endpoint(endless.url)], warmup_requests=0, concurrency_levels=[2],
                              requests_per_level=2), 60)
    assert run.status == Run.FAILED
    errors = {r.error for lv in run.levels.all() for r in lv.requests.all()}
    assert len(errors) == 1 and "grew past 1048576 bytes without ending" in errors.pop()


def test_a_finish_reason_longer_than_the_column_does_not_lose_the_level():
    from benchmarks.engine.client import LevelOutcome
    from benchmarks.engine.metrics import RequestResult

    e = endpoint("http://127.0.0.1:9", name="long-finish")
    run = create_run([e], **SMALL)
    reason = "stopped_because_of_a_rather_long_custom_reason_" * 2
    results = [RequestResult(index=0, sent=0.0, prompt_tokens_asked=16, output_tokens_asked=4, first_content=0.01,
                             chunk_times=[0.01, 0.02, 0.03, 0.04], chunk_tokens=[1] * 4, output_tokens=4,
                             client_output_tokens=4, finish_reason=reason)]
    level = services.level_store(run=run, endpoint=e, outcome=LevelOutcome(1, results, 1.7e9, 0.04))
    assert level.requests.get().finish_reason == reason[:30]
