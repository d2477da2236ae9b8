"""The advisor's answers for the 36 workloads of test_advisor_every_gpu, frozen: each candidate's
eligibility, fit, figures (value, how, band), launch command and rank, and the verdict in words.

A change that moves the advisor's code without meaning to change what it says must leave this file's
data as it is. A change that means to change the answers rewrites it, and the diff is the review:

    V100SITE_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/test_advisor_golden.py
"""

import json
import os
from pathlib import Path

import pytest

from test_advisor_every_gpu import WORKLOADS, answer

GOLDEN = Path(__file__).parent / "data" / "advisor_golden.json"
UPDATE = os.environ.get("V100SITE_UPDATE_GOLDEN") == "1"


def _round(x):
    """Four significant figures: what the page shows, and what float noise cannot move."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    return x


def frozen(rec) -> dict:
    """What a user reads of an answer, without the prose every breakdown repeats."""
    return _round({
        "recommended": rec.recommended, "summary": rec.summary, "why": rec.why, "confidence": rec.confidence,
        "capacity": rec.capacity,
        "ranked": [{
            "key": r.key, "rank": r.rank, "eligible": r.eligible, "fits": r.fit.fits, "gpus": r.fit.gpus_used,
            "split": r.fit.split, "kv_cache": r.fit.kv_cache, "required_gib": r.fit.required_gib,
            "priority": [r.priority_value, r.priority_how],
            "predicted": {m: [p.value, p.how, list(p.band) if p.band else None]
                          for m, p in sorted(r.predicted.items()) if p.value is not None},
            "launch": r.launch.command if r.launch else None,
        } for r in rec.ranked],
    })


def _answers() -> dict:
    return {row[0]: frozen(answer(row)) for row in WORKLOADS}


@pytest.fixture(scope="module")
def golden():
    if UPDATE:
        GOLDEN.write_text(json.dumps(_answers(), indent=1, sort_keys=True) + "\n")
    return json.loads(GOLDEN.read_text())


def test_the_golden_file_covers_every_workload(golden):
    assert sorted(golden) == sorted(row[0] for row in WORKLOADS) and len(golden) >= 30


@pytest.mark.parametrize("row", WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_the_answer_is_the_frozen_one(golden, row):
    assert json.loads(json.dumps(frozen(answer(row)), sort_keys=True)) == golden[row[0]]
