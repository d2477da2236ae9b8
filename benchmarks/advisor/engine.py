"""advise(): can it start, does it fit, how fast at this load, does it meet the targets, rank."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import date
from typing import Mapping, Sequence

from ..engine import backends
from ..engine.catalogue import figure
from ..engine.cost import OWNED, OWNERSHIP, HourlyPrice
from ..engine.differences import judge
from .backends import DEFAULT_CANDIDATES, ENGINES, Launch, engine_of
from .facts import (Candidate, cc_str, fact, fmt, min_compute_capability, users_str,
                    ineligible_reasons, requirements, start_check)
from .cards import CardsAnswer
from .cards import answer as cards_answer
from .economics import COST, ECONOMY, NEEDS_PRICE, READ, EconomyRead, cost_read, economy_priority, energy_read
from .launches import (LaunchRef, StartupRead, contradiction_reason, did_not_start_reason, measured_fit,
                       other_failure_reason, read_launches, startup_sentence)
from .memory import MemoryFit, memory_fit
from .performance import BASES, EvidenceRef, Performance, Predicted, predict
from .correction import Correction
from .prior import corrected, estimate, stand_in, with_replicas
from .quality import QualityBasis, QualityRead, quality_sentence, read_quality
from .specs import (PRIORITIES, PRIORITY, EngineBuilds, Evidence, GpuSpec, LaunchEvidence, ModelSpec, QualityEvidence,
                    Workload)

PRIORITY_PHRASES = {key: p.phrase for key, p in PRIORITY.items()}
QUALITY = "least_quality_loss"  # the priority that ranks on quality, not on the speed evidence
# Of Recommendation.to_dict(): 8 adds each candidate's energy per output token and cost per million
# output tokens (economics.py: measured, or estimated with a band) and the price stated; 7 adds each
# candidate's estimate_sources (the figures its physical prior rests on), the fit's
# tensor_parallel_refused and the answer's capacity (what fits when nothing does); 6 adds "one card or two?" (cards: measured runs on one GPU and
# several, or the write-up's anecdote, labelled); 5 adds each candidate's measured start (did it
# start on a GPU like this one, the launches it rests on, its start-up time and memory after load, a contradiction of the
# facts table); 4 adds the verdict's reasons (why), each candidate's launch command,
# estimate, releases and capacity, predicted bands; 3 adds each candidate's quality and the quality
# basis; 2 names figures as the catalogue does; 1 (no "version") named them ttft_p50_ms-style.
# Every addition is optional to the reader (presenter.result_from_stored).
RESULT_VERSION = 9
SHOWN_FAILURES = 3
MORE_CARDS = 8  # when nothing fits: up to this many times the host's GPUs are tried  # a candidate's launches that did not start, for their own reasons, named in its reasons


@dataclass(frozen=True)
class TargetCheck:
    target: str  # a Target's key: "ttft_p90_ms" | "tpot_ms" | "min_user_tok_s"
    limit: float
    metric: str  # the predicted metric compared (TPOT and decode speed stand in for each other)
    predicted: float | None
    how: str  # Predicted.how of that metric
    met: bool | None  # None: no figure at this load
    note: str


@dataclass(frozen=True)
class Note:
    text: str
    source: str
    fact_id: str


@dataclass(frozen=True)
class SuggestedRun:
    """Enough to pre-fill a run form."""

    candidate: str
    concurrency_levels: tuple[int, ...]
    prompt_tokens: int
    output_tokens: int
    host_id: str | None
    why: str
    quality: bool = False  # with a quality step


@dataclass
class CandidateResult:
    key: str
    label: str
    requirements: dict
    eligible: bool
    ineligible_reasons: list[str]
    fit: MemoryFit
    evidence_basis: str | None  # one of performance.BASES
    evidence_shape: tuple[int, int] | None  # (prompt, output) tokens of the evidence used
    predicted: dict[str, Predicted]
    evidence: list[EvidenceRef]  # rows actually used
    evidence_notes: list[str]  # interpolation / extrapolation / shape
    meets_targets: dict[str, TargetCheck]
    meets_all: bool | None  # True also when no target was set
    priority_value: float | None  # higher is better
    priority_how: str  # "measured" | "published" | "interpolated" | "extrapolated" | "none" | "computed"
    priority_text: str  # the priority value in words, with where it was read
    reasons: list[str]
    quality: QualityRead = field(default_factory=lambda: QualityRead("not measured"))
    rank: int = 0
    launch: Launch | None = None  # the command that starts it as sized (None: it cannot start or fit)
    estimate: str = ""  # how the physical prior was derived, when it stands in for evidence
    estimate_sources: list[str] = field(default_factory=list)  # the figures its efficiencies rest on
    releases: str = ""  # which releases of its engine start it, when the version was not given
    started: str = "not measured"  # the lab's: "did not start" | "started" | "not measured" on a GPU like this
    launches: list[LaunchRef] = field(default_factory=list)  # the lab's launches read (deciding ones first)
    startup: StartupRead | None = None  # measured start-up time and memory after load
    contradiction: str = ""  # a start measured where the facts table says it cannot
    memory_measured: str = ""  # the measured memory after load beside the modelled fit
    energy: EconomyRead | None = None  # energy per output token at this load (None: it cannot start or fit)
    cost: EconomyRead | None = None  # cost per million output tokens at the stated price (None: no price)
    model_estimate: dict = field(default_factory=dict)  # the step-time estimate, shown or not (the ledger's)

    @property
    def recommendable(self) -> bool:
        return self.eligible and self.fit.fits


@dataclass
class Recommendation:
    gpu: GpuSpec
    model: ModelSpec
    workload: Workload
    builds: EngineBuilds
    ranked: list[CandidateResult]
    recommended: str | None
    summary: str
    caveats: list[str]
    confidence: str  # "high" | "medium" | "low"
    confidence_why: str
    hardware_notes: list[Note] = field(default_factory=list)
    measure_next: list[SuggestedRun] = field(default_factory=list)
    quality_basis: QualityBasis = field(default_factory=lambda: QualityBasis(None, ""))
    why: list[str] = field(default_factory=list)  # the verdict's reasons, three lines at most
    cards: CardsAnswer | None = None  # one card or two? None on a host of one GPU
    capacity: list[str] = field(default_factory=list)  # when nothing fits: what would, and with how many cards
    price: HourlyPrice | None = None  # the GPUs' stated price, the costs' (None: no cost read)

    def candidate(self, key: str) -> CandidateResult:
        return next(r for r in self.ranked if r.key == key)

    def to_dict(self) -> dict:
        return {"version": RESULT_VERSION, **_jsonable(dataclasses.asdict(self))}


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, date):
        return x.isoformat()
    return x


# --- targets ---------------------------------------------------------------------------------

def _compare(target: str, limit: float, p: Predicted, ok, what: str, unit: str) -> TargetCheck:
    if p.value is None:
        return TargetCheck(target, limit, p.metric, None, p.how, None,
                           f"{what}: no figure in the evidence.")
    shown = f"{fmt(p.value)} {unit} ({p.note})"
    if p.how in ("extrapolated", "estimated", "derived"):  # never pass (or fail) a target on these
        return TargetCheck(target, limit, p.metric, p.value, p.how, None,
                           f"{what}: not known at this load, only {shown}.")
    met = ok(p.value)
    return TargetCheck(target, limit, p.metric, p.value, p.how, met,
                       f"{what}: {'met' if met else 'missed'}, {shown}.")


@dataclass(frozen=True)
class Target:
    """A workload target (its Workload field and input name) and the catalogue figure it bounds:
    at most its value when lower is better, at least when higher is. `inverse` is the figure
    that says the same as 1000 / it (TPOT in ms and per-stream decode in tok/s)."""

    key: str
    figure: str
    inverse: str = ""


TARGETS = (Target("ttft_p90_ms", "ttft_ms_p90"), Target("tpot_ms", "tpot_ms_p50", "decode_tok_s_p50"),
           Target("min_user_tok_s", "decode_tok_s_p50", "tpot_ms_p50"))


def _words(f) -> str:
    """How a target names its figure: a target on the median is on the metric itself ("TPOT
    target 50 ms"); any other statistic is said ("TTFT p90 target 500 ms")."""
    return f.metric.label if f.stat == "p50" else f.label


def _bound(name: str, limit: float):
    """(words, test) for a value of this figure against `limit`, the right way round."""
    lower = figure(name).metric.lower_is_better
    return ("at most" if lower else "at least"), ((lambda v: v <= limit) if lower else (lambda v: v >= limit))


def check_targets(workload: Workload, m: dict[str, Predicted]) -> dict[str, TargetCheck]:
    """TPOT and per-stream decode are the same thing (decode = 1000 / TPOT): when the evidence has
    only one of them, the target is converted, never the evidence."""
    checks = {}
    for t in TARGETS:
        limit = getattr(workload, t.key)
        if limit is None:
            continue
        f = figure(t.figure)
        what = f"{_words(f)} target {fmt(limit)} {f.metric.unit}"
        name, bound = t.figure, limit
        if m[t.figure].value is None and t.inverse and m[t.inverse].value is not None:
            name, bound = t.inverse, 1000 / limit
            inverse = figure(name)
            what += f" (as {_words(inverse)} of {_bound(name, bound)[0]} {fmt(bound)} {inverse.metric.unit})"
        checks[t.key] = _compare(t.key, limit, m[name], _bound(name, bound)[1], what, figure(name).metric.unit)
    return checks


def _meets_all(checks: dict[str, TargetCheck]) -> bool | None:
    results = [c.met for c in checks.values()]
    if False in results:
        return False
    return None if None in results else True


# --- ranking ---------------------------------------------------------------------------------

def _priority(priority: str, m: dict[str, Predicted], fit: MemoryFit) -> tuple[float | None, str, str]:
    """The value ranked on (higher is better), how to say it, and how it was read."""
    if priority == "memory_headroom":
        if fit.gpu_memory_utilization is not None:  # vLLM holds its whole share, used or not
            return fit.headroom_gib, (f"{fmt(fit.headroom_gib)} GiB of vLLM's --gpu-memory-utilization "
                                      f"{fmt(fit.gpu_memory_utilization)} share left after this workload (vLLM "
                                      f"takes the whole share at start-up)"), "computed"
        return fit.headroom_gib, f"{fmt(fit.headroom_gib)} GiB of memory left", "computed"
    if priority == "throughput":
        p = m["aggregate_tok_s"]
        if p.value is not None:
            return p.value, f"{fmt(p.value)} {figure(p.metric).quoted} ({p.note})", p.how
        return None, "", "none"
    p = m["decode_tok_s_p50"]
    if p.value is not None:
        return p.value, f"{fmt(p.value)} {figure(p.metric).quoted} ({p.note})", p.how
    p = m["tpot_ms_p50"]
    if p.value:  # lower TPOT is faster: rank on its inverse, say the TPOT
        return 1000 / p.value, f"{figure(p.metric).label} {fmt(p.value)} ms ({p.note})", p.how
    return None, "", "none"


def _economy_read(priority: str, r: CandidateResult) -> EconomyRead | None:
    """The energy or cost read a cost or energy priority ranks on; None for the other priorities."""
    return (r.cost if priority == COST else r.energy) if priority in ECONOMY else None


def _sort_key(r: CandidateResult, index: int, priority: str = ""):
    """Runnable first; then meets the targets, unknown, misses them; then figures at this load,
    extrapolated figures (or a cost or energy whose throughput is read at this load and only its
    power estimated), estimates, no figures; then the priority value."""
    if not r.recommendable:
        return (1, 0, 0, 0.0, index)  # the ones that cannot run stay in the candidates' order
    target_rank = {True: 0, None: 1, False: 2}[r.meets_all]
    known_rank = {"none": 3, "estimated": 2, "extrapolated": 1}.get(r.priority_how, 0)
    read = _economy_read(priority, r)
    if read is not None and read.how == "estimated" and read.tok_s_how in READ:
        known_rank = 1
    return (0, target_rank, known_rank, -(r.priority_value or 0.0), index)


def _relevant_hows(r: CandidateResult) -> set[str]:
    """How the figures that decided (priority and targets) were read."""
    hows = {c.how for c in r.meets_targets.values()}
    if r.priority_how != "computed":
        hows.add(r.priority_how)
    return hows


def _perf_sentence(c: Candidate, perf: Performance, workload: Workload, gpu: GpuSpec) -> str:
    if perf.basis is None:
        return (f"No measured or published figures for {c.label} on {gpu.name} "
                f"(compute capability {cc_str(gpu.compute_capability)}).")
    m = perf.metrics
    parts = []
    for metric in ("decode_tok_s_p50", "aggregate_tok_s", "ttft_ms_p90", "tpot_ms_p50"):
        p, unit = m[metric], figure(metric).quoted
        if p.value is not None:
            at = (f" (the figure at {users_str(p.levels[0])}: extrapolation)" if p.how == "extrapolated"
                  else " (derived: an upper bound)" if p.how == "derived" else "")
            parts.append(f"{fmt(p.value)} {unit}{at}")
    source = "; ".join(sorted({ref.label for ref in perf.evidence}))
    if perf.basis not in source:
        source = f"{perf.basis}: {source}"
    figures = ", ".join(parts) if parts else "no speed figures"
    return f"At {users_str(workload.users)} ({source}): {figures}."


# --- notes, caveats, what to measure -----------------------------------------------------------

def _sentence(text: str) -> str:
    """A statement as a sentence: capitalised unless it starts with a name written in lower case."""
    first = text if text.startswith(("llama", "vLLM", "-")) else text[0].upper() + text[1:]
    return first if first.endswith(".") else first + "."


def hardware_notes(gpu: GpuSpec, workload: Workload, results: list[CandidateResult],
                   candidates: Sequence[Candidate], builds: EngineBuilds,
                   cards: CardsAnswer | None = None) -> list[Note]:
    """Notes about this GPU and the candidates that can start on it, each once."""
    by_key = {c.key: c for c in candidates}
    runnable = [by_key[r.key] for r in results if r.eligible]
    notes: list[Note] = []

    def add(fact_id: str, text: str | None = None):
        f = fact(fact_id)
        notes.append(Note(_sentence(text or f.statement), f.source, f.id))

    if cards is not None and cards.note:  # one card or two, as measured here or the write-up's anecdote
        notes.append(Note(cards.note, cards.source, cards.note_fact))
    for name in (n for n in ENGINES if any(c.backend == n for c in runnable)):  # each engine that can run here
        for fact_id, text in engine_of(name).hardware_notes(gpu, builds, [c for c in runnable if c.backend == name]):
            add(fact_id, text)
    for name in dict.fromkeys(by_key[r.key].backend for r in results if r.eligible and r.releases):
        engine = engine_of(name)
        said = "; ".join(f"{r.label} starts with releases {r.releases}" for r in results
                         if r.eligible and r.releases and by_key[r.key].backend == name)
        f = fact(engine.version_fact)
        notes.append(Note(f"This answer depends on the {backends.label(name)} version, which was not given: {said}. "
                          f"Give the version (or register an endpoint, whose /version is read) to settle it.",
                          f.source, f.id))
    add("hot-gpu-ecc")
    return notes


def _levels(users: int) -> tuple[int, ...]:
    """1, powers of two, and the workload's own level: a sweep that brackets it."""
    levels, n = {1, users}, 2
    while n < users:
        levels.add(n)
        n *= 2
    return tuple(sorted(levels))


def _speed_gap(gpu: GpuSpec, workload: Workload, r: CandidateResult) -> str:
    """What the speed evidence lacks for this workload, or "" when nothing."""
    hows = _relevant_hows(r) - ({"none"} if workload.priority == QUALITY else set())
    if r.evidence_basis is None:
        return "no figures for this GPU yet"
    if r.evidence_basis == BASES[3]:
        return "only published figures, not measured here"
    if r.evidence_basis == BASES[2]:
        return "measured only on another GPU model of the same compute capability"
    if r.evidence_shape != (workload.prompt_tokens, workload.output_tokens):
        return "measured with other prompt/output lengths"
    if gpu.host_id and r.evidence_basis != BASES[0]:
        return "measured on another host with this GPU model"
    if hows & {"interpolated", "extrapolated", "none"}:
        return "not measured at this number of users"
    return ""


def measure_next(gpu: GpuSpec, workload: Workload, results: list[CandidateResult]) -> list[SuggestedRun]:
    runs = []
    for r in results:
        if not r.recommendable:
            continue  # cannot start or does not fit: nothing to measure
        why = [_speed_gap(gpu, workload, r)]
        if workload.priority in ECONOMY and r.priority_how == "estimated" and not why[0]:
            why.append(f"its {PRIORITY_PHRASES[workload.priority]} only estimated (energy not measured at this load)")
        quality = workload.priority == QUALITY and r.priority_value is None
        if quality:
            why.append("its quality not measured comparably with the others' (a run with a quality step)")
        why = [w for w in why if w]
        if why:
            runs.append(SuggestedRun(r.key, _levels(workload.users), workload.prompt_tokens,
                                     workload.output_tokens, gpu.host_id, "; ".join(why), quality))
    return runs


def _confidence(rec: CandidateResult | None, results: list[CandidateResult],
                workload: Workload) -> tuple[str, str]:
    if rec is None:
        return "low", "nothing could be recommended"
    hows = _relevant_hows(rec)
    others_unknown = [r.label for r in results if r.recommendable and r is not rec
                      and (r.priority_value is None or r.priority_how == "estimated")]
    if workload.priority == QUALITY:  # ranked on measured quality, whatever the speed evidence
        if rec.priority_value is None:
            return "low", f"the quality loss of {rec.label} is unknown"
        if "extrapolated" in hows:
            return "low", "the target figures are extrapolated beyond the measured levels"
        if others_unknown:
            return "medium", f"no comparable quality figures for {', '.join(others_unknown)}"
        return "high", "quality measured comparably for every candidate that can run here"
    if rec.priority_how == "estimated" and workload.priority in ECONOMY:
        return "low", (f"the {PRIORITY_PHRASES[workload.priority]} of {rec.label} is estimated from the GPU's "
                       f"maximum board power over its throughput at this load, not measured")
    if rec.priority_how == "estimated":
        return "low", (f"estimated from the GPU's datasheet and the efficiencies the engine's published figures "
                       f"show (see the figures it rests on), "
                       f"not measured for {rec.label} on this GPU")
    if rec.evidence_basis is None:
        return "low", f"nothing was measured or published for {rec.label} on this GPU"
    if rec.priority_value is None:
        return "low", f"the {PRIORITY_PHRASES[workload.priority]} of {rec.label} is unknown"
    if rec.evidence_basis == BASES[3]:
        return "low", "the figures are published, not measured here"
    if "extrapolated" in hows:
        return "low", "the figures are extrapolated beyond the measured levels"
    if rec.evidence_basis == BASES[2]:
        return "medium", "measured on another GPU model of the same compute capability"
    if rec.evidence_shape != (workload.prompt_tokens, workload.output_tokens):
        return "medium", "measured with other prompt/output lengths"
    if "interpolated" in hows:
        return "medium", "interpolated between measured levels"
    if others_unknown:
        return "medium", f"no measured figures for {', '.join(others_unknown)} to compare against"
    return "high", f"{rec.evidence_basis}, at this number of users"


# --- the engine ------------------------------------------------------------------------------

class AdviceInputError(ValueError):
    """What advise() cannot reason about, by input field: {"users": "...", ...}."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _price_errors(price: HourlyPrice | None, workload: Workload) -> dict[str, str]:
    """A price the cost per million tokens can be computed with, and one when it is ranked on."""
    if price is None:
        return {"price_per_hour": NEEDS_PRICE} if workload.priority == COST else {}
    errors = {}
    if price.ownership not in dict(OWNERSHIP):
        errors["price_ownership"] = f"ownership must be one of {', '.join(dict(OWNERSHIP))}"
    for name in ("per_hour", "per_kwh"):
        value = getattr(price, name)
        if (value is not None or name == "per_hour") and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf):
            errors[f"price_{name}"] = f"a price: a number, 0 or more (got {value!r})"
    if price.per_kwh is not None and price.ownership != OWNED and "price_per_kwh" not in errors:
        errors["price_per_kwh"] = "electricity is priced for owned GPUs; a rented GPU's rate includes it"
    return errors


def validate_inputs(model: ModelSpec, workload: Workload, gpu: GpuSpec,
                    gpu_memory_utilization: float | None, price: HourlyPrice | None = None) -> None:
    errors = {}
    for name in ("users", "prompt_tokens", "output_tokens"):
        value = getattr(workload, name)
        if not _is_int(value) or value < 1:
            errors[name] = f"must be a whole number, at least 1 (got {value!r})"
    if errors:
        raise AdviceInputError(errors)
    if workload.priority not in PRIORITIES:
        errors["priority"] = f"priority must be one of {', '.join(PRIORITIES)}"
    if workload.context_tokens is not None and not _is_int(workload.context_tokens):
        errors["context_tokens"] = "must be a whole number of tokens"
    elif workload.context < workload.prompt_tokens + workload.output_tokens:
        errors["context_tokens"] = "the context must hold the prompt and the output"
    elif workload.context > model.context_length:
        errors["context_tokens"] = f"{model.name} handles at most {model.context_length} tokens of context"
    if not _is_int(gpu.count) or gpu.count < 1:
        errors["gpu_count"] = "the GPU count must be a whole number, at least 1"
    if not gpu.vram_gib or gpu.vram_gib <= 0:
        errors["vram_gib"] = "the GPU needs memory"
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        errors["gpu_memory_utilization"] = (f"a share of the GPU's memory: more than 0, at most 1 "
                                            f"(got {gpu_memory_utilization!r})")
    errors.update(_price_errors(price, workload))
    if errors:
        raise AdviceInputError(errors)


def advise(gpu: GpuSpec, model: ModelSpec, workload: Workload, evidence: Sequence[Evidence],
           candidates: Sequence[Candidate] = DEFAULT_CANDIDATES, *,
           builds: EngineBuilds = EngineBuilds(),
           variant_bytes: Mapping[str, float] | None = None,
           gpu_memory_utilization: float | None = None,
           quality: Sequence[QualityEvidence] = (),
           launches: Sequence[LaunchEvidence] = (),
           price: HourlyPrice | None = None,
           corrections: Mapping[str, Correction] | None = None) -> Recommendation:
    """`corrections`: per engine, what the team's runs on this host taught its estimates."""
    validate_inputs(model, workload, gpu, gpu_memory_utilization, price)
    evidence = list(evidence)
    cc = tuple(gpu.compute_capability)
    by_key = {c.key: c for c in candidates}
    quality_read = read_quality(candidates, model, quality)
    results, perfs, labs = [], {}, {}
    for c in candidates:
        start = start_check(c, cc, builds)
        refusals = ineligible_reasons(c, cc, builds)
        fit = memory_fit(c, model, gpu, workload.users, workload.context, variant_bytes,
                         gpu_memory_utilization)
        lab = labs[c.key] = read_launches(c, gpu, model, launches, builds, gpus_used=fit.gpus_used)
        contradiction = ""
        if lab.outcome == "did not start":  # measured: beats what the facts table says
            refusals = [did_not_start_reason(lab.decided_by, bool(refusals))] + refusals
        elif lab.outcome == "started" and refusals:
            contradiction, refusals = contradiction_reason(lab.decided_by, c, min_compute_capability(c, builds)), []
        modelled = fit
        fit = measured_fit(c, fit, lab.startup) or fit
        perf = predict(c, gpu, workload, evidence, builds, model=model, gpus_used=fit.gpus_used)
        estimated, estimate_sources, layout_words = "", [], ""
        prior = (estimate(c, model, gpu, workload, modelled.weights_gib * 1024**3, fit.gpus_used, fit.split)
                 if not refusals and fit.fits else None)
        prior, ledger = corrected(prior, (corrections or {}).get(c.backend))
        if prior is not None and perf.basis is None:  # nothing measured: the physical estimate
            perf.metrics.update({m: p for m, p in prior.metrics.items() if p.value is not None})
            estimated, estimate_sources, layout_words = prior.sentence, prior.sources, prior.layout
        elif prior is not None:  # figures carried past the levels they cover say nothing there: the estimate does
            stand_in(perf, prior)
        perfs[c.key] = perf
        checks = check_targets(workload, perf.metrics)
        energy = cost = None
        if not refusals and fit.fits:  # what serving it would spend, at this load
            energy = energy_read(perf.metrics, gpu, fit.gpus_used)
            cost = cost_read(price, perf.metrics, gpu, fit.gpus_used) if price is not None else None
        if workload.priority == QUALITY:
            value, value_text, value_how = quality_read.priority_value(c.key)
        elif workload.priority in ECONOMY:
            read = cost if workload.priority == COST else energy
            value, value_text, value_how = economy_priority(read) if read is not None else (None, "", "none")
        else:
            value, value_text, value_how = _priority(workload.priority, perf.metrics, fit)

        reasons = list(refusals)
        if contradiction:
            reasons.append(contradiction)
        started_refs = lab.decided_by if lab.outcome == "started" else []
        reasons += [other_failure_reason(ref, started_refs) for ref in lab.other_failures[:SHOWN_FAILURES]]
        if len(lab.other_failures) > SHOWN_FAILURES:
            reasons.append(f"{len(lab.other_failures) - SHOWN_FAILURES} more launches did not start (see the lab's "
                           f"launches below).")
        if lab.startup:
            reasons.append(startup_sentence(lab.startup))
        memory_measured = _memory_measured(c, lab.startup, fit)
        reasons.append(fit.explanation)
        if fit.default_context_note and not refusals:
            reasons.append(fit.default_context_note)
        if fit.fits and fit.gpus_used > 1:
            reasons.append(f"Needs {fit.gpus_used} GPUs ({fit.split}): one is not enough.")
        reasons += fit.tensor_parallel_refused
        reasons.append(estimated or _perf_sentence(c, perf, workload, gpu))
        if layout_words:
            reasons.append(layout_words)
        reasons += perf.notes
        for flag in sorted({f for ref in perf.evidence for f in ref.flags}):
            reasons.append(f"These figures are {flag}.")
        reasons += [chk.note for chk in checks.values()]
        ranked_on = value_text if workload.priority in ECONOMY else None  # said once, as what it is ranked by
        reasons += [f"{figure(r.figure).metric.name}: {r.text[0].lower() + r.text[1:]}".rstrip(".") + "."
                    for r in (energy, cost) if r is not None and r.text != ranked_on]
        reasons.append(quality_sentence(c, quality_read.reads[c.key]))
        if refusals or not fit.fits:
            reasons.append("Not recommended: it " + ("cannot start on this GPU." if refusals
                                                     else "does not fit in this GPU's memory."))
        elif value is not None:
            reasons.append(f"Ranked by {PRIORITY_PHRASES[workload.priority]}: {value_text}.")
        else:
            reasons.append(f"Ranked below candidates with figures: its "
                           f"{PRIORITY_PHRASES[workload.priority]} is unknown.")
            if workload.priority == QUALITY:
                reasons.append(quality_read.not_ranked_why(c.key))

        results.append(CandidateResult(
            key=c.key, label=c.label, requirements=requirements(c, builds), eligible=not refusals,
            ineligible_reasons=refusals, fit=fit, evidence_basis=perf.basis, evidence_shape=perf.shape,
            predicted=perf.metrics,
            evidence=perf.evidence, evidence_notes=perf.notes, meets_targets=checks,
            meets_all=_meets_all(checks), priority_value=value, priority_how=value_how,
            priority_text=value_text, reasons=reasons, quality=quality_read.reads[c.key], estimate=estimated,
            estimate_sources=estimate_sources,
            releases="" if refusals or contradiction else start.releases_text,
            started=lab.outcome, launches=lab.decided_by + lab.other_failures, startup=lab.startup,
            contradiction=contradiction, memory_measured=memory_measured, energy=energy, cost=cost,
            model_estimate=ledger,
            launch=with_replicas(engine_of(c.backend).launch(c, model, gpu, workload, fit), prior, workload)
            if not refusals and fit.fits else None))

    results = [r for _, r in sorted(enumerate(results), key=lambda ir: _sort_key(ir[1], ir[0], workload.priority))]
    for i, r in enumerate(results, 1):
        r.rank = i

    runnable = [r for r in results if r.recommendable]
    top = runnable[0] if runnable else None
    # The top one, if the evidence backs it: known priority figure, or targets shown to be met,
    # or it is the only one that can start and fit (said so, with low confidence).
    # An estimate is only compared with measured figures or other estimates: a candidate with no
    # figure at all (a GPU without a datasheet row) leaves the comparison open (measure next). An
    # estimate never stands in for targets it cannot check.
    guessed = top is not None and top.priority_how == "estimated" and (
        bool(top.meets_targets) and top.meets_all is None
        or any(r.priority_value is None and by_key[r.key].estimable for r in runnable))
    rec = top if top and top.meets_all is not False and not guessed and (
        top.priority_value is not None or (top.meets_targets and top.meets_all)
        or len(runnable) == 1) else None
    confidence, confidence_why = _confidence(rec, results, workload)
    cards = cards_answer(gpu, model, workload, evidence, results, rec.key if rec else None)

    summary = _summary(gpu, workload, results, runnable, rec, candidates)
    caveats = _caveats(workload, results, perfs, evidence, by_key)
    caveats += [r.contradiction for r in results if r.contradiction]
    for c in candidates:
        for why, n in labs[c.key].ignored_why.items():
            caveats.append(f"{'1 launch' if n == 1 else f'{n} launches'} of {c.label} not used: {why}.")
    return Recommendation(
        capacity=capacity_answer(gpu, model, workload, results, candidates, variant_bytes, gpu_memory_utilization)
        if not runnable else [],
        gpu=gpu, model=model, workload=workload, builds=builds, ranked=results,
        recommended=rec.key if rec else None, summary=summary, caveats=caveats,
        confidence=confidence, confidence_why=confidence_why,
        hardware_notes=hardware_notes(gpu, workload, results, candidates, builds, cards),
        measure_next=measure_next(gpu, workload, results), quality_basis=quality_read.basis,
        why=_why(gpu, workload, results, rec), cards=cards, price=price)


def _memory_measured(c: Candidate, startup: StartupRead | None, fit: MemoryFit) -> str:
    """The measured memory after load beside the modelled fit, saying which one the fit is."""
    if startup is None or startup.memory_loaded_gib is None:
        return ""
    ref = startup.launch
    if fit.basis == "measured":
        flags = ref.flags or "as its recipe starts it"
        return (f"The fit is measured: {fmt(startup.memory_loaded_gib)} GiB of GPU memory after load ({flags}; "
                f"{ref.label}) gives the weights and runtime; this workload's KV cache is modelled on top.")
    if startup.memory_source != "gpu":
        return (f"Memory after load was measured only as resident memory (RSS, {fmt(startup.memory_loaded_gib)} GiB, "
                f"{ref.label}): no GPU memory was read, so the fit is modelled.")
    held = (" vLLM takes its --gpu-memory-utilization share at start whatever it needs, so this is its "
            "allocation, not its need." if engine_of(c.backend).memory_share_fact else "")
    return (f"Memory after load measured: {fmt(startup.memory_loaded_gib)} GiB of GPU memory "
            f"({ref.flags or 'as its recipe starts it'}; {ref.label}), against {fmt(fit.required_gib)} GiB modelled "
            f"for this workload. The fit is modelled, not this measurement: the launch's flags size its own KV "
            f"cache.{held}")


def _why(gpu: GpuSpec, workload: Workload, results: list[CandidateResult], rec: CandidateResult | None) -> list[str]:
    """The verdict in three lines: its figure and where it comes from, that it fits (and how much
    more would), what the runner-up or the refused ones are."""
    if rec is None:
        return []
    text = rec.priority_text
    if text and rec.evidence_basis and rec.priority_how not in ("estimated", "computed") \
            and rec.evidence_basis not in text:
        text += f", {rec.evidence_basis}"
    first = (f"{PRIORITY_PHRASES[workload.priority][0].upper()}{PRIORITY_PHRASES[workload.priority][1:]}: {text}."
             if text else f"{rec.label} is the only candidate that can start and fit; its figures at this "
                          f"load are unknown.")
    chosen = next((c for c in rec.fit.capacity if c.kv_cache == rec.fit.kv_cache), None)
    second = (f"{rec.fit.explanation.split(':', 1)[0]} ({fmt(rec.fit.required_gib)} of {fmt(rec.fit.usable_gib)} "
              f"GiB usable)" + (f"; {chosen.sentence[0].lower() + chosen.sentence[1:]}" if chosen else "."))
    others = [r for r in results if r is not rec and r.recommendable]
    refused = [r.label for r in results if not r.eligible]
    if others and others[0].priority_value is not None:
        third = f"Next: {others[0].label}, {others[0].priority_text}."
        band = _band(workload, others[0])
        if others[0].priority_how == "estimated" and rec.priority_how != "estimated" and band is not None \
                and rec.priority_value is not None and band[0] > rec.priority_value:
            third += (f" Its whole band ({fmt(band[0])} to {fmt(band[1])}) lies above {rec.label}'s "
                      f"{rec.priority_how} {fmt(rec.priority_value)}, yet an estimate ranks below figures that were "
                      f"measured or published: measure {others[0].label} next, and it may well win.")
        elif others[0].priority_how == "estimated" and rec.priority_how != "estimated":
            third += " An estimate ranks below figures that were measured or published, whatever its value."
        elif _bands_overlap(workload, rec, others[0]):
            third += " The two estimates overlap: measure both before choosing between them."
        elif (d := _within_noise(rec, others[0])) is not None:
            published = " (a published figure's own uncertainty is not known)" if "published" in (
                rec.priority_how, others[0].priority_how) else ""
            third += (f" No clear winner between them: {d.ratio:.2f}× apart, {d.why()}{published}; measure both "
                      f"with trials before choosing.")
    elif refused:
        third = (f"{', '.join(refused)} cannot start on compute capability {cc_str(gpu.compute_capability)} "
                 f"(see each breakdown).")
    else:
        third = "No other candidate has figures at this load to compare with."
    return [first, second, third]


def _within_noise(a: CandidateResult, b: CandidateResult):
    """The difference between two candidates' figures read from data (measured, published, or
    between measured levels) when it is within their noise (engine/differences.py); else None."""
    read = ("measured", "published", "interpolated")
    if a.priority_how not in read or b.priority_how not in read or not a.priority_value or not b.priority_value:
        return None
    d = judge([a.priority_value], [b.priority_value])
    return d if d is not None and not d.clear else None


def _band(workload: Workload, r: CandidateResult) -> tuple[float, float] | None:
    """The estimate's band of the figure ranked on; None when it was not estimated."""
    if workload.priority in ECONOMY:  # in cost or joules: two bands overlap or not all the same
        read = _economy_read(workload.priority, r)
        return read.band if read is not None and read.how == "estimated" else None
    if workload.priority not in ("throughput", "single_user_speed"):
        return None  # memory headroom is computed, quality measured: neither is an estimate's band
    metric = "aggregate_tok_s" if workload.priority == "throughput" else "decode_tok_s_p50"
    p = r.predicted.get(metric)
    return p.band if p is not None and p.how == "estimated" else None


def _bands_overlap(workload: Workload, a: CandidateResult, b: CandidateResult) -> bool:
    """Two estimates whose bands overlap do not rank one above the other."""
    x, y = _band(workload, a), _band(workload, b)
    return x is not None and y is not None and x[0] <= y[1] and y[0] <= x[1]


def capacity_answer(gpu: GpuSpec, model: ModelSpec, workload: Workload, results: list[CandidateResult],
                    candidates: Sequence[Candidate], variant_bytes, gpu_memory_utilization) -> list[str]:
    """When nothing fits: the most users that fit at the stated context, the longest context that
    fits the stated users, and whether more cards of this GPU would do."""
    by_key = {c.key: c for c in candidates}
    startable = [r for r in results if r.eligible]
    if not startable:
        return []
    options = [(cap, r) for r in startable for cap in r.fit.capacity]
    out = []
    if options:
        cap, r = max(options, key=lambda o: (o[0].max_users, o[0].longest_context))
        where = "one GPU" if cap.gpus == 1 else f"{cap.gpus} GPUs"
        if cap.max_users:
            out.append(f"At {workload.context} tokens each, at most {users_str(cap.max_users)} fit "
                       f"({r.label}, {cap.kv_cache} KV cache, {where}).")
            cap, r = max(options, key=lambda o: (o[0].longest_context, o[0].max_users))
            out.append(f"At {users_str(workload.users)}, at most {cap.longest_context} tokens each fit "
                       f"({r.label}, {cap.kv_cache} KV cache).")
        else:
            out.append(f"At {workload.context} tokens each, not one user fits on {where}: the weights and "
                       f"runtime leave too little room.")
    most = gpu.count * MORE_CARDS
    for more in sorted({gpu.count + 1, gpu.count * 2, gpu.count * 4, most}):
        bigger = dataclasses.replace(gpu, count=more)
        fits = [(r, memory_fit(by_key[r.key], model, bigger, workload.users, workload.context, variant_bytes,
                               gpu_memory_utilization)) for r in startable]
        fits = [(r, f) for r, f in fits if f.fits]
        if fits:
            r, f = min(fits, key=lambda rf: (rf[1].gpus_used, -rf[1].headroom_gib))
            out.append(f"{f.gpus_used} of these GPUs would fit it: {r.label} ({f.split}), "
                       f"{fmt(f.required_gib)} of {fmt(f.usable_gib)} GiB usable.")
            break
    else:
        out.append(f"Even {most} of these GPUs would not fit {users_str(workload.users)} x "
                   f"{workload.context} tokens.")
    return out


def _summary(gpu, workload, results, runnable, rec, candidates) -> str:
    cc = cc_str(gpu.compute_capability)
    order = [c.key for c in candidates]
    blocked = [r.label for r in sorted(results, key=lambda r: order.index(r.key)) if not r.eligible]
    tail = f" {' and '.join(blocked)} cannot start on compute capability {cc}." if blocked else ""
    phrase = PRIORITY_PHRASES[workload.priority]
    load = f"{users_str(workload.users)} on {gpu.name}"
    if rec is not None:
        text = rec.priority_text
        if rec.priority_value is None and len(runnable) == 1:
            why = "the only candidate that can start and fit; its figures at this load are unknown"
        elif rec.priority_value is None:
            why = f"it meets the targets; its {phrase} is unknown"
        else:
            why = f"{PRIORITY[workload.priority].best} {phrase}, {text}"
            if rec.evidence_basis == BASES[3] and workload.priority != QUALITY:
                why += ", published, not measured here"
        if rec.meets_all is None and rec.meets_targets:
            why += "; the targets could not all be checked"
        return f"{rec.label} for {load}: {why}.{tail}"
    if not runnable:
        return (f"Nothing can be recommended: no candidate both starts on {gpu.name} and fits "
                f"{users_str(workload.users)} x {workload.context} tokens.{tail}")
    if all(r.meets_all is False for r in runnable):
        return (f"No candidate is known to meet the targets at {users_str(workload.users)}; the "
                f"closest by {phrase} is {runnable[0].label}.{tail}")
    missing = [r.label for r in runnable if r.meets_all is False]
    missing = f" {' and '.join(missing)} miss the targets." if missing else ""
    if runnable[0].priority_how == "estimated":
        unknown = [r.label for r in runnable if r.priority_value is None]
        open_ = (f"nothing to estimate {', '.join(unknown)} from" if unknown
                 else "an estimate cannot check the targets")
        return (f"Only estimates for {load}: {runnable[0].label} first, {runnable[0].priority_text}; "
                f"{open_}: measure next.{missing}{tail}")
    meeting = " that meet the targets" if any(r.meets_targets for r in runnable) else ""
    return f"No candidate that can run here has figures for {load}{meeting}: measure next.{missing}{tail}"


def _caveats(workload, results, perfs, evidence, by_key) -> list[str]:
    """What holds for the whole answer, each once (a candidate's own flags are in its breakdown)."""
    caveats = [f"Memory assumes {users_str(workload.users)}, each holding a full "
               f"{workload.context}-token context at once; runtime overheads are estimates (see "
               f"each breakdown)."]
    for r in results:
        for why, n in perfs[r.key].ignored_why.items():
            rows = "1 evidence row" if n == 1 else f"{n} evidence rows"
            caveats.append(f"{rows} for {r.label} not used: {why}.")
    unknown = sorted({ev.candidate for ev in evidence if ev.candidate not in by_key})
    if unknown:
        caveats.append(f"Evidence for candidates not considered was ignored: {', '.join(unknown)}.")
    return list(dict.fromkeys(caveats))
