"""A spread of cases (Pascal to Hopper, 8 GB to 141 GB, one to four cards, 7B/14B/32B), each answer
checked against physics worked out here and the engines' documented facts, and the errors an audit
found, each with the test that failed before its fix."""

import json
import math
from pathlib import Path

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEEPSEEK_R1_DISTILL_QWEN_14B as R1_14B,
                                DEEPSEEK_R1_DISTILL_QWEN_32B as R1_32B, DEFAULT_CANDIDATES, AdviceInputError,
                                EngineBuilds, Evidence, GpuSpec, Workload, advise, published_v100_evidence)
from benchmarks.advisor import fit as advisor_fit

GIB = 1024**3
V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77)
V100_PAIR = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77, count=2)
P100 = GpuSpec("Tesla P100-PCIE-16GB", (6, 0), 15.9)
P40 = GpuSpec("Tesla P40", (6, 1), 22.4)
T4 = GpuSpec("Tesla T4", (7, 5), 14.58)
RTX3070 = GpuSpec("NVIDIA GeForce RTX 3070", (8, 6), 7.8)
RTX3090 = GpuSpec("NVIDIA GeForce RTX 3090", (8, 6), 24.0)
RTX4090 = GpuSpec("NVIDIA GeForce RTX 4090", (8, 9), 23.99)
L4 = GpuSpec("NVIDIA L4", (8, 9), 22.5)
A100 = GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 79.3)
H100_4 = GpuSpec("NVIDIA H100 80GB HBM3", (9, 0), 79.6, count=4, interconnect="nvlink")
H200 = GpuSpec("NVIDIA H200", (9, 0), 139.8, host_id="gpu-1")
BY_KEY = {c.key: c for c in DEFAULT_CANDIDATES}


def work(users, context=8192, priority="single_user_speed", **kw):
    return Workload(users=users, prompt_tokens=512, output_tokens=100, context_tokens=context, priority=priority,
                    **kw)


def h200_llamacpp():
    """measured-here.md: llama.cpp Q4_K_M of the 7B's shape on the H200, -c 8192 --parallel 8."""
    def row(c, decode, aggregate, ttft):
        return Evidence(id=f"h200-q4-c{c}", candidate="llamacpp-q4_k_m", kind="measured", label=f"H200 run c{c}",
                        gpu_name="NVIDIA H200", compute_capability=(9, 0), concurrency=c, prompt_tokens=512,
                        output_tokens=100, host_id="gpu-1", url=f"/r/{c}/", decode_tok_s_p50=decode,
                        aggregate_tok_s=aggregate, ttft_ms_p50=ttft, model=R1_7B.name, weight_bytes=4.68e9,
                        peak_memory_gib=5.84 if c == 8 else None)
    return [row(1, 226.0, 186.0, 97.5), row(8, 56.2, 349.0, 393.0)]


EVIDENCE = published_v100_evidence() + h200_llamacpp()


# --- the errors the audit found ------------------------------------------------------------------

def test_a_14b_on_two_v100s_is_never_answered_with_the_7bs_figures():
    rec = advise(V100_PAIR, R1_14B, work(8), EVIDENCE)
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert q4.evidence == [] and q4.evidence_basis is None  # the write-up measured the 7B
    assert all(p.value not in (56.0, 29.4, 235.0) for p in q4.predicted.values())
    assert any("measured on another model (DeepSeek-R1-Distill-Qwen-7B)" in c for c in rec.caveats)
    # 14.77e9 weights x 4.9 bits = 9.05e9 B; KV 2 x 48 layers x 8 heads x 128 x 2 B = 196608 B per
    # token, x 8 x 8192 = 12 GiB: 8.43 + 12 + 1.1 > 15.77, and even a q8_0 cache (6.375 GiB) gives
    # 15.9 > 15.77; on both cards (layer split) 8.43 + 12 + 2.2 = 22.6 of 31.5 GiB
    assert q4.fit.fits and q4.fit.gpus_used == 2 and q4.fit.split == "layer split"
    assert q4.fit.weights_gib == pytest.approx(14.77e9 * 4.9 / 8 / GIB)
    assert q4.fit.kv_cache_gib == pytest.approx(12.0)
    assert "--split-mode layer" in q4.launch.command
    tp = next(n for n in rec.hardware_notes if n.fact_id == "tp-over-pcie")
    assert tp.text.startswith("Layer split")  # the model needs both cards: what to split with


def test_the_aggregate_at_one_user_is_never_the_eight_user_figure():
    rec = advise(V100, R1_7B, work(1, priority="throughput"), published_v100_evidence())
    q4 = rec.candidate("llamacpp-q4_k_m")
    agg, decode = q4.predicted["aggregate_tok_s"], q4.predicted["decode_tok_s_p50"]
    assert decode.value == 56.0 and agg.value <= 1 * decode.value  # one stream: at most its own speed
    assert agg.how == "derived" and "upper bound" in agg.note
    assert q4.predicted["peak_memory_gib"].value is None  # 6.5 GB was 8 users' peak, not one's
    assert "235" not in rec.summary


def test_llamacpp_starts_on_a_p100_and_vllm_does_not():
    rec = advise(P100, R1_7B, work(1, 4096), published_v100_evidence())
    assert rec.candidate("llamacpp-q4_k_m").eligible  # no dp4a floor (ggml_cuda_dp4a falls back)
    assert all(not r.eligible for r in rec.ranked if r.key.startswith("vllm"))  # vLLM needs 7.0
    assert rec.recommended and rec.recommended.startswith("llamacpp")
    notes = {n.fact_id for n in rec.hardware_notes}
    assert "llamacpp-min-cc" in notes and "cuda13-no-sm70" in notes and "vllm-volta-quant" not in notes


@pytest.mark.parametrize("workload, kwargs, field", [
    (work(1), {"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    (work(1), {"gpu_memory_utilization": 0.0}, "gpu_memory_utilization"),
    (Workload(users=2.5, prompt_tokens=512, output_tokens=100), {}, "users"),
    (Workload(users=0, prompt_tokens=512, output_tokens=100), {}, "users"),
    (Workload(users=True, prompt_tokens=512, output_tokens=100), {}, "users"),
])
def test_it_refuses_what_it_cannot_reason_about_by_field(workload, kwargs, field):
    with pytest.raises(AdviceInputError) as e:
        advise(V100, R1_7B, workload, [], **kwargs)
    assert set(e.value.errors) == {field}


def test_the_volta_note_is_only_for_volta():
    for gpu in (T4, A100, L4, H200, P100):
        assert "vllm-volta-quant" not in {n.fact_id for n in advise(gpu, R1_7B, work(4), []).hardware_notes}
    assert "vllm-volta-quant" in {n.fact_id for n in advise(V100, R1_7B, work(4), []).hardware_notes}
    assert "llamacpp-volta-tensor-cores" in {n.fact_id for n in advise(V100, R1_7B, work(4), []).hardware_notes}


def test_vllm_needs_max_model_len_on_a_16_gib_card():
    # T4 (7.5) runs FP8 from vLLM v0.13 as W8A16. FP8 weights: 6.53e9 B + 1.09e9 x 2 B = 8.71e9 B
    # = 8.11 GiB; 0.9 x 14.58 = 13.12 GiB usable, less 2 GiB runtime = 3.0 GiB for the KV cache. The
    # model's 131072 tokens need 131072 x 57344 B = 7 GiB for one sequence: vLLM would not start.
    rec = advise(T4, R1_7B, work(1), [], builds=EngineBuilds(vllm_version=(0, 13)))
    fp8 = rec.candidate("vllm-fp8")
    assert fp8.eligible and fp8.fit.fits
    assert "would refuse to start" in fp8.fit.default_context_note and "7 GiB" in fp8.fit.default_context_note
    assert "--max-model-len 8192" in fp8.launch.command and "--dtype half" in fp8.launch.command
    full = advise(T4, R1_7B, work(1, 131072), [], builds=EngineBuilds(vllm_version=(0, 13)))
    assert not full.candidate("vllm-fp8").fit.fits
    # below v0.13 FP8 needs 8.0: refused, with the release named
    old = advise(T4, R1_7B, work(1), [], builds=EngineBuilds(vllm_version=(0, 12)))
    assert not old.candidate("vllm-fp8").eligible and "v0.12" in old.candidate("vllm-fp8").ineligible_reasons[0]
    unknown = advise(T4, R1_7B, work(1), [])
    assert unknown.candidate("vllm-fp8").releases == "v0.13 or later"


def test_llamacpp_shares_c_across_its_slots():
    rec = advise(H200, R1_7B, work(8), EVIDENCE)
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert "-c 65536 --parallel 8" in q4.launch.command  # 8 slots of 8192 tokens
    assert q4.fit.kv_tokens == 65536 and q4.fit.kv_cache_gib == pytest.approx(65536 * 57344 / GIB)


# --- the physical prior ----------------------------------------------------------------------------

def test_the_prior_is_under_the_bandwidth_ceiling_and_labelled():
    rec = advise(A100, R1_7B, work(1), EVIDENCE)
    q4 = rec.candidate("llamacpp-q4_k_m")
    p = q4.predicted["decode_tok_s_p50"]
    assert p.how == "estimated" and p.value < 2039e9 / 4.68e9  # under weights / bandwidth
    # the band is the fit's held-out error spread (fitted.json) around the estimate, which it contains
    fitted = json.loads((Path(advisor_fit.__file__).parent / "fitted.json").read_text())["engines"]["llamacpp"]
    lo, hi = fitted["bands"]["speed"]
    assert lo < 0 < hi and p.band == pytest.approx((p.value * math.exp(lo), p.value * math.exp(hi)))
    assert "estimated, not measured" in q4.estimate.lower() and "2039 GB/s" in q4.estimate
    median = fitted["by_regime"]["one user"]["leave_one_gpu_out"]["median_abs_error"]  # one user: that regime's
    assert f"for one user were off by a median {median * 100:.0f} %" in q4.estimate and "figures.csv" in q4.estimate
    assert any(s.startswith("xiongjiedai-gpu-benchmarks (https://github.com/") for s in q4.estimate_sources)
    # vLLM has its own prior now: every candidate that starts and fits is estimated, one is recommended
    assert rec.recommended is not None and rec.confidence == "low" and "estimated" in rec.confidence_why
    assert rec.candidate("vllm-awq").predicted["decode_tok_s_p50"].how == "estimated"
    # an estimate never passes a target
    strict = advise(A100, R1_7B, work(1, min_user_tok_s=1.0), EVIDENCE)
    assert strict.candidate("llamacpp-q4_k_m").meets_targets["min_user_tok_s"].met is None


def test_a_figure_upstream_cannot_reproduce_does_not_fit_an_efficiency():
    # the write-up's vLLM FP8 32 tok/s on a V100 is flagged (vLLM refuses FP8 on 7.0): vLLM's
    # efficiency rests on its published figures only
    rec = advise(A100, R1_7B, work(1), published_v100_evidence())
    fp8 = rec.candidate("vllm-fp8")
    assert fp8.predicted["decode_tok_s_p50"].how == "estimated"
    assert not any("V100" in s for s in fp8.estimate_sources)
    assert "v100-writeup-vllm-fp8-c1" not in fp8.predicted["decode_tok_s_p50"].evidence_ids


# --- the spread --------------------------------------------------------------------------------------

CASES = [
    # gpu, model, users, context
    (P100, R1_7B, 1, 4096),
    (P40, R1_14B, 4, 4096),
    (V100, R1_7B, 1, 8192),
    (V100, R1_7B, 8, 8192),
    (V100_PAIR, R1_14B, 8, 8192),
    (T4, R1_7B, 4, 8192),
    (RTX3070, R1_7B, 1, 8192),
    (RTX3090, R1_14B, 1, 16384),
    (RTX4090, R1_32B, 1, 8192),
    (L4, R1_7B, 8, 8192),
    (A100, R1_32B, 16, 8192),
    (H100_4, R1_32B, 32, 16384),
    (H200, R1_7B, 8, 8192),
]


@pytest.mark.parametrize("gpu, model, users, context", CASES,
                         ids=[f"{g.count}x{g.name}-{m.name[-3:]}-{u}u" for g, m, u, _ in CASES])
@pytest.mark.parametrize("priority", ["single_user_speed", "throughput", "memory_headroom"])
def test_every_answer_respects_physics_and_the_facts(gpu, model, users, context, priority):
    rec = advise(gpu, model, work(users, context, priority), EVIDENCE)
    cc = tuple(gpu.compute_capability)
    for r in rec.ranked:
        c = BY_KEY[r.key]
        # documented floors: vLLM 7.0 (7.5 from v0.20), FP8 and AWQ 7.5, llama.cpp 5.0
        if c.backend == "vllm" and cc < (7, 0) or c.quantization in ("fp8", "awq") and cc < (7, 5):
            assert not r.eligible
        if c.backend == "llamacpp":
            assert r.eligible
        # memory: weights + KV for every user's context + runtime within what the engine may take
        if r.fit.fits:
            assert r.fit.weights_gib + r.fit.kv_cache_gib + r.fit.overhead_gib <= r.fit.usable_gib + 1e-9
            per_gpu = gpu.vram_gib * (r.fit.gpu_memory_utilization or 1.0)
            assert r.fit.usable_gib == pytest.approx(per_gpu * r.fit.gpus_used)
        decode, agg = r.predicted["decode_tok_s_p50"], r.predicted["aggregate_tok_s"]
        if decode.value is not None and agg.value is not None and decode.how != "extrapolated":
            assert agg.value <= users * decode.value * 1.02 + 1e-9  # published figures are rounded
        if decode.how == "estimated":  # under weights / bandwidth, even ignoring the KV reads
            # NVIDIA datasheets
            bandwidth = {"3070": 448, "P100": 732, "P40": 346, "V100": 900, "T4": 320, "3090": 936, "4090": 1008, "L4": 300,
                         "A100": 2039, "H100": 3350, "H200": 4800}
            gbs = next((v for k, v in bandwidth.items() if k in gpu.name), None)
            cards = r.fit.gpus_used if r.fit.split == "tensor parallel" else 1
            assert gbs is not None and decode.value <= gbs * 1e9 * cards / (r.fit.weights_gib * GIB)
    if rec.recommended:
        chosen = rec.candidate(rec.recommended)
        assert chosen.eligible and chosen.fit.fits and chosen.launch is not None
        assert len(rec.why) == 3
    assert len(rec.caveats) == len(set(rec.caveats))


def test_the_write_ups_verdict_is_reproduced_from_its_figures():
    for users in (1, 8):
        for priority in ("single_user_speed", "throughput"):
            rec = advise(V100, R1_7B, work(users, priority=priority), published_v100_evidence())
            assert rec.recommended == "llamacpp-q4_k_m"
    eight = advise(V100, R1_7B, work(8, priority="throughput"), published_v100_evidence())
    q4 = eight.candidate("llamacpp-q4_k_m")
    assert q4.predicted["aggregate_tok_s"].value == 235.0 and q4.predicted["decode_tok_s_p50"].value == 29.4
    # the launch command of the write-up's setup: -c 8192 per slot, 8 slots, every layer, flash attention
    assert q4.launch.command.startswith("llama-server -m ") and "-c 65536 --parallel 8 -ngl 99 -fa on" in q4.launch.command
    assert "-DCMAKE_CUDA_ARCHITECTURES=70" in q4.launch.build


def test_an_8_gb_card_fits_the_7b_only_as_4_bit_gguf():
    rec = advise(RTX3070, R1_7B, work(1), EVIDENCE)
    # Q4_K_M 4.36 + 0.44 KV + 1.1 = 5.9 of 7.8 GiB; FP8 8.11 GiB of weights alone is over 0.9 x 7.8
    assert rec.candidate("llamacpp-q4_k_m").fit.fits and not rec.candidate("vllm-fp8").fit.fits
    assert not rec.candidate("llamacpp-q8_0").fit.fits  # 7.62e9 x 8.5 / 8 = 7.54 GiB of weights


def test_capacity_answers_most_users_and_longest_context():
    rec = advise(V100, R1_7B, work(8), published_v100_evidence())
    q4 = rec.candidate("llamacpp-q4_k_m")
    sixteen, q8 = q4.fit.capacity
    room = 15.77 - 1.1 - 4.68e9 / GIB  # GiB left for the KV cache on one V100
    assert sixteen.max_users == int(room * GIB // (8192 * 57344))
    assert sixteen.longest_context == min(131072, int(room * GIB // (8 * 57344)))
    assert q8.kv_flags == "-ctk q8_0 -ctv q8_0" and q8.max_users == int(room * GIB // (8192 * 57344 * 34 / 64))
    l4 = advise(L4, R1_7B, work(8), []).candidate("vllm-fp8")
    assert [c.kv_cache for c in l4.fit.capacity] == ["16-bit", "FP8"]  # FP8 KV cache where FP8 is native
