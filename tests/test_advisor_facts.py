"""Eligibility: which candidate can start on which compute capability, and why not."""

from datetime import date

import pytest

from benchmarks.advisor import (DEFAULT_CANDIDATES, FACTS, Candidate, EngineBuilds, fact,
                                ineligible_reasons, required_facts, requirements, start_check)

BY_KEY = {c.key: c for c in DEFAULT_CANDIDATES}
FP16 = Candidate("vllm-fp16", "vLLM FP16", "vllm", "fp16", ("vllm",), "fp8-size", embedding_bits=16)
CCS = [(5, 0), (6, 0), (6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0)]
T, F = True, False

# cc -> can start: for a vLLM release before PR #29901 (v0.12), one after it (v0.13), and the version
# unknown (some release starts it). vLLM docs and fp8.py/awq.py/gptq.py: FP8 8.0 then 7.5, AWQ 7.5,
# vLLM itself 7.0 (7.5 from v0.20); llama.cpp from Maxwell, P100 included.
TABLE = {
    "vllm-fp8":         {"v0.12": [F, F, F, F, F, T, T, T, T], "v0.13": [F, F, F, F, T, T, T, T, T],
                         "unknown": [F, F, F, F, T, T, T, T, T]},
    "vllm-awq":         {"v0.12": [F, F, F, F, T, T, T, T, T], "v0.13": [F, F, F, F, T, T, T, T, T],
                         "unknown": [F, F, F, F, T, T, T, T, T]},
    "vllm-gptq":        {"v0.12": [F, F, F, T, T, T, T, T, T], "v0.20": [F, F, F, F, T, T, T, T, T],
                         "unknown": [F, F, F, T, T, T, T, T, T]},
    "llamacpp-q4_k_m":  {"unknown": [T, T, T, T, T, T, T, T, T]},
}
BUILDS = {"unknown": EngineBuilds(), "v0.12": EngineBuilds(vllm_version=(0, 12)),
          "v0.13": EngineBuilds(vllm_version=(0, 13)), "v0.20": EngineBuilds(vllm_version=(0, 20))}


@pytest.mark.parametrize("key,build,cc,expected", [
    (key, build, cc, TABLE[key][build][i])
    for key in TABLE for build in TABLE[key] for i, cc in enumerate(CCS)
])
def test_it_follows_the_eligibility_table(key, build, cc, expected):
    assert (ineligible_reasons(BY_KEY[key], cc, BUILDS[build]) == []) is expected


@pytest.mark.parametrize("cc,version,expected", [
    ((6, 1), None, False), ((7, 0), None, True), ((7, 5), None, True),
    ((6, 1), (0, 20), False), ((7, 0), (0, 20), False), ((7, 5), (0, 20), True), ((9, 0), (0, 20), True),
    ((7, 0), (0, 14), True),
])
def test_it_drops_volta_from_vllm_0_21(cc, version, expected):
    assert (ineligible_reasons(FP16, cc, EngineBuilds(vllm_version=version)) == []) is expected


def test_an_unknown_version_names_the_releases_that_start_it():
    assert start_check(FP16, (7, 0)).releases_text == "before v0.20"
    assert start_check(BY_KEY["vllm-fp8"], (7, 5)).releases_text == "v0.13 or later"
    assert start_check(BY_KEY["vllm-fp8"], (8, 0)).releases_text == ""  # every release
    assert start_check(BY_KEY["vllm-fp8"], (7, 5), EngineBuilds(vllm_version=(0, 20))).releases_text == ""


def test_it_refuses_fp8_on_volta_citing_fp8_py_and_pr_29901():
    reasons = ineligible_reasons(BY_KEY["vllm-fp8"], (7, 0))
    assert all("compute capability 7.0" in r and "2026-12-01" in r for r in reasons)
    assert any("quantization/fp8.py" in r and "8.0" in r for r in reasons)
    assert any("PR #29901" in r and "7.5" in r for r in reasons)


def test_a_given_version_says_which_rule_refused_it():
    reason, releases = ineligible_reasons(BY_KEY["vllm-fp8"], (7, 5), EngineBuilds(vllm_version=(0, 12)))
    assert "with vLLM v0.12" in reason and "before v0.13" in reason
    # FP8 runs on Turing from v0.13 (PR #29901): the refusal says which releases do start it
    assert releases.startswith("vLLM releases v0.13 or later still start it on this GPU")


def test_it_refuses_awq_on_volta_citing_the_issues():
    reasons = ineligible_reasons(BY_KEY["vllm-awq"], (7, 0))
    assert any("awq.py" in r and "#1488" in r and "#4202" in r for r in reasons)


def test_llamacpp_has_no_dp4a_floor_and_starts_on_a_p100():
    assert ineligible_reasons(BY_KEY["llamacpp-q4_k_m"], (6, 0)) == []
    (reason,) = ineligible_reasons(BY_KEY["llamacpp-q4_k_m"], (3, 7))  # Kepler: below 50-virtual
    assert "scalar" in reason and "50-virtual" in reason


def test_it_describes_requirements_from_facts():
    req = requirements(BY_KEY["vllm-fp8"])
    assert req["backend"] == "vLLM" and req["quantization"] == "fp8"
    assert req["min_compute_capability"] == "7.5"  # from v0.13
    assert requirements(BY_KEY["vllm-fp8"], EngineBuilds(vllm_version=(0, 12)))["min_compute_capability"] == "8.0"
    assert {f["id"] for f in requirements(BY_KEY["vllm-fp8"], EngineBuilds((0, 12)))["facts"]} == \
        {"vllm-min-cc", "vllm-fp8-min-cc"}


def test_every_fact_has_a_source_and_a_date():
    assert len({f.id for f in FACTS}) == len(FACTS)
    for f in FACTS:
        assert f.statement and f.source and isinstance(f.as_of, date)


def test_every_requirement_is_a_fact_with_a_minimum():
    for c in DEFAULT_CANDIDATES:
        for f in required_facts(c) + required_facts(c, EngineBuilds((0, 20))):
            assert f.min_cc is not None
        assert fact(c.size_fact).value is not None
