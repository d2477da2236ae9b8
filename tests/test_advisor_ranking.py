"""The ranking follows the physics the step-time model states: where a step is bound by its
matrix work (many users on a GPU with FP8 tensor cores), FP8 weights multiplied in FP8 beat AWQ's
4-bit weights multiplied at 16 bit; where it is bound by its reads (one user), the fewer bytes win."""

import pytest

from benchmarks.advisor import DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, GpuSpec, Workload, advise

HOPPER_AND_BLACKWELL = [("NVIDIA H100 80GB HBM3", (9, 0), 79.6), ("NVIDIA H200", (9, 0), 141),
                        ("NVIDIA B200", (10, 0), 180)]


@pytest.mark.parametrize("name, cc, vram", HOPPER_AND_BLACKWELL)
def test_fp8_ranks_over_awq_where_the_step_is_compute_bound(name, cc, vram):
    gpu = GpuSpec(name, cc, vram)
    busy = advise(gpu, R1_7B, Workload(128, 512, 128, priority="throughput"), [])
    fp8, awq = (busy.candidate(k).predicted["aggregate_tok_s"].value for k in ("vllm-fp8", "vllm-awq"))
    assert fp8 > awq
    assert [r.key for r in busy.ranked].index("vllm-fp8") < [r.key for r in busy.ranked].index("vllm-awq")
    alone = advise(gpu, R1_7B, Workload(1, 512, 128), [])
    fp8, awq = (alone.candidate(k).predicted["decode_tok_s_p50"].value for k in ("vllm-fp8", "vllm-awq"))
    assert awq > fp8  # one stream reads the weights every step: 4 bits beat 8


def test_on_ampere_fp8_runs_as_w8a16_and_gains_nothing_from_fp8_tensor_cores():
    a100 = GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80)
    busy = advise(a100, R1_7B, Workload(128, 512, 128, priority="throughput"), [])
    fp8, awq = (busy.candidate(k).predicted["aggregate_tok_s"].value for k in ("vllm-fp8", "vllm-awq"))
    assert fp8 <= awq * 1.05  # both multiply at 16 bit there: no compute advantage for FP8
