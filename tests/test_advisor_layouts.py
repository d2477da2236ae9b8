"""Several GPUs in one host: tensor parallel (with its all-reduces over NVLink or PCIe), a layer
split and data-parallel replicas are each estimated, the one that answers the workload best is
used, and the answer says so in words, with the command to start it."""

from benchmarks.advisor import DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, GpuSpec, Workload, advise
from benchmarks.advisor.backends import DEFAULT_CANDIDATES
from benchmarks.advisor.fit import params_of
from benchmarks.advisor.prior import Layout, setup_of
from benchmarks.advisor.steptime import predict

BY_KEY = {c.key: c for c in DEFAULT_CANDIDATES}
A100X4 = GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80, count=4, interconnect="nvlink")


def test_many_users_on_four_cards_are_served_by_replicas_and_the_page_says_so():
    rec = advise(A100X4, R1_7B, Workload(256, 512, 128, priority="throughput"), [])
    fp8 = rec.candidate("vllm-fp8")
    aggregate = fp8.predicted["aggregate_tok_s"]
    assert aggregate.how == "estimated"
    words = next(r for r in fp8.reasons if r.startswith("On this host's 4 GPUs, estimated:"))
    assert "4 replicas of one GPU (data parallel)" in words and "The estimate uses 4 replicas" in words
    assert "4 GPUs in tensor parallel" in words  # the alternative it was weighed against
    assert any("4 replicas: start this once per group of GPUs (CUDA_VISIBLE_DEVICES=0; 1; 2; 3)" in w
               for w in fp8.launch.why)
    # more in all than one card serving every user alone would give
    one = predict(params_of("vllm"), setup_of(BY_KEY["vllm-fp8"], R1_7B, A100X4, Workload(256, 512, 128),
                                            fp8.fit.weights_gib * 1024**3, Layout(1, "")))
    assert aggregate.value > 2 * one.output_tok_s


def test_one_stream_is_fastest_in_tensor_parallel_over_nvlink_not_over_pcie():
    # the all-reduces of each layer cost a few microseconds over NVLink and tens over PCIe, so the
    # same two cards speed one stream up more over NVLink
    c, params = BY_KEY["vllm-bf16"], params_of("vllm")
    work = Workload(1, 512, 128)
    weights = 2 * R1_7B.params_b * 1e9
    speeds = {}
    for link in ("nvlink", "pcie"):
        g = GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80, count=2, interconnect=link)
        speeds[link] = predict(params, setup_of(c, R1_7B, g, work, weights, Layout(2, "tp"))).decode_tok_s
    alone = predict(params, setup_of(c, R1_7B, GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80), work, weights,
                                   Layout(1, ""))).decode_tok_s
    assert speeds["nvlink"] > speeds["pcie"] and speeds["nvlink"] > alone


def test_a_layer_split_reads_one_card_after_another():
    # llama.cpp's layer split: one stream is no faster on two cards than on one (each card reads its
    # half in turn), only a little slower for the hand-over
    c, params = BY_KEY["llamacpp-q4_k_m"], params_of("llamacpp")
    g = GpuSpec("NVIDIA GeForce RTX 3090", (8, 6), 24, count=2)
    work = Workload(1, 512, 128)
    weights = 4.9 / 8 * R1_7B.params_b * 1e9
    split = predict(params, setup_of(c, R1_7B, g, work, weights, Layout(2, "layer-split"))).decode_tok_s
    alone = predict(params, setup_of(c, R1_7B, g, work, weights, Layout(1, ""))).decode_tok_s
    assert 0.9 * alone < split < alone
