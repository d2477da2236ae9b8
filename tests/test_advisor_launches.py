"""The lab's launches in the advisor (Django-free): the memory fit on a measured load, checked
against numbers worked out by hand; a start measured on a GPU of another model or compute
capability, or of another model, is not read."""

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEEPSEEK_R1_DISTILL_QWEN_14B as R1_14B, GpuSpec,
                                LaunchEvidence, Workload, advise)

V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 16.0, host_id="1")
LOAD = Workload(users=8, prompt_tokens=512, output_tokens=100, context_tokens=4096)


def q4_loaded(gib, *, source="gpu", kv_context_tokens=8192, gpu_name=V100.name, cc=(7, 0), model=R1_7B.name,
              host_id="1"):
    """A llama.cpp Q4_K_M server the lab started at -c `kv_context_tokens`, `gib` after load."""
    return LaunchEvidence(id="launch-a", candidate="llamacpp-q4_k_m", label="run A · llama-q4", gpu_name=gpu_name,
                          compute_capability=cc, started=True, model=model, url="/runs/A/#launch-a", host_id=host_id,
                          flags="-c 8192", health_s=6.5, first_token_s=7.0, memory_loaded_mib=gib * 1024,
                          memory_source=source, kv_context_tokens=kv_context_tokens)


def q4(rec):
    return rec.candidate("llamacpp-q4_k_m")


def test_the_fit_uses_the_measured_load_memory_less_its_own_kv_cache():
    # 5.5 GiB after load at -c 8192: its KV cache 8192 x 57344 B = 0.4375 GiB, so weights and runtime
    # 5.0625 GiB; 8 users x 4096 tokens x 57344 B = 1.75 GiB of KV cache on top: 6.8125 GiB of 16.
    c = q4(advise(V100, R1_7B, LOAD, [], launches=[q4_loaded(5.5)]))
    assert c.fit.basis == "measured" and c.fit.fits
    assert c.fit.weights_gib == pytest.approx(5.0625) and c.fit.overhead_gib == 0
    assert c.fit.kv_cache_gib == pytest.approx(1.75)
    assert c.fit.required_gib == pytest.approx(6.8125) and c.fit.headroom_gib == pytest.approx(9.1875)
    assert "measured: 5.5 GiB after load (run A · llama-q4) less the 0.44 GiB KV cache of its -c 8192" \
        in c.fit.explanation
    assert c.memory_measured.startswith("The fit is measured")
    assert c.startup.health_s == 6.5 and c.started == "started"


def test_a_measured_load_that_leaves_no_room_does_not_fit_whatever_the_model_says():
    modelled = q4(advise(V100, R1_7B, LOAD, []))
    assert modelled.fit.fits and modelled.fit.basis == "modelled"
    # 15.5 GiB after load at -c 8192: 15.0625 + 1.75 = 16.8125 GiB > 16.
    c = q4(advise(V100, R1_7B, LOAD, [], launches=[q4_loaded(15.5)]))
    assert c.fit.basis == "measured" and not c.fit.fits and c.fit.required_gib == pytest.approx(16.8125)
    assert not c.recommendable


@pytest.mark.parametrize("launch, why", [
    (q4_loaded(5.5, source="rss"), "only as resident memory"),  # no GPU read: RSS is not GPU memory
    (q4_loaded(5.5, kv_context_tokens=None), "The fit is modelled, not this measurement"),  # -c unknown
])
def test_the_fit_stays_modelled_without_a_gpu_reading_or_the_launchs_context(launch, why):
    c = q4(advise(V100, R1_7B, LOAD, [], launches=[launch]))
    assert c.fit.basis == "modelled" and c.fit.weights_gib == pytest.approx(4.36, abs=0.01)
    assert why in c.memory_measured


@pytest.mark.parametrize("launch, why", [
    (q4_loaded(5.5, gpu_name="NVIDIA A100-SXM4-80GB", cc=(8, 0), host_id="2"), "started on other GPUs"),
    (q4_loaded(5.5, model=R1_14B.name), f"started with another model ({R1_14B.name})"),
])
def test_a_launch_on_another_gpu_or_of_another_model_is_not_read(launch, why):
    rec = advise(V100, R1_7B, LOAD, [], launches=[launch])
    assert q4(rec).started == "not measured" and q4(rec).startup is None and q4(rec).fit.basis == "modelled"
    assert f"1 launch of llama.cpp Q4_K_M not used: {why}." in rec.caveats


def fp8_refused(i):
    return LaunchEvidence(id=f"launch-{i}", candidate="vllm-fp8", label=f"run {i} · vllm-fp8", gpu_name=V100.name,
                          compute_capability=(7, 0), started=False, model=R1_7B.name, url=f"/runs/{i}/#launch-{i}",
                          host_id="1", flags=f"--gpu-memory-utilization 0.{85 + i}", cause_code="unsupported_gpu",
                          cause="the GPU's compute capability is not supported",
                          cause_line="RuntimeError: FP8 needs compute capability 8.0", exit="exit code 1")


def test_a_sweep_that_never_started_is_one_refusal_that_counts_the_rest():
    fp8 = advise(V100, R1_7B, LOAD, [], launches=[fp8_refused(0), fp8_refused(1), fp8_refused(2)]).candidate("vllm-fp8")
    measured = [r for r in fp8.ineligible_reasons if r.startswith("Did not start")]
    assert len(measured) == 1 and "run 0 · vllm-fp8" in measured[0]  # the newest, passed first
    assert "2 more launches did not start either" in measured[0]
    assert [ref.id for ref in fp8.launches] == ["launch-0", "launch-1", "launch-2"]
