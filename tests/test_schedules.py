"""Scheduled runs: a schedule fired by a real beat process (django-celery-beat's database
scheduler) queues a run that a real worker measures; a schedule pauses itself after repeated
failures and says why; the run page's "Repeat this run on a schedule" and the schedule pages,
owners and staff only."""
import datetime as dt
import time

import pytest
from django.urls import reverse
from django_celery_beat.models import PeriodicTask

from benchmarks import schedules, services
from benchmarks.models import Host, Run, Schedule
from conftest import spawn_beat, spawn_worker, stop_worker, worker_env
from factories import endpoint, measured_run, user, queue_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def runs_to_no_worker(settings, transactional_db):
    """Runs these tests queue go to their host's queue, which none of the suite's workers
    consumes, and are dropped after: the suite's shared worker must not measure one while the
    tables are emptied for the next test."""
    from v100site.celery import app

    settings.HOST_QUEUES = True
    yield
    queues = set(Host.objects.values_list("queue_name", flat=True)) | {settings.CELERY_TASK_DEFAULT_QUEUE}
    with app.connection_for_write() as conn:
        for queue in queues:
            conn.default_channel.queue_purge(queue)


def _template_run(e, owner):
    """A run as the form queues one (the source a schedule repeats), never sent to a worker."""
    run = measured_run([e], levels=(1,), requests=3, tokens=8, prompt_tokens=32, owner=owner)
    return run


def test_a_schedule_fired_by_beat_queues_a_run_that_a_worker_measures(simulator):
    """The firings' runs go to a host queue of their own (HOST_QUEUES in the spawned worker), so
    that the suite's shared worker never measures one while a later test empties the tables."""
    from v100site.celery import app

    sim = simulator(decode_ms=1.0)
    owner = user()
    e = endpoint(url=sim.url, name="sim-scheduled", host="scheduled-host")
    e.host.queue_name = "scheduled-host-test"
    e.host.save()
    source = _template_run(e, owner)
    schedule = schedules.schedule_create(owner=owner, name="every 2 s", template=schedules.template_from_run(source),
                                         every=Schedule.INTERVAL, interval_s=2)
    task = PeriodicTask.objects.get(id=schedule.periodic_task_id)
    assert task.task == "benchmarks.schedule_fire" and task.interval.every == 2 and task.enabled
    env = worker_env(HOST_QUEUES="1")
    worker = spawn_worker(env, name="scheduled", queue="scheduled-host-test,housekeeping")
    beat = spawn_beat(env)
    try:
        deadline = time.monotonic() + 90
        run = None
        while time.monotonic() < deadline:
            run = Run.objects.filter(schedule=schedule, status__in=Run.FINISHED).first()
            if run is not None:
                break
            time.sleep(0.3)
        assert run is not None, beat.log_path.read_text()[-3000:] + worker.log_path.read_text()[-3000:]
    finally:
        stop_worker(beat)
        schedules.schedule_pause(schedule=schedule, reason="test over")
        # Let the worker finish what it started, then drop the firings it did not take.
        deadline = time.monotonic() + 60
        while Run.objects.filter(schedule=schedule, status=Run.RUNNING).exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        stop_worker(worker)
        with app.connection_for_write() as conn:
            for queue in ("scheduled-host-test", "housekeeping"):
                conn.default_channel.queue_purge(queue)
    assert run.status == Run.SUCCEEDED, run.error
    assert run.owner == owner and list(run.endpoints.all()) == [e]
    assert (run.prompt_tokens, run.output_tokens, run.concurrency_levels, run.requests_per_level) == (32, 8, [1], 3)
    assert run.levels.get().completed == 3
    schedule.refresh_from_db()
    assert schedule.last_fired is not None and schedule.consecutive_failures == 0
    assert not PeriodicTask.objects.get(id=schedule.periodic_task_id).enabled


def test_a_schedule_pauses_itself_after_consecutive_failed_runs_and_says_why(settings, client):
    """Each firing's run is measured here by the worker's own service (the endpoint's port is
    closed: every run fails). After SCHEDULE_PAUSE_AFTER_FAILURES of them the schedule is paused,
    its beat entry disabled, and its page says why; a measured run in between clears the count."""
    from v100site.celery import app

    settings.SCHEDULE_PAUSE_AFTER_FAILURES = 2
    owner = user()
    dead = endpoint(url="http://127.0.0.1:9", name="dead")
    schedule = schedules.schedule_create(owner=owner, name="nightly", template=schedules.template_from_run(
        _template_run(dead, owner)), every=Schedule.DAILY, at=dt.time(3, 0))
    try:
        first = schedules.schedule_fire(schedule_id=schedule.id)
        services.run_execute(run_id=first.id)
        first.refresh_from_db()
        assert first.status == Run.FAILED and first.schedule == schedule
        schedule.refresh_from_db()
        assert schedule.active and schedule.consecutive_failures == 1
        second = schedules.schedule_fire(schedule_id=schedule.id)
        services.run_execute(run_id=second.id)
    finally:
        app.control.purge()  # the firings' runs were measured here, not by a worker
    schedule.refresh_from_db()
    assert not schedule.active and schedule.consecutive_failures == 2
    assert "Paused after 2 consecutive failures" in schedule.paused_reason and second.public_id in schedule.paused_reason
    assert not PeriodicTask.objects.get(id=schedule.periodic_task_id).enabled
    assert schedules.schedule_fire(schedule_id=schedule.id) is None  # a paused schedule queues nothing
    client.force_login(owner)
    page = client.get(schedule.get_absolute_url()).content.decode()
    assert "Paused after 2 consecutive failures" in page, (schedule.paused_reason, page[-3000:])
    assert "connect" in schedule.paused_reason.lower()
    # Resumed: the count starts again and beat fires it again.
    client.post(reverse("schedule-action", args=[schedule.public_id, "resume"]))
    schedule.refresh_from_db()
    assert schedule.active and schedule.consecutive_failures == 0
    assert PeriodicTask.objects.get(id=schedule.periodic_task_id).enabled


def test_a_firing_that_cannot_queue_a_run_counts_as_a_failure(settings):
    settings.SCHEDULE_PAUSE_AFTER_FAILURES = 1
    owner = user()
    e = endpoint(name="retired")
    schedule = schedules.schedule_create(owner=owner, name="weekly", template=schedules.template_from_run(
        _template_run(e, owner)), every=Schedule.WEEKLY, at=dt.time(2, 30), weekday=1)
    e.enabled = False
    e.save()
    assert schedules.schedule_fire(schedule_id=schedule.id) is None
    schedule.refresh_from_db()
    assert not schedule.active
    assert "could not queue a run: 1 of the schedule's endpoints or recipes were removed or disabled" in schedule.paused_reason
    assert schedule.when == "every Monday at 02:30 UTC"
    crontab = PeriodicTask.objects.get(id=schedule.periodic_task_id).crontab
    assert (crontab.minute, crontab.hour, crontab.day_of_week) == ("30", "2", "1")


def test_the_run_page_saves_a_schedule_and_only_its_owner_or_staff_act_on_it(client):
    alice, bob, staff = user("alice"), user("bob"), user("root", staff=True)
    run = _template_run(endpoint(), alice)
    client.force_login(alice)
    page = client.get(run.get_absolute_url()).content.decode()
    assert "Repeat this run on a schedule" in page
    bad = client.post(reverse("run-schedule", args=[run.public_id]), {"every": "cron", "cron": "61 * * * *"}, follow=True)
    assert "Not scheduled: Cron expression: Not a cron expression" in bad.content.decode()
    assert not Schedule.objects.exists()
    hook = client.post(reverse("run-schedule", args=[run.public_id]),
                       {"every": "daily", "at": "04:00", "webhook_url": "http://169.254.169.254/latest"}, follow=True)
    assert "link-local" in hook.content.decode() and not Schedule.objects.exists()
    r = client.post(reverse("run-schedule", args=[run.public_id]),
                    {"every": "cron", "cron": "30 2 * * 1-5", "webhook_url": "https://hooks.example.org/hook",
                     "webhook_secret": "s3cret-value"})
    schedule = Schedule.objects.get()
    assert r.status_code == 302 and r["Location"] == schedule.get_absolute_url()
    assert schedule.owner == alice and schedule.name == str(run) and schedule.when == "cron 30 2 * * 1-5 (UTC)"
    detail = client.get(schedule.get_absolute_url()).content.decode()
    assert "s3cret-value" not in detail and "stored (write-only: never shown)" in detail
    client.force_login(bob)
    assert client.get(schedule.get_absolute_url()).status_code == 404
    assert client.post(reverse("schedule-action", args=[schedule.public_id, "pause"])).status_code == 404
    assert schedule.name not in client.get(reverse("schedule-list")).content.decode()
    client.force_login(staff)
    assert schedule.name in client.get(reverse("schedule-list")).content.decode()
    client.post(reverse("schedule-action", args=[schedule.public_id, "pause"]))
    schedule.refresh_from_db()
    assert not schedule.active and schedule.paused_reason == "Paused by root."
    client.force_login(alice)
    client.post(reverse("schedule-action", args=[schedule.public_id, "delete"]))
    assert not Schedule.objects.exists() and not PeriodicTask.objects.exists()
    assert Run.objects.filter(id=run.id).exists()


def test_the_run_form_queues_the_run_and_its_schedule_or_neither(client):
    """The form's "Repeat this run on a schedule": judged only when ticked; a bad schedule keeps
    the run from being queued, with the schedule's message beside its field."""
    from v100site.celery import app

    from factories import run_form

    e = endpoint()
    client.force_login(user())
    data = run_form([e], title="nightly sim")
    try:
        r = client.post(reverse("run-new"), {**data, "schedule-repeat": "on", "schedule-every": "daily"})
        assert r.status_code == 200 and "Give the time of day" in r.content.decode()
        assert not Run.objects.exists() and not Schedule.objects.exists()
        r = client.post(reverse("run-new"), {**data, "schedule-every": "daily"})  # not ticked: the run alone
        assert r.status_code == 302 and Run.objects.count() == 1 and not Schedule.objects.exists()
        r = client.post(reverse("run-new"), {**data, "schedule-repeat": "on", "schedule-every": "daily",
                                             "schedule-at": "05:30", "schedule-alert_emails": "ops@example.org"})
        assert r.status_code == 302
    finally:
        app.control.purge()  # no worker measures these runs
    schedule = Schedule.objects.get()
    run = Run.objects.get(title="nightly sim", id__gt=Run.objects.order_by("id").first().id)
    assert schedule.name == "nightly sim" and schedule.when == "daily at 05:30 UTC"
    assert schedule.alert_emails == "ops@example.org"
    kwargs = schedules.template_kwargs(schedule.template)
    # the template's plan is the run's own: its levels, tokens and requests per level among it
    assert kwargs["endpoints"] == [e] and kwargs["plan"] == run.plan and kwargs["title"] == "nightly sim"
    assert kwargs["plan"].load.arguments()["concurrency_levels"] == run.concurrency_levels


def test_a_schedule_repeats_a_rate_run_s_arrival_pattern_and_a_conversation_run_as_submitted():
    """The template keeps what run_create was given for each load mode: queued again from it,
    the run has the same load settings (and so the same workload fingerprint)."""
    from v100site.celery import app

    from benchmarks import history
    from benchmarks.engine.arrivals import ArrivalPattern
    from benchmarks.engine.conversations import Conversation

    owner = user()
    e = endpoint()
    common = dict(owner=owner, endpoints=[e], prompt_tokens=32, output_tokens=8, temperature=0.0,
                  requests_per_level=4, warmup_requests=0)
    try:
        rate = queue_run(load_mode="rate", request_rates=[1.0, 2.0], arrivals="gamma",
                                   arrival_pattern=ArrivalPattern(kind="gamma", burstiness=0.5), **common)
        talk = queue_run(load_mode="conversation", concurrency_levels=[2],
                                   conversation=Conversation(turns=3, think_s=0.5), **common)
        for source in (rate, talk):
            again = services.run_create(owner=owner, **schedules.template_kwargs(schedules.template_from_run(source)))
            for field in ("load_mode", "request_rates", "concurrency_levels", "arrivals", "arrival_pattern",
                          "conversation", "prompt_tokens", "output_tokens", "temperature", "requests_per_level"):
                assert getattr(again, field) == getattr(source, field), field
            assert history.workload_fingerprint(again, e) == history.workload_fingerprint(source, e)
        assert rate.arrival_pattern["burstiness"] == 0.5 and talk.conversation["turns"] == 3
    finally:
        app.control.purge()  # no worker measures these runs


def test_only_the_run_s_owner_or_staff_can_repeat_it_on_a_schedule(client):
    """A schedule reuses the run's uploaded prompts and evaluation text: not another member's."""
    alice, bob, staff = user("alice"), user("bob"), user("root", staff=True)
    run = _template_run(endpoint(), alice)
    client.force_login(bob)
    r = client.post(reverse("run-schedule", args=[run.public_id]), {"every": "daily", "at": "04:00"})
    assert r.status_code == 403 and not Schedule.objects.exists()
    client.force_login(staff)
    r = client.post(reverse("run-schedule", args=[run.public_id]), {"every": "daily", "at": "04:00"})
    assert r.status_code == 302 and Schedule.objects.get().owner == staff


@pytest.mark.parametrize("setting, value, changes, why", [
    ("MAX_REQUESTS_PER_RUN", 2, {}, "This run would send 3 requests; the limit is 2."),
    ("MAX_REQUESTS_PER_LEVEL", 2, {}, "3 requests per level; the limit is 2."),
    ("RUN_TIME_LIMIT_S", 30, {"duration_s": 60}, "a duration of 60 s; the run time limit is 30 s."),
    ("RUN_TIME_LIMIT_S", 30, {"load_mode": "rate", "request_rates": [0.01], "concurrency_levels": []},
     "above the run time limit of 30 s"),
    ("MAX_RUNS_IN_FLIGHT", 0, {}, "runs queued or running"),
])
def test_a_firing_gets_the_limits_of_a_submitted_run_and_says_why_it_queued_none(settings, setting, value, changes,
                                                                                  why):
    """Settings lowered since the schedule was saved: the firing queues no run, and counts as a failure."""
    settings.SCHEDULE_PAUSE_AFTER_FAILURES = 1
    owner = user()
    template = schedules.template_from_run(_template_run(endpoint(), owner))
    schedule = schedules.schedule_create(owner=owner, name="daily", template={**template, **changes},
                                         every=Schedule.DAILY, at=dt.time(3, 0))
    setattr(settings, setting, value)
    assert schedules.schedule_fire(schedule_id=schedule.id) is None
    assert Run.objects.count() == 1  # only the template's
    schedule.refresh_from_db()
    assert not schedule.active and schedule.consecutive_failures == 1
    assert "could not queue a run: " in schedule.paused_reason and why in schedule.paused_reason, schedule.paused_reason
