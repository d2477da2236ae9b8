"""Fit arithmetic, checked against numbers worked out by hand."""

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEFAULT_CANDIDATES, GpuSpec,
                                kv_bytes_per_token, memory_fit, weight_bytes)

GIB = 1024**3
FP8, Q4KM, AWQ = DEFAULT_CANDIDATES[:3]
V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 16.0)


def test_kv_cache_per_token_is_hand_computed():
    # 2 (K and V) * 28 layers * 4 KV heads * 128 head dim * 2 bytes (fp16)
    assert kv_bytes_per_token(R1_7B) == 2 * 28 * 4 * 128 * 2 == 57344
    assert kv_bytes_per_token(R1_7B, cache_bytes=1) == 28672


@pytest.mark.parametrize("users,context,gib", [
    (1, 131072, 7.0),  # 131072 * 57344 = 7 * 2**30
    (8, 8192, 3.5),
    (1, 8192, 0.4375),
    (32, 8192, 14.0),
])
def test_kv_cache_grows_with_users_times_context(users, context, gib):
    big = GpuSpec("NVIDIA H200", (9, 0), 139.8)
    assert memory_fit(Q4KM, R1_7B, big, users, context).kv_cache_gib == pytest.approx(gib)


def test_a_quantized_kv_cache_is_tried_when_the_16_bit_one_does_not_fit():
    # 32 x 8192 tokens at 57344 bytes = 14 GiB: with 4.36 GiB of weights, over a 16 GiB V100;
    # -ctk/-ctv q8_0 store 34 bytes per 32 values: 14 x 34 / 64 = 7.4375 GiB, which fits.
    fit = memory_fit(Q4KM, R1_7B, V100, 32, 8192)
    assert fit.fits and fit.kv_cache == "q8_0" and fit.kv_flags == "-ctk q8_0 -ctv q8_0"
    assert fit.kv_cache_gib == pytest.approx(14 * 34 / 64)


def test_q4_k_m_uses_the_known_file_size():
    size, source = weight_bytes(Q4KM, R1_7B)
    assert size == 4.68e9 and "known" in source


def test_fp8_and_awq_sizes_are_estimated_from_parameters():
    # 6.53e9 layer weights at 1 byte + 1.09e9 embedding/lm_head weights at 2 bytes
    assert weight_bytes(FP8, R1_7B)[0] == pytest.approx(6.53e9 + 2.18e9)
    # 6.53e9 at 4.15625 bits (4-bit + fp16 scale and 4-bit zero per 128) + 2.18e9 bytes
    assert weight_bytes(AWQ, R1_7B)[0] == pytest.approx(6.53e9 * 4.15625 / 8 + 2.18e9)


def test_the_callers_size_wins():
    assert weight_bytes(FP8, R1_7B, {"fp8": 7.6e9}) == (7.6e9, "the variant's size as given")
    fit = memory_fit(AWQ, R1_7B, V100, 1, 8192, variant_bytes={"awq": 5.0e9})
    assert fit.weights_gib == pytest.approx(5.0e9 / GIB)


def test_llamacpp_fits_eight_users_on_a_v100():
    fit = memory_fit(Q4KM, R1_7B, V100, 8, 8192)
    # 4.68e9 B weights + 3.5 GiB KV + 1.1 GiB runtime, against all 16 GiB
    assert fit.required_gib == pytest.approx(4.68e9 / GIB + 3.5 + 1.1)
    assert fit.usable_gib == 16.0 and fit.gpu_memory_utilization is None
    assert fit.fits and fit.gpus_used == 1
    assert fit.headroom_gib == pytest.approx(16.0 - fit.required_gib)
    assert "8 users x 8192 tokens x 57344 bytes" in fit.explanation


def test_vllm_respects_gpu_memory_utilization():
    fit = memory_fit(FP8, R1_7B, V100, 1, 8192)
    assert fit.gpu_memory_utilization == 0.9 and fit.usable_gib == pytest.approx(14.4)
    # 8.71e9 B weights + 0.4375 GiB KV + 2 GiB (CUDA context 0.5 + activations/graphs 1.5)
    assert fit.required_gib == pytest.approx(8.71e9 / GIB + 0.4375 + 2.0)
    assert memory_fit(FP8, R1_7B, V100, 1, 8192, gpu_memory_utilization=0.5).usable_gib == 8.0


def test_full_context_fp8_does_not_fit_one_v100_but_fits_two():
    # 8.11 GiB weights + 7 GiB of 16-bit KV (131072 x 57344 B) + 2 GiB runtime = 17.1 GiB > 14.4 GiB usable;
    # vLLM's FP8 KV cache (any GPU it runs on; E5M2 below compute capability 8.9, which has no E4M3
    # conversions: vLLM issue #26431) halves the 7 GiB: 13.6 GiB + the 0.5 GiB margin = 14.1 GiB <= 14.4
    one = memory_fit(FP8, R1_7B, V100, 1, 131072)
    assert one.fits and one.kv_cache == "FP8" and one.kv_flags == "--kv-cache-dtype fp8_e5m2"
    assert one.required_gib == pytest.approx(8.71e9 / GIB + 3.5 + 2.0)
    assert one.capacity[0].kv_cache == "16-bit" and one.capacity[0].max_users == 0  # 16-bit: not one user
    # two such users: 8.11 + 7 (FP8 KV) + 2 = 17.1 > 14.4 on one card; on two (tensor parallel) the
    # 16-bit cache fits: 8.11 + 14 + 4 = 26.1 GiB, + 1 GiB margin, <= 28.8
    pair = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 16.0, count=2)
    assert not memory_fit(FP8, R1_7B, V100, 2, 131072).fits
    two = memory_fit(FP8, R1_7B, pair, 2, 131072)
    assert two.fits and two.gpus_used == 2 and two.kv_cache == "16-bit"
    assert two.overhead_gib == 4.0 and two.usable_gib == pytest.approx(28.8)


def test_it_does_not_fit_thirty_two_full_users_on_eight_gib():
    fit = memory_fit(Q4KM, R1_7B, GpuSpec("small", (8, 6), 8.0), 32, 8192)
    assert not fit.fits and fit.headroom_gib < 0
    assert fit.explanation.startswith("Does not fit")
