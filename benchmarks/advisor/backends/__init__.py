"""The serving engines the advisor can advise on, one small module each, as the measuring side's
backends are (engine/backends): `vllm.py` and `llamacpp.py`.

Adding an engine is one new module here: an `AdvisorEngine` subclass (base.py) with `@register`,
holding its candidates, eligibility facts, speed model and fitted parameters, memory rules and
launch command. Every module here is imported when the package is; the advisor reads the merged
views below and asks `engine_of(candidate.backend)` for the rest.

    from benchmarks.advisor.backends import DEFAULT_CANDIDATES, engine_of
    engine_of("vllm").kv_options(candidate, (9, 0))
"""
from __future__ import annotations

import importlib
import pkgutil

from ..facts import GENERIC_FACTS, Candidate, Fact
from .base import (CUDA_CONTEXT_GIB, ENGINES, FP16_KV, AdvisorEngine, KvCache, Launch, WeightFormat, _listeners,
                   engine_of, register, unregister)

__all__ = ["CUDA_CONTEXT_GIB", "ENGINES", "FP16_KV", "AdvisorEngine", "KvCache", "Launch", "WeightFormat", "engine_of",
           "register", "unregister", "DEFAULT_CANDIDATES", "all_facts", "facts_by_id", "requirement_facts",
           "variant_quantization", "candidate_for"]

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")


def _page_order() -> tuple[Candidate, ...]:
    """Every registered engine's candidates in the page's order (the write-up's three first)."""
    return tuple(sorted((c for e in ENGINES.values() for c in e.candidates), key=lambda c: c.order))


# The candidates of the engines this package holds, fixed at import (an engine registered later,
# as a test's toy, is advised on when its candidates are passed to advise()).
DEFAULT_CANDIDATES: tuple[Candidate, ...] = _page_order()

_index: dict[str, Fact] = {}


def _rebuild() -> None:
    _index.clear()


_listeners.append(_rebuild)


def all_facts() -> tuple[Fact, ...]:
    """The facts shared by every engine, then each registered engine's."""
    return GENERIC_FACTS + tuple(f for e in ENGINES.values() for f in e.facts)


def facts_by_id() -> dict[str, Fact]:
    if not _index:
        _index.update({f.id: f for f in all_facts()})
    return _index


def requirement_facts(requirement: str) -> tuple[str, ...]:
    """The fact ids that state a requirement (a fact id with a min_cc stands for itself)."""
    for e in ENGINES.values():
        if requirement in e.requirements:
            return e.requirements[requirement]
    return (requirement,)


def variant_quantization() -> dict[str, str]:
    """Candidate.quantization -> Variant.quantization, over every registered engine."""
    return {q: v for e in ENGINES.values() for q, v in e.variant_quantization.items()}


def candidate_for() -> dict[tuple[str, str], Candidate]:
    """(backend, Variant.quantization) -> the candidate a registered endpoint or a report measures."""
    return {(c.backend, e.variant_quantization[c.quantization]): c
            for e in ENGINES.values() for c in e.candidates if c.quantization in e.variant_quantization}
