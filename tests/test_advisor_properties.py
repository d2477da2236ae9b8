"""Properties that must hold for any GPU, workload and evidence."""

import dataclasses
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.advisor.prior import fitted
from benchmarks.advisor.economics import POWER_SHARE
from benchmarks.advisor.gpus import peak_of
from benchmarks.advisor import (DEEPSEEK_R1_DISTILL_QWEN_7B as R1_7B, DEFAULT_CANDIDATES, FACTS,
                                EngineBuilds, Evidence, GpuSpec, Workload, advise, memory_fit,
                                published_v100_evidence)

GPUS = [("Tesla V100-PCIE-16GB", (7, 0)), ("NVIDIA H200", (9, 0)), ("NVIDIA A100-SXM4-80GB", (8, 0)),
        ("Tesla T4", (7, 5)), ("NVIDIA L4", (8, 9)), ("Tesla P40", (6, 1)), ("Tesla P100", (6, 0))]
KEYS = [c.key for c in DEFAULT_CANDIDATES]
figure = st.none() | st.floats(0.1, 5000).map(lambda x: round(x, 1))

gpus = st.builds(
    lambda model, vram, count, link, host: GpuSpec(model[0], model[1], vram, count, link, host),
    st.sampled_from(GPUS), st.floats(2, 200).map(lambda x: round(x, 2)), st.integers(1, 4),
    st.sampled_from(["pcie", "nvlink"]), st.sampled_from([None, "h1", "h2"]))


@st.composite
def workloads(draw):
    prompt, output = draw(st.integers(1, 4096)), draw(st.integers(1, 1024))
    context = draw(st.integers(prompt + output, 131072))
    target = st.none() | st.floats(1, 2000).map(lambda x: round(x, 1))
    return Workload(users=draw(st.integers(1, 64)), prompt_tokens=prompt, output_tokens=output,
                    context_tokens=context, ttft_p90_ms=draw(target), tpot_ms=draw(target),
                    min_user_tok_s=draw(target),
                    priority=draw(st.sampled_from(["single_user_speed", "throughput", "memory_headroom",
                                                   "lowest_energy"])))


@st.composite
def evidence_rows(draw):
    n = draw(st.integers(0, 12))
    rows = []
    for i in range(n):
        name, cc = draw(st.sampled_from(GPUS))
        prompt, output = draw(st.sampled_from([(512, 100), (1024, 256), (128, 32)]))
        rows.append(Evidence(
            id=f"e{i}", candidate=draw(st.sampled_from(KEYS + ["other"])),
            kind=draw(st.sampled_from(["measured", "published"])), label=f"run e{i}",
            gpu_name=name, compute_capability=cc, host_id=draw(st.sampled_from([None, "h1", "h2"])),
            concurrency=draw(st.sampled_from([1, 2, 4, 8, 16, 32])), prompt_tokens=prompt,
            output_tokens=output, ttft_ms_p50=draw(figure), ttft_ms_p90=draw(figure),
            tpot_ms_p50=draw(figure), decode_tok_s_p50=draw(figure), aggregate_tok_s=draw(figure),
            peak_memory_gib=draw(figure), energy_per_token_j=draw(figure), model=draw(st.sampled_from([R1_7B.name, "Other-14B"])),
            weight_bytes=draw(st.none() | st.floats(1e9, 4e10)), gpu_count=draw(st.sampled_from([1, 1, 2]))))
    if draw(st.booleans()):
        rows += published_v100_evidence()
    return rows


builds = st.builds(EngineBuilds, st.sampled_from([None, (0, 12), (0, 14), (0, 20)]))


@settings(max_examples=300, deadline=None)
@given(gpus, workloads(), evidence_rows(), builds)
def test_it_never_recommends_an_ineligible_or_non_fitting_candidate(gpu, workload, evidence, build):
    rec = advise(gpu, R1_7B, workload, evidence, builds=build)
    if rec.recommended is not None:
        chosen = rec.candidate(rec.recommended)
        assert chosen.eligible and chosen.fit.fits and chosen.ineligible_reasons == []
        assert chosen.meets_all is not False
        assert rec.ranked[0].key == rec.recommended
    # runnable ones come first
    runnable = [r.recommendable for r in rec.ranked]
    assert runnable == sorted(runnable, reverse=True)


@settings(max_examples=300, deadline=None)
@given(gpus, st.floats(0.01, 100), workloads(), st.sampled_from(DEFAULT_CANDIDATES))
def test_more_vram_never_turns_a_fit_into_a_misfit(gpu, extra, workload, candidate):
    small = memory_fit(candidate, R1_7B, gpu, workload.users, workload.context)
    bigger = dataclasses.replace(gpu, vram_gib=gpu.vram_gib + extra)
    big = memory_fit(candidate, R1_7B, bigger, workload.users, workload.context)
    if small.fits:
        assert big.fits
    # (unless the bigger card takes the 16-bit KV cache where the smaller needed a quantized one)
    assert big.headroom_gib >= small.headroom_gib or big.gpus_used != small.gpus_used or big.kv_cache != small.kv_cache
    # and advise() uses the same arithmetic
    rec = advise(bigger, R1_7B, workload, [])
    assert rec.candidate(candidate.key).fit.fits == big.fits


@settings(max_examples=300, deadline=None)
@given(gpus, workloads(), evidence_rows(), builds)
def test_every_predicted_figure_is_evidence_or_an_interpolation_of_it(gpu, workload, evidence, build):
    by_id = {ev.id: ev for ev in evidence}
    rec = advise(gpu, R1_7B, workload, evidence, builds=build)
    for r in rec.ranked:
        used = {ref.id for ref in r.evidence}
        for metric, p in r.predicted.items():
            if p.value is None:
                assert p.evidence_ids == ()
                continue
            if p.how == "estimated":  # the step-time model: its band around it, no evidence row behind it
                lo, hi = p.band
                assert lo - 1e-9 <= p.value <= hi + 1e-9 and p.evidence_ids == ()
                assert r.estimate or any(x.startswith("Beyond the levels its figures cover") for x in r.reasons)
                continue
            rows = [by_id[i] for i in p.evidence_ids]
            assert all(row.candidate == r.key for row in rows) and set(p.evidence_ids) <= used
            values = [getattr(row, metric) for row in rows]
            if p.how == "derived":  # aggregate <= users x per-stream decode, and no more
                assert metric == "aggregate_tok_s"
                decode = r.predicted["decode_tok_s_p50"]
                assert abs(p.value - workload.users * decode.value) < 1e-6
                continue
            if metric == "aggregate_tok_s" and r.predicted["decode_tok_s_p50"].how in ("measured", "published", "interpolated"):
                assert p.value <= workload.users * r.predicted["decode_tok_s_p50"].value * 1.02 + 1e-9
            if p.how == "interpolated":
                (c0, c1), (v0, v1) = (rows[0].concurrency, rows[1].concurrency), values
                assert c0 < workload.users < c1
                assert abs(p.value - (v0 + (v1 - v0) * (workload.users - c0) / (c1 - c0))) < 1e-9
                assert min(v0, v1) - 1e-9 <= p.value <= max(v0, v1) + 1e-9
            else:
                assert values == [p.value]
                # read at the workload's level: "measured", or "published" for a published row
                read_at_level = p.how == ("published" if rows[0].kind == "published" else "measured")
                assert (rows[0].concurrency == workload.users) == read_at_level


NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _numbers(value) -> set[float]:
    """Every number in a value: numeric fields, and numbers written in its strings."""
    found: set[float] = set()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        for k, v in value.items():
            found |= _numbers(k) | _numbers(v)
    elif isinstance(value, (list, tuple, set)):
        for v in value:
            found |= _numbers(v)
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, (int, float)):
        found.add(float(value))
    elif isinstance(value, str):
        found |= {float(n) for n in NUMBER.findall(value)}
    else:  # dates
        found |= _numbers(str(value))
    return found


def _traceable(token: str, allowed: set[float]) -> bool:
    x = float(token)
    decimals = len(token.split(".")[1]) if "." in token else 0
    tol = 0.5 * 10 ** -decimals + 1e-9
    return any(abs(x - a) <= tol for a in allowed)


@settings(max_examples=300, deadline=None)
@given(gpus, workloads(), evidence_rows(), builds)
def test_every_number_in_the_words_comes_from_evidence_facts_or_inputs(gpu, workload, evidence, build):
    rec = advise(gpu, R1_7B, workload, evidence, builds=build)
    # What a number may come from: the evidence, the facts, the inputs (and simple arithmetic on the
    # inputs that the text shows: users x context, 1000 / TPOT target), and the memory breakdown,
    # itself arithmetic on facts and inputs (tested by hand in test_advisor_memory.py).
    allowed = _numbers(evidence) | _numbers(FACTS) | _numbers(DEFAULT_CANDIDATES) | _numbers(R1_7B)
    allowed |= _numbers(gpu) | _numbers(workload) | _numbers(build)
    allowed |= {workload.users * workload.context, float(f"{gpu.compute_capability[0]}{gpu.compute_capability[1]}")}
    allowed |= {1000 / t for t in (workload.tpot_ms, workload.min_user_tok_s) if t}
    versions = [v for f in FACTS for v in (f.since, f.until) if v] + ([build.vllm_version] if build.vllm_version else [])
    allowed |= {float(f"{a}.{b}") for a, b in versions}  # "v0.20"
    for r in rec.ranked:
        allowed |= _numbers(r.fit) | {p.value for p in r.predicted.values() if p.value is not None}
        allowed |= {x for p in r.predicted.values() if p.band for x in p.band}
        allowed |= _numbers([r.key, r.label])
        # energy and cost: arithmetic on the throughput read above, the measured energy, or the
        # datasheet's board power at its stated shares (worked by hand in test_advisor_economics.py)
        for read in (r.energy, r.cost):
            if read is not None:
                allowed |= {x for x in (read.value, read.tok_s, *(read.band or ())) if x is not None}
        e, agg = r.predicted["energy_per_token_j"].value, r.predicted["aggregate_tok_s"].value
        allowed |= {e * agg} if e is not None and agg is not None else set()
    if rec.cards is not None:  # one card against a split: each measured figure as a share of another
        values = [v for row in rec.cards.rows for v in (row.decode_tok_s_p50, row.aggregate_tok_s) if v]
        allowed |= {a / b * 100 for a in values for b in values}
    for e in fitted()["engines"].values():  # what the estimate's note says of its fit
        allowed |= {e["rows"], len(e["gpus"])} | {r["leave_one_gpu_out"]["median_abs_error"] * 100
                                                   for r in e["by_regime"].values()}
    board = peak_of(gpu.name).power_w if peak_of(gpu.name) else None
    allowed |= {x * 100 for x in POWER_SHARE} | ({share * board * n for share in POWER_SHARE
                                                  for n in range(1, gpu.count + 1)} if board else set())
    texts = [rec.summary, *rec.caveats, *(n.text for n in rec.hardware_notes), rec.confidence_why,
             *(run.why for run in rec.measure_next)]
    for r in rec.ranked:
        # the prior's sentence carries datasheet peaks and the ceilings computed from them
        # (checked by hand in test_advisor_cases.py)
        # (checked by hand in test_advisor_cases.py), as does its stand-in beyond the figures' levels and
        # its comparison of the host's GPU layouts
        estimates = tuple(x for x in (r.estimate, "Beyond the levels its figures cover", "On this host's") if x)
        texts += [t for t in r.reasons if not t.startswith(estimates)] + r.ineligible_reasons
        texts += [n for n in r.evidence_notes if not n.startswith(estimates)]
        texts += [c.note for c in r.meets_targets.values()]
    for text in texts:
        for token in NUMBER.findall(text):
            assert _traceable(token, allowed), (token, text)
