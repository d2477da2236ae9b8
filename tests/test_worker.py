"""From the submission form through Redis and a real Celery worker process to stored results."""
import time

import httpx
import pytest
from django.urls import reverse

from benchmarks.engine.metrics import percentile
from benchmarks.engine.server_metrics import scrape
from benchmarks.models import LevelResult, RequestRecord, Run
from conftest import free_port
from factories import endpoint, run_form, user
from test_fault_tolerance import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def wait_finished(run, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_finished:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run still {run.status} after {timeout} s ({run.progress_note})")


def submit(client, endpoints, **overrides):
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form(endpoints, **overrides))
    assert r.status_code == 302, r.content.decode()[:2000]
    return Run.objects.get()


def truth_by_level(sim, run):
    """What the simulator logged of each level's measured requests (one endpoint), in the order
    they arrived: the warmups and the pool's one-token opening requests left out."""
    logged = sorted((t for t in sim.truth() if len(t["chunks"]) == run.output_tokens),
                    key=lambda t: t["arrived"] or t["received"])[run.warmup_requests:]
    out = []
    for lv in run.levels.order_by("level_index"):
        n = lv.completed + lv.failed
        out.append((lv, logged[:n]))
        logged = logged[n:]
    return out


def median(values):
    return percentile(list(values), 50)


def test_a_submitted_run_is_measured_and_stored_level_by_level(client, simulator, celery_worker_process):
    sim = simulator(dialect="llamacpp", prefill_ms=20, decode_ms=4, truth=True)
    e = endpoint(sim.url, backend="llamacpp", quantization="gguf_q4_k_m")
    run = wait_finished(submit(client, [e], concurrency_levels="1,2", requests_per_level=4, output_tokens=10))
    assert run.status == Run.SUCCEEDED, run.error
    assert run.progress_done == run.progress_total == 8
    levels = list(LevelResult.objects.filter(run=run).order_by("concurrency"))
    assert [lv.concurrency for lv in levels] == [1, 2]
    for lv, logged in truth_by_level(sim, run):
        assert lv.completed == 4 and lv.failed == 0 and len(logged) == 4
        # Against what the simulator logged it did (a loaded machine makes it late): never
        # shorter than its 20 ms prefill; longer by at most what a busy worker adds between the
        # first and last bytes of a request it sends; shorter than the log only by the time the
        # simulator, descheduled after writing its first chunk, took to stamp it (the client reads
        # the kernel's receive time: a CI run saw 1.06 ms).
        ttft, true_ttft = lv.summary["ttft_ms"]["p50"], median(
            (t["chunks"][0] - (t["arrived"] or t["received"])) * 1000 for t in logged)
        assert 20 - 1 <= ttft and true_ttft - 5 <= ttft <= true_ttft + 8
        true_tpot = median((t["chunks"][-1] - t["chunks"][0]) / 9 * 1000 for t in logged)
        assert lv.summary["tpot_ms"]["p50"] == pytest.approx(true_tpot, abs=0.5)
    rec = RequestRecord.objects.filter(level__run=run).first()
    assert rec.prompt_tokens == 64 and rec.output_tokens == 10 and len(rec.chunk_times) == 10
    assert rec.timings["predicted_n"] == 10  # llama.cpp's own timings are kept verbatim
    page = client.get(run.get_absolute_url()).content.decode()
    assert "succeeded" in page and 'data-concurrency="2"' in page


def test_a_dead_endpoint_ends_the_run_failed_with_the_cause(client, celery_worker_process):
    e = endpoint(f"http://127.0.0.1:{free_port()}", name="dead")
    run = wait_finished(submit(client, [e]))
    assert run.status == Run.FAILED
    errors = set(RequestRecord.objects.filter(level__run=run).values_list("error", flat=True))
    assert len(errors) == 1 and "preflight failed: health: unreachable" in errors.pop()
    assert RequestRecord.objects.filter(level__run=run).count() == run.progress_total
    page = client.get(run.get_absolute_url()).content.decode()
    assert "unreachable" in page and "Failed requests (6)" in page


def test_a_workload_past_the_servers_context_is_refused_in_preflight_without_a_request(
        client, simulator, celery_worker_process):
    """A vLLM-like server with max_model_len 600 cannot hold 512 + 100 tokens: the run says so in
    the preflight (the server's figure, the request's size, the flag to raise) and sends no
    request, instead of 6 failures of the same 400; a server with room measures as usual."""
    small = simulator(dialect="vllm", context=600, truth=True)
    roomy = simulator(dialect="vllm", context=4096)
    e, ok = endpoint(small.url, name="small-context"), endpoint(roomy.url, name="roomy")
    run = wait_finished(submit(client, [e, ok], prompt_tokens=512, output_tokens=100, warmup_requests=1))
    assert run.status == Run.PARTIAL
    context = next(f for f in run.preflight[str(e.id)] if f["check"] == "context")
    assert not context["ok"] and "612 tokens" in context["detail"] and "600 tokens" in context["detail"]
    assert "--max-model-len" in context["detail"]
    assert small.truth() == []  # not even a warmup was sent
    errors = set(RequestRecord.objects.filter(level__endpoint=e).values_list("error", flat=True))
    assert len(errors) == 1 and "preflight failed: context:" in errors.pop()
    assert set(LevelResult.objects.filter(run=run, endpoint=ok).values_list("failed", flat=True)) == {0}
    assert next(f for f in run.preflight[str(ok.id)] if f["check"] == "context")["ok"]


def test_one_good_and_one_faulty_endpoint_make_a_partial_run(client, simulator, celery_worker_process):
    good = endpoint(simulator(decode_ms=2).url, name="good")
    bad = endpoint(simulator(decode_ms=2, fault="http500", fault_every=1).url, name="bad")
    run = wait_finished(submit(client, [good, bad], warmup_requests=0))
    assert run.status == Run.PARTIAL
    assert set(LevelResult.objects.filter(run=run, endpoint=good).values_list("failed", flat=True)) == {0}
    bad_errors = RequestRecord.objects.filter(level__endpoint=bad).values_list("error", flat=True)
    assert all("HTTP 500" in err for err in bad_errors)


def test_a_request_rate_run_with_slos_stores_goodput_and_schedule(client, simulator, celery_worker_process):
    sim = simulator(decode_ms=2, prefill_ms=10)
    e = endpoint(sim.url)
    run = wait_finished(submit(client, [e], load_mode="rate", request_rates="20,40", arrivals="constant",
                               max_concurrency="", requests_per_level=10, output_tokens=5, slo_ttft_ms=1000))
    assert run.status == Run.SUCCEEDED, run.error
    levels = list(run.levels.order_by("level_index"))
    assert [lv.rate for lv in levels] == [20, 40]
    for lv in levels:
        assert lv.summary["good_requests"] == 10 and lv.summary["slo"] == {"ttft_ms": 1000}
        assert lv.client["loop_lag_ms_p99"] is not None
    scheduled = list(RequestRecord.objects.filter(level=levels[0]).order_by("index").values_list("scheduled", flat=True))
    assert scheduled == pytest.approx([i / 20 for i in range(10)])
    page = client.get(run.get_absolute_url()).content.decode()
    assert "20 req/s" in page and "Goodput" in page


def test_a_level_with_stopped_short_requests_is_flagged(client, simulator, celery_worker_process):
    sim = simulator(decode_ms=1, eos_after=3, honor_ignore_eos=False)
    e = endpoint(sim.url)
    run = wait_finished(submit(client, [e], output_tokens=8, concurrency_levels="1"))
    assert run.status == Run.SUCCEEDED
    assert "stopped_short" in {f["code"] for f in run.flags}
    assert "stopped before the asked output length" in client.get(run.get_absolute_url()).content.decode()


def test_the_progress_json_follows_the_run(client, simulator, celery_worker_process):
    sim = simulator(decode_ms=50)
    e = endpoint(sim.url)
    run = submit(client, [e], concurrency_levels="1", requests_per_level=6, output_tokens=10, warmup_requests=0)
    seen = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        p = client.get(reverse("run-progress", args=[run.public_id])).json()
        seen.add((p["status"], p["done"]))
        if p["finished"]:
            break
        time.sleep(0.1)
    assert p["status"] == "succeeded" and p["percent"] == 100
    assert any(status == "running" and 0 < done < 6 for status, done in seen), seen


def streaming_on(sim) -> int:
    """Requests the simulator is generating for right now (its own /metrics)."""
    return int(scrape(httpx.get(sim.url + "/metrics", timeout=10).text).get("running", 0))


def test_cancelling_stops_a_running_run_and_its_request_in_flight(client, simulator, celery_worker_process):
    # Each request streams for 30 s (300 tokens, 100 ms apart): a worker that stopped only
    # between requests would keep this one going for half a minute after the cancel.
    sim = simulator(decode_ms=100)
    e = endpoint(sim.url)
    run = submit(client, [e], concurrency_levels="1", requests_per_level=50, output_tokens=300, warmup_requests=0)
    wait_for(lambda: Run.objects.get(id=run.id).status == Run.RUNNING and streaming_on(sim) == 1, 60,
             "the run to be measuring its first request")
    assert client.post(reverse("run-cancel", args=[run.public_id])).status_code == 302
    cancelled = time.monotonic()
    wait_for(lambda: streaming_on(sim) == 0 and sim.stats()["open_connections"] == 0, 20,
             "the worker to drop its request and close its connections")
    stopped = time.monotonic()
    # The worker looks every second; a loaded machine may take a little longer, never a request's 30 s.
    assert stopped - cancelled < 5
    print(f"cancel to the last stream and connection closed at the server: {stopped - cancelled:.2f} s")
    sent = sim.stats()["requests"]
    time.sleep(1.5)
    assert sim.stats()["requests"] == sent  # nothing sent after it stopped
    run.refresh_from_db()
    assert run.status == Run.CANCELLED and run.finished is not None
    assert not run.levels.exists()  # the level cut short is not stored as if it were measured
    # The worker is free again: a new run completes.
    e2 = endpoint(simulator(decode_ms=1).url, name="next")
    Run.objects.all().delete()
    run2 = wait_finished(submit(client, [e2], concurrency_levels="1", requests_per_level=1), timeout=30)
    assert run2.status == Run.SUCCEEDED


def test_a_chat_run_against_a_reasoning_model_shows_the_first_answer_token(client, simulator, celery_worker_process):
    sim = simulator(decode_ms=5, prefill_ms=10, reasoning_tokens=6, truth=True)
    e = endpoint(sim.url)
    run = wait_finished(submit(client, [e], api="chat", concurrency_levels="1", requests_per_level=3, output_tokens=10))
    assert run.status == Run.SUCCEEDED, run.error
    [(level, logged)] = truth_by_level(sim, run)
    # Reasoning counts toward TTFT (the first chunk); the answer starts at the seventh, six
    # tokens (~30 ms) later: as far apart as the simulator wrote them.
    records = list(level.requests.order_by("index"))
    assert all(r.first_content == r.chunk_times[0] and r.first_answer == r.chunk_times[6] for r in records)
    gap = median((r.first_answer - r.first_content) * 1000 for r in records)
    # The simulator brackets each chunk's hand-over to the kernel (chunks_from[k] .. chunks[k]): each
    # request's gap lies between the brackets' near and far ends, so the median between their medians
    # (a busy machine may stall the simulator inside a bracket; 1 ms for the loopback's own delay)
    near = median((t["chunks_from"][6] - t["chunks"][0]) * 1000 for t in logged)
    far = median((t["chunks"][6] - t["chunks_from"][0]) * 1000 for t in logged)
    assert near - 1 <= gap <= far + 1, (gap, near, far)
    assert level.summary["answer_ms"]["p50"] == pytest.approx(median(r.first_answer * 1000 for r in records))
    page = client.get(run.get_absolute_url()).content.decode()
    assert "First answer token" in page
