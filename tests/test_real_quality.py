"""Quality through real servers: the product's perplexity through llama-server equals
llama-perplexity's on the same GGUF, text and windows; requantized variants of the same model
come out in the order physics expects (Q2_K clearly worse, a Q8_0 copy of the Q4_K_M file close
to zero KL against it)."""
import asyncio
import json
import math
import os
import re
import subprocess

import httpx
import pytest

from benchmarks.engine import quality
from conftest import LLM_SERVERS, ROOT, free_port, wait_http

pytestmark = pytest.mark.real_server
N_CTX, CHUNKS = 128, 3


def script(*args) -> str:
    return subprocess.run(["bash", str(LLM_SERVERS), *args], check=True, capture_output=True, text=True,
                          timeout=1800).stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("quality") / "pydoc-topics.txt"
    path.write_text(quality.builtin_text(max_chars=40_000).text)
    return path


@pytest.fixture(scope="module")
def gemma_servers():
    """llama-server for the Q4_K_M file and for its Q8_0 and Q2_K requantized copies."""
    models = {"Q4_K_M": script("model"), "Q8_0": script("variant", "Q8_0"), "Q2_K": script("variant", "Q2_K")}
    procs, urls = [], {}
    try:
        for name, path in models.items():
            port = free_port()
            log = ROOT / "var" / f"test-quality-{name}-{os.getpid()}.log"
            # --swa-full: Gemma 3's sliding-window layers otherwise cannot reuse a slot's cache,
            # and each teacher-forcing step would compute its whole prefix again.
            proc = subprocess.Popen(["bash", str(LLM_SERVERS), "serve", str(port), "--parallel", "2", "-c", "1024",
                                     "-t", "2", "--swa-full"], stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                                    env={**os.environ, "LLAMA_SERVER_MODEL": path,
                                         "LLAMA_SERVER_LOG": str(log.with_suffix(".server.log"))})
            procs.append(proc)
            urls[name] = f"http://127.0.0.1:{port}"
            wait_http(urls[name] + "/health", 120, proc)
        yield models, urls
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)


def measure(url, text_file, reference=None):
    async def go():
        async with httpx.AsyncClient(timeout=300) as client:
            return await quality.measure(client, url, "llamacpp", quality.file_text(text_file), n_ctx=N_CTX,
                                         chunks=CHUNKS, reference=reference)
    return asyncio.run(go())


def measure_reference(url, text_file):
    async def go():
        async with httpx.AsyncClient(timeout=300) as client:
            return await quality.measure_reference(client, url, "llamacpp", quality.file_text(text_file),
                                                   n_ctx=N_CTX, chunks=CHUNKS, agreement_prompts=3)
    return asyncio.run(go())


def llama_perplexity(model: str, text_file) -> float:
    out = subprocess.run([f"{script('tools')}/llama-perplexity", "-m", model, "-f", str(text_file), "-c", str(N_CTX),
                          "--chunks", str(CHUNKS), "-t", "2"], capture_output=True, text=True, timeout=600)
    found = re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr)
    assert found, (out.stdout + out.stderr)[-2000:]
    return float(found.group(1))


def test_perplexity_through_the_server_equals_llama_perplexity_within_1_percent(gemma_servers, text_file):
    models, urls = gemma_servers
    ours = measure(urls["Q4_K_M"], text_file)
    theirs = llama_perplexity(models["Q4_K_M"], text_file)
    assert ours.tokens_scored == CHUNKS * (N_CTX - 1 - N_CTX // 2)
    assert ours.perplexity == pytest.approx(theirs, rel=0.01), (ours.perplexity, theirs)
    print(f"\nperplexity: server {ours.perplexity:.4f}, llama-perplexity {theirs:.4f}; "
          f"{ours.tokens_per_s:.1f} tokens scored/s")


def test_variants_rank_as_their_precision_says(gemma_servers, text_file):
    _, urls = gemma_servers
    reference = measure_reference(urls["Q4_K_M"], text_file)  # scored once, compared with twice
    q8 = measure(urls["Q8_0"], text_file, reference)
    q2 = measure(urls["Q2_K"], text_file, reference)
    base = reference.result.perplexity
    assert q8.reference["perplexity"] == q2.reference["perplexity"] == base
    # A Q8_0 copy of the Q4_K_M weights is nearly the same model; Q2_K throws half the bits away.
    assert q8.reference["kl_mean"] < 0.02 and q8.reference["same_top_share"] > 0.9
    assert q2.reference["kl_mean"] > 5 * q8.reference["kl_mean"]
    assert q2.perplexity > 1.05 * base and abs(q8.perplexity - base) < 0.02 * base
    assert q2.reference["same_top_share"] < q8.reference["same_top_share"]
    assert q2.reference["greedy"]["identical_token_share"] <= q8.reference["greedy"]["identical_token_share"]
    print(f"\nQ8_0: ppl {q8.perplexity:.3f}, KL {q8.reference['kl_mean']:.5f}, same top "
          f"{q8.reference['same_top_share']:.3f}; Q2_K: ppl {q2.perplexity:.3f}, KL {q2.reference['kl_mean']:.4f}, "
          f"same top {q2.reference['same_top_share']:.3f}; reference Q4_K_M ppl {base:.3f}")


TRANSFORMERS_NLL = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
windows, first = json.loads(sys.stdin.read())
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.bfloat16).eval()
nll = []
with torch.no_grad():
    for w in windows:
        logits = model(torch.tensor([w])).logits[0].float()
        logp = torch.log_softmax(logits, dim=-1)
        nll += [-logp[j, w[j + 1]].item() for j in range(first, len(w) - 1)]
print(json.dumps(nll))
"""


def test_perplexity_through_vllm_prompt_logprobs_equals_transformers_within_half_a_percent(vllm_server, text_file):
    async def go():
        async with httpx.AsyncClient(timeout=300) as client:
            scorer = quality.Scorer(client, vllm_server, "vllm", "tiny-qwen2")
            text = quality.file_text(text_file).text
            windows = quality.make_windows(await scorer.tokenize(text, special=True),
                                           await scorer.tokenize(text, special=False), N_CTX, CHUNKS)
            result = await quality.measure(client, vllm_server, "vllm", quality.file_text(text_file),
                                           model="tiny-qwen2", n_ctx=N_CTX, chunks=CHUNKS)
            return windows, result
    windows, ours = asyncio.run(go())
    venv = script("vllm-setup")
    model_dir = os.path.expanduser(os.environ.get("LLM_SERVERS_CACHE", "~/.cache/llm-servers")) + "/tiny-qwen2"
    done = subprocess.run([f"{venv}/bin/python", "-c", TRANSFORMERS_NLL, model_dir],
                          input=json.dumps([windows.windows, windows.first]), capture_output=True, text=True,
                          timeout=600, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    nll = json.loads(done.stdout)
    theirs = math.exp(sum(nll) / len(nll))
    assert ours.tokens_scored == len(nll)
    assert ours.perplexity == pytest.approx(theirs, rel=0.005), (ours.perplexity, theirs)
    # As many log-probabilities per position as the server allows: vLLM's --max-logprobs, 20 by
    # default, read from its refusal of more.
    assert ours.settings["top_k"] == 20
    print(f"\nvLLM prompt_logprobs perplexity {ours.perplexity:.2f}, transformers {theirs:.2f}; "
          f"{ours.tokens_per_s:.0f} tokens scored/s")


@pytest.mark.django_db(transaction=True)
def test_a_run_with_a_quality_step_through_the_worker_compares_real_variants(gemma_servers, text_file, client,
                                                                           celery_worker_process):
    """The real llama-server serving the Q4_K_M model against its Q8_0 copy as the reference,
    through the run form, Redis and a real worker, onto the run page."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    from benchmarks.models import QualityMeasurement, Run
    from factories import endpoint, run_form, user
    from test_fault_tolerance import finished

    _, urls = gemma_servers
    q4 = endpoint(urls["Q4_K_M"], name="gemma-q4", backend="llamacpp", quantization="gguf_q4_k_m")
    q8 = endpoint(urls["Q8_0"], name="gemma-q8", backend="llamacpp", quantization="gguf_q8_0")
    client.force_login(user())
    body = {**run_form([q4, q8], concurrency_levels="1", requests_per_level=2, output_tokens=8, warmup_requests=0),
            "quality": "on", "quality_reference": q8.id, "quality_ctx": 64, "quality_chunks": 2,
            "quality_text_file": SimpleUploadedFile("pydoc-topics.txt", text_file.read_bytes())}
    assert client.post(reverse("run-new"), body).status_code == 302
    run = finished(Run.objects.get(), timeout=300)
    assert run.status == Run.SUCCEEDED, run.error
    rows = {q.endpoint.name: q.figures for q in QualityMeasurement.objects.filter(run=run)}
    ref, tested = rows["gemma-q8"], rows["gemma-q4"]
    assert ref.tokens_scored == tested.tokens_scored == 2 * (64 - 1 - 32)
    assert tested.reference["name"] == "gemma-q8" and tested.reference["perplexity"] == ref.perplexity
    # llama-server caps no top-k: both list the product's ceiling of tokens per position.
    assert ref.settings["top_k"] == tested.settings["top_k"] == tested.reference["top_k"] == quality.TOP_K_CEILING
    # The Q8_0 file is a requantized copy of the Q4_K_M one: nearly the same model.
    assert abs(tested.perplexity - ref.perplexity) < 0.05 * ref.perplexity
    assert 0 <= tested.value("kl_mean") < 0.05 and tested.value("same_top_share") > 0.8
    assert 0 < tested.value("greedy_identical_share") <= 1
    page = client.get(run.get_absolute_url()).content.decode()
    assert 'id="quality-table"' in page and f"{tested.value('kl_mean'):.4f}" in page
    assert "gemma-q4</strong> against gemma-q8" in page
    print(f"\nthrough the worker: Q4_K_M ppl {tested.perplexity:.3f} vs Q8_0 {ref.perplexity:.3f}, KL "
          f"{tested.value('kl_mean'):.5f}, same top {tested.value('same_top_share'):.3f}, greedy "
          f"{tested.value('greedy_identical_share'):.3f}; {tested.tokens_per_s:.1f} and {ref.tokens_per_s:.1f} tok/s")
