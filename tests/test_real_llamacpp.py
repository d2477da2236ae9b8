"""Against a real llama.cpp server: llama-server built from the llama-cpp-python sdist, serving
the Gemma 3 270M Q4_K_M GGUF on the CPU."""
import asyncio

import pytest
from django.urls import reverse

from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.metrics import summarize_level
from benchmarks.models import Run
from factories import endpoint, run_form, user
from test_worker import wait_finished

pytestmark = pytest.mark.real_server


def test_decode_speed_agrees_with_the_servers_own_timings(llama_server):
    async def go():
        wl = Workload(prompt_tokens=128, output_tokens=48, warmup_requests=1)
        s = Session(Target(llama_server, "llamacpp"), wl, loads=[Load(concurrency=1, requests=4)])
        pf = await s.preflight()
        assert pf.ok, pf.cause
        await s.prepare(pf.model)
        assert s.prompts.pool, "prompts are built with the server's own /tokenize"
        outcome = await s.measure(Load(concurrency=1, requests=4))
        await s.close()
        return outcome
    outcome = asyncio.run(go())
    for r in outcome.results:
        assert r.ok, r.error
        assert r.prompt_tokens == 128, "exactly the asked prompt length, BOS included"
        assert r.output_tokens == 48 and r.client_output_tokens == 48, "ignore_eos forces the length"
        assert r.timings and r.timings["cache_n"] == 0, "cache_prompt=false: the prompt is processed"
        ours = 1 / r.tpot
        theirs = r.timings["predicted_per_second"]
        assert ours == pytest.approx(theirs, rel=0.05), (ours, theirs)
        # The same interval on both sides: llama-server's predicted_ms runs from the first to
        # the last generated token, i.e. n - 1 decode steps, as our TPOT does. Within 2 %.
        same_span = (r.timings["predicted_n"] - 1) / r.timings["predicted_ms"] * 1000
        assert ours == pytest.approx(same_span, rel=0.02), (ours, same_span)
    s = summarize_level(outcome.results, outcome.wall_s)
    assert s.stat("decode_tok_s", "p50") == pytest.approx(s.stat("server_decode_tok_s", "p50"), rel=0.05)


@pytest.mark.django_db(transaction=True)
def test_a_run_against_real_llamacpp_through_the_worker(client, llama_server, celery_worker_process):
    e = endpoint(llama_server, name="llama-cpu", backend="llamacpp", quantization="gguf_q4_k_m")
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], prompt_tokens=96, output_tokens=24,
                                                 concurrency_levels="1,2", requests_per_level=3))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get(), timeout=240)
    assert run.status == Run.SUCCEEDED, run.error
    for level in run.levels.all():
        assert level.completed == 3
        assert level.summary["decode_tok_s"]["p50"] > 0
        assert level.summary["server_decode_tok_s"]["count"] == 3
    findings = run.preflight[str(e.id)]
    assert all(f["ok"] for f in findings)


def test_a_request_past_a_slots_share_of_the_context_is_refused_before_any_is_sent(llama_server):
    """The fixture serves `-c 4096 --parallel 4`: llama-server gives each slot 4096 / 4 = 1024
    tokens. A workload of 1000 + 100 tokens cannot fit one (every request would fail, as the
    H200 lab's `--parallel 16` with `-c 8192` did); 900 + 100 can. Read from the real /slots."""
    from benchmarks.engine.server_metrics import server_identity

    async def check(prompt, output):
        s = Session(Target(llama_server, "llamacpp"), Workload(prompt_tokens=prompt, output_tokens=output),
                    loads=[Load(concurrency=1, requests=1)])
        try:
            identity = await server_identity(s.client, llama_server, "llamacpp")
            return s.context_check(identity)
        finally:
            await s.close()
    refused = asyncio.run(check(1000, 100))
    assert not refused.ok and "1100 tokens" in refused.detail and "the 1024 tokens" in refused.detail
    assert "--parallel" in refused.detail
    assert asyncio.run(check(900, 100)).ok


def test_server_busy_is_raised_only_while_someone_else_is_sending(llama_server):
    """The run's own warm-up and connection-opening requests leave no server_busy; a second
    client streaming a long answer while a level starts does."""
    import httpx

    from benchmarks.engine.observe import measure_observed
    from benchmarks.engine.validity import level_flags

    async def level(other_client: bool) -> tuple[list[str], object]:
        wl = Workload(prompt_tokens=32, output_tokens=8, warmup_requests=2)
        s = Session(Target(llama_server, "llamacpp"), wl, loads=[Load(concurrency=2, requests=4)])
        pf = await s.preflight()
        assert pf.ok, pf.cause
        await s.prepare(pf.model)
        stranger = None
        if other_client:
            async def send():
                async with httpx.AsyncClient(timeout=120) as c:
                    await c.post(llama_server + "/completion", json={"prompt": "Once upon a time", "n_predict": 400,
                                                                     "ignore_eos": True, "cache_prompt": False})
            stranger = asyncio.create_task(send())
            for _ in range(100):  # until the server counts it
                async with httpx.AsyncClient() as c:
                    if "llamacpp:requests_processing 1" in (await c.get(llama_server + "/metrics")).text:
                        break
                await asyncio.sleep(0.05)
        outcome, _, server = await measure_observed(s, Load(concurrency=2, requests=4))
        if stranger is not None:
            stranger.cancel()
        await s.close()
        summary = summarize_level(outcome.results, outcome.wall_s)
        flags = level_flags(summary, client=outcome.client, server_idle_at_start=server.summary.idle_at_start)
        return [f.code for f in flags], server.summary

    alone, summary = asyncio.run(level(other_client=False))
    assert "server_busy" not in alone and summary.idle_at_start is True, (alone, summary)
    shared, summary = asyncio.run(level(other_client=True))
    assert "server_busy" in shared and summary.idle_at_start is False, (shared, summary)
