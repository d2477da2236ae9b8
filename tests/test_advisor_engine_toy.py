"""A new engine for the decision page is one module: an AdvisorEngine subclass with its candidate,
its facts and its speed model's formats, registered. Here SGLang FP8, written as that module would
be, is advised on end to end beside the engines the package holds: refused where its fact says,
estimated (and labelled as borrowing vLLM's fit until the figure table has its own), ranked, and
given its launch command."""

from datetime import date

import pytest

from benchmarks.advisor import DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEFAULT_CANDIDATES, GpuSpec, Workload, advise
from benchmarks.advisor.backends import AdvisorEngine, Launch, WeightFormat, engine_of, register, unregister
from benchmarks.advisor.facts import Candidate, Fact, fact


class SGLang(AdvisorEngine):
    name = "sglang"
    candidates = (Candidate("sglang-fp8", "SGLang FP8", "sglang", "fp8", ("sglang-fp8-min-cc",), "fp8-size",
                            embedding_bits=16, order=9),)
    facts = (Fact("sglang-fp8-min-cc", "SGLang's FP8 kernels need FP8 tensor cores (compute capability 8.9)",
                  "sgl-project/sglang docs, Quantization", date(2026, 12, 1), min_cc=(8, 9), engine="sglang"),)
    variant_quantization = {"fp8": "fp8"}
    formats = {"fp8": WeightFormat(8, 8, 16, "fp8", (8, 9))}
    fitted_as = "vllm"

    def launch(self, candidate, model, gpu, workload, fit):
        return Launch(f"python -m sglang.launch_server --model-path {model.name}-FP8 --port 30000 "
                      f"--max-running-requests {workload.users}", "", ("--max-running-requests: one per user.",))


@pytest.fixture
def sglang():
    register(SGLang)
    yield engine_of("sglang")
    unregister("sglang")


def test_a_new_engine_is_one_module_and_is_advised_end_to_end(sglang):
    candidates = DEFAULT_CANDIDATES + sglang.candidates
    h100 = GpuSpec("NVIDIA H100 80GB HBM3", (9, 0), 79.6)
    rec = advise(h100, R1_7B, Workload(32, 512, 128, priority="throughput"), [], candidates)
    toy = rec.candidate("sglang-fp8")
    assert toy.eligible and toy.fit.fits and toy.launch.command.startswith("python -m sglang.launch_server")
    aggregate = toy.predicted["aggregate_tok_s"]
    assert aggregate.how == "estimated" and aggregate.band[0] < aggregate.value < aggregate.band[1]
    assert "no figure of SGLang in it yet: its steps are taken as vLLM's" in toy.estimate
    # its format is vLLM FP8's, borrowed fit and all: the same estimate, ranked beside it
    assert aggregate.value == pytest.approx(rec.candidate("vllm-fp8").predicted["aggregate_tok_s"].value, rel=1e-9)
    assert fact("sglang-fp8-min-cc").statement.startswith("SGLang's FP8")  # its facts are the registry's
    # refused where its own fact says, with that fact's words
    a100 = advise(GpuSpec("NVIDIA A100-SXM4-80GB", (8, 0), 80), R1_7B, Workload(8, 512, 128), [], candidates)
    refused = a100.candidate("sglang-fp8")
    assert not refused.eligible and any("compute capability 8.9" in r for r in refused.ineligible_reasons)


def test_unregistered_it_is_gone_and_nothing_else_changed(sglang):
    unregister("sglang")
    assert engine_of("sglang").candidates == ()
    with pytest.raises(KeyError):
        fact("sglang-fp8-min-cc")
    register(SGLang)  # for the fixture's own unregister
