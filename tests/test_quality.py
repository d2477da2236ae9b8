"""The quality step's arithmetic, exactly, against the simulator's known model: perplexity in
llama-perplexity's windows, KL divergence and top-token agreement against a reference, greedy
agreement, and the clear refusals (a text too short, a server without log-probabilities,
tokenizers that differ). The formulas below are the simulator's documented model, computed
here on their own."""
import asyncio
import json
import math
import subprocess
import sys
import zlib

import httpx
import pytest

from benchmarks.engine import quality
from conftest import ROOT

WORDS = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
         "sigma tau upsilon phi chi psi omega").split()
TEXT = quality.EvalText("greek", " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(300)))
VOCAB, RANKED = 32000, 64


def sim_tokens(text):  # the simulator's tokenizer: one token per word
    return [zlib.crc32(w.encode()) % 30000 + 1000 for w in text.split()]


def candidate(prev, j):
    return (prev * 7919 + j * 104729 + 13) % VOCAB


def logprob(prev, token, sharpness):
    rank = next((j for j in range(RANKED) if candidate(prev, j) == token), RANKED)
    z = sum(math.exp(-sharpness * j) for j in range(RANKED)) + (VOCAB - RANKED) * math.exp(-sharpness * RANKED)
    return -sharpness * rank - math.log(z)


def expected_perplexity(tokens, n_ctx, chunks, bos, sharpness):
    nll = []
    for c in range(min(chunks, len(tokens) // n_ctx)):
        w = tokens[c * n_ctx:(c + 1) * n_ctx]
        if bos is not None:
            w[0] = bos
        nll += [-logprob(w[j], w[j + 1], sharpness) for j in range(n_ctx // 2, n_ctx - 1)]
    return math.exp(sum(nll) / len(nll)), len(nll)


def score_reference(sim, backend, text=TEXT, **kw):
    async def go():
        async with httpx.AsyncClient(timeout=30) as client:
            return await quality.measure_reference(client, sim.url, backend, text, **kw)
    return asyncio.run(go())


def run(sim, backend, text=TEXT, reference=None, **kw):
    """`reference`: a simulator (scored here first, with the same windows) or ReferenceScores."""
    if reference is not None and not isinstance(reference, quality.ReferenceScores):
        windows = {k: kw[k] for k in ("n_ctx", "chunks", "top_k") if k in kw}
        reference = score_reference(reference, backend, text, **windows)

    async def go():
        async with httpx.AsyncClient(timeout=30) as client:
            return await quality.measure(client, sim.url, backend, text, reference=reference, **kw)
    return asyncio.run(go())


@pytest.mark.parametrize("dialect, bos", [("llamacpp", 1), ("vllm", None)])
def test_perplexity_is_exactly_the_known_model_s_in_llama_perplexity_windows(simulator, dialect, bos):
    sim = simulator(dialect=dialect, sharpness=0.7)
    result = run(sim, dialect, n_ctx=32, chunks=4)
    tokens = ([bos] if bos is not None else []) + sim_tokens(TEXT.text)
    want, scored = expected_perplexity(tokens, 32, 4, bos, 0.7)
    assert result.tokens_scored == scored == 4 * 15
    assert result.perplexity == pytest.approx(want, rel=1e-9)
    assert result.settings["llama_perplexity"] == "-c 32 --chunks 4"
    assert result.settings["bos"] == bos
    assert result.text["sha256"] == TEXT.sha256 and result.method == {
        "llamacpp": "teacher_forcing", "vllm": "prompt_logprobs"}[dialect]


def test_kl_divergence_over_the_whole_top_list_is_the_exact_kl(simulator):
    # With every ranked token listed the rest of the vocabulary is uniform on both sides, so the
    # tail bucket loses nothing: the figure must equal the full-vocabulary KL computed here.
    ref, test = simulator(dialect="vllm", sharpness=1.0), simulator(dialect="vllm", sharpness=1.3)
    result = run(test, "vllm", reference=ref, n_ctx=32, chunks=2, top_k=RANKED)
    p = [math.exp(logprob(0, candidate(0, j), 1.0)) for j in range(RANKED)]
    q = [math.exp(logprob(0, candidate(0, j), 1.3)) for j in range(RANKED)]
    tail_p, tail_q = math.exp(logprob(0, -1, 1.0)), math.exp(logprob(0, -1, 1.3))
    exact = sum(a * math.log(a / b) for a, b in zip(p, q)) + (VOCAB - RANKED) * tail_p * math.log(tail_p / tail_q)
    r = result.reference
    assert r["kl_mean"] == pytest.approx(exact, rel=1e-6)
    assert r["kl_max"] == pytest.approx(exact, rel=1e-6)
    assert r["same_top_share"] == 1.0  # a sharper model keeps the order
    assert r["reference_top_k_missing_share"] == 0.0


def test_the_top_k_is_as_large_as_the_server_allows(simulator):
    # vLLM refuses more than its --max-logprobs and says its cap; llama-server caps nothing, so
    # the product's ceiling applies.
    capped = score_reference(simulator(dialect="vllm", max_logprobs=20), "vllm", n_ctx=32, chunks=2)
    assert capped.top_k == 20 and capped.result.settings["top_k"] == 20
    assert max(len(p.top) for w in capped.scored for p in w) == 20
    free = score_reference(simulator(dialect="llamacpp"), "llamacpp", n_ctx=32, chunks=2)
    assert free.top_k == quality.TOP_K_CEILING == 100
    assert max(len(p.top) for w in free.scored for p in w) == RANKED  # all the known model ranks


def test_vllm_s_cap_is_read_from_either_wording_of_its_refusal():
    vllm = quality.backends.get("vllm")
    assert vllm.read_top_k_cap("Requested prompt logprobs of 100, which is greater than max allowed: 20") == 20
    assert vllm.read_top_k_cap("Cannot request more than 5 logprobs.") == 5  # before its V1 engine
    assert vllm.read_top_k_cap("prompt_logprobs must be an integer") is None


def test_a_server_that_allows_fewer_than_the_reference_is_compared_over_its_own_top_k(simulator):
    ref = score_reference(simulator(dialect="vllm", sharpness=1.0), "vllm", n_ctx=32, chunks=2)
    assert ref.top_k == 100
    result = run(simulator(dialect="vllm", sharpness=1.3, max_logprobs=20), "vllm", reference=ref, n_ctx=32, chunks=2)
    assert result.settings["top_k"] == 20 and result.reference["top_k"] == 20
    # KL over the reference's 20 most likely tokens and the actual one, plus one bucket for the
    # rest of the vocabulary, computed here from the known model.
    tokens, kls = sim_tokens(TEXT.text), []
    for c in range(2):
        w = tokens[c * 32:(c + 1) * 32]
        for j in range(16, 31):
            listed = {candidate(w[j], r) for r in range(20)} | {w[j + 1]}
            p = {t: math.exp(logprob(w[j], t, 1.0)) for t in listed}
            q = {t: math.exp(logprob(w[j], t, 1.3)) for t in listed}
            p_rest, q_rest = 1 - sum(p.values()), 1 - sum(q.values())
            kls.append(sum(p[t] * math.log(p[t] / q[t]) for t in listed) + p_rest * math.log(p_rest / q_rest))
    assert result.reference["kl_mean"] == pytest.approx(sum(kls) / len(kls), rel=1e-6)
    assert result.reference["reference_top_k_missing_share"] == 0.0


def test_teacher_forcing_keeps_the_next_position_queued_at_each_slot(simulator):
    # Each scoring answer takes 0.2 s: a slot whose next request is sent only after the last
    # answer came back would never hold two. The figures are the known model's all the same.
    sim = simulator(dialect="llamacpp", slots=2, score_ms=200)
    result = run(sim, "llamacpp", n_ctx=32, chunks=2)
    stats = sim.stats()
    assert stats["scoring_per_slot_max"] == quality.PIPELINE == 2
    assert stats["reused_during_fresh"] == 0  # a window's first step, from an empty cache, is answered first
    tokens = [1] + sim_tokens(TEXT.text)
    assert result.perplexity == pytest.approx(expected_perplexity(tokens, 32, 2, 1, 1.0)[0], rel=1e-9)
    assert result.tokens_scored == 2 * 15 and result.requests == 2 + 2 * 15  # the text tokenized twice, each position


@pytest.mark.parametrize("dialect, chunks, fail_at, whole_pass", [
    ("llamacpp", 8, 12, 8 * 15),  # teacher forcing: a request per position, 4 slots
    ("vllm", 48, 3, 48)])  # prompt_logprobs: a request per window, MAX_STREAMS (16) at once
def test_a_failed_answer_stops_every_stream_in_a_loop_that_goes_on(simulator, dialect, chunks, fail_at, whole_pass):
    # A worker scores the next endpoint in the same event loop: once one answer has failed the
    # step, no other stream goes on sending to the server or counting progress.
    sim = simulator(dialect=dialect, slots=4, score_ms=20, fail_scoring_request=fail_at)
    counted = []
    loop = asyncio.new_event_loop()
    try:
        client = httpx.AsyncClient(timeout=30)
        with pytest.raises(quality.QualityError, match="HTTP 500"):
            loop.run_until_complete(quality.measure(client, sim.url, dialect, TEXT, n_ctx=32, chunks=chunks,
                                                    progress=counted.append))
        sent, progressed = sim.stats()["scoring_requests"], len(counted)
        assert fail_at <= sent < whole_pass  # stopped part way
        loop.run_until_complete(asyncio.sleep(0.5))  # the loop goes on (each answer takes 20 ms)
        assert sim.stats()["scoring_requests"] == sent
        assert len(counted) == progressed
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()


def test_a_server_against_itself_has_zero_divergence_and_full_agreement(simulator):
    a, b = simulator(dialect="llamacpp", sharpness=0.9), simulator(dialect="llamacpp", sharpness=0.9)
    r = run(a, "llamacpp", reference=b, n_ctx=32, chunks=2).reference
    assert r["kl_mean"] == pytest.approx(0.0, abs=1e-12) and r["same_top_share"] == 1.0
    assert r["greedy"]["identical_token_share"] == 1.0
    assert r["greedy"]["identical_continuations"] == r["greedy"]["prompts"] == 2


def test_divergence_grows_with_the_distance_between_the_models(simulator):
    ref = simulator(dialect="vllm", sharpness=1.0)
    near, far = simulator(dialect="vllm", sharpness=1.1), simulator(dialect="vllm", sharpness=2.0)
    kl_near = run(near, "vllm", reference=ref, n_ctx=32, chunks=2).reference["kl_mean"]
    kl_far = run(far, "vllm", reference=ref, n_ctx=32, chunks=2).reference["kl_mean"]
    assert 0 < kl_near < kl_far


def test_agreement_counts_identical_tokens_and_the_first_difference():
    same = quality.agreement([[1, 2, 3, 4]], [[1, 2, 3, 4]])
    parted = quality.agreement([[1, 2, 3, 4], [5, 6, 7, 8]], [[1, 2, 9, 9], [5, 6, 7, 8]])
    assert same["identical_token_share"] == 1.0 and same["first_difference"] == [None]
    assert parted["identical_token_share"] == 6 / 8 and parted["first_difference"] == [2, None]


def test_a_text_too_short_for_one_window_is_refused_with_the_reason(simulator):
    sim = simulator(dialect="llamacpp")
    with pytest.raises(quality.QualityError, match="too short for one window of 512"):
        run(sim, "llamacpp", text=quality.EvalText("tiny", "just a few words"), n_ctx=512)


def test_a_server_without_log_probabilities_is_said_so(simulator):
    sim = simulator(dialect="openai")
    with pytest.raises(quality.NotSupported, match="returns no log-probabilities"):
        run(sim, "openai", n_ctx=32)


def test_endpoints_with_different_tokenizers_keep_their_perplexity_but_are_not_compared(simulator):
    a, b = simulator(dialect="vllm", sharpness=0.7), simulator(dialect="vllm", token_offset=5)
    result = run(a, "vllm", reference=b, n_ctx=32, chunks=2)
    assert "tokenize differently" in result.reference_refused and result.reference is None
    want, _ = expected_perplexity(sim_tokens(TEXT.text), 32, 2, None, 0.7)
    assert result.perplexity == pytest.approx(want, rel=1e-9)
    assert result.value("kl_mean") is None and result.value("perplexity") == result.perplexity


def test_the_reference_is_scored_once_and_compared_with_after_its_server_stopped(simulator):
    ref = simulator(dialect="vllm", sharpness=1.0)
    scores = score_reference(ref, "vllm", n_ctx=32, chunks=2)
    requests = ref.stats()["requests"]
    ref.__exit__(None, None, None)  # the reference server is gone
    near, far = simulator(dialect="vllm", sharpness=1.1), simulator(dialect="vllm", sharpness=2.0)
    kl_near = run(near, "vllm", reference=scores, n_ctx=32, chunks=2).reference
    kl_far = run(far, "vllm", reference=scores, n_ctx=32, chunks=2).reference
    assert 0 < kl_near["kl_mean"] < kl_far["kl_mean"]
    assert kl_near["perplexity"] == scores.result.perplexity
    # /v1/models, the top-k probe, one tokenizer probe, the text tokenized twice, two windows,
    # two greedy prompts: once.
    assert requests == 1 + 1 + 1 + 2 + 2 + 2


def test_the_comparison_is_refused_on_another_text_or_other_windows(simulator):
    ref, test = simulator(dialect="vllm"), simulator(dialect="vllm")
    scores = score_reference(ref, "vllm", n_ctx=32, chunks=2)
    other = quality.EvalText("other", TEXT.text + " omega")
    assert "another text" in run(test, "vllm", text=other, reference=scores, n_ctx=32, chunks=2).reference_refused
    assert "other windows (-c 32 --chunks 2)" in run(test, "vllm", reference=scores, n_ctx=64,
                                                     chunks=2).reference_refused


def test_every_quality_figure_of_the_catalogue_is_read_from_a_result_and_nothing_else(simulator):
    from benchmarks.engine.catalogue import METRICS

    keys = {k for k, m in METRICS.items() if m.source == "quality"}
    assert keys == set(quality.QualityResult.READERS)
    ref, test = simulator(dialect="llamacpp", sharpness=1.0), simulator(dialect="llamacpp", sharpness=1.5)
    result = run(test, "llamacpp", reference=ref, n_ctx=32, chunks=2)
    assert all(isinstance(result.value(k), float) for k in keys)
    assert result.value("greedy_identical_share") == result.reference["greedy"]["identical_token_share"]
    assert result.value("quality_tok_s") == result.tokens_per_s
    with pytest.raises(KeyError, match="not a quality figure"):
        result.value("ttft_ms")
    # Through the stored shape: the one writer, the one reader.
    again = quality.QualityResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and result.to_dict()["version"] == quality.RESULT_VERSION


def test_a_version_1_result_still_reads():
    v1 = {"text": {"name": "t", "sha256": "ab", "chars": 10, "tokens": 64}, "settings": {"n_ctx": 32},
          "backend": "vllm", "method": "prompt_logprobs", "perplexity": 5.0, "perplexity_stderr": 0.1,
          "mean_nll": math.log(5.0), "tokens_scored": 30, "seconds": 1.0, "tokens_per_s": 30.0, "requests": 2,
          "reference": {"url": "http://10.0.0.1:8000", "kl_mean": 0.01, "greedy": {"identical_token_share": 0.5}}}
    r = quality.QualityResult.from_dict(v1)
    assert r.value("kl_mean") == 0.01 and r.value("greedy_identical_share") == 0.5
    assert "tokens" not in r.text and "url" not in r.reference and r.reference_refused == ""


def test_the_command_line_prints_one_json_object(simulator, tmp_path):
    sim = simulator(dialect="llamacpp", sharpness=0.5)
    path = tmp_path / "text.txt"
    path.write_text(TEXT.text)
    done = subprocess.run([sys.executable, "-m", "benchmarks.engine.quality", sim.url, "--backend", "llamacpp",
                           "--text", str(path), "--ctx", "32", "--chunks", "3", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    want, scored = expected_perplexity([1] + sim_tokens(TEXT.text), 32, 3, 1, 0.5)
    assert out["perplexity"] == pytest.approx(want, rel=1e-9) and out["tokens_scored"] == scored
    assert out["settings"]["n_ctx"] == 32 and out["settings"]["scored_per_window"] == 15
    assert out["text"]["name"] == "text.txt" and out["text"]["sha256"] == TEXT.sha256
    assert out["text"]["tokens"] == 1 + len(TEXT.text.split())  # the whole text, with the BOS


def test_the_command_line_compares_with_a_reference(simulator, tmp_path):
    ref, test = simulator(dialect="llamacpp", sharpness=1.0), simulator(dialect="llamacpp", sharpness=1.0)
    path = tmp_path / "text.txt"
    path.write_text(TEXT.text)
    done = subprocess.run([sys.executable, "-m", "benchmarks.engine.quality", test.url, "--backend", "llamacpp",
                           "--text", str(path), "--ctx", "32", "--chunks", "2", "--reference", ref.url, "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["reference"]["name"] == ref.url and out["reference"]["kl_mean"] == pytest.approx(0, abs=1e-12)
    assert out["reference"]["greedy"]["identical_token_share"] == 1.0


def test_the_command_line_says_why_it_cannot_measure(simulator):
    sim = simulator(dialect="openai")
    done = subprocess.run([sys.executable, "-m", "benchmarks.engine.quality", sim.url, "--backend", "openai",
                           "--json"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "returns no log-probabilities" in done.stderr and not done.stdout


def test_the_built_in_text_is_named_and_fixed():
    a, b = quality.builtin_text(), quality.builtin_text()
    assert a.sha256 == b.sha256 and "pydoc" in a.name and len(a.text) > 100_000
