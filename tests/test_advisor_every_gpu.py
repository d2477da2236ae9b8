"""Advice on every GPU from Pascal to Hopper: 36 workloads (1 to 8 cards, 7B to 70B, 1 to 64 users,
4k to 32k contexts), each with the verdict, refusals and command checks a vLLM or llama.cpp
maintainer would expect, and the rule or source each expectation rests on — worked out here from
the engines' code and docs and the models' config.json, never read back from the advisor."""

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_LLAMA_8B as L8, DEEPSEEK_R1_DISTILL_LLAMA_70B as L70,
                                DEEPSEEK_R1_DISTILL_QWEN_7B as Q7, DEEPSEEK_R1_DISTILL_QWEN_14B as Q14,
                                DEEPSEEK_R1_DISTILL_QWEN_32B as Q32, DEFAULT_CANDIDATES, EngineBuilds, GpuSpec,
                                Workload, advise, published_v100_evidence)

GIB = 1024**3
BY_KEY = {c.key: c for c in DEFAULT_CANDIDATES}
ANY = "any"  # some recommendation: the candidates are estimates a measurement must settle, or close


def gpu(name, cc, vram, count=1):
    return GpuSpec(name, cc, vram, count=count)


V100 = ("Tesla V100-PCIE-16GB", (7, 0), 15.77)
P40, P100 = ("Tesla P40", (6, 1), 22.4), ("Tesla P100-PCIE-16GB", (6, 0), 15.9)
T4, RTX2080TI = ("Tesla T4", (7, 5), 14.58), ("NVIDIA GeForce RTX 2080 Ti", (7, 5), 10.75)
RTX3060, RTX3070 = ("NVIDIA GeForce RTX 3060", (8, 6), 11.76), ("NVIDIA GeForce RTX 3070", (8, 6), 7.79)
RTX3090, RTX4090 = ("NVIDIA GeForce RTX 3090", (8, 6), 23.69), ("NVIDIA GeForce RTX 4090", (8, 9), 23.99)
L4, L40S, A10G = ("NVIDIA L4", (8, 9), 22.5), ("NVIDIA L40S", (8, 9), 44.99), ("NVIDIA A10G", (8, 6), 22.49)
A30, A100_40 = ("NVIDIA A30", (8, 0), 23.5), ("NVIDIA A100-PCIE-40GB", (8, 0), 39.5)
A100_80 = ("NVIDIA A100-SXM4-80GB", (8, 0), 79.3)
H100, H100_PCIE = ("NVIDIA H100 80GB HBM3", (9, 0), 79.6), ("NVIDIA H100 PCIe", (9, 0), 79.6)
H200 = ("NVIDIA H200", (9, 0), 139.8)

# Rules, each from the engines' own code or docs:
VOLTA_REFUSES = {"vllm-fp8", "vllm-awq"}  # vLLM fp8.py (min capability 80, 75 from PR #29901) and awq.py (75)
PASCAL_REFUSES = {c.key for c in DEFAULT_CANDIDATES if c.backend == "vllm"}  # vLLM needs 7.0 (install docs)

# (id, gpu, count, model, users, context, priority, builds, expected recommendation, refused, checks)
# expected recommendation: a key, ANY, a prefix ending in "*", or None (nothing fits: the capacity answer)
WORKLOADS = [
    # The V100 write-up's case: its published llama.cpp Q4_K_M figures at 1 and 8 users rank above any estimate.
    ("v100-7b-1u", V100, 1, Q7, 1, 8192, "single_user_speed", None, "llamacpp-q4_k_m", VOLTA_REFUSES, ()),
    ("v100-7b-8u", V100, 1, Q7, 8, 8192, "throughput", None, "llamacpp-q4_k_m", VOLTA_REFUSES, ()),
    # vLLM v0.20 dropped Volta (PR #39878): every vLLM candidate refused, only llama.cpp is left.
    ("v100-7b-8u-vllm0.20", V100, 1, Q7, 8, 8192, "throughput", (0, 20), "llamacpp-*", PASCAL_REFUSES, ()),
    # vLLM v0.19 still runs on Volta: GPTQ (exllama) and 16-bit start, FP8 and AWQ do not.
    ("v100-7b-1u-vllm0.19", V100, 1, Q7, 1, 4096, "single_user_speed", (0, 19), ANY, VOLTA_REFUSES, ("vllm-gptq",)),
    ("2xv100-14b-8u", V100, 2, Q14, 8, 8192, "single_user_speed", None, ANY, VOLTA_REFUSES, ()),
    ("p40-7b-1u", P40, 1, Q7, 1, 4096, "single_user_speed", None, "llamacpp-*", PASCAL_REFUSES, ()),
    ("p40-14b-4u", P40, 1, Q14, 4, 4096, "throughput", None, "llamacpp-*", PASCAL_REFUSES, ()),
    ("p100-7b-4u", P100, 1, Q7, 4, 4096, "throughput", None, "llamacpp-*", PASCAL_REFUSES, ()),
    ("t4-7b-1u", T4, 1, Q7, 1, 4096, "single_user_speed", None, ANY, set(), ()),
    ("t4-7b-8u", T4, 1, Q7, 8, 8192, "throughput", None, ANY, set(), ()),
    ("2080ti-7b-1u", RTX2080TI, 1, Q7, 1, 4096, "single_user_speed", None, ANY, set(), ()),
    ("3060-8b-4u", RTX3060, 1, L8, 4, 8192, "throughput", None, ANY, set(), ()),
    ("3070-7b-1u", RTX3070, 1, Q7, 1, 8192, "single_user_speed", None, ANY, set(), ()),
    ("3090-8b-1u", RTX3090, 1, L8, 1, 8192, "single_user_speed", None, ANY, set(), ()),
    ("3090-14b-4u", RTX3090, 1, Q14, 4, 8192, "throughput", None, ANY, set(), ()),
    ("4090-32b-1u", RTX4090, 1, Q32, 1, 8192, "single_user_speed", None, ANY, set(), ()),
    ("4090-8b-8u", RTX4090, 1, L8, 8, 8192, "throughput", None, ANY, set(), ()),
    ("l4-7b-8u", L4, 1, Q7, 8, 8192, "throughput", None, ANY, set(), ()),
    ("l4-8b-32u", L4, 1, L8, 32, 4096, "throughput", None, ANY, set(), ()),
    ("a10g-7b-8u", A10G, 1, Q7, 8, 8192, "single_user_speed", None, ANY, set(), ()),
    ("a30-7b-16u", A30, 1, Q7, 16, 8192, "throughput", None, ANY, set(), ()),
    ("a100-40-7b-64u", A100_40, 1, Q7, 64, 4096, "throughput", None, ANY, set(), ()),
    ("a100-80-14b-16u", A100_80, 1, Q14, 16, 8192, "throughput", None, ANY, set(), ()),
    # 32B x 8 users x 32k: 64 GiB of 16-bit KV cache; vLLM's FP8 KV cache (any GPU, its attention-backend
    # table) halves it, so vLLM FP8 and AWQ fit on one A100 80GB.
    ("a100-80-32b-8u-32k", A100_80, 1, Q32, 8, 32768, "throughput", None, ANY, set(), ("kv-fp8",)),
    # 70B FP8 on two A100 80GB at 8 x 32k: 67.7 GiB weights + 80 GiB 16-bit KV + 4 > 143 GiB; FP8 KV fits.
    ("2xa100-80-70b-8u-32k", A100_80, 2, L70, 8, 32768, "throughput", None, ANY, set(), ("fp8-tp2",)),
    ("l40s-32b-8u", L40S, 1, Q32, 8, 8192, "throughput", None, ANY, set(), ()),
    ("h100-8b-1u", H100, 1, L8, 1, 4096, "single_user_speed", None, ANY, set(), ()),
    ("h100-8b-32u", H100, 1, L8, 32, 8192, "throughput", None, ANY, set(), ()),
    ("h100-8b-64u", H100, 1, L8, 64, 4096, "throughput", None, ANY, set(), ()),
    # 64 x 32k of an 8B's KV cache is 256 GiB (128 in FP8): nothing fits one H100.
    ("h100-8b-64u-32k", H100, 1, L8, 64, 32768, "throughput", None, None, set(), ()),
    ("4xh100-32b-32u", H100, 4, Q32, 32, 16384, "throughput", None, ANY, set(), ()),
    ("2xh100pcie-70b-16u", H100_PCIE, 2, L70, 16, 8192, "throughput", None, ANY, set(), ()),
    ("h200-7b-8u", H200, 1, Q7, 8, 8192, "throughput", None, ANY, set(), ()),
    # a 70B in BF16 is 141 GB (131 GiB): more than 0.9 x 139.8 GiB of one H200; FP8 (68 GiB) fits.
    ("h200-70b-8u", H200, 1, L70, 8, 8192, "single_user_speed", None, ANY, set(), ("no-bf16",)),
    # 28 attention heads do not divide by 8 (vLLM's verify_with_parallel_config): the 7B needs more than
    # four 8 GB cards at 64 x 8192, so vLLM cannot serve it; llama.cpp's layer split can.
    ("8x3070-7b-64u", RTX3070, 8, Q7, 64, 8192, "throughput", None, "llamacpp-*", set(), ("tp8-heads",)),
    # Qwen2.5-14B's MLP is 13,824 wide: 1,728 per card over 8, not a multiple of AWQ's group size 128.
    ("8x3070-14b-16u", RTX3070, 8, Q14, 16, 8192, "throughput", None, ANY, set(), ("tp8-awq",)),
    # a 32B at Q4_K_M is 20 GB: more than a T4's 14.6 GiB; two T4s (layer split) hold it.
    ("t4-32b-1u", T4, 1, Q32, 1, 4096, "single_user_speed", None, None, set(), ("two-t4",)),
]
assert len(WORKLOADS) >= 30


def answer(row):
    _, (name, cc, vram), count, model, users, context, priority, version, *_ = row
    builds = EngineBuilds(vllm_version=version) if version else EngineBuilds()
    work = Workload(users=users, prompt_tokens=512, output_tokens=100, context_tokens=context, priority=priority)
    return advise(gpu(name, cc, vram, count), model, work, published_v100_evidence(), builds=builds)


@pytest.mark.parametrize("row", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_the_verdict_refusals_and_commands(row):
    wid, (name, cc, vram), count, model, users, context, priority, version, expected, refused, checks = row
    rec = answer(row)
    assert {r.key for r in rec.ranked if not r.eligible} >= refused
    for key in refused:
        assert rec.candidate(key).ineligible_reasons, key
    if expected is None:
        assert rec.recommended is None and "Nothing can be recommended" in rec.summary
        assert rec.capacity and rec.capacity[0].startswith(f"At {context} tokens each, ")
    elif expected == ANY:
        assert rec.recommended is not None, rec.summary
    elif expected.endswith("*"):
        assert rec.recommended is not None and rec.recommended.startswith(expected[:-1]), rec.summary
    else:
        assert rec.recommended == expected, rec.summary
    if rec.recommended:
        chosen = rec.candidate(rec.recommended)
        assert chosen.eligible and chosen.fit.fits and chosen.launch is not None
        assert len(rec.why) == 3
        if chosen.priority_how == "estimated":  # labelled, with a band and the figures it rests on
            assert rec.confidence == "low" and "estimated" in rec.summary
            assert chosen.estimate_sources and chosen.estimate.startswith("Estimated, not measured")
    for r in rec.ranked:
        if r.launch is None:
            continue
        command = r.launch.command
        if BY_KEY[r.key].backend == "vllm":
            # pre-quantized checkpoints are served without --quantization (awq_marlin.py, gptq_marlin.py)
            assert "--quantization" not in command, command
            # bfloat16 needs compute capability 8.0: --dtype half below
            assert ("--dtype half" in command) == (tuple(cc) < (8, 0)), command
            if "--tensor-parallel-size" in command:
                size = int(command.split("--tensor-parallel-size ")[1].split()[0])
                assert model.attention_heads % size == 0 and (model.kv_heads % size == 0 or size % model.kv_heads == 0)
        else:
            assert "-ngl 99" in command and f"--parallel {users}" in command and f"-c {users * context}" in command
            # llama.cpp splits over every GPU it sees: sized on fewer, it is told which
            pinned = ",".join(str(i) for i in range(r.fit.gpus_used))
            assert command.startswith(f"CUDA_VISIBLE_DEVICES={pinned} ") == (r.fit.gpus_used < count), command
    if version and version >= (0, 20) and tuple(cc) == (7, 0):  # refused by the release: which still run
        gptq = rec.candidate("vllm-gptq")
        assert any("releases before v0.20 still start it" in s for s in gptq.ineligible_reasons), gptq.ineligible_reasons
    if "vllm-gptq" in checks:
        assert rec.candidate("vllm-gptq").eligible and "before v0.20" not in rec.candidate("vllm-gptq").releases
    if "kv-fp8" in checks:  # an A100 (8.0) has no E4M3 conversions: E5M2 (vLLM issue #26431)
        for key in ("vllm-fp8", "vllm-awq"):
            r = rec.candidate(key)
            assert r.fit.fits and "--kv-cache-dtype fp8_e5m2" in r.launch.command, r.fit.explanation
    for r in rec.ranked:  # the FP8 KV cache's format follows the GPU: E4M3 from compute capability 8.9
        if r.launch is not None and "--kv-cache-dtype" in r.launch.command:
            dtype = r.launch.command.split("--kv-cache-dtype ")[1].split()[0]
            assert dtype == ("fp8" if tuple(cc) >= (8, 9) else "fp8_e5m2"), r.launch.command
    if "fp8-tp2" in checks:
        r = rec.candidate("vllm-fp8")
        assert r.fit.fits and "--tensor-parallel-size 2" in r.launch.command and "--kv-cache-dtype fp8_e5m2" in r.launch.command
    if "no-bf16" in checks:
        assert not rec.candidate("vllm-bf16").fit.fits and rec.candidate("vllm-fp8").fit.fits
    if "tp8-heads" in checks:
        for key in ("vllm-awq", "vllm-fp8", "vllm-bf16"):
            r = rec.candidate(key)
            assert not r.fit.fits and any("28 attention heads do not divide among 8 GPUs" in s for s in r.reasons)
    if "tp8-awq" in checks:
        r = rec.candidate("vllm-awq")
        assert any("1728 of" in s and "not a multiple of the AWQ group size 128" in s
                   for s in r.fit.tensor_parallel_refused), r.fit.tensor_parallel_refused
        assert "--tensor-parallel-size 8" not in (r.launch.command if r.launch else "")
    if "two-t4" in checks:
        # 32.76e9 x 4.9 bits = 20.1 GB (18.7 GiB) against 14.58 GiB; on two, 18.7 + 1 GiB KV + 2.2 + 1 margin < 29.2
        assert "not one user fits on one GPU" in rec.capacity[0]
        assert any(line.startswith("2 of these GPUs would fit it") for line in rec.capacity), rec.capacity


# Turing or newer, with something that fits (a recommendation is expected): every such workload
TURING_OR_NEWER = [w for w in WORKLOADS if w[1][1] >= (7, 5) and w[8] is not None]


@pytest.mark.parametrize("row", TURING_OR_NEWER, ids=[w[0] for w in TURING_OR_NEWER])
def test_every_turing_or_newer_workload_that_fits_gets_a_recommendation(row):
    rec = answer(row)
    recommendable = {r.key for r in rec.ranked if r.recommendable}
    assert recommendable, [(r.key, r.reasons) for r in rec.ranked]
    assert rec.recommended in recommendable, rec.summary


def test_per_stream_speed_falls_as_users_grow():
    # each decode step reads the weights once and every sequence's KV cache, and its matrix work
    # grows with the batch: a stream can only get slower with more users
    h100 = gpu(*H100)
    speeds = {}
    for users in (1, 8, 32, 64):
        rec = advise(h100, L8, Workload(users=users, prompt_tokens=512, output_tokens=100, context_tokens=4096), [])
        for r in rec.ranked:
            p = r.predicted["decode_tok_s_p50"]
            if p.how == "estimated":
                speeds.setdefault(r.key, []).append(p.value)
    assert len(speeds) >= 6
    for key, values in speeds.items():
        assert values == sorted(values, reverse=True) and values[-1] < values[0] / 1.5, (key, values)


def test_each_gpu_is_estimated_from_its_own_datasheet_and_the_v100_figures_stay_figures():
    # a P40 and an H100 with nothing measured: estimated from their own bandwidth (346 and 3350 GB/s,
    # gpus.py), the P40 several times slower per stream, each labelled with its band
    work = Workload(users=1, prompt_tokens=512, output_tokens=100, context_tokens=4096)
    p40 = advise(gpu(*P40), Q7, work, published_v100_evidence()).candidate("llamacpp-q4_k_m")
    h100 = advise(gpu(*H100), Q7, work, published_v100_evidence()).candidate("llamacpp-q4_k_m")
    assert "346 GB/s" in p40.estimate and "3350 GB/s" in h100.estimate
    slow, fast = (c.predicted["decode_tok_s_p50"] for c in (p40, h100))
    assert slow.how == fast.how == "estimated" and 3 < fast.value / slow.value < 3350 / 346
    # the write-up's V100 figures at 1 and 8 users are read (interpolated), not replaced by an estimate
    v100 = advise(gpu(*V100), Q7, Workload(users=2, prompt_tokens=512, output_tokens=100, context_tokens=4096),
                  published_v100_evidence()).candidate("llamacpp-q4_k_m")
    assert v100.evidence_basis is not None and v100.predicted["decode_tok_s_p50"].how == "interpolated"


def test_an_estimate_above_a_published_figure_is_said_to_rank_below_it():
    # The write-up's V100 evidence, its llama.cpp Q4_K_M figure at 1 user lowered to 40 tok/s (as from a
    # slower build): a published figure still ranks above every estimate, even one whose whole band beats it.
    from dataclasses import replace
    evidence = [replace(e, decode_tok_s_p50=40.0) if e.id == "v100-writeup-llamacpp-q4_k_m-c1" else e
                for e in published_v100_evidence()]
    rec = advise(gpu(*V100), Q7, Workload(users=1, prompt_tokens=512, output_tokens=100, context_tokens=8192),
                 evidence)
    assert rec.recommended == "llamacpp-q4_k_m" and rec.ranked[1].priority_how == "estimated"
    assert rec.why[2].startswith(f"Next: {rec.ranked[1].label}")
    lo, hi = rec.ranked[1].predicted["decode_tok_s_p50"].band
    assert lo > 40.0  # the premise: the next candidate's whole band lies above the published figure
    # said, with both figures, and what to measure
    assert "an estimate ranks below figures that were measured or published" in rec.why[2].lower()
    assert "published 40" in rec.why[2] and f"measure {rec.ranked[1].label} next" in rec.why[2]


def test_memory_headroom_is_never_called_an_estimate_and_vllm_s_is_within_its_share():
    rec = advise(gpu(*H100), L8, Workload(users=16, prompt_tokens=512, output_tokens=100, context_tokens=8192,
                                          priority="memory_headroom"), [])
    assert all("estimates overlap" not in line for line in rec.why)
    awq = rec.candidate("vllm-awq")
    assert "of vLLM's --gpu-memory-utilization 0.9 share left" in awq.priority_text


def test_a_fit_closer_than_the_overheads_uncertainty_is_not_called_one():
    from benchmarks.advisor import memory_fit
    q4 = BY_KEY["llamacpp-q4_k_m"]
    # 4.36 GiB weights + 1 x 8192 x 57344 B (0.4375 GiB) KV + 1.1 GiB runtime = 5.8975 GiB
    required = 4.68e9 / GIB + 0.4375 + 1.1
    tight = memory_fit(q4, Q7, gpu("Some 6 GB card", (8, 6), required + 0.24), 1, 8192)
    assert not tight.fits and "too close to call a fit" in tight.explanation
    assert memory_fit(q4, Q7, gpu("Some 6 GB card", (8, 6), required + 0.6), 1, 8192).fits


def test_the_commands_serve_prequantized_checkpoints_without_quantization():
    rec = advise(gpu(*A100_80), Q7, Workload(users=8, prompt_tokens=512, output_tokens=100, context_tokens=8192), [])
    for key in ("vllm-awq", "vllm-gptq", "vllm-fp8"):
        launch = rec.candidate(key).launch
        assert "--quantization" not in launch.command
        assert any(line.startswith("No --quantization:") and "awq_marlin" in line for line in launch.why)


def test_vllm_s_batching_beats_llamacpp_s_at_many_users():
    # llama-server pays a per-sequence cost every step (sampling, slot handling) that vLLM's batched
    # sampler does not: fitted from llama-server's own many-user runs and vLLM's batched latencies
    from benchmarks.advisor.fit import params_of
    assert params_of("llamacpp")["per_sequence_ms"] > 3 * params_of("vllm")["per_sequence_ms"]
    # so at 64 users on an H100 vLLM's 4-bit weights give several times llama.cpp Q4_K_M's aggregate
    rec = advise(gpu(*H100), Q7, Workload(users=64, prompt_tokens=512, output_tokens=100, context_tokens=4096,
                                          priority="throughput"), [])
    assert rec.recommended.startswith("vllm-")
    awq, q4 = (rec.candidate(k).predicted["aggregate_tok_s"].value for k in ("vllm-awq", "llamacpp-q4_k_m"))
    assert awq > 3 * q4


def test_fed_the_setup_a_figure_was_published_for_the_estimate_gives_that_figure_back():
    # llama.cpp PR #4766: a P40 decodes LLaMA 7B Q4_0 (3.56 GiB; 32 layers x 32 KV heads x 128) at 56.79 tok/s
    # in llama-bench's tg128 (one stream from an empty context: 64 tokens held on average)
    from benchmarks.advisor import ModelSpec
    llama7b = ModelSpec("LLaMA 7B", params_b=6.74, layers=32, kv_heads=32, head_dim=128, context_length=2048,
                        attention_heads=32, intermediate_size=11008)
    rec = advise(gpu(*P40), llama7b, Workload(users=1, prompt_tokens=1, output_tokens=126, context_tokens=128), [],
                 [BY_KEY["llamacpp-q4_k_m"]], variant_bytes={"q4_k_m": 3.56 * GIB})
    lo, hi = rec.candidate("llamacpp-q4_k_m").predicted["decode_tok_s_p50"].band
    assert lo <= 56.79 * 1.01 and hi >= 56.79 * 0.99, (lo, hi)


@pytest.mark.parametrize("name, bandwidth", [
    # NVIDIA's specifications: a "Ti" or "SUPER" is another card with other figures, never its sibling's
    ("NVIDIA GeForce RTX 3070 Ti", 608), ("NVIDIA GeForce RTX 2080 SUPER", 496),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", 672), ("NVIDIA GeForce RTX 3070", 448),
])
def test_a_variant_of_a_card_gets_its_own_datasheet_row(name, bandwidth):
    from benchmarks.advisor.gpus import peak_of
    assert peak_of(name).bandwidth_gbs == bandwidth
    assert peak_of("NVIDIA GeForce RTX 4060") is None  # not listed: no sibling's figures instead


def test_a_published_figure_read_at_its_level_is_labelled_published_not_measured():
    rec = advise(gpu(*V100), Q7, Workload(users=1, prompt_tokens=512, output_tokens=100, context_tokens=8192),
                 published_v100_evidence())
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert q4.predicted["decode_tok_s_p50"].value == 56.0  # the write-up's figure at 1 user
    assert q4.predicted["decode_tok_s_p50"].how == "published" and q4.priority_how == "published"
    assert rec.to_dict()["ranked"][0]["predicted"]["decode_tok_s_p50"]["how"] == "published"
