"""The quality step as part of a run: the form's fields and their errors, the uploaded text
stored once per content, and the step through a real Celery worker — figures that land on the
run page, its export and its CSV equal to what the simulator's known model gives when computed
here on its own; bad input (too short a text, a server without log-probabilities, another
tokenizer, a server that dies) stored per endpoint with the speed levels kept; cancel, and a
killed worker resumed without measuring a stored endpoint again."""
import csv
import io
import math
import os
import signal

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from benchmarks.engine import quality
from benchmarks.forms import RunForm
from benchmarks.models import EvaluationText, QualityMeasurement, Run
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint, run_form, user
from test_fault_tolerance import FAST_RECOVERY, faults_queue, finished, wait_for  # noqa: F401 (a fixture)
from test_quality import RANKED, TEXT, VOCAB, candidate, expected_perplexity, logprob, sim_tokens

# The product asks a llama-server (which caps nothing) for quality.TOP_K_CEILING tokens per
# position; the known model lists the RANKED ones it ranks.
TOP_K = RANKED
QUALITY = {"quality": "on", "quality_ctx": 32, "quality_chunks": 3}


def upload(text: str | bytes, name="greek.txt"):
    return SimpleUploadedFile(name, text.encode() if isinstance(text, str) else text, content_type="text/plain")


def form(endpoints, files=None, **overrides):
    return RunForm(run_form(endpoints, **{**QUALITY, **overrides}), files or {})


def errors(f, field):
    assert not f.is_valid()
    return " ".join(f.errors.get(field, []))


# ---------------------------------------------------------------------------------- the form
@pytest.mark.django_db
def test_a_member_uploads_a_text_which_is_stored_once_by_its_sha256(client):
    a, b = endpoint(name="a"), endpoint(name="b")
    client.force_login(user())
    body = {**run_form([a, b]), **QUALITY, "quality_reference": a.id, "quality_text_name": "Greek letters"}
    r = client.post(reverse("run-new"), {**body, "quality_text_file": upload(TEXT.text)})
    assert r.status_code == 302, r.content.decode()[:3000]
    run = Run.objects.get()
    stored = run.quality_text
    assert stored.name == "Greek letters" and stored.text == TEXT.text and stored.sha256 == TEXT.sha256
    assert stored.uploaded_by.username == "alice"
    assert run.quality and run.quality_reference == a and (run.quality_ctx, run.quality_chunks) == (32, 3)
    # Levels: 2 endpoints x 2 levels x 3 requests; quality: 2 endpoints x 3 windows x 15 scored positions.
    assert run.progress_total == 2 * 2 * 3 + 2 * 3 * 15
    # The same text again, under another name: the stored one.
    r = client.post(reverse("run-new"), {**body, "quality_text_name": "again", "quality_text_file": upload(TEXT.text)})
    assert r.status_code == 302
    assert EvaluationText.objects.count() == 1 and Run.objects.filter(quality_text=stored).count() == 2


@pytest.mark.django_db
def test_an_uploaded_text_that_is_not_utf8_empty_or_too_large_is_refused_on_its_field(settings):
    e = [endpoint()]
    assert "not UTF-8 text (byte 0xe9 at position 4" in errors(
        form(e, {"quality_text_file": upload("café".encode("latin-1") + b" au lait")}), "quality_text_file")
    assert "is empty" in errors(form(e, {"quality_text_file": upload(" \n\t")}), "quality_text_file")
    assert "NUL character (position 3)" in errors(form(e, {"quality_text_file": upload("ab\x00c")}), "quality_text_file")
    settings.MAX_EVALUATION_TEXT_MIB = 1
    big = upload(b"a " * (512 * 1024) + b"b")
    assert "greek.txt is 1,048,577 bytes; an evaluation text may be at most 1 MiB." in errors(form(e, {"quality_text_file": big}),
                                                                            "quality_text_file")
    stored = EvaluationText.objects.create(name="kept", sha256="0" * 64, text="some words")
    assert "not both" in errors(form(e, {"quality_text_file": upload("x y")}, quality_text=stored.public_id),
                                "quality_text_file")
    assert EvaluationText.objects.count() == 1


@pytest.mark.django_db
def test_the_reference_must_be_one_of_the_chosen_endpoints():
    a, b, c = endpoint(name="a"), endpoint(name="b"), endpoint(name="c")
    assert "c is not one of the chosen endpoints" in errors(form([a, b], quality_reference=c.id), "quality_reference")
    assert "at least one other endpoint" in errors(form([a], quality_reference=a.id), "quality_reference")
    assert "Choose a registered, enabled endpoint" in errors(form([a, b], quality_reference=99999), "quality_reference")
    ok = form([a, b], quality_reference=b.id)
    assert ok.is_valid(), ok.errors
    assert ok.cleaned_data["quality_reference"] == b and ok.cleaned_data["quality_text"] is None


@pytest.mark.django_db
@pytest.mark.parametrize("field, value, message", [
    ("quality_ctx", 8, "greater than or equal to 16"), ("quality_ctx", 9000, "less than or equal to 8192"),
    ("quality_chunks", 0, "greater than or equal to 1"), ("quality_chunks", 1001, "less than or equal to 1000"),
    ("quality_ctx", "x", "Enter a whole number"),
])
def test_window_size_and_count_have_bounds(field, value, message):
    assert message in errors(form([endpoint()], **{field: value}), field)


@pytest.mark.django_db
def test_too_many_positions_per_endpoint_are_refused():
    f = form([endpoint()], quality_ctx=8192, quality_chunks=100)
    assert "score 409,500 positions per endpoint; the limit is 200,000" in errors(f, "quality_chunks")


@pytest.mark.django_db
def test_without_the_checkbox_the_quality_fields_are_ignored():
    f = form([endpoint()], quality="", quality_ctx=3, quality_text_file="")
    assert f.is_valid(), f.errors
    assert f.cleaned_data["quality"] is False and f.cleaned_data["quality_upload"] is None


# ---------------------------------------------------------------------------------- through the worker
def tail_mass(prev: int, listed: set, sharpness: float) -> float:
    """The known model's probability of every token not listed, summed exactly (1 - the listed
    mass rounds to nothing when every ranked token is listed)."""
    ranked = {candidate(prev, r) for r in range(RANKED)}
    unranked_left = VOCAB - len(ranked | listed)
    return (sum(math.exp(logprob(prev, t, sharpness)) for t in ranked - listed)
            + unranked_left * math.exp(logprob(prev, -1, sharpness)))


def known_figures(text: str, n_ctx: int, chunks: int, sharp_ref: float, sharp_test: float) -> dict:
    """The quality figures of a llama.cpp simulator (a BOS, one token per word) of sharpness
    `sharp_test` against one of `sharp_ref`, from the KnownModel's formula and the definitions
    in the catalogue: KL over the reference's top-k (plus the actual token, which both servers
    give exactly) and one bucket for the rest of the vocabulary."""
    tokens = [1] + sim_tokens(text)
    kls = []
    for c in range(min(chunks, len(tokens) // n_ctx)):
        w = tokens[c * n_ctx:(c + 1) * n_ctx]
        w[0] = 1
        for j in range(n_ctx // 2, n_ctx - 1):
            listed = {candidate(w[j], r) for r in range(TOP_K)} | {w[j + 1]}
            p = {t: math.exp(logprob(w[j], t, sharp_ref)) for t in listed}
            q = {t: math.exp(logprob(w[j], t, sharp_test)) for t in listed}
            tail_p, tail_q = (tail_mass(w[j], listed, s) for s in (sharp_ref, sharp_test))
            kls.append(sum(p[t] * math.log(p[t] / q[t]) for t in listed) + tail_p * math.log(tail_p / tail_q))
    ordered = sorted(kls)
    return {"perplexity_ref": expected_perplexity(tokens, n_ctx, chunks, 1, sharp_ref)[0],
            "perplexity": expected_perplexity(tokens, n_ctx, chunks, 1, sharp_test)[0],
            "positions": len(kls), "kl_mean": sum(kls) / len(kls),
            "kl_p99": ordered[math.ceil(0.99 * len(ordered)) - 1]}


def submit(client, endpoints, text=TEXT.text, **overrides):
    client.force_login(user())
    body = {**run_form(endpoints, concurrency_levels="1", requests_per_level=2, warmup_requests=0), **QUALITY,
            **overrides}
    if text is not None:
        body["quality_text_file"] = upload(text)
    r = client.post(reverse("run-new"), body)
    assert r.status_code == 302, r.content.decode()[:3000]
    return Run.objects.latest("created")


@pytest.mark.django_db(transaction=True)
def test_a_run_with_a_quality_step_lands_on_the_run_page_with_the_known_figures(client, simulator,
                                                                                celery_worker_process):
    ref = endpoint(simulator(dialect="llamacpp", sharpness=1.0, decode_ms=1).url, name="gemma-q8", backend="llamacpp",
                   quantization="gguf_q8_0")
    test = endpoint(simulator(dialect="llamacpp", sharpness=1.5, decode_ms=1).url, name="gemma-q4",
                    backend="llamacpp", quantization="gguf_q4_k_m")
    run = finished(submit(client, [ref, test], quality_reference=ref.id))
    assert run.status == Run.SUCCEEDED, run.error
    assert run.progress_done == run.progress_total == 2 * 2 + 2 * 3 * 15
    want = known_figures(TEXT.text, 32, 3, 1.0, 1.5)
    rows = {q.endpoint.name: q for q in QualityMeasurement.objects.filter(run=run)}
    r, own = rows["gemma-q4"].figures, rows["gemma-q8"].figures
    assert own.perplexity == pytest.approx(want["perplexity_ref"], rel=1e-9) and own.reference is None
    assert r.perplexity == pytest.approx(want["perplexity"], rel=1e-9) and r.tokens_scored == 45
    assert r.reference["name"] == "gemma-q8" and r.reference["positions"] == want["positions"] == 45
    # The tail bucket is 1 - the listed mass, ~1e-9 here: summed in another order its rounding
    # moves the KL by ~1e-8 of itself.
    assert r.value("kl_mean") == pytest.approx(want["kl_mean"], rel=1e-6)
    assert r.value("kl_p99") == pytest.approx(want["kl_p99"], rel=1e-6)
    # A sharper model keeps the order of the candidates: the same top token, the same greedy path.
    assert r.value("same_top_share") == 1.0 and r.value("greedy_identical_share") == 1.0
    assert r.reference["reference_top_k_missing_share"] == 0.0
    assert r.text["sha256"] == TEXT.sha256 and r.text["tokens"] == 1 + len(TEXT.text.split())
    assert r.settings["llama_perplexity"] == "-c 32 --chunks 3" and r.method == "teacher_forcing"
    assert r.settings["top_k"] == own.settings["top_k"] == quality.TOP_K_CEILING
    assert r.value("quality_tok_s") > 0

    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="quality-table"' in page and "-c 32 --chunks 3" in page and TEXT.sha256 in page
    assert f"{want['perplexity']:.4g} ± " in page and f"{want['kl_mean']:.4f}" in page  # ~1e44: in powers of ten
    assert "teacher forcing" in page and "requests and scored positions" in page
    assert 'id="metric-kl_mean"' in page  # the definitions of the quality figures, for this run

    export = client.get(reverse("run-export", args=[run.public_id])).json()
    assert export["version"] == 6 and export["quality"]["reference"] == "gemma-q8"
    by_name = {x["endpoint"]: x for x in export["quality"]["results"]}
    assert by_name["gemma-q4"]["result"]["reference"]["kl_mean"] == pytest.approx(want["kl_mean"], rel=1e-6)
    assert by_name["gemma-q4"]["result"]["version"] == quality.RESULT_VERSION

    response = client.get(reverse("run-quality-csv", args=[run.public_id]))
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    q4 = next(row for row in table if row["endpoint"] == "gemma-q4")
    assert float(q4["Perplexity"]) == pytest.approx(want["perplexity"], rel=1e-6)
    assert float(q4["KL divergence (nats)"]) == pytest.approx(want["kl_mean"], rel=1e-5)
    assert float(q4["Same top token (%)"]) == 100.0 and q4["reference"] == "gemma-q8"


@pytest.mark.django_db(transaction=True)
def test_bad_input_is_said_per_endpoint_and_the_speed_levels_are_kept(client, simulator, celery_worker_process):
    ref = endpoint(simulator(dialect="llamacpp", decode_ms=1).url, name="ref", backend="llamacpp")
    dying_sim = simulator(dialect="llamacpp", decode_ms=1, score_ms=400)
    dies = endpoint(dying_sim.url, name="a-dies", backend="llamacpp")
    other = endpoint(simulator(dialect="llamacpp", decode_ms=1, token_offset=5, sharpness=0.8).url,
                     name="other-tokenizer", backend="llamacpp")
    plain = endpoint(simulator(dialect="openai", decode_ms=1).url, name="plain-openai", backend="openai")
    run = submit(client, [ref, dies, other, plain], quality_reference=ref.id)
    wait_for(lambda: "quality: a-dies: " in Run.objects.get(id=run.id).progress_note
             and "positions scored" in Run.objects.get(id=run.id).progress_note, 90, "a-dies to be scoring")
    dying_sim.proc.kill()
    run = finished(run, timeout=90)
    assert run.status == Run.PARTIAL
    assert run.levels.count() == 4 and all(lv.failed == 0 and lv.completed == 2 for lv in run.levels.all())
    rows = {q.endpoint.name: q for q in QualityMeasurement.objects.filter(run=run)}
    assert rows["ref"].figures is not None and rows["ref"].error == ""
    assert rows["a-dies"].error.startswith("the server stopped answering during the quality step (")
    assert "returns no log-probabilities of given tokens" in rows["plain-openai"].error
    mismatched = rows["other-tokenizer"].figures
    want, _ = expected_perplexity([1 + 5] + [t + 5 for t in sim_tokens(TEXT.text)], 32, 3, 1 + 5, 0.8)
    assert mismatched.perplexity == pytest.approx(want, rel=1e-9) and mismatched.reference is None
    assert "tokenize differently" in mismatched.reference_refused
    assert run.error.startswith("quality step incomplete: a-dies: the server stopped answering")
    assert "other-tokenizer: not compared with the reference" in run.error and "plain-openai:" in run.error
    page = client.get(run.get_absolute_url()).content.decode()
    assert "Not measured: the server stopped answering during the quality step" in page
    assert "returns no log-probabilities of given tokens" in page
    assert "not compared with the reference: the endpoint and the reference ref tokenize differently" in page


@pytest.mark.django_db(transaction=True)
def test_a_text_too_short_for_one_window_is_said_and_the_levels_kept(client, simulator, celery_worker_process):
    e = endpoint(simulator(dialect="vllm", decode_ms=1).url, name="vllm")
    run = finished(submit(client, [e], text="only a few words here"))
    assert run.status == Run.PARTIAL and run.levels.get().completed == 2
    [row] = QualityMeasurement.objects.filter(run=run)
    assert row.figures is None
    assert row.error == ("the text has 5 tokens: too short for one window of 32 (use a longer text or a smaller "
                         "window)")
    assert run.progress_done == run.progress_total
    assert "too short for one window of 32" in client.get(run.get_absolute_url()).content.decode()


@pytest.mark.django_db(transaction=True)
def test_cancelling_stops_the_quality_step(client, simulator, celery_worker_process):
    sim = simulator(dialect="vllm", decode_ms=1, score_ms=3000)
    e = endpoint(sim.url, name="slow-scorer")
    run = submit(client, [e], quality_chunks=4)
    wait_for(lambda: "quality: slow-scorer" in Run.objects.get(id=run.id).progress_note
             and sim.stats()["open_connections"] >= 2, 60, "the quality step to be scoring")
    assert client.post(reverse("run-cancel", args=[run.public_id])).status_code == 302
    wait_for(lambda: sim.stats()["open_connections"] == 0, 10, "the scoring requests to be dropped")
    run = finished(run)
    assert run.status == Run.CANCELLED and not QualityMeasurement.objects.filter(run=run).exists()
    assert run.levels.count() == 1  # the speed level stays


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_resumes_the_quality_step_without_measuring_a_stored_endpoint_again(
        client, simulator, faults_queue):
    ref = endpoint(simulator(dialect="llamacpp", decode_ms=1, sharpness=1.0).url, name="ref", backend="llamacpp")
    a = endpoint(simulator(dialect="llamacpp", decode_ms=1, sharpness=1.2).url, name="a", backend="llamacpp")
    b_sim = simulator(dialect="llamacpp", decode_ms=1, sharpness=1.2, score_ms=300)
    b = endpoint(b_sim.url, name="b", backend="llamacpp")
    killed = spawn_worker(worker_env(**FAST_RECOVERY), "quality-killed")
    faults_queue.append(killed)
    run = submit(client, [ref, a, b], quality_reference=ref.id)
    wait_for(lambda: QualityMeasurement.objects.filter(run=run).count() == 2
             and "quality: b: " in Run.objects.get(id=run.id).progress_note
             and "positions scored" in Run.objects.get(id=run.id).progress_note, 90, "ref and a stored, b scoring")
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait(10)
    first_rows = dict(QualityMeasurement.objects.filter(run=run).values_list("endpoint__name", "id"))
    rescuer = spawn_worker(worker_env(**FAST_RECOVERY), "quality-rescuer")
    faults_queue.append(rescuer)
    run = finished(run, timeout=90)
    assert run.status == Run.SUCCEEDED and run.attempts == 2, run.error
    rows = {q.endpoint.name: q for q in QualityMeasurement.objects.filter(run=run)}
    assert {name: rows[name].id for name in first_rows} == first_rows  # not measured again
    # b, measured by the second worker against the reference it scored again, as a was.
    assert rows["b"].figures.reference["kl_mean"] == pytest.approx(rows["a"].figures.reference["kl_mean"], rel=1e-12)
    assert run.progress_done == run.progress_total
    stop_worker(rescuer)


@pytest.mark.django_db(transaction=True)
def test_the_time_limit_stops_the_quality_step_and_keeps_what_was_stored(client, simulator, faults_queue):
    ref = endpoint(simulator(dialect="vllm", decode_ms=1).url, name="ref")
    slow = endpoint(simulator(dialect="vllm", decode_ms=1, score_ms=60000).url, name="slow")
    worker = spawn_worker(worker_env(RUN_TIME_LIMIT_S=8, **FAST_RECOVERY), "quality-time-limit")
    faults_queue.append(worker)
    run = finished(submit(client, [ref, slow], quality_reference=ref.id), timeout=60)
    assert run.status == Run.FAILED
    assert run.error == "time limit of 8 s reached; the finished levels and quality results are kept"
    assert run.levels.count() == 2
    assert list(QualityMeasurement.objects.filter(run=run).values_list("endpoint__name", flat=True)) == ["ref"]
