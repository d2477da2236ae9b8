"""Reading evidence at the workload's load: which rows, interpolation, extrapolation."""

import pytest

from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEFAULT_CANDIDATES, Evidence, GpuSpec, Workload, predict,
                                published_v100_evidence)

FP8, Q4KM, AWQ = DEFAULT_CANDIDATES[:3]
H200 = GpuSpec("NVIDIA H200", (9, 0), 139.8, host_id="gpu-1")
V100 = GpuSpec("Tesla V100-PCIE-16GB", (7, 0), 15.77)


def ev(id, concurrency, candidate="llamacpp-q4_k_m", kind="measured", gpu="NVIDIA H200", cc=(9, 0),
       host="gpu-1", prompt=512, output=100, **figures):
    return Evidence(id=id, candidate=candidate, kind=kind, label=f"run {id}", gpu_name=gpu,
                    compute_capability=cc, concurrency=concurrency, prompt_tokens=prompt,
                    output_tokens=output, host_id=host, url=f"/runs/{id}/", model=R1_7B.name, **figures)


def work(users, prompt=512, output=100):
    return Workload(users=users, prompt_tokens=prompt, output_tokens=output, context_tokens=8192)


# measured-here.md: llama.cpp Q4_K_M on the H200
H200_LLAMACPP = [
    ev("c1", 1, ttft_ms_p50=97.5, decode_tok_s_p50=226.0, aggregate_tok_s=186.0),
    ev("c8", 8, ttft_ms_p50=393.0, decode_tok_s_p50=56.2, aggregate_tok_s=349.0),
]


def test_it_reads_a_measured_level_as_is():
    perf = predict(Q4KM, H200, work(8), H200_LLAMACPP)
    p = perf.metrics["aggregate_tok_s"]
    assert (p.value, p.how, p.evidence_ids) == (349.0, "measured", ("c8",))
    assert perf.basis == "measured on this host" and [r.id for r in perf.evidence] == ["c8"]


def test_it_interpolates_four_users_between_one_and_eight_and_says_so():
    perf = predict(Q4KM, H200, work(4), H200_LLAMACPP)
    p = perf.metrics["decode_tok_s_p50"]
    assert p.how == "interpolated" and p.levels == (1, 8) and p.evidence_ids == ("c1", "c8")
    assert p.value == pytest.approx(226.0 + (56.2 - 226.0) * 3 / 7)
    assert "interpolated linearly between the figures at 1 and 8 users" in p.note
    assert any("Interpolated" in n for n in perf.notes)


def test_it_flags_extrapolation_at_sixteen_users_without_inventing_a_number():
    perf = predict(Q4KM, H200, work(16), H200_LLAMACPP)
    p = perf.metrics["aggregate_tok_s"]
    assert p.how == "extrapolated" and p.value == 349.0 and p.levels == (8,)
    assert "extrapolation" in p.note and "not at 16 users" in p.note
    assert any(n.startswith("Extrapolation") for n in perf.notes)


def test_it_says_when_nothing_was_measured():
    perf = predict(AWQ, H200, work(8), H200_LLAMACPP)
    assert perf.basis is None and perf.evidence == []
    assert all(p.value is None and p.how == "none" for p in perf.metrics.values())


def test_it_prefers_this_host_then_the_gpu_model_then_the_compute_capability_then_published():
    rows = [
        ev("pub", 8, kind="published", host=None, decode_tok_s_p50=1.0),
        ev("cc", 8, gpu="NVIDIA H100 80GB HBM3", host="other", decode_tok_s_p50=2.0),
        ev("model", 8, gpu="H200", host="other", decode_tok_s_p50=3.0),
        ev("host", 8, decode_tok_s_p50=4.0),
    ]
    expected = [("host", "measured on this host"), ("model", "measured on the same GPU model"),
                ("cc", "measured on the same compute capability"), ("pub", "published, not measured here")]
    for i, (value_id, basis) in enumerate(expected):
        perf = predict(Q4KM, H200, work(8), rows[:len(rows) - i])
        assert perf.basis == basis and perf.metrics["decode_tok_s_p50"].evidence_ids == (value_id,)


def test_it_ignores_figures_from_other_gpus():
    perf = predict(Q4KM, H200, work(8), published_v100_evidence())
    assert perf.basis is None and len(perf.ignored) == 2


def test_it_picks_the_closest_prompt_and_output_lengths_and_warns():
    rows = [ev("long", 8, prompt=4096, output=1024, decode_tok_s_p50=40.0),
            ev("near", 8, prompt=1024, output=128, decode_tok_s_p50=50.0)]
    perf = predict(Q4KM, H200, work(8), rows)
    assert perf.metrics["decode_tok_s_p50"].evidence_ids == ("near",) and perf.shape == (1024, 128)
    assert any("may not transfer" in n for n in perf.notes)
    exact = predict(Q4KM, H200, work(8), rows + [ev("exact", 8, decode_tok_s_p50=60.0)])
    assert exact.metrics["decode_tok_s_p50"].evidence_ids == ("exact",)
    assert not any("may not transfer" in n for n in exact.notes)


def test_the_first_row_per_level_wins():
    perf = predict(Q4KM, H200, work(8), [ev("new", 8, decode_tok_s_p50=50.0), ev("old", 8, decode_tok_s_p50=40.0)])
    assert perf.metrics["decode_tok_s_p50"].value == 50.0


def test_it_flags_published_vllm_figures_on_volta_as_not_reproducible():
    perf = predict(FP8, V100, work(8), published_v100_evidence())
    assert perf.basis == "published, not measured here"
    for ref in perf.evidence:
        assert ref.flags and ref.flags[0].startswith("not reproducible with upstream vLLM")
    q4 = predict(Q4KM, V100, work(8), published_v100_evidence())
    assert all(ref.flags == () for ref in q4.evidence)
