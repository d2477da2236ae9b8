"""Arrivals, trace replay and conversations from the run form (and the API, with the same
messages) to the real worker, the stored requests, the run page and the exports: bad settings and
bad trace files are field errors naming the line, a replayed trace and a held-back client are
measured on PostgreSQL by the Celery worker, and conversation runs show TTFT by turn."""
import csv
import io
import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.engine.arrivals import ArrivalPattern
from benchmarks.forms import RunForm
from benchmarks.models import Endpoint, RequestRecord, Run
from factories import endpoint, run_form, user
from test_arrivals import BURSTGPT, MOONCAKE
from test_worker import wait_finished


def upload(text: str, name: str = "trace.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, text.encode("utf-8") if isinstance(text, str) else text)


def form_with(files=None, **overrides):
    e = Endpoint.objects.first() or endpoint()
    return RunForm(run_form([e], **overrides), files or {})


RATE = dict(load_mode="rate", request_rates="2", concurrency_levels="")


@pytest.mark.django_db
@pytest.mark.parametrize("overrides, files, field, message", [
    (dict(RATE, arrivals="trace"), {}, "trace_file", "Upload the trace file"),
    (dict(RATE, arrivals="trace"), {"trace_file": upload('{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                                                         '{"timestamp": 9, "input_length": 5}')},
     "trace_file", 'trace.jsonl: line 2 has no "output_length".'),
    (dict(RATE, arrivals="trace"), {"trace_file": upload(b"\xff\xfe", "t.csv")}, "trace_file", "t.csv is not UTF-8"),
    (dict(RATE, arrivals="trace"), {"trace_file": upload("Timestamp,Request tokens\n1,2\n", "b.csv")},
     "trace_file", "b.csv: line 1: the header lacks Response tokens"),
    (dict(RATE, arrivals="trace", trace_speedups="0"), {"trace_file": upload(MOONCAKE)}, "trace_speedups",
     "A speed-up is from 0.01 to 1000"),
    (dict(RATE, arrivals="trace", dataset_source="sharegpt"), {"trace_file": upload(MOONCAKE)}, "dataset_source",
     "A trace replay sends the lengths of its trace"),
    (dict(RATE, arrivals="ramp"), {}, "ramp_to", "Give the rate the ramp ends at"),
    (dict(RATE, arrivals="ramp", ramp_to="-1"), {}, "ramp_to", "A rate from"),
    (dict(RATE, arrivals="gamma", burstiness="0"), {}, "burstiness", "greater than or equal to 0.01"),
    (dict(load_mode="conversation"), {}, "api", "choose /v1/chat/completions"),
    (dict(load_mode="conversation", api="chat", conversation_turns="1"), {}, "conversation_turns",
     "greater than or equal to 2"),
    (dict(load_mode="conversation", api="chat", concurrency_levels=""), {}, "concurrency_levels",
     "Give at least one concurrency level"),
])
def test_bad_arrival_and_conversation_settings_are_field_errors(overrides, files, field, message):
    form = form_with(files, **overrides)
    assert not form.is_valid()
    assert message in " ".join(form.errors.get(field, [])), form.errors


@pytest.mark.django_db
def test_a_trace_over_the_size_limit_is_refused_before_it_is_read(settings):
    settings.MAX_DATASET_MIB = 0
    form = form_with({"trace_file": upload(MOONCAKE)}, **RATE, arrivals="trace")
    assert not form.is_valid() and "a trace may be at most 0 MiB" in form.errors["trace_file"][0]


@pytest.mark.django_db
def test_settings_of_arrivals_not_chosen_do_not_matter():
    # A ramp's end rate left bad while Poisson is chosen, a conversation field in rate mode.
    form = form_with(**RATE, ramp_to="-3", conversation_turns="99", burstiness="0")
    assert form.is_valid(), form.errors
    assert form.cleaned_data["arrival_pattern"] == ArrivalPattern("poisson")


@pytest.mark.django_db
def test_a_trace_replay_run_has_a_level_per_speed_up_at_the_traces_mean_rate(client):
    client.force_login(user())
    data = run_form([endpoint()], **RATE, arrivals="trace", trace_speedups="1, 4", requests_per_level=3,
                    trace_file=upload(MOONCAKE))
    r = client.post(reverse("run-new"), data)
    assert r.status_code == 302, r.content.decode()[:3000]
    run = Run.objects.get()
    assert run.arrivals == "trace" and run.request_rates == []
    loads = run.loads()
    # The first 3 requests span 0.4 s: 2 gaps, 5 req/s at ×1 and 20 at ×4.
    assert [(lv.speedup, lv.rate, lv.requests) for lv in loads] == [(1.0, pytest.approx(5.0), 3),
                                                                   (4.0, pytest.approx(20.0), 3)]
    assert run.progress_total == 2 * 3
    assert "Mooncake JSONL trace.jsonl replayed ×1, ×4" in client.get(run.get_absolute_url()).content.decode()


@pytest.mark.django_db
def test_the_api_takes_the_same_settings_and_answers_the_forms_messages(client):
    from benchmarks.services import api_token_create
    token, key = api_token_create(owner=user(), name="t")
    e = endpoint()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    body = {"endpoints": [e.name], "load_mode": "rate", "arrivals": "trace", "trace_speedups": [2],
            "requests_per_level": 4, "trace_file": {"name": "b.csv", "content": BURSTGPT}}
    r = client.post("/api/v1/runs/", json.dumps(body), content_type="application/json", **headers)
    assert r.status_code == 201, r.content
    run = Run.objects.get(public_id=r.json()["public_id"])
    assert run.arrival_settings.trace.format == "burstgpt" and run.arrival_settings.speedups == (2.0,)
    bad = dict(body, trace_file={"name": "b.csv", "content": "Timestamp,Request tokens\n1,2\n"})
    r = client.post("/api/v1/runs/", json.dumps(bad), content_type="application/json", **headers)
    form = form_with({"trace_file": upload("Timestamp,Request tokens\n1,2\n", "b.csv")}, **RATE, arrivals="trace")
    assert r.status_code == 400 and not form.is_valid()
    assert r.json()["errors"]["trace_file"] == form.errors["trace_file"]
    r = client.post("/api/v1/runs/", json.dumps(dict(body, trace_file="just text")), content_type="application/json",
                    **headers)
    assert r.status_code == 400 and "content" in r.json()["errors"]["trace_file"][0]
    gamma = {"endpoints": [e.name], "load_mode": "rate", "request_rates": [1, 2], "arrivals": "gamma",
             "burstiness": 0.5, "requests_per_level": 4}
    r = client.post("/api/v1/runs/", json.dumps(gamma), content_type="application/json", **headers)
    assert r.status_code == 201, r.content
    assert Run.objects.get(public_id=r.json()["public_id"]).arrival_settings == ArrivalPattern("gamma", burstiness=0.5)
    talk = {"endpoints": [e.name], "load_mode": "conversation", "concurrency_levels": [2], "requests_per_level": 6,
            "conversation_turns": 3}
    r = client.post("/api/v1/runs/", json.dumps(talk), content_type="application/json", **headers)
    assert r.status_code == 400 and "choose /v1/chat/completions" in r.json()["errors"]["api"][0]


@pytest.mark.django_db(transaction=True)
def test_a_replayed_trace_runs_on_the_worker_with_its_lengths_and_scheduled_times(client, simulator,
                                                                                 celery_worker_process):
    sim = simulator(dialect="vllm", decode_ms=1, prefill_ms=1, truth=True)
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([endpoint(sim.url)], **RATE, arrivals="trace", trace_speedups="2",
                                                 requests_per_level=4, trace_file=upload(MOONCAKE), seed=3))
    assert r.status_code == 302, r.content.decode()[:2000]
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, (run.error, run.preflight)
    records = list(RequestRecord.objects.filter(level__run=run).order_by("index"))
    # The trace's times halved, and its lengths (the server's own counts).
    assert [rec.scheduled for rec in records] == pytest.approx([0, 0.1, 0.2, 0.6])
    assert [(rec.prompt_tokens, rec.output_tokens) for rec in records] == [(40, 5), (60, 6), (30, 4), (20, 3)]
    level = run.levels.get()
    assert level.rate == pytest.approx(3 / 0.6)
    text = client.get(reverse("run-requests-csv", args=[run.public_id])).content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [float(row["scheduled (s from the level start)"]) for row in rows] == pytest.approx([0, 0.1, 0.2, 0.6])
    for row in rows:
        lag = float(row["sent (s from the level start)"]) - float(row["scheduled (s from the level start)"])
        assert float(row["TTFT from schedule (ms)"]) == pytest.approx(float(row["TTFT (ms)"]) + 1000 * lag, abs=0.01)


@pytest.mark.django_db(transaction=True)
def test_a_client_held_back_by_its_cap_is_flagged_on_the_run_page(client, simulator, celery_worker_process):
    sim = simulator(dialect="vllm", decode_ms=10, prefill_ms=5)
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([endpoint(sim.url)], **dict(RATE, request_rates="20"),
                                                 arrivals="constant", max_concurrency=1, requests_per_level=10,
                                                 output_tokens=10))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, run.error
    assert "coordinated_omission" in [f["code"] for f in run.flags]
    page = client.get(run.get_absolute_url()).content.decode()
    ttft = float(re.search(r'data-metric="ttft_ms" data-stat="p99">([^<]*)<', page).group(1))
    scheduled = float(re.search(r'data-metric="ttft_from_schedule_ms" data-stat="p99">([^<]*)<', page).group(1))
    # 10 requests due 50 ms apart, each ~105 ms long one at a time: the last waits ~0.5 s.
    assert scheduled > ttft + 300


@pytest.mark.django_db(transaction=True)
def test_a_conversation_run_stores_turns_and_shows_ttft_by_turn(client, simulator, celery_worker_process):
    sim = simulator(dialect="llamacpp", decode_ms=1, prefill_ms=2, prefill_ms_per_token=0.5)
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([endpoint(sim.url, backend="llamacpp")], load_mode="conversation",
                                                 api="chat", concurrency_levels="2", conversation_turns=3,
                                                 think_time_s="0.05", think_time="exponential", requests_per_level=6,
                                                 prompt_tokens=40, output_tokens=30, seed=5))
    assert r.status_code == 302, r.content.decode()[:2000]
    run = wait_finished(Run.objects.get())
    assert run.status == Run.SUCCEEDED, (run.error, run.preflight)
    records = list(RequestRecord.objects.filter(level__run=run).order_by("conversation", "turn"))
    assert [(rec.conversation, rec.turn) for rec in records] == [(s, k) for s in range(2) for k in range(3)]
    for before, after in zip(records, records[1:]):
        if after.conversation == before.conversation:  # the history grows by the reply and a new message
            assert after.prompt_tokens > before.prompt_tokens + before.output_tokens
    page = client.get(run.get_absolute_url()).content.decode()
    table = page[page.index('id="ttft-by-turn"'):]
    table = table[:table.index("</table>")]
    assert re.findall(r'data-turn="(\d)"', table) == ["1", "2", "3"]
    # Prefill costs 0.5 ms per prompt token: a later turn's longer prompt takes longer to its first token.
    p50 = [float(v) for v in re.findall(r'data-stat="p50">([^<]*)<', table)]
    assert p50[0] < p50[1] < p50[2]
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("run-requests-csv", args=[run.public_id])).content.decode())))
    # one convention in every export: turns from 1, as the page numbers them
    assert sorted((int(row["conversation"]), int(row["turn (1 = the first)"])) for row in rows) == [
        (s, k) for s in range(2) for k in range(1, 4)]
    export = client.get(reverse("run-export", args=[run.public_id])).json()
    assert export["workload"]["conversation"] == {"turns": 3, "think_s": 0.05, "think": "exponential"}
    assert sorted((q["conversation"], q["turn"]) for q in export["levels"][0]["requests"]) == [
        (s, k) for s in range(2) for k in range(1, 4)]
