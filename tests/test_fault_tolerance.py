"""Surviving killed workers, a restarted broker, runs past their time limit and misbehaving
servers — with real PostgreSQL, Redis and worker processes."""
import contextlib
import os
import signal
import socket
import subprocess
import time
from urllib.parse import urlsplit

import pytest
from celery import Celery

from benchmarks.models import LevelResult, RequestRecord, Run
from conftest import free_port, spawn_worker, stop_worker, worker_env
from factories import endpoint, user, queue_run

pytestmark = pytest.mark.django_db(transaction=True)
FAST_RECOVERY = {"RUN_HEARTBEAT_S": 0.5, "RUN_HEARTBEAT_STALE_S": 3, "RUN_SWEEP_EVERY_S": 1,
                 "RUN_REQUEUE_AFTER_S": 2, "CELERY_DEFAULT_QUEUE": "faults"}


@pytest.fixture
def faults_queue(settings, django_db_blocker):
    settings.CELERY_TASK_DEFAULT_QUEUE = "faults"
    Celery(broker=settings.CELERY_BROKER_URL, set_as_current=False).connection().default_channel.queue_purge("faults")
    workers = []
    yield workers
    for w in workers:
        if w.poll() is None:
            stop_worker(w)


def create_run(endpoints, **kw):
    fields = dict(owner=user(), endpoints=endpoints, prompt_tokens=32, output_tokens=20, temperature=0.7,
                  concurrency_levels=[1, 2], requests_per_level=8, warmup_requests=0)
    fields.update(kw)
    return queue_run(**fields)


@contextlib.contextmanager
def hold_port(port):
    """Bind 127.0.0.1:`port` without listening: nobody else can listen there meanwhile."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the dead server's TIME_WAITs
        s.bind(("127.0.0.1", port))
        yield


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def finished(run, timeout=60):
    wait_for(lambda: Run.objects.get(id=run.id).is_finished, timeout, f"run {run.id} to finish")
    return Run.objects.get(id=run.id)


def test_a_killed_worker_s_run_resumes_on_another_worker_without_redoing_levels(faults_queue, simulator):
    sim = simulator(decode_ms=25)
    a = spawn_worker(worker_env(**FAST_RECOVERY), "killed")
    faults_queue.append(a)
    run = create_run([endpoint(sim.url)])
    wait_for(lambda: LevelResult.objects.filter(run=run).count() == 1, 60, "the first level")
    first_level = LevelResult.objects.get(run=run)
    first_requests = set(RequestRecord.objects.filter(level=first_level).values_list("id", flat=True))
    os.kill(a.pid, signal.SIGKILL)
    a.wait(10)
    assert Run.objects.get(id=run.id).status == Run.RUNNING  # as a crash leaves it
    b = spawn_worker(worker_env(**FAST_RECOVERY), "rescuer")
    faults_queue.append(b)
    run = finished(run)
    assert run.status == Run.SUCCEEDED and run.attempts == 2, (run.error, run.preflight)
    assert list(run.levels.order_by("level_index").values_list("level_index", flat=True)) == [0, 1]
    assert LevelResult.objects.get(run=run, level_index=0).id == first_level.id  # not measured again
    assert set(RequestRecord.objects.filter(level=first_level).values_list("id", flat=True)) == first_requests
    assert RequestRecord.objects.filter(level__run=run).count() == run.progress_total == 16


@pytest.fixture
def private_redis():
    port = free_port()

    def start():
        proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no"], stdout=subprocess.DEVNULL)
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG",
                 10, "redis")
        return proc

    server = {"proc": start()}

    def restart():
        server["proc"].terminate()  # no persistence: the queued messages are gone
        server["proc"].wait(10)
        server["proc"] = start()

    yield f"redis://127.0.0.1:{port}/0", restart
    server["proc"].terminate()
    server["proc"].wait(10)


def test_runs_queued_when_redis_restarts_still_run(faults_queue, simulator, private_redis, settings):
    url, restart = private_redis
    sim = simulator(decode_ms=5)
    e = endpoint(sim.url)
    broker = Celery(broker=url, set_as_current=False)
    connection = broker.connection(url)  # not the CELERY_BROKER_URL of this environment
    runs = []
    for _ in range(3):
        run = Run.objects.create(prompt_tokens=16, output_tokens=5, temperature=0.7, concurrency_levels=[1],
                                 requests_per_level=3, warmup_requests=0, queue_name="faults", progress_total=3)
        run.endpoints.set([e])
        broker.send_task("benchmarks.run_execute", args=(run.id,), queue="faults", connection=connection)
        runs.append(run)
    assert int(subprocess.run(["redis-cli", "-u", url, "llen", "faults"], capture_output=True, text=True).stdout) == 3
    connection.release()
    restart()
    assert int(subprocess.run(["redis-cli", "-u", url, "llen", "faults"], capture_output=True, text=True).stdout) == 0
    w = spawn_worker(worker_env(CELERY_BROKER_URL=url, **FAST_RECOVERY), "after-restart")
    faults_queue.append(w)
    for run in runs:
        assert finished(run).status == Run.SUCCEEDED


def test_a_run_past_its_time_limit_fails_with_the_reason_and_keeps_finished_levels(faults_queue, simulator):
    # One request at a time, 1 s each (the server's own schedule, however busy the machine):
    # both levels take ~4 s, so the first ends 2 s before the 6 s limit and the second 2 s after.
    sim = simulator(decode_ms=50, slots=1)
    w = spawn_worker(worker_env(RUN_TIME_LIMIT_S=6, **FAST_RECOVERY), "time-limit")
    faults_queue.append(w)
    run = create_run([endpoint(sim.url)], concurrency_levels=[1, 2], requests_per_level=4)
    run = finished(run)
    assert run.status == Run.FAILED and "time limit of 6 s reached" in run.error
    assert run.levels.count() == 1 and run.levels.get().completed == 4


def test_a_run_whose_workers_keep_dying_is_given_up_after_its_attempts(faults_queue, simulator):
    sim = simulator(decode_ms=25)
    limits = dict(RUN_MAX_ATTEMPTS=1, **FAST_RECOVERY)
    a = spawn_worker(worker_env(**limits), "dies")
    faults_queue.append(a)
    run = create_run([endpoint(sim.url)])
    wait_for(lambda: LevelResult.objects.filter(run=run).count() == 1, 60, "the first level")
    os.kill(a.pid, signal.SIGKILL)
    a.wait(10)
    b = spawn_worker(worker_env(**limits), "gives-up")
    faults_queue.append(b)
    run = finished(run)
    assert run.status == Run.FAILED and run.attempts == 2
    assert run.error == "gave up after 1 attempts: the workers measuring it stopped (killed or crashed)"
    assert list(run.levels.values_list("level_index", "completed")) == [(0, 8)]  # what was measured is kept


@pytest.fixture
def level_store_refused(django_db_blocker):
    """The database refuses to store a run's second level (as a full disk or a broken
    constraint would): a fault the worker does not expect."""
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("CREATE FUNCTION test_refuse_level() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'could not extend file: No space left on device (simulated)'; END $$")
        cur.execute("CREATE TRIGGER test_refuse_level BEFORE INSERT ON benchmarks_levelresult FOR EACH ROW "
                    "WHEN (NEW.level_index = 1) EXECUTE FUNCTION test_refuse_level()")
    yield
    with django_db_blocker.unblock(), connection.cursor() as cur:
        cur.execute("DROP TRIGGER test_refuse_level ON benchmarks_levelresult")
        cur.execute("DROP FUNCTION test_refuse_level()")


def test_an_unexpected_fault_ends_the_run_failed_with_its_cause_and_keeps_what_was_measured(
        level_store_refused, simulator, celery_worker_process):
    sim = simulator(decode_ms=2)
    run = finished(create_run([endpoint(sim.url)]))
    assert run.status == Run.FAILED
    assert run.error.startswith("ProgrammingError: could not extend file: No space left on device (simulated)")
    assert list(run.levels.values_list("level_index", "completed")) == [(0, 8)]
    assert RequestRecord.objects.filter(level__run=run).count() == 8
    # The worker is fine: the next run is measured.
    assert finished(create_run([endpoint(sim.url, name="next")], concurrency_levels=[1])).status == Run.SUCCEEDED


def test_a_server_gone_mid_level_fails_the_remaining_requests_with_a_connect_cause(simulator, celery_worker_process):
    sim = simulator(decode_ms=20)  # 20 tokens: ~0.4 s a request
    e = endpoint(sim.url)
    run = create_run([e], concurrency_levels=[1], requests_per_level=20)
    wait_for(lambda: Run.objects.get(id=run.id).progress_done >= 3, 60, "a few measured requests")
    sim.proc.kill()
    sim.proc.wait(10)
    # Hold the freed port, bound but not listening, so that no server another test starts on a
    # free port (tests run in parallel) takes it: connections to it are refused, as to a dead server.
    with hold_port(urlsplit(sim.url).port):
        run = finished(run)
    assert run.status == Run.PARTIAL and run.error == ""
    [level] = run.levels.all()
    records = list(level.requests.all())
    assert len(records) == 20 and 2 <= level.completed < 20 and level.failed == 20 - level.completed
    failed = [r for r in records if r.error]
    # The one in flight lost its connection; every later one found nobody listening.
    errors = [(r.index, r.error_kind, r.error) for r in failed]
    assert {r.error_kind for r in failed[1:]} == {"connect"}, errors
    assert all(r.error.startswith("cannot connect: ConnectError") for r in failed[1:]), errors
    assert failed[0].error_kind in ("protocol", "connect")


FAULTS = ["http500", "reset", "stall", "malformed", "error_chunk", "truncate", "slow_drip"]


def test_injected_server_faults_are_recorded_per_request_and_the_run_completes(faults_queue, simulator):
    w = spawn_worker(worker_env(REQUEST_READ_TIMEOUT_S=1, **FAST_RECOVERY), "faults")
    faults_queue.append(w)
    endpoints = [endpoint(simulator(decode_ms=2, fault=f, fault_every=2).url, name=f) for f in FAULTS]
    run = create_run(endpoints, concurrency_levels=[2], requests_per_level=6, output_tokens=8)
    run = finished(run, timeout=120)
    assert run.status == Run.PARTIAL
    kinds = {}
    for f in FAULTS:
        records = RequestRecord.objects.filter(level__run=run, level__endpoint__name=f)
        assert records.count() == 6
        kinds[f] = {r.error_kind for r in records if r.error}
    assert kinds == {"http500": {"http"}, "reset": {"protocol"}, "stall": {"timeout"}, "malformed": {"protocol"},
                     "error_chunk": {"server"}, "truncate": {"protocol"}, "slow_drip": set()}
    print(f"faults injected: {RequestRecord.objects.filter(level__run=run).exclude(error='').count()} "
          f"requests across {len(FAULTS)} fault kinds; run completed as {run.status}")
