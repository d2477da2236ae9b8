"""A conversation level split over load-generator processes, against the simulator: each shard
holds whole conversations, so every turn carries its own conversation's history (its earlier
user messages and the server's actual replies), and the merged level has the same requests,
records and metrics as the level measured by one process."""
import asyncio

import pytest

from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine.conversations import Conversation
from benchmarks.engine.datasets import Dataset, Entry, Lengths
from benchmarks.engine.metrics import summarize_level, ttft_by_turn
from benchmarks.engine.shards import measure_level
from benchmarks.engine.simulator import prompt_key

TURNS, CONVERSATIONS, STREAMS, OUTPUT = 3, 8, 4, 5
REQUESTS = TURNS * CONVERSATIONS
SIM_CHAT_TEMPLATE = 8  # tokens the simulator adds to every chat prompt (simulator.Simulator.generate)
SIM_REPLY_WORD = "tok"  # the simulator streams " tok" per token
# Prompts that say which entry they are (distinct words), of different lengths, so that a turn's
# messages tell exactly which user messages its history holds.
ENTRIES = tuple(Entry(prompt=" ".join(f"entry{j}word{w}" for w in range(6 + j)), line=j + 1)
                for j in range(REQUESTS))


def measure(url, processes):
    """The conversation level, measured by one process or over `processes` shards; returns its
    outcome and the session's request plan (what request i asks for)."""
    load = Load(concurrency=STREAMS, requests=REQUESTS, conversation=Conversation(turns=TURNS))
    workload = Workload(api="chat", output_tokens=OUTPUT, warmup_requests=1, seed=5,
                        dataset=Dataset(source="jsonl", entries=ENTRIES, output_lengths=Lengths(mean=OUTPUT)))

    async def go():
        session = Session(Target(url, "vllm"), workload, loads=[load])
        try:
            pf = await session.preflight()
            assert pf.ok, pf.cause
            await session.prepare(pf.model)
            if processes == 1:
                await session.open_connections(session.streams_for(load))
            return await measure_level(session, load, processes), session.plan
        finally:
            await session.close()

    return asyncio.run(go())


def expected_turns(plan):
    """Request i = turn i % TURNS of conversation i // TURNS: the messages it must carry (role,
    content) given the plan's user message for each request and the simulator's known reply."""
    reply = "".join(f" {SIM_REPLY_WORD}" for _ in range(OUTPUT))
    out = {}
    for s in range(CONVERSATIONS):
        history = []
        for k in range(TURNS):
            i = s * TURNS + k
            history = history + [("user", plan.at(i).entry.prompt)]
            out[i] = (s, k, list(history))
            history = history + [("assistant", reply)]
    return out


def check_turns(sim, outcome, plan):
    """Every request of the level reached the server once, with its conversation's history."""
    truth = [t for t in sim.truth() if t["received"] >= outcome.t0]
    by_key = {}
    for t in truth:
        by_key.setdefault(t["prompt"], []).append(t)
    assert len(truth) == REQUESTS
    for r in outcome.results:
        s, k, messages = expected_turns(plan)[r.index]
        assert (r.conversation, r.turn) == (s, k)
        found = by_key.get(prompt_key(" ".join(content for _, content in messages)), [])
        assert len(found) == 1, (r.index, len(found))
        # Roles and lengths as the server counted them: user, assistant (the streamed reply), ...
        assert found[0]["messages"] == [[role, len(content.split())] for role, content in messages]
        assert r.prompt_tokens == sum(len(c.split()) for _, c in messages) + SIM_CHAT_TEMPLATE


@pytest.fixture
def sim(simulator):
    return simulator(dialect="vllm", prefill_ms=10, decode_ms=5, slots=64, truth=True)


def test_a_conversation_level_over_two_shards_sends_the_same_turns_with_their_history(sim):
    one, plan_one = measure(sim.url, 1)
    check_turns(sim, one, plan_one)
    two, plan_two = measure(sim.url, 2)
    check_turns(sim, two, plan_two)

    # Both levels asked for the same requests (the plan is seeded) and got the same records.
    assert [plan_two.at(i).entry for i in range(REQUESTS)] == [plan_one.at(i).entry for i in range(REQUESTS)]
    for outcome in (one, two):
        assert [r.index for r in outcome.results] == list(range(REQUESTS))
        assert all(r.ok for r in outcome.results), [r.error for r in outcome.results if not r.ok]
        assert all(r.output_tokens == r.client_output_tokens == OUTPUT for r in outcome.results)
    shape = [(r.index, r.conversation, r.turn, r.prompt_tokens, r.output_tokens, r.finish_reason,
              len(r.chunk_times)) for r in one.results]
    assert [(r.index, r.conversation, r.turn, r.prompt_tokens, r.output_tokens, r.finish_reason,
             len(r.chunk_times)) for r in two.results] == shape
    # Each turn's prompt grows by the previous reply and the new user message.
    for outcome in (one, two):
        by_index = {r.index: r for r in outcome.results}
        for i, r in by_index.items():
            if r.turn:
                before = by_index[i - 1]
                new_message = len(plan_one.at(i).entry.prompt.split())
                assert r.prompt_tokens == before.prompt_tokens + before.output_tokens + new_message

    # The same metrics, computed the same way from the merged records.
    s1, s2 = summarize_level(one.results, one.wall_s), summarize_level(two.results, two.wall_s)
    assert s2.to_dict().keys() == s1.to_dict().keys()
    counts = ("requests", "completed", "failed", "prompt_drift", "prompt_tokens", "output_tokens")
    assert [getattr(s2, c) for c in counts] == [getattr(s1, c) for c in counts]
    assert s1.requests == REQUESTS and s1.prompt_tokens == sum(r.prompt_tokens for r in one.results)
    # Every metric measured in both, over as many values (a distribution's count, or a number).
    measured = [{k: getattr(v, "count", v is not None) for k, v in s.values.items()} for s in (s1, s2)]
    # Except decode speed (1 / TPOT), which a request has only if its tokens came in more than one
    # read: a stalled client reads the rest of a reply at once (TPOT 0), in either run.
    for m, outcome in zip(measured, (one, two)):
        assert m.pop("decode_tok_s") == sum(1 for r in outcome.results if r.tpot)
    assert measured[0] == measured[1] and measured[0]["ttft_ms"] == REQUESTS
    t1, t2 = ttft_by_turn(one.results), ttft_by_turn(two.results)
    assert list(t2) == list(t1) == list(range(TURNS))
    assert [d.count for d in t2.values()] == [d.count for d in t1.values()] == [CONVERSATIONS] * TURNS

    # Two processes, each holding whole conversations: half the conversations, every turn of each.
    figures = ClientFigures.from_dict(two.client)
    assert figures.processes == 2 and sorted(s.requests for s in figures.shards) == [REQUESTS // 2] * 2
