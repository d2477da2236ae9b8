"""Decision services: decide (the Django-free advisor, on the evidence measured here: levels, quality
and the lab's launches) and save."""
from __future__ import annotations

import dataclasses

from django.db import transaction

from benchmarks.advisor import EngineBuilds, advise
from benchmarks.advisor.economics import COST, price_comparison
from benchmarks.decisions.forms import Specs
from benchmarks.decisions.selectors import (evidence_from_db, launch_evidence_from_db, quality_evidence_from_db,
                                            slo_capacity_from_db)
from benchmarks.engine.slo_search import SloTarget
from benchmarks.ledger.selectors import corrections_for
from benchmarks.ledger.services import prediction_record
from benchmarks.models import Decision, Prediction


def decision_compute(*, specs: Specs) -> dict:
    """The advisor's answer for these (validated) specs, as JSON; nothing saved. With a rented GPU
    to compare with, `price_comparison` holds the cheapest candidate on each at its price."""
    evidence = evidence_from_db()
    shared = {"variant_bytes": specs.variant_bytes or None, "quality": quality_evidence_from_db(),
              "gpu_memory_utilization": specs.gpu_memory_utilization, "launches": launch_evidence_from_db()}
    rec = advise(specs.gpu, specs.model, specs.workload, evidence, builds=specs.builds, price=specs.price,
                 corrections=corrections_for(specs.gpu.host_id), **shared)
    result = rec.to_dict()
    result["host"] = specs.host
    result["model_source"] = specs.model_source
    result["price_source"] = specs.price_source
    result["evidence_skipped"] = evidence.skipped
    result["slo_capacity"] = slo_capacity(specs, slo_capacity_from_db())
    result["price_comparison"] = None
    if specs.rented is not None:
        on_cost = dataclasses.replace(specs.workload, priority=COST)
        yours = rec if specs.workload.priority == COST else advise(
            specs.gpu, specs.model, on_cost, evidence, builds=specs.builds, price=specs.price, **shared)
        gpu, rate = specs.rented
        # The engine versions read from this host's endpoints say nothing of the rented machine.
        builds = specs.builds if specs.builds.source == "as stated" else EngineBuilds()
        rented = advise(gpu, specs.model, on_cost, evidence, builds=builds, price=rate, **shared)
        result["price_comparison"] = price_comparison(yours, rented).to_dict()
    return result


def wanted_targets(workload) -> list[tuple[str, int, float]]:
    """The decision's targets as an SLO search states them (metric, percentile, ms): TTFT at p90,
    TPOT at p50, and a per-user decode speed as the TPOT it allows (1000 / tok/s)."""
    wanted = []
    if workload.ttft_p90_ms:
        wanted.append(("ttft_ms", 90, workload.ttft_p90_ms))
    tpots = [t for t in (workload.tpot_ms, 1000.0 / workload.min_user_tok_s if workload.min_user_tok_s else None) if t]
    if tpots:
        wanted.append(("tpot_ms", 50, min(tpots)))
    return wanted


def slo_capacity(specs: Specs, searches: list[dict]) -> list[dict]:
    """Measured evidence of load within the targets: the SLO searches on this GPU whose targets are
    at least as strict as the decision's (all of them when it states none), each said as "serves N
    users within your targets", and whether N reaches the users asked for."""
    wanted = wanted_targets(specs.workload)
    users = specs.workload.users
    out = []
    for row in searches:
        if row["gpu_name"] != specs.gpu.name or not SloTarget.from_dict(row["target"]).within(wanted):
            continue
        target = SloTarget.from_dict(row["target"]).words
        within = "your targets" if wanted else "its own targets"
        at_least = "at least " if row["status"] == "at_least" else ""
        if row.get("by") == "rate":
            # A rate is not a number of users: said with what it kept in flight, not judged.
            if row["status"] == "none":
                text = f"{row['endpoint']} misses {within} ({target}) even at the lowest rate searched."
            else:
                flight = (f", about {row['in_flight']:.1f} requests in flight on average (Little's law on its "
                          "measured throughput and mean E2E)") if row.get("in_flight") is not None else ""
                text = f"{row['endpoint']} sustains {at_least}{row['rate']:g} req/s within {within} ({target}){flight}."
            out.append({**row, "text": text, "enough": None})
            continue
        served = row["users"] or 0
        if row["status"] == "none":
            words = f"{row['endpoint']} misses {within} ({target}) even at 1 concurrent user"
        else:
            words = (f"{row['endpoint']} serves {at_least}{served} "
                     f"concurrent user{'s' if served != 1 else ''} within {within} ({target})")
        enough = "enough for" if served >= users else "fewer than"
        out.append({**row, "text": f"{words}: {enough} the {users} you asked for.", "enough": served >= users})
    return sorted(out, key=lambda r: (r.get("by") == "rate", -(r["users"] or r.get("rate") or 0)))


def decision_answer(*, owner, specs: Specs) -> tuple[dict, Prediction]:
    """Decide without saving a decision; the answer is kept in the prediction ledger all the same."""
    result = decision_compute(specs=specs)
    return result, prediction_record(result=result, owner=owner)


def decision_create(*, owner, inputs: dict, specs: Specs) -> Decision:
    """Decide and save behind a permalink, and in the prediction ledger; `inputs` (a valid
    DecisionForm's) are kept to start a new decision from ("change the workload")."""
    result = decision_compute(specs=specs)
    with transaction.atomic():
        decision = Decision.objects.create(owner=owner, inputs=inputs, result=result,
                                           recommended=result["recommended"] or "")
        prediction_record(result=result, owner=owner, decision=decision)
    return decision
