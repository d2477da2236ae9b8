"""Eligibility: which candidate can start on which compute capability, and why not."""

from datetime import date

import pytest

from benchmarks.advisor import (DEFAULT_CANDIDATES, FACTS, Candidate, EngineBuilds, fact,
                                ineligible_reasons, required_facts, requirements)

BY_KEY = {c.key: c for c in DEFAULT_CANDIDATES}
FP16 = Candidate("vllm-fp16", "vLLM FP16", "vllm", "fp16", ("vllm-min-cc",), "fp8-size",
                 embedding_bits=16)
CCS = [(6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0)]
T, F = True, False

# cc -> can start, for the default build and for a build with PR #29901 (FP8 Marlin on 7.5)
TABLE = {
    "vllm-fp8":        {"default": [F, F, F, T, T, T, T], "pr29901": [F, F, T, T, T, T, T]},
    "vllm-awq":        {"default": [F, F, T, T, T, T, T], "pr29901": [F, F, T, T, T, T, T]},
    "llamacpp-q4_k_m": {"default": [T, T, T, T, T, T, T], "pr29901": [T, T, T, T, T, T, T]},
}
BUILDS = {"default": EngineBuilds(), "pr29901": EngineBuilds(vllm_fp8_sm75=True)}


@pytest.mark.parametrize("key,build,cc,expected", [
    (key, build, cc, TABLE[key][build][i])
    for key in TABLE for build in BUILDS for i, cc in enumerate(CCS)
])
def test_it_follows_the_eligibility_table(key, build, cc, expected):
    assert (ineligible_reasons(BY_KEY[key], cc, BUILDS[build]) == []) is expected


@pytest.mark.parametrize("cc,version,expected", [
    ((6, 1), None, False), ((7, 0), None, True), ((7, 5), None, True),
    ((6, 1), (0, 21), False), ((7, 0), (0, 21), False), ((7, 5), (0, 21), True), ((9, 0), (0, 21), True),
    ((7, 0), (0, 14), True),
])
def test_it_drops_volta_from_vllm_0_21(cc, version, expected):
    assert (ineligible_reasons(FP16, cc, EngineBuilds(vllm_version=version)) == []) is expected


def test_it_refuses_fp8_on_volta_citing_fp8_py():
    (reason,) = ineligible_reasons(BY_KEY["vllm-fp8"], (7, 0))
    assert "compute capability 7.0" in reason and "8.0" in reason
    assert "quantization/fp8.py" in reason and "2026-11-29" in reason


def test_it_cites_pr_29901_when_the_build_has_it():
    (reason,) = ineligible_reasons(BY_KEY["vllm-fp8"], (7, 0), EngineBuilds(vllm_fp8_sm75=True))
    assert "PR #29901" in reason and "7.5" in reason


def test_it_refuses_awq_on_volta_citing_the_issues():
    (reason,) = ineligible_reasons(BY_KEY["vllm-awq"], (7, 0))
    assert "awq.py" in reason and "#1488" in reason and "#4202" in reason


def test_it_gives_every_unmet_requirement_on_pascal():
    reasons = ineligible_reasons(BY_KEY["vllm-fp8"], (6, 1))
    assert len(reasons) == 2  # vLLM itself (7.0) and its fp8 method (8.0)


def test_it_refuses_llamacpp_without_dp4a():
    (reason,) = ineligible_reasons(BY_KEY["llamacpp-q4_k_m"], (6, 0))
    assert "dp4a" in reason and "6.1" in reason


def test_it_describes_requirements_from_facts():
    req = requirements(BY_KEY["vllm-fp8"])
    assert req["backend"] == "vLLM" and req["quantization"] == "fp8"
    assert req["min_compute_capability"] == "8.0"
    assert {f["id"] for f in req["facts"]} == {"vllm-min-cc", "vllm-fp8-min-cc"}
    assert requirements(BY_KEY["vllm-fp8"], EngineBuilds(vllm_fp8_sm75=True))["min_compute_capability"] == "7.5"


def test_every_fact_has_a_source_and_a_date():
    assert len({f.id for f in FACTS}) == len(FACTS)
    for f in FACTS:
        assert f.statement and f.source and isinstance(f.as_of, date)


def test_every_requirement_is_a_fact_with_a_minimum():
    for c in DEFAULT_CANDIDATES:
        for f in required_facts(c) + required_facts(c, EngineBuilds((0, 21), True)):
            assert f.min_cc is not None
        assert fact(c.size_fact).value is not None
