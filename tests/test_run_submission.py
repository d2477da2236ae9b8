"""Submitting a run from the form: validation, login, and what the service creates."""
import os
from datetime import timedelta

import pytest
from django.utils import timezone
from django.urls import reverse

from benchmarks import services
from benchmarks.forms import RunForm
from benchmarks.models import Run
from factories import endpoint, run_form, user, queue_run
from v100site.celery import app

pytestmark = pytest.mark.django_db


def errors_for(**overrides):
    e = endpoint()
    form = RunForm(run_form([e], **overrides))
    assert not form.is_valid()
    return form.errors


def test_it_requires_login(client):
    r = client.get(reverse("run-new"))
    assert r.status_code == 302 and reverse("login") in r.url
    r = client.post(reverse("run-new"), {})
    assert r.status_code == 302 and not Run.objects.exists()


@pytest.mark.parametrize("field, value, message", [
    ("prompt_tokens", 0, "greater than or equal to 1"),
    ("prompt_tokens", -5, "greater than or equal to 1"),
    ("output_tokens", 0, "greater than or equal to 1"),
    ("prompt_tokens", "many", "Enter a whole number"),
    ("temperature", 3, "less than or equal to 2"),
    ("concurrency_levels", "1,100000", "above the limit of 512"),
    ("concurrency_levels", "0", "at least 1"),
    ("concurrency_levels", "1,x", "'x' is not a whole number"),
    ("concurrency_levels", " , ", "at least one concurrency level"),
    ("concurrency_levels", "1,-4", "-4 is negative: a concurrency level is at least 1 request."),
    ("concurrency_levels", "1,4,4", "4 is listed twice: give each concurrency level once."),
    ("requests_per_level", 0, "greater than or equal to 1"),
    ("requests_per_level", 10**6, "at most 10000"),
    ("warmup_requests", -1, "greater than or equal to 0"),
    ("duration_s", 0, "greater than or equal to 1"),
    ("slo_ttft_ms", -3, "greater than or equal to 0.001"),
])
def test_it_rejects_bad_values_with_a_field_message(field, value, message):
    errs = errors_for(**{field: value})
    assert message in " ".join(errs[field])


@pytest.mark.parametrize("rates, message", [
    ("", "at least one request rate"),
    ("0", "above 0"),
    ("1,abc", "'abc' is not a number"),
    ("5000", "at most 1000 per second"),
    ("-2", "-2 is negative: a request rate is above 0 per second."),
    ("1,0.5,1.0", "1.0 per second is listed twice"),
])
def test_rate_mode_rejects_bad_rates(rates, message):
    errs = errors_for(load_mode="rate", request_rates=rates)
    assert message in " ".join(errs["request_rates"])


def test_rate_mode_rejects_a_cap_above_the_limit():
    errs = errors_for(load_mode="rate", request_rates="1", max_concurrency=100000)
    assert "above the limit" in " ".join(errs["max_concurrency"])


def test_an_unknown_load_mode_is_refused():
    errs = errors_for(load_mode="warp")
    assert "Select a valid choice" in " ".join(errs["load_mode"])


def test_it_rejects_an_unknown_endpoint():
    errs = errors_for(endpoints=[987654])
    assert "not a registered, enabled endpoint" in " ".join(errs["endpoints"])


def test_it_rejects_a_disabled_endpoint():
    e = endpoint(name="off")
    e.enabled = False
    e.save()
    form = RunForm(run_form([e]))
    assert not form.is_valid() and "endpoints" in form.errors


def test_it_rejects_prompt_plus_output_above_the_limit(settings):
    settings.MAX_TOKENS = 1000
    errs = errors_for(prompt_tokens=900, output_tokens=200)
    assert "exceed the limit of 1000" in " ".join(errs["__all__"])


def test_bad_input_redisplays_the_form_with_messages_and_keeps_values(client):
    e = endpoint()
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], prompt_tokens=0, title="keep me"))
    assert r.status_code == 200
    assert b"greater than or equal to 1" in r.content and b"keep me" in r.content
    assert not Run.objects.exists()


def take_from_broker(queue: str) -> list[tuple[str, list]]:
    """Every message on `queue` of the real test broker, taken off it, as (task name, args)."""
    taken = []
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            args, _kwargs, _embed = message.decode()  # Celery's message protocol 2
            taken.append((message.headers["task"], args))
    return taken


@pytest.fixture
def private_queue(settings):
    """The shared queue renamed to one that no worker consumes, on the real test broker: what a
    submission sends stays there to be read. Returns a function that takes every message off it
    as (task name, args)."""
    queue = settings.CELERY_TASK_DEFAULT_QUEUE = f"test-submission-{os.getpid()}"

    def take() -> list[tuple[str, list]]:
        return take_from_broker(queue)

    take()
    yield take
    take()


@pytest.mark.django_db(transaction=True)
def test_submitting_creates_a_queued_run_and_enqueues_it_after_commit(client, private_queue):
    e = endpoint()
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], concurrency_levels="8, 1"))
    run = Run.objects.get()
    assert r.status_code == 302 and r.url == run.get_absolute_url()
    assert run.status == Run.QUEUED and run.concurrency_levels == [1, 8]
    assert run.progress_total == 2 * 3
    assert run.enqueued_at is not None
    assert private_queue() == [("benchmarks.run_execute", [run.id])]  # on the broker, once


@pytest.mark.django_db(transaction=True)
def test_a_run_reaches_the_broker_only_when_its_transaction_commits(private_queue):
    from django.db import transaction

    fields = dict(owner=user(), endpoints=[endpoint()], prompt_tokens=8, output_tokens=8, temperature=0.7,
                  concurrency_levels=[1], requests_per_level=1, warmup_requests=0)
    with transaction.atomic():
        run = queue_run(**fields)
        # Not yet: a worker must never be handed a run it cannot see.
        assert private_queue() == []
    assert private_queue() == [("benchmarks.run_execute", [run.id])]
    with pytest.raises(RuntimeError, match="rolled back"):
        with transaction.atomic():
            queue_run(**fields)
            raise RuntimeError("rolled back")
    assert private_queue() == [] and Run.objects.count() == 1  # nothing sent for a run that never was


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_re_sends_lost_runs_to_the_queue_each_was_first_sent_to(private_queue, settings):
    settings.HOST_QUEUES = True
    e = endpoint(host=f"sweep-box-{os.getpid()}")
    on_host = queue_run(owner=user(), endpoints=[e], prompt_tokens=8, output_tokens=8, temperature=0.7,
                                  concurrency_levels=[1], requests_per_level=1, warmup_requests=0)
    host_queue = e.host.queue_name
    assert on_host.queue_name == host_queue and take_from_broker(host_queue) == [("benchmarks.run_execute", [on_host.id])]
    # Lost by the broker: one queued run never sent, one running run whose worker stopped
    # beating (and a row from before queue names, which goes to the shared queue).
    Run.objects.filter(id=on_host.id).update(enqueued_at=None)
    stale = Run.objects.create(prompt_tokens=1, output_tokens=1, temperature=0, concurrency_levels=[1],
                               requests_per_level=1, warmup_requests=0, status=Run.RUNNING, queue_name="",
                               heartbeat=timezone.now() - timedelta(seconds=settings.RUN_HEARTBEAT_STALE_S + 60))
    assert services.runs_requeue() == 2
    assert take_from_broker(host_queue) == [("benchmarks.run_execute", [on_host.id])]
    assert private_queue() == [("benchmarks.run_execute", [stale.id])]
    assert not Run.objects.filter(id__in=[on_host.id, stale.id], enqueued_at=None).exists()
    assert services.runs_requeue() == 1  # the stale run again; the queued one was just sent
    assert private_queue() == [("benchmarks.run_execute", [stale.id])] and take_from_broker(host_queue) == []


def test_it_routes_to_the_host_queue_when_host_queues_are_on(settings):
    from benchmarks.services import queue_for
    settings.HOST_QUEUES = True
    a, b = endpoint(name="a", host="gpu-box"), endpoint(name="b", host="gpu-box")
    c = endpoint(name="c", host="other")
    assert queue_for([a, b]) == "host-gpu-box"
    assert queue_for([a, c]) == "runs"


def test_permalinks_are_long_and_random():
    ids = set()
    for _ in range(20):
        run = Run.objects.create(prompt_tokens=1, output_tokens=1, temperature=0, concurrency_levels=[1],
                                 requests_per_level=1, warmup_requests=0)
        ids.add(run.public_id)
    assert len(ids) == 20 and all(len(i) >= 22 for i in ids)


def test_a_run_is_claimed_only_once():
    run = Run.objects.create(prompt_tokens=1, output_tokens=1, temperature=0, concurrency_levels=[1],
                             requests_per_level=1, warmup_requests=0)
    assert run.claim()
    assert not Run.objects.get(id=run.id).claim()


def test_an_unknown_permalink_is_404(client):
    assert client.get(reverse("run-detail", args=["nope"])).status_code == 404
    assert client.get(reverse("run-progress", args=["nope"])).status_code == 404


def test_the_form_can_be_prefilled_from_a_link(client):
    e = endpoint()
    client.force_login(user())
    r = client.get(reverse("run-new") + f"?endpoints={e.id}&concurrency_levels=1,4,16&prompt_tokens=2048")
    page = r.content.decode()
    assert 'value="1,4,16"' in page and 'value="2048"' in page
    assert f'value="{e.id}" ' in page and "checked" in page
