"""advise(): the decisions the product must get right."""

import json

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEFAULT_CANDIDATES, V100_LABEL,
                                Candidate, EngineBuilds, Evidence, GpuSpec, Workload,
                                published_v100_evidence)
from benchmarks.advisor import advise as advise_all

# Most of these are about the write-up's three candidates; the others (Q5_K_M, Q8_0, GPTQ, GGUF on
# vLLM) are tested in test_advisor_cases.py.
NAMED = DEFAULT_CANDIDATES[:3]


def advise(gpu, model, workload, evidence, candidates=NAMED, **kwargs):
    return advise_all(gpu, model, workload, evidence, candidates, **kwargs)

V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77)
V100_PAIR = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77, count=2, interconnect="pcie")
H200 = GpuSpec("NVIDIA H200", (9, 0), 139.8, host_id="gpu-1")
PRIORITIES = ["single_user_speed", "throughput", "memory_headroom"]
# The weights measured-here.md served (Q4_K_M) and the FP8 size the memory model estimates.
WEIGHTS = {"llamacpp-q4_k_m": 4.68e9, "vllm-fp8": 8.71e9}


def ev(id, candidate, concurrency, gpu=H200, **figures):
    return Evidence(id=id, candidate=candidate, kind="measured", label=f"run {id}", gpu_name=gpu.name,
                    compute_capability=gpu.compute_capability, concurrency=concurrency,
                    prompt_tokens=512, output_tokens=100, host_id=gpu.host_id, url=f"/runs/{id}/",
                    model=R1_7B.name, weight_bytes=WEIGHTS.get(candidate), **figures)


def work(users=8, priority="throughput", **targets):
    return Workload(users=users, prompt_tokens=512, output_tokens=100, context_tokens=8192,
                    priority=priority, **targets)


def h200_runs(fp8_aggregate, llamacpp_aggregate):
    return [
        ev("f1", "vllm-fp8", 1, decode_tok_s_p50=200.0, aggregate_tok_s=190.0, ttft_ms_p90=40.0),
        ev("f8", "vllm-fp8", 8, decode_tok_s_p50=fp8_aggregate / 8, aggregate_tok_s=fp8_aggregate,
           ttft_ms_p90=80.0),
        ev("l1", "llamacpp-q4_k_m", 1, decode_tok_s_p50=226.0, aggregate_tok_s=186.0, ttft_ms_p90=103.0),
        ev("l8", "llamacpp-q4_k_m", 8, decode_tok_s_p50=llamacpp_aggregate / 8,
           aggregate_tok_s=llamacpp_aggregate, ttft_ms_p90=623.0),
    ]


# --- the V100 write-up ---------------------------------------------------------------------

@pytest.mark.parametrize("users", range(1, 9))
@pytest.mark.parametrize("priority", PRIORITIES)
def test_it_recommends_llamacpp_on_a_v100_from_the_published_figures(users, priority):
    rec = advise_all(V100, R1_7B, work(users, priority), published_v100_evidence())
    assert rec.recommended == "llamacpp-q4_k_m"
    assert rec.ranked[0].key == "llamacpp-q4_k_m"
    assert rec.confidence == "low" and "published" in rec.confidence_why


def test_it_refuses_fp8_and_awq_on_volta_with_the_reason():
    rec = advise(V100, R1_7B, work(8), published_v100_evidence())
    fp8, awq = rec.candidate("vllm-fp8"), rec.candidate("vllm-awq")
    assert not fp8.eligible and "fp8.py" in fp8.ineligible_reasons[0]
    assert not awq.eligible and "#1488" in awq.ineligible_reasons[0]
    assert "vLLM FP8 and vLLM AWQ cannot start on compute capability 7.0" in rec.summary


def test_it_flags_the_published_vllm_figures_as_not_reproducible_upstream():
    rec = advise(V100, R1_7B, work(8), published_v100_evidence())
    for key in ("vllm-fp8", "vllm-awq"):
        result = rec.candidate(key)
        assert result.evidence and all(
            ref.flags[0].startswith("not reproducible with upstream vLLM") for ref in result.evidence)
        assert sum("not reproducible with upstream vLLM" in r for r in result.reasons) == 1
    # said once, in the candidate's breakdown: the caveats hold for the whole answer
    assert not any("not reproducible" in c for c in rec.caveats)
    assert len(rec.caveats) == len(set(rec.caveats))
    llamacpp = rec.candidate("llamacpp-q4_k_m")
    assert all(ref.label == V100_LABEL and ref.kind == "published" for ref in llamacpp.evidence)


def test_it_uses_the_write_ups_figures_at_one_and_eight_users():
    rec = advise(V100, R1_7B, work(8), published_v100_evidence())
    llamacpp = rec.candidate("llamacpp-q4_k_m")
    assert llamacpp.predicted["aggregate_tok_s"].value == 235.0
    assert llamacpp.predicted["decode_tok_s_p50"].value == 29.4
    assert "235 tok/s aggregate" in rec.summary
    one = advise(V100, R1_7B, work(1, "single_user_speed"), published_v100_evidence())
    assert one.candidate("llamacpp-q4_k_m").predicted["decode_tok_s_p50"].value == 56.0
    assert one.candidate("vllm-fp8").predicted["decode_tok_s_p50"].value == 32.0


def test_it_never_recommends_an_ineligible_candidate_however_fast():
    evidence = [ev("fast", "vllm-fp8", 8, gpu=V100, decode_tok_s_p50=500.0, aggregate_tok_s=4000.0)]
    rec = advise(V100, R1_7B, work(8), evidence + published_v100_evidence())
    assert rec.recommended == "llamacpp-q4_k_m" and rec.candidate("vllm-fp8").rank == 2


# --- the H200: the ranking follows the measurements ---------------------------------------

def test_it_recommends_fp8_on_an_h200_when_it_is_faster_in_aggregate():
    rec = advise(H200, R1_7B, work(8), h200_runs(fp8_aggregate=900.0, llamacpp_aggregate=349.0))
    assert rec.candidate("vllm-fp8").eligible
    assert rec.recommended == "vllm-fp8"
    assert [r.key for r in rec.ranked] == ["vllm-fp8", "llamacpp-q4_k_m", "vllm-awq"]
    assert "900 tok/s aggregate" in rec.summary


def test_it_ranks_llamacpp_first_when_the_measurements_say_so():
    rec = advise(H200, R1_7B, work(8), h200_runs(fp8_aggregate=300.0, llamacpp_aggregate=349.0))
    assert rec.recommended == "llamacpp-q4_k_m"
    assert [r.key for r in rec.ranked][:2] == ["llamacpp-q4_k_m", "vllm-fp8"]


def test_it_ranks_unknown_performance_below_known_and_asks_to_measure_it():
    rec = advise(H200, R1_7B, work(8), h200_runs(900.0, 349.0))
    awq = rec.candidate("vllm-awq")
    # only estimated (bandwidth ceiling x vLLM's fitted efficiency): below what was measured
    assert awq.eligible and awq.fit.fits and awq.priority_how == "estimated" and awq.rank == 3
    assert rec.confidence == "medium" and "vLLM AWQ" in rec.confidence_why
    (run,) = rec.measure_next
    assert (run.candidate, run.concurrency_levels, run.prompt_tokens, run.output_tokens, run.host_id) \
        == ("vllm-awq", (1, 2, 4, 8), 512, 100, "gpu-1")


def test_it_is_confident_when_everything_was_measured_here_at_this_load():
    runs = h200_runs(900.0, 349.0) + [ev("a8", "vllm-awq", 8, decode_tok_s_p50=90.0, aggregate_tok_s=700.0)]
    rec = advise(H200, R1_7B, work(8), runs)
    assert rec.confidence == "high" and rec.measure_next == []


def test_it_ranks_by_memory_headroom_when_asked():
    rec = advise(H200, R1_7B, work(8, "memory_headroom"), h200_runs(900.0, 349.0))
    assert rec.recommended == "llamacpp-q4_k_m"  # the smallest weights and runtime overhead


def test_it_ranks_by_per_stream_speed_when_asked():
    runs = h200_runs(900.0, 349.0)
    runs[3] = ev("l8", "llamacpp-q4_k_m", 8, decode_tok_s_p50=150.0, aggregate_tok_s=349.0)
    assert advise(H200, R1_7B, work(8, "throughput"), runs).recommended == "vllm-fp8"
    assert advise(H200, R1_7B, work(8, "single_user_speed"), runs).recommended == "llamacpp-q4_k_m"


# --- targets ---------------------------------------------------------------------------------

def test_a_candidate_that_misses_a_target_ranks_below_one_that_meets_it():
    rec = advise(H200, R1_7B, work(8, ttft_p90_ms=50.0), h200_runs(900.0, 349.0))
    fp8 = rec.candidate("vllm-fp8")
    assert fp8.meets_targets["ttft_p90_ms"].met is False and fp8.meets_all is False
    assert "missed" in fp8.meets_targets["ttft_p90_ms"].note
    # neither measured one meets 50 ms at 8 users, and vLLM AWQ was not measured
    assert rec.recommended is None and rec.ranked[0].key == "vllm-awq"
    assert "measure next" in rec.summary and "vLLM FP8 and llama.cpp Q4_K_M miss the targets" in rec.summary
    measured_only = advise(H200, R1_7B, work(8, ttft_p90_ms=50.0), h200_runs(900.0, 349.0),
                           DEFAULT_CANDIDATES[:2])
    assert measured_only.recommended is None
    assert "the closest by aggregate output throughput is vLLM FP8" in measured_only.summary

    rec = advise(H200, R1_7B, work(8, ttft_p90_ms=500.0), h200_runs(300.0, 349.0))
    assert rec.candidate("llamacpp-q4_k_m").meets_all is False  # 623 ms
    assert rec.recommended == "vllm-fp8"


def test_it_checks_a_tpot_target_against_decode_speed_when_only_that_was_published():
    rec = advise(V100, R1_7B, work(8, tpot_ms=40.0), published_v100_evidence())
    check = rec.candidate("llamacpp-q4_k_m").meets_targets["tpot_ms"]
    # 40 ms per token = 25 tok/s; the write-up published 29.4 tok/s per stream at 8 users
    assert check.met is True and check.metric == "decode_tok_s_p50" and check.predicted == 29.4
    assert "at least 25 tok/s" in check.note


def test_it_does_not_pass_a_target_beyond_the_figures_levels():
    # measured at 1 and 8 users, asked at 16: the figure at 8 says nothing there, the model's
    # estimate stands in, and an estimate never passes a target
    rec = advise(H200, R1_7B, work(16, min_user_tok_s=10.0), h200_runs(900.0, 349.0))
    check = rec.candidate("vllm-fp8").meets_targets["min_user_tok_s"]
    assert check.met is None and check.how == "estimated"
    assert rec.confidence == "low"


def test_it_interpolates_and_extrapolates_in_the_recommendation_and_says_so():
    runs = h200_runs(900.0, 349.0)
    four = advise(H200, R1_7B, work(4), runs).candidate("vllm-fp8")
    assert four.predicted["aggregate_tok_s"].how == "interpolated"
    assert any("Interpolated linearly between the figures at 1 and 8 users" in r for r in four.reasons)
    sixteen = advise(H200, R1_7B, work(16), runs).candidate("vllm-fp8")
    # past the last level the figure at 8 users is not carried flat: the model's estimate, labelled
    aggregate = sixteen.predicted["aggregate_tok_s"]
    assert aggregate.how == "estimated" and aggregate.value != 900.0 and aggregate.band[0] < aggregate.value
    assert any("Extrapolation: figures only up to 8 users" in r for r in sixteen.reasons)
    assert any(r.startswith("Beyond the levels its figures cover, the estimate stands in") for r in sixteen.reasons)


# --- fitting, notes, odds and ends ------------------------------------------------------------

def test_it_never_recommends_what_does_not_fit():
    tiny = GpuSpec("NVIDIA H200", (9, 0), 6.0, host_id="gpu-1")
    rec = advise(tiny, R1_7B, work(8), h200_runs(900.0, 349.0))
    assert rec.recommended is None and "Nothing can be recommended" in rec.summary
    assert all(not r.fit.fits for r in rec.ranked) and rec.measure_next == []


def test_it_recommends_the_only_runnable_candidate_without_figures_but_with_low_confidence():
    # a Volta card with no datasheet row: no physical prior, nothing measured; of the write-up's
    # three, vLLM FP8 and AWQ cannot start on compute capability 7.0
    unlisted = GpuSpec("Custom Volta board", (7, 0), 15.77)
    rec = advise(unlisted, R1_7B, work(8), [], DEFAULT_CANDIDATES[:3])
    assert rec.recommended == "llamacpp-q4_k_m" and rec.confidence == "low"
    assert "only candidate that can start and fit" in rec.summary
    assert rec.measure_next[0].why == "no figures for this GPU yet"


def test_it_gives_the_hardware_advice_that_applies_to_two_pcie_v100s():
    rec = advise_all(V100_PAIR, R1_7B, work(8), published_v100_evidence())
    notes = {n.fact_id: n for n in rec.hardware_notes}
    assert "~24 tok/s" in notes["tp-over-pcie"].text and "32 tok/s" in notes["tp-over-pcie"].text
    launch = rec.candidate("llamacpp-q4_k_m").launch
    assert "-ngl 99" in launch.command and "-c 65536 --parallel 8" in launch.command
    assert "-DCMAKE_CUDA_ARCHITECTURES=70" in launch.build and "CUDA 12.x" in launch.build
    assert "CUDA 12.x" in notes["cuda13-no-sm70"].text
    assert "dp4a" in notes["llamacpp-dp4a-decode"].text and "not on INT4" in notes["llamacpp-dp4a-decode"].text
    assert "correctable ECC" in notes["hot-gpu-ecc"].text
    assert "GPTQ" in notes["vllm-volta-quant"].text
    assert all(n.source for n in rec.hardware_notes)


def test_it_skips_tensor_parallel_advice_with_nvlink_and_build_advice_for_new_gpus():
    nvlink = GpuSpec("NVIDIA H200", (9, 0), 139.8, count=2, interconnect="nvlink")
    notes = {n.fact_id for n in advise(nvlink, R1_7B, work(8), []).hardware_notes}
    assert "tp-over-pcie" not in notes and "cuda13-no-sm70" not in notes
    assert "bf16-min-cc" not in notes and "vllm-fp8-native-cc" not in notes


def test_it_tells_turing_to_use_dtype_half_and_ampere_that_fp8_is_weight_only():
    t4 = {n.fact_id: n.text for n in advise(GpuSpec("Tesla T4", (7, 5), 15.0), R1_7B, work(8), []).hardware_notes}
    assert "--dtype half" in t4["bf16-min-cc"]
    a100 = {n.fact_id: n.text for n in advise(GpuSpec("NVIDIA A100", (8, 0), 80.0), R1_7B, work(8), []).hardware_notes}
    assert "W8A16" in a100["vllm-fp8-native-cc"]


def test_candidates_are_data_and_vllm_versions_matter_on_volta():
    fp16 = Candidate("vllm-fp16", "vLLM FP16", "vllm", "fp16", ("vllm",), "fp8-size",
                     embedding_bits=16)
    candidates = DEFAULT_CANDIDATES + (fp16,)
    sizes = {"fp16": 15.2e9}
    old = advise(V100_PAIR, R1_7B, work(1), [], candidates, variant_bytes=sizes)
    assert old.candidate("vllm-fp16").eligible
    assert any("before v0.20" in n.text for n in old.hardware_notes)
    new = advise(V100_PAIR, R1_7B, work(1), [], candidates, variant_bytes=sizes,
                 builds=EngineBuilds(vllm_version=(0, 20)))
    assert not new.candidate("vllm-fp16").eligible
    assert "v0.20" in new.candidate("vllm-fp16").ineligible_reasons[0]


def test_it_serialises_to_json():
    rec = advise(V100_PAIR, R1_7B, work(4, ttft_p90_ms=500.0), published_v100_evidence())
    data = json.loads(json.dumps(rec.to_dict()))
    assert data["recommended"] == "llamacpp-q4_k_m"
    first = data["ranked"][0]
    assert {"key", "label", "eligible", "ineligible_reasons", "fit", "predicted", "evidence",
            "meets_targets", "reasons", "rank", "requirements"} <= set(first)
    assert first["fit"]["kv_cache_gib"] == pytest.approx(1.75)
    assert data["measure_next"][0]["concurrency_levels"] == [1, 2, 4]


@pytest.mark.parametrize("workload, message", [
    (Workload(users=0, prompt_tokens=512, output_tokens=100), "at least 1"),
    (Workload(users=1, prompt_tokens=512, output_tokens=100, context_tokens=262144),
     "handles at most 131072 tokens of context"),
    (Workload(users=1, prompt_tokens=512, output_tokens=100, context_tokens=256),
     "the context must hold the prompt and the output"),
    (Workload(users=1, prompt_tokens=512, output_tokens=100, priority="cheapest"), "priority must be one of"),
])
def test_it_rejects_a_workload_it_cannot_reason_about(workload, message):
    with pytest.raises(ValueError, match=message):
        advise(V100, R1_7B, workload, [])


@pytest.mark.parametrize("fp8, llamacpp, clear", [(1000.0, 980.0, False), (1000.0, 500.0, True)])
def test_two_measured_candidates_within_the_noise_name_no_clear_winner(fp8, llamacpp, clear):
    """The ranking still puts one first, but the verdict says when the figures it ranked on are
    within the run-to-run noise (one run each: ±10 %)."""
    rec = advise(H200, R1_7B, work(8, "throughput"), h200_runs(fp8, llamacpp))
    assert rec.recommended == "vllm-fp8" and rec.why[2].startswith("Next: llama.cpp"), rec.why
    assert ("No clear winner between them: 1.02× apart, within the ±10 %" in rec.why[2]) is not clear, rec.why[2]
