"""The lab's quality step by the host's own llama-perplexity (issue 28): a recipe as the reference,
its GGUF file scored once with its distributions saved, each server the lab starts from a GGUF
compared with it over the whole vocabulary; the figures are the tool's own on the same text and
windows. And the tool's summary lines read as the tool prints them."""
import subprocess
import time
from pathlib import Path

import pytest

from benchmarks.engine import llama_perplexity
from benchmarks.models import QualityMeasurement, Run, ServerRecipe
from conftest import LLM_SERVERS
from factories import execute_in_process, queue_run, user
from test_decisions_lab import llama_paths  # noqa: F401 (its fixture)
from test_lab import recipe

HOST = "tool-lab"  # a host whose queue no worker takes: this test process measures its runs

ARGS = ["-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "1024", "-t", "2"]

# The tool's summary lines, as tools/perplexity/perplexity.cpp prints them (its format strings).
SAVING = """perplexity: calculating perplexity over 4 chunks, n_ctx=128, batch_size=2048, n_seq=16
[1]12.3456,[2]13.0000,[3]13.5000,[4]13.8840,
Final estimate: PPL = 13.8840 +/- 0.51234
"""
COMPARING = """kl_divergence: computing over 4 chunks, n_ctx=128, batch_size=2048, n_seq=16
====== Perplexity statistics ======
Mean PPL(Q)                   :  14.123456 ±   0.523456
Mean PPL(base)                :  13.884000 ±   0.512340
====== KL divergence statistics ======
Mean    KLD:   0.031234 ±   0.001234
Maximum KLD:   1.234567
99.9%   KLD:   0.876543
99.0%   KLD:   0.345678
Median  KLD:   0.012345
====== Token probability statistics ======
Same top p: 93.254 ± 1.234 %
"""


def test_the_tools_summary_lines_are_read():
    saved = llama_perplexity.parse(SAVING, 1.5, ["llama-perplexity"])
    assert (saved.perplexity, saved.perplexity_stderr, saved.chunks, saved.n_ctx) == (13.884, 0.51234, 4, 128)
    assert saved.kl_mean is None and saved.reference("q8") is None
    assert saved.tokens_scored == 4 * (128 - 1 - 64)
    compared = llama_perplexity.parse(COMPARING)
    assert (compared.perplexity, compared.kl_mean, compared.kl_p99) == (14.123456, 0.031234, 0.345678)
    assert compared.same_top_share == pytest.approx(0.93254) and compared.kl_mean_stderr == 0.001234
    assert compared.reference("q8")["vocabulary"] == "full"
    with pytest.raises(llama_perplexity.ToolError, match="printed no perplexity"):
        llama_perplexity.parse("main: error: failed to load model\n")


@pytest.fixture
def tool_lab(settings, tmp_path, llama_paths):  # noqa: F811 (the fixture imported above)
    """This test process as the lab host's worker: llama-server and llama-perplexity from the cache."""
    binary, model = llama_paths
    (tmp_path / "state").mkdir()
    settings.WORKER_HOST = HOST
    settings.LAB_EXECUTABLES = f"{binary},{Path(binary).parent / 'llama-perplexity'}"
    settings.LAB_MODEL_DIRS = str(Path(model).parent)
    settings.LAB_STATE_DIR = str(tmp_path / "state")
    settings.LAB_PORTS = "18440-18459"  # a range no other test file uses
    settings.LAB_START_TIMEOUT_S, settings.LAB_STOP_GRACE_S, settings.LAB_FREED_TIMEOUT_S = 300, 5, 10
    q8 = subprocess.run(["bash", str(LLM_SERVERS), "variant", "Q8_0"], check=True, capture_output=True, text=True,
                        timeout=1800).stdout.split()[-1]
    return binary, model, q8


@pytest.mark.real_server
@pytest.mark.django_db(transaction=True)
def test_a_recipe_is_the_reference_and_llama_perplexity_scores_the_lab_servers(tool_lab, tmp_path):
    binary, q4_path, q8_path = tool_lab
    q4 = recipe("gemma-q4", binary, q4_path, args=ARGS, host=HOST)
    q8 = recipe("gemma-q8", binary, q8_path, args=ARGS, host=HOST)
    run = execute_in_process(queue_run(
        owner=user(), endpoints=[], recipes=[q4, q8], sweep={}, prompt_tokens=16, output_tokens=4, temperature=0.0,
        concurrency_levels=[1], requests_per_level=2, warmup_requests=0, quality=True, quality_reference_recipe=q8,
        quality_ctx=128, quality_chunks=4))
    assert run.status == Run.SUCCEEDED, (run.error, [(q.endpoint.name, q.error) for q in run.quality_results.all()])
    rows = {q.endpoint.recipe.name: q for q in QualityMeasurement.objects.filter(run=run).select_related("endpoint__recipe")}
    assert set(rows) == {"gemma-q4", "gemma-q8"} and not any(r.error for r in rows.values())
    ours_q4, ours_q8 = rows["gemma-q4"].figures, rows["gemma-q8"].figures
    assert ours_q4.method == ours_q8.method == llama_perplexity.METHOD
    assert ours_q4.tokens_scored == ours_q8.tokens_scored == 4 * (128 - 1 - 64)
    assert ours_q8.reference is None  # it is the reference
    assert ours_q4.reference["name"] == "gemma-q8" and ours_q4.reference["vocabulary"] == "full"
    assert not (Path(str(tmp_path / "state")) / "quality" / f"run-{run.id}").exists()  # its files removed
    # The same tool by hand on the same files, text and windows gives the same figures.
    text = tmp_path / "text.txt"
    text.write_text(run.evaluation_text().text, encoding="utf-8")
    tool = str(Path(binary).parent / "llama-perplexity")
    base = str(tmp_path / "base.kld")
    started = time.monotonic()
    by_hand_q8 = llama_perplexity.run(llama_perplexity.command(tool, q8_path, str(text), 128, 4, base=base),
                                      timeout_s=600)
    by_hand_q4 = llama_perplexity.run(llama_perplexity.command(tool, q4_path, str(text), 128, 4, base=base,
                                                               compare=True), timeout_s=600)
    by_hand_s = time.monotonic() - started
    assert ours_q8.perplexity == pytest.approx(by_hand_q8.perplexity, rel=0.01)
    assert ours_q4.perplexity == pytest.approx(by_hand_q4.perplexity, rel=0.01)
    assert ours_q4.value("kl_mean") == pytest.approx(by_hand_q4.kl_mean, rel=0.01) and by_hand_q4.kl_mean > 0
    assert ours_q4.value("same_top_share") == pytest.approx(by_hand_q4.same_top_share, rel=0.01)
    print(f"lab quality step: {ours_q8.seconds:.1f} s + {ours_q4.seconds:.1f} s; llama-perplexity by hand "
          f"{by_hand_s:.1f} s; perplexity Q8_0 {ours_q8.perplexity:.3f}, Q4_K_M {ours_q4.perplexity:.3f}, "
          f"KL {ours_q4.value('kl_mean'):.4f}")


@pytest.mark.django_db
def test_a_reference_recipe_must_be_a_chosen_llama_cpp_recipe(client):
    from benchmarks.models import Host
    from factories import run_form

    host, _ = Host.objects.get_or_create(name=HOST)
    common = dict(host=host, executable="/opt/llama.cpp/bin/llama-server", args=["-m", "{model}", "--port", "{port}"])
    q4 = ServerRecipe.objects.create(name="q4", backend="llamacpp", model_path="/models/q4.gguf", **common)
    q8 = ServerRecipe.objects.create(name="q8", backend="llamacpp", model_path="/models/q8.gguf", **common)
    vllm = ServerRecipe.objects.create(name="fp16", backend="vllm", model_path="/models/fp16", **common)
    client.force_login(user())
    cases = [([q4], q8, "is not one of the chosen recipes"), ([q4, vllm], vllm, "must start llama.cpp from a GGUF"),
             ([q4, q8], q8, None)]
    for recipes, reference, message in cases:
        form = run_form([], recipes=[r.pk for r in recipes], quality="on", quality_reference_recipe=reference.name,
                        concurrency_levels="1", requests_per_level=2)
        page = client.post("/runs/new/", form)
        errors = page.context["form"].errors if page.status_code == 200 else {}
        if message:
            assert message in " ".join(errors.get("quality_reference_recipe", [])), errors
        else:
            assert "quality_reference_recipe" not in errors, errors
