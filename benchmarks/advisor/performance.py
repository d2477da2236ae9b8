"""How fast at this load? Pick the closest evidence, then read it at the workload's users level."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..engine import backends
from ..engine.catalogue import ADVISOR_FIGURES
from .facts import Candidate, cc_str, unmet_requirements, users_str
from .specs import EngineBuilds, Evidence, GpuSpec, Workload

# What is predicted for each candidate: the catalogue's figures, named as the catalogue names them
# (Evidence has one field per name; their labels and units are the catalogue's too).
METRICS = tuple(f.name for f in ADVISOR_FIGURES)
# Preference order for evidence, best first.
BASES = ("measured on this host", "measured on the same GPU model",
         "measured on the same compute capability", "published, not measured here")


@dataclass(frozen=True)
class EvidenceRef:
    id: str
    label: str
    kind: str
    url: str | None
    concurrency: int
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Predicted:
    metric: str
    value: float | None
    how: str  # "measured" | "interpolated" | "extrapolated" | "none"
    levels: tuple[int, ...]  # concurrency levels the value was read from
    evidence_ids: tuple[str, ...]
    note: str


@dataclass
class Performance:
    basis: str | None  # one of BASES, None when nothing was measured or published
    shape: tuple[int, int] | None  # (prompt, output) tokens of the evidence used
    metrics: dict[str, Predicted]
    evidence: list[EvidenceRef] = field(default_factory=list)  # rows actually used
    notes: list[str] = field(default_factory=list)
    ignored: list[Evidence] = field(default_factory=list)  # this candidate's rows not comparable


def gpu_key(name: str) -> str:
    """'NVIDIA H200' and 'H200' are the same GPU model."""
    words = [w for w in name.lower().replace("-", " ").split() if w not in ("nvidia", "tesla")]
    return " ".join(words)


def basis_of(ev: Evidence, gpu: GpuSpec) -> int | None:
    """Index into BASES, or None when the row says nothing about this GPU."""
    same_gpu = gpu_key(ev.gpu_name) == gpu_key(gpu.name)
    same_cc = tuple(ev.compute_capability) == tuple(gpu.compute_capability)
    if ev.kind == "measured":
        if gpu.host_id and ev.host_id == gpu.host_id:
            return 0
        return 1 if same_gpu else 2 if same_cc else None
    if ev.kind == "published" and (same_gpu or same_cc):
        return 3
    return None


def reproducibility_flags(ev: Evidence, candidate: Candidate, builds: EngineBuilds) -> tuple[str, ...]:
    """A figure for a setup upstream engines refuse to start cannot be reproduced."""
    backend = backends.label(candidate.backend)
    return tuple(
        f"not reproducible with upstream {backend}: {ev.gpu_name} is compute capability "
        f"{cc_str(ev.compute_capability)} and {f.statement} ({f.source})"
        for f in unmet_requirements(candidate, ev.compute_capability, builds)
    )


def read_at(points: dict[int, Evidence], metric: str, users: int) -> Predicted:
    """Exact level, else linear interpolation between the two nearest levels; beyond the measured
    range report the nearest level's figure, flagged, rather than invent a trend."""
    known = sorted((c, ev) for c, ev in points.items() if getattr(ev, metric) is not None)
    if not known:
        return Predicted(metric, None, "none", (), (), "no figure in the evidence")
    for c, ev in known:
        if c == users:
            return Predicted(metric, getattr(ev, metric), "measured", (c,), (ev.id,),
                             f"figure at {users_str(c)}")
    lo = [(c, ev) for c, ev in known if c < users]
    hi = [(c, ev) for c, ev in known if c > users]
    if lo and hi:
        (c0, e0), (c1, e1) = lo[-1], hi[0]
        v0, v1 = getattr(e0, metric), getattr(e1, metric)
        value = v0 + (v1 - v0) * (users - c0) / (c1 - c0)
        return Predicted(metric, value, "interpolated", (c0, c1), (e0.id, e1.id),
                         f"interpolated linearly between the figures at {c0} and {users_str(c1)}")
    c, ev = lo[-1] if lo else hi[0]
    side = "up to" if lo else "from"
    return Predicted(metric, getattr(ev, metric), "extrapolated", (c,), (ev.id,),
                     f"extrapolation: figures only {side} {users_str(c)}; this is the figure at "
                     f"{users_str(c)}, not at {users_str(users)}")


def _shape_distance(ev: Evidence, workload: Workload) -> float:
    return (abs(math.log(max(ev.prompt_tokens, 1) / workload.prompt_tokens))
            + abs(math.log(max(ev.output_tokens, 1) / workload.output_tokens)))


def predict(candidate: Candidate, gpu: GpuSpec, workload: Workload, evidence: list[Evidence],
            builds: EngineBuilds = EngineBuilds()) -> Performance:
    rows = [ev for ev in evidence if ev.candidate == candidate.key and ev.concurrency >= 1]
    ranked = [(basis_of(ev, gpu), ev) for ev in rows]
    usable = [(b, ev) for b, ev in ranked if b is not None]
    ignored = [ev for b, ev in ranked if b is None]
    if not usable:
        empty = {m: Predicted(m, None, "none", (), (), "no figure in the evidence") for m in METRICS}
        return Performance(None, None, empty, ignored=ignored)

    # One series = one setup (GPU, host, prompt/output shape): levels are only comparable within it.
    best = min(b for b, _ in usable)
    series: dict[tuple, dict[int, Evidence]] = {}
    for b, ev in usable:
        if b == best:  # first row per level wins: pass newest first
            key = (gpu_key(ev.gpu_name), ev.host_id, ev.prompt_tokens, ev.output_tokens)
            series.setdefault(key, {}).setdefault(ev.concurrency, ev)
    order = list(series)
    chosen = min(order, key=lambda k: (_shape_distance(next(iter(series[k].values())), workload),
                                       -len(series[k]), order.index(k)))
    points = series[chosen]
    metrics = {m: read_at(points, m, workload.users) for m in METRICS}

    used_ids = {i for p in metrics.values() for i in p.evidence_ids}
    refs = [EvidenceRef(ev.id, ev.label, ev.kind, ev.url, ev.concurrency,
                        reproducibility_flags(ev, candidate, builds))
            for c, ev in sorted(points.items()) if ev.id in used_ids]
    notes = []
    shape = (chosen[2], chosen[3])
    if shape != (workload.prompt_tokens, workload.output_tokens):
        notes.append(f"Evidence is for {shape[0]} prompt / {shape[1]} output tokens, not the "
                     f"workload's {workload.prompt_tokens} / {workload.output_tokens}: figures may "
                     f"not transfer.")
    for p in metrics.values():
        if p.how in ("interpolated", "extrapolated"):
            note = p.note[0].upper() + p.note[1:] + "."
            if note not in notes:
                notes.append(note)
    return Performance(BASES[best], shape, metrics, refs, notes, ignored)
