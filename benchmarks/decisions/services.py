"""Decision services: decide (the Django-free advisor, on the evidence measured here: levels, quality
and the lab's launches) and save."""
from __future__ import annotations

from benchmarks.advisor import advise
from benchmarks.decisions.forms import Specs
from benchmarks.decisions.selectors import evidence_from_db, launch_evidence_from_db, quality_evidence_from_db
from benchmarks.models import Decision


def decision_compute(*, specs: Specs) -> dict:
    """The advisor's answer for these (validated) specs, as JSON; nothing saved."""
    evidence = evidence_from_db()
    rec = advise(specs.gpu, specs.model, specs.workload, evidence, variant_bytes=specs.variant_bytes or None,
                 quality=quality_evidence_from_db(), builds=specs.builds,
                 gpu_memory_utilization=specs.gpu_memory_utilization, launches=launch_evidence_from_db())
    result = rec.to_dict()
    result["host"] = specs.host
    result["model_source"] = specs.model_source
    result["evidence_skipped"] = evidence.skipped
    return result


def decision_create(*, owner, inputs: dict, specs: Specs) -> Decision:
    """Decide and save behind a permalink; `inputs` (a valid DecisionForm's) are kept to start
    a new decision from ("change the workload")."""
    result = decision_compute(specs=specs)
    return Decision.objects.create(owner=owner, inputs=inputs, result=result,
                                   recommended=result["recommended"] or "")
