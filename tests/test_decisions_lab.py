"""The decision page reads the lab's launches as measured evidence: a server that did not start on
a GPU like the one asked about, for a reason of that GPU, refuses its candidate with the log line
and the run's link (beating the facts table); one that started where the facts table says it
cannot is a measured contradiction, said as such; start-up time and memory after load are shown
per candidate. Launches are stored by the lab's own writer (lab services' launch_execute, with the
real launcher) on a host whose inventory names its GPU."""
import subprocess
from pathlib import Path

import pytest
from django.test import Client

from benchmarks.decisions import selectors
from benchmarks.lab import services as lab_services
from benchmarks.models import Decision, Gpu, Host, Model, Run, ServerLaunch, ServerRecipe, Variant
from conftest import LLM_SERVERS, watched
from factories import advice, decide, user, queue_run

pytestmark = pytest.mark.django_db
V100_HOST = "v100-lab"
LLAMA_ARGS = ["-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "1024", "-t", "2"]
# What vLLM prints when FP8 weights meet a compute capability its kernels do not cover (its
# quantization config's minimum-capability check). No V100 here: /bin/sh writes vLLM's line
# and exits as vLLM does; the launcher reads its log like any other server's.
VLLM_FP8_ON_VOLTA = ("ValueError: The quantization method fp8 is not supported for the current GPU. "
                     "Minimum capability: 80. Current capability: 70.")
SHELL_SERVER = ["-c", f"echo 'INFO vLLM API server version 0.11.0'; echo '{VLLM_FP8_ON_VOLTA}' >&2; exit 1",
                "vllm-fp8", "{port}"]


@pytest.fixture
def llama_paths():
    binary = subprocess.run(["bash", str(LLM_SERVERS), "path"], capture_output=True, text=True).stdout.split()
    if len(binary) != 2 or not all(Path(p).exists() for p in binary):
        pytest.fail("llama-server or its model is not built: run `scripts/llm-servers.sh build` and `... model`")
    return binary


@pytest.fixture
def lab(settings, tmp_path, llama_paths):
    """This test process as the worker of the V100 host: it may start the cached llama-server and
    /bin/sh, with models from the cache."""
    (tmp_path / "state").mkdir()
    settings.WORKER_HOST = V100_HOST
    settings.LAB_EXECUTABLES = f"{llama_paths[0]},/bin/sh"
    settings.LAB_MODEL_DIRS = str(Path(llama_paths[1]).parent)
    settings.LAB_STATE_DIR = str(tmp_path / "state")
    settings.LAB_PORTS = "18420-18439"  # a range no other test file uses (files run side by side)
    settings.LAB_START_TIMEOUT_S = 120
    settings.LAB_STOP_GRACE_S = 5
    settings.LAB_FREED_TIMEOUT_S = 10
    return llama_paths


def v100_host(name=V100_HOST):
    host, created = Host.objects.get_or_create(name=name)
    if created:
        Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16384,
                           compute_capability="7.0")
    return host


def variant(quantization, model="DeepSeek-R1-Distill-Qwen-7B"):
    m, _ = Model.objects.get_or_create(name=model, defaults=dict(params_b=7.6, layers=28, kv_heads=4, head_dim=128))
    v, _ = Variant.objects.get_or_create(model=m, name=quantization, defaults={"quantization": quantization})
    return v


def launched(name, *, backend, quantization, executable, model_path, args, model="DeepSeek-R1-Distill-Qwen-7B",
             host=V100_HOST) -> ServerLaunch:
    """A run with one recipe, started (and stopped) by the lab's writer on this host's worker; the
    run finished as the worker finishes one."""
    recipe = ServerRecipe(name=name, host=v100_host(host), backend=backend, executable=executable,
                          model_path=model_path, args=args, variant=variant(quantization, model))
    recipe.full_clean()
    recipe.save()
    run = queue_run(owner=user(), endpoints=[], recipes=[recipe], sweep={}, prompt_tokens=32,
                              output_tokens=8, temperature=0.7, concurrency_levels=[1], requests_per_level=1,
                              warmup_requests=0)
    launch = run.launches.get()
    lab_services.launch_execute(run=run, launch=launch, measure=lambda endpoint, trials, last: None, should_stop=lambda: False)
    status = Run.SUCCEEDED if launch.endpoint_id else Run.PARTIAL
    Run.objects.filter(id=run.id).update(status=status)
    return ServerLaunch.objects.get(id=launch.id)  # as stored (its figures are read once per instance)


def v100(**overrides):
    host = v100_host()
    return {"host": host.pk, "gpu_name": "", "compute_capability": "", "vram_gib": None, "gpu_count": 1,
            "interconnect": "pcie", "model": None, "users": 1, "prompt_tokens": 512, "output_tokens": 100,
            "context_tokens": 4096, "ttft_p90_ms": None, "tpot_ms": None, "min_user_tok_s": None,
            "priority": "single_user_speed", **overrides}


def candidate(result, key):
    return next(c for c in result["ranked"] if c["key"] == key)


def fp8_failed(lab_paths):
    return launched("vllm-fp8-v100", backend="vllm", quantization="fp8_e4m3", executable="/bin/sh",
                    model_path=lab_paths[1], args=SHELL_SERVER)


def test_fp8_that_did_not_start_on_the_v100_is_measured_refusal_with_the_log_and_the_runs_link(lab):
    launch = fp8_failed(lab)
    report = launch.figures
    assert launch.status == ServerLaunch.DID_NOT_START and report.cause.code == "unsupported_quantization"
    result = advice(v100())
    fp8 = candidate(result, "vllm-fp8")
    assert not fp8["eligible"] and fp8["started"] == "did not start"
    measured = fp8["ineligible_reasons"][0]
    assert measured.startswith("Did not start on Tesla V100-PCIE-16GB") and "measured on this host" in measured
    assert "Minimum capability: 80. Current capability: 70." in measured and "exit code 1" in measured
    assert "0.11.0" in measured  # the version its log said
    assert "the facts table says the same" in measured  # the documented refusal agrees, and stays
    assert any("FP8" in r or "fp8" in r.lower() for r in fp8["ineligible_reasons"][1:])
    [ref] = fp8["launches"]
    assert ref["url"] == f"{launch.run.get_absolute_url()}#launch-{launch.public_id}"
    assert VLLM_FP8_ON_VOLTA in ref["log_excerpt"]

    decision = decide(v100(), owner=user())
    page = Client().get(decision.get_absolute_url()).content.decode()
    section = page[page.index('id="candidate-vllm-fp8"'):]
    section = section[:section.index("</section>")]
    assert 'data-started="did not start"' in section
    assert f'href="{ref["url"]}"' in section and "Current capability: 70." in section
    assert "Last lines of its log" in section
    # The run page has the row the link points at.
    run_page = Client().get(launch.run.get_absolute_url()).content.decode()
    assert f'id="launch-{launch.public_id}"' in run_page


def test_a_measured_gpu_failure_beats_a_fact_that_says_it_starts(lab):
    """llama.cpp Q4_K_M starts on compute capability 7.0 by the facts table; a build without
    kernels for it says otherwise, and the measurement wins."""
    no_kernels = ["-c", "echo 'ggml_cuda_compute_forward: CUDA error: no kernel image is available for execution "
                        "on the device' >&2; exit 1", "llama", "{port}"]
    before = candidate(advice(v100()), "llamacpp-q4_k_m")
    assert before["eligible"] and before["started"] == "not measured"
    launched("llama-q4-v100", backend="llamacpp", quantization="gguf_q4_k_m", executable="/bin/sh",
             model_path=lab[1], args=no_kernels)
    result = advice(v100())
    q4 = candidate(result, "llamacpp-q4_k_m")
    assert not q4["eligible"] and q4["started"] == "did not start"
    assert "the facts table says it can start here, but the measurement wins" in q4["ineligible_reasons"][0]
    assert "no kernel image is available" in q4["ineligible_reasons"][0]
    assert result["recommended"] != "llamacpp-q4_k_m"


def test_a_failure_of_the_recipes_own_setup_is_no_evidence_about_the_gpu(lab):
    launched("llama-q4-bad-flag", backend="llamacpp", quantization="gguf_q4_k_m", executable=lab[0],
             model_path=lab[1], args=LLAMA_ARGS + ["--numa", "bogus"])
    q4 = candidate(advice(v100()), "llamacpp-q4_k_m")
    assert q4["eligible"] and q4["started"] == "not measured"
    assert any("an argument it does not accept" in r and "not evidence about the GPU" in r for r in q4["reasons"])


def test_a_launch_is_never_carried_to_another_model(lab):
    launched("vllm-fp8-14b", backend="vllm", quantization="fp8_e4m3", executable="/bin/sh", model_path=lab[1],
             args=SHELL_SERVER, model="DeepSeek-R1-Distill-Qwen-14B")
    # The 14B's FP8 refused on this V100 says nothing about the 7B's.
    result = advice(v100())
    fp8 = candidate(result, "vllm-fp8")
    assert fp8["started"] == "not measured" and not fp8["launches"]
    assert "1 launch of vLLM FP8 not used: started with another model (DeepSeek-R1-Distill-Qwen-14B)." \
        in result["caveats"]


def test_a_start_where_the_facts_refuse_is_a_measured_contradiction_with_its_start_up(lab):
    """The server is the CPU llama-server (no V100 here) under a recipe that says it serves FP8
    with vLLM: what the advisor reads is the launch as the lab stored it."""
    # A vLLM FP8 that started on the V100: llama-server standing in for it, run by /bin/sh (vLLM's own
    # flags would not start llama-server, and llama-server's are not vLLM's).
    launch = launched("vllm-fp8-started", backend="vllm", quantization="fp8_e4m3", executable="/bin/sh",
                      model_path=lab[1], args=["-c", 'exec "$0" "$@"', lab[0], *LLAMA_ARGS])
    report = launch.figures
    assert launch.status == ServerLaunch.STOPPED and report.health_s > 0
    result = advice(v100())
    fp8 = candidate(result, "vllm-fp8")
    assert fp8["eligible"] and fp8["started"] == "started"
    assert fp8["contradiction"].startswith("Measured contradiction: it started on Tesla V100-PCIE-16GB")
    assert "where the facts table says it needs compute capability 7.5 or more" in fp8["contradiction"]
    assert fp8["contradiction"] in result["caveats"] and fp8["contradiction"] in fp8["reasons"]
    assert fp8["startup"]["health_s"] == report.health_s
    assert fp8["startup"]["first_token_s"] == report.first_token_s
    assert fp8["startup"]["memory_source"] == "rss"
    assert fp8["startup"]["memory_loaded_gib"] == pytest.approx(report.memory_loaded.server_mib / 1024)
    # Only RSS: the memory fit stays modelled, and says so.
    assert "only as resident memory" in fp8["memory_measured"] and "the fit is modelled" in fp8["memory_measured"]

    decision = decide(v100(), owner=user())
    page = Client().get(decision.get_absolute_url()).content.decode()
    section = page[page.index('id="candidate-vllm-fp8"'):]
    section = section[:section.index("</section>")]
    assert "a measured contradiction of the facts table" in section
    assert "Start → /health (s)" in section and f"{report.health_s:,.2f}" in section
    assert "RSS (no GPU: not GPU memory)" in section


def test_the_measured_start_is_read_for_the_asked_vllm_version_only(lab):
    fp8_failed(lab)  # its log says vLLM 0.11.0
    other = advice(v100(vllm_version="0.10"))
    assert candidate(other, "vllm-fp8")["started"] == "not measured"
    assert any("started with vLLM 0.11.0, not the 0.10 asked about" in c for c in other["caveats"])
    assert candidate(advice(v100(vllm_version="0.11")), "vllm-fp8")["started"] == "did not start"


def test_launch_evidence_is_read_in_a_bounded_number_of_queries(lab, django_assert_max_num_queries):
    fp8_failed(lab)
    launched("llama-bad-flag", backend="llamacpp", quantization="gguf_q4_k_m", executable=lab[0],
             model_path=lab[1], args=LLAMA_ARGS + ["--numa", "bogus"])
    with django_assert_max_num_queries(2 + 2 * 2):  # the launches, their hosts' GPUs; per run its endpoints
        rows = selectors.launch_evidence_from_db()
    assert {r.candidate for r in rows} == {"vllm-fp8", "llamacpp-q4_k_m"}
    # llama.cpp's -c from the recipe's arguments (the KV cache it allocates at load); vLLM has none.
    assert {r.candidate: (r.kv_context_tokens, r.gpu_count) for r in rows} == {
        "vllm-fp8": (None, 1), "llamacpp-q4_k_m": (1024, 1)}


def test_a_decision_saved_before_launches_were_read_still_shows(client):
    decision = decide(v100(), owner=user())
    stored = dict(decision.result, version=4)
    stored["ranked"] = [{k: v for k, v in c.items() if k not in ("started", "launches", "startup", "contradiction",
                                                                  "memory_measured")} for c in stored["ranked"]]
    Decision.objects.filter(id=decision.id).update(result=stored)
    r = client.get(decision.get_absolute_url())
    assert r.status_code == 200 and "Started by the lab" not in r.content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_refusal_with_its_log_fits_1366_pixels_in_a_browser(lab, browser, live_server):
    long_line = "CUDA error: no kernel image is available for execution on the device " + "x" * 400
    launched("llama-q4-v100-long", backend="llamacpp", quantization="gguf_q4_k_m", executable="/bin/sh",
             model_path=lab[1], args=["-c", f"echo '{long_line}' >&2; exit 1", "llama", "{port}"])
    fp8_failed(lab)
    decision = decide(v100(), owner=user())
    page = watched(browser.new_page(viewport={"width": 1366, "height": 768}))
    page.goto(live_server.url + decision.get_absolute_url())
    for key in ("vllm-fp8", "llamacpp-q4_k_m"):
        section = page.locator(f"#candidate-{key}")
        section.locator("summary").first.click()
        section.locator("ul.launches summary").first.click()
        assert section.locator("pre.log-tail").is_visible()
        assert section.locator(".measured-start").get_attribute("data-started") == "did not start"
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth})""")
    assert widths["page"] <= widths["screen"], widths
    assert page.js_errors == []
