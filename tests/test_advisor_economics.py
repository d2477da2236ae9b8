"""Energy per output token and cost per million output tokens (issue 29): measured at the workload's
load where a run measured it, else estimated from the GPU's maximum board power over the predicted
throughput, labelled and banded; a cost only from a stated price; the team's GPU against a rented
one. Every expected value is worked by hand in the comments."""

import dataclasses

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, AdviceInputError, Evidence, GpuSpec, Workload,
                                advise, published_v100_evidence)
from benchmarks.advisor.economics import POWER_SHARE, price_comparison, rented_gpu
from benchmarks.advisor.gpus import peak_of
from benchmarks.engine.cost import OWNED, RENTED, HourlyPrice

H200 = GpuSpec("NVIDIA H200", (9, 0), 139.8, host_id="gpu-1")
V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77)
V100_OWNED = HourlyPrice(OWNED, 0.20, "USD", 0.30)  # 0.20 USD/h amortisation, 0.30 USD/kWh


def ev(id, concurrency, candidate, gpu="NVIDIA H200", cc=(9, 0), host="gpu-1", **figures):
    return Evidence(id=id, candidate=candidate, kind="measured", label=f"run {id}", gpu_name=gpu,
                    compute_capability=cc, concurrency=concurrency, prompt_tokens=512, output_tokens=100,
                    host_id=host, url=f"/runs/{id}/", model=R1_7B.name, **figures)


def work(priority, users=8):
    return Workload(users=users, prompt_tokens=512, output_tokens=100, context_tokens=8192, priority=priority)


@pytest.mark.parametrize("reported, watts", [
    ("Tesla V100-PCIE-16GB", 250), ("Tesla V100-SXM2-16GB", 300), ("Tesla V100-SXM2-32GB", 300),
    ("NVIDIA A100-SXM4-80GB", 400), ("NVIDIA A100 80GB PCIe", 300), ("NVIDIA H100 80GB HBM3", 700),
    ("NVIDIA H100 PCIe", 350), ("NVIDIA L4", 72), ("Tesla T4", 70), ("NVIDIA H200", 700),
    ("NVIDIA A100-PCIE-40GB", None),  # one row for the 400 W SXM4 board and the 250 W card: no figure
])
def test_each_gpu_row_has_its_datasheet_board_power_or_none(reported, watts):
    peak = peak_of(reported)
    assert peak.power_w == watts
    assert "maximum board power" in peak.source if watts else "no power" in peak.note


def test_energy_and_cost_measured_at_the_workloads_level():
    rows = [ev("q8", 8, "llamacpp-q4_k_m", aggregate_tok_s=400.0, decode_tok_s_p50=50.0, energy_per_token_j=0.9)]
    price = HourlyPrice(OWNED, 1.00, "USD", 0.20)
    rec = advise(H200, R1_7B, work("lowest_cost"), rows, price=price)
    q4 = rec.candidate("llamacpp-q4_k_m")
    # Energy: the run's own 0.9 J/token at 8 users.
    assert (q4.energy.value, q4.energy.how, q4.energy.band) == (0.9, "measured", None)
    # Cost: 400 tok/s is 1.44 M tokens an hour, so 1.00 USD/h is 0.69444 USD per million; a million
    # tokens take 0.9 MJ = 0.25 kWh, 0.05 USD at 0.20 USD/kWh: 0.74444 USD per million output tokens.
    assert q4.cost.value == pytest.approx(0.744444, rel=1e-5) and q4.cost.how == "measured" and q4.cost.band is None
    # the power it rests on: 0.9 J/token x 400 tok/s = 360 W, measured
    assert "360 W (measured" in q4.cost.power
    assert q4.priority_how == "measured" and q4.priority_value == pytest.approx(1 / 0.744444, rel=1e-5)
    assert "0.74 USD per million output tokens (measured)" in q4.priority_text
    assert "owned: 1.00 USD/h amortisation, 0.20 USD/kWh" in q4.priority_text  # the price it comes from


def test_a_rented_gpus_cost_rests_on_its_throughput_alone():
    rows = [ev("f8", 8, "vllm-fp8", aggregate_tok_s=3000.0, decode_tok_s_p50=375.0)]  # no energy measured
    rec = advise(H200, R1_7B, work("lowest_cost"), rows, price=HourlyPrice(RENTED, 2.50, "USD"))
    fp8 = rec.candidate("vllm-fp8")
    # 3000 tok/s = 10.8 M tokens an hour; 2.50 / 10.8 = 0.231481 USD per million, electricity included
    assert fp8.cost.value == pytest.approx(0.231481, rel=1e-5) and fp8.cost.how == "measured"
    assert rec.recommended == "vllm-fp8"


def test_without_measured_energy_it_estimates_from_the_board_power_with_a_band():
    rec = advise(V100, R1_7B, work("lowest_cost"), published_v100_evidence(), price=V100_OWNED)
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert POWER_SHARE == (0.4, 1.0)
    # The write-up's 235 tok/s at 8 users (published); the V100 PCIe's 250 W board drawing 40 % to
    # 100 % of it: 100 to 250 W. Energy: 100 / 235 = 0.425532 to 250 / 235 = 1.063830 J/token, the
    # geometric middle sqrt(0.425532 x 1.063830) = 0.672825.
    assert q4.energy.how == "estimated"
    assert q4.energy.band == pytest.approx((0.425532, 1.063830), rel=1e-5)
    assert q4.energy.value == pytest.approx(0.672825, rel=1e-5)
    # Cost: 235 tok/s = 0.846 M tokens an hour; (0.20 + 0.30 x 0.100 kW) / 0.846 = 0.271868 to
    # (0.20 + 0.30 x 0.250 kW) / 0.846 = 0.325059 USD per million output tokens.
    assert q4.cost.how == "estimated" and q4.cost.band == pytest.approx((0.271868, 0.325059), rel=1e-5)
    for said in ("0.27 to 0.33 USD per million output tokens, estimated, not measured", "235 tok/s (published)",
                 "100 to 250 W (estimated: 40 % to 100 % of the Tesla V100 (PCIe)'s 250 W maximum board power"):
        assert said in q4.cost.text
    # A throughput read from data with only its power estimated ranks above a throughput estimated
    # from the datasheet, whatever the estimate's middle: llama.cpp Q4_K_M is recommended.
    assert rec.recommended == "llamacpp-q4_k_m" and rec.ranked[0].key == "llamacpp-q4_k_m"
    assert rec.confidence == "low" and "maximum board power" in rec.confidence_why


def test_an_estimated_throughput_widens_the_cost_band_by_its_own():
    rate = HourlyPrice(RENTED, 2.50, "USD")
    rec = advise(rented_gpu("H100 (SXM)"), R1_7B, work("lowest_cost"), [], price=rate)
    for r in rec.ranked:
        if r.cost is None or r.cost.value is None:
            continue
        low_t, high_t = r.predicted["aggregate_tok_s"].band
        # rented: 2.50 USD/h over tok/s x 3600 tokens an hour, the band's ends swapped
        assert r.cost.band == pytest.approx((2.5 / (high_t * 3600) * 1e6, 2.5 / (low_t * 3600) * 1e6))
        assert r.cost.how == "estimated" and "estimated, not measured" in r.cost.text


def test_ranking_on_energy_follows_the_measured_joules_not_the_throughput():
    rows = [ev("f8", 8, "vllm-fp8", aggregate_tok_s=350.0, decode_tok_s_p50=44.0, energy_per_token_j=0.5),
            ev("q8", 8, "llamacpp-q4_k_m", aggregate_tok_s=400.0, decode_tok_s_p50=50.0, energy_per_token_j=0.9)]
    rec = advise(H200, R1_7B, work("lowest_energy"), rows)
    assert rec.recommended == "vllm-fp8"  # 0.5 J/token against 0.9, though 350 tok/s against 400
    assert [r.key for r in rec.ranked[:2]] == ["vllm-fp8", "llamacpp-q4_k_m"]
    assert rec.ranked[0].priority_value == pytest.approx(1 / 0.5)
    assert rec.summary.startswith("vLLM FP8 for 8 users on NVIDIA H200: lowest energy per output token, 0.5 J/token")
    assert rec.candidate("vllm-fp8").cost is None  # no price: no cost, none assumed


def test_ranking_on_cost_needs_a_price_and_never_assumes_one():
    with pytest.raises(AdviceInputError) as e:
        advise(V100, R1_7B, work("lowest_cost"), published_v100_evidence())
    assert "needs a price" in e.value.errors["price_per_hour"]
    with pytest.raises(AdviceInputError) as e:
        advise(V100, R1_7B, work("lowest_cost"), [], price=HourlyPrice(RENTED, -1.0, "USD"))
    assert set(e.value.errors) == {"price_per_hour"}
    with pytest.raises(AdviceInputError) as e:
        advise(V100, R1_7B, work("throughput"), [], price=HourlyPrice(RENTED, 1.0, "USD", 0.3))
    assert "rented GPU's rate includes it" in e.value.errors["price_per_kwh"]


def test_a_gpu_without_a_board_power_gets_no_energy_estimate_and_says_so():
    a100 = GpuSpec("NVIDIA A100-PCIE-40GB", (8, 0), 39.4)
    rows = [ev("a8", 8, "llamacpp-q4_k_m", gpu=a100.name, cc=(8, 0), host=None, aggregate_tok_s=360.0,
               decode_tok_s_p50=45.0)]
    rec = advise(a100, R1_7B, work("lowest_cost"), rows, price=HourlyPrice(OWNED, 0.5, "USD", 0.25))
    q4 = rec.candidate("llamacpp-q4_k_m")
    assert q4.energy.value is None and "no maximum board power for the A100 40GB" in q4.energy.text
    assert q4.cost.value is None and "electricity is priced but" in q4.cost.text
    # owned without an electricity price: the amortisation alone, 0.5 / (360 x 3600 / 1e6) = 0.385802
    rec = advise(a100, R1_7B, work("lowest_cost"), rows, price=HourlyPrice(OWNED, 0.5, "USD"))
    assert rec.candidate("llamacpp-q4_k_m").cost.value == pytest.approx(0.385802, rel=1e-5)


H100_FP8 = [ev("h8", 8, "vllm-fp8", gpu="NVIDIA H100 80GB HBM3", host="h100-host", aggregate_tok_s=3000.0,
               decode_tok_s_p50=375.0)]


def _compare(rate: float):
    evidence = published_v100_evidence() + H100_FP8
    yours = advise(V100, R1_7B, work("lowest_cost"), evidence, price=V100_OWNED)
    rented = advise(rented_gpu("H100 (SXM)"), R1_7B, work("lowest_cost"), evidence,
                    price=HourlyPrice(RENTED, rate, "USD"))
    return price_comparison(yours, rented)


def test_your_v100_against_a_rented_h100_names_the_cheaper_when_the_bands_do_not_overlap():
    cmp = _compare(2.50)
    yours, rented = cmp.sides
    # V100 owned: 0.271868 to 0.325059 (estimated power, above); H100 rented: 2.50 / 10.8 = 0.231481,
    # measured: below the V100's band, so the rented H100 is cheaper.
    assert (yours.candidate, rented.candidate) == ("llamacpp-q4_k_m", "vllm-fp8")
    assert yours.cost.band == pytest.approx((0.271868, 0.325059), rel=1e-5)
    assert rented.cost.value == pytest.approx(0.231481, rel=1e-5)
    assert cmp.cheaper == "rented"
    assert cmp.verdict.startswith("Cheaper on the rented H100 (SXM): 0.23 against 0.27 to 0.33 USD per million")
    assert cmp.text.startswith("8 users of DeepSeek-R1-Distill-Qwen-7B: on your Tesla V100-PCIE-16GB: llama.cpp "
                               "Q4_K_M, 0.27 to 0.33 USD per million output tokens, estimated")
    assert "Against a rented H100 (SXM): vLLM FP8, 0.23 USD per million output tokens (measured): at 3000 tok/s" \
        in cmp.text and "rented at 2.50 USD/h" in cmp.text


def test_no_winner_is_claimed_within_each_others_band():
    cmp = _compare(3.00)  # 3.00 / 10.8 = 0.277778, inside the V100's 0.271868 to 0.325059
    assert cmp.sides[1].cost.value == pytest.approx(0.277778, rel=1e-5)
    assert cmp.cheaper is None and "within each other's band" in cmp.verdict


def test_the_comparison_keeps_the_currency_and_says_when_a_side_has_no_cost():
    yours = advise(V100, R1_7B, work("lowest_cost"), published_v100_evidence(), price=V100_OWNED)
    rented = advise(rented_gpu("H100 (SXM)"), R1_7B, work("lowest_cost"), [], price=HourlyPrice(RENTED, 2.0, "EUR"))
    assert "different currencies (USD, EUR)" in price_comparison(yours, rented).verdict
    nothing = dataclasses.replace(rented, ranked=[], recommended=None)
    assert "the cost on H100 (SXM) is not known" in price_comparison(yours, nothing).verdict
