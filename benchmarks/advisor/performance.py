"""How fast at this load? Pick the closest evidence, then read it at the workload's users level."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..engine import backends
from ..engine.catalogue import ADVISOR_FIGURES
from .facts import Candidate, cc_str, fmt, unmet_requirements, users_str
from .specs import EngineBuilds, Evidence, GpuSpec, ModelSpec, Workload

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
    how: str  # "measured" | "published" (read at the level) | "interpolated" | "derived" | "extrapolated" |
    # "estimated" | "none"
    levels: tuple[int, ...]  # concurrency levels the value was read from
    evidence_ids: tuple[str, ...]
    note: str
    band: tuple[float, float] | None = None  # "estimated": the range the value is the middle of


@dataclass
class Performance:
    basis: str | None  # one of BASES, None when nothing was measured or published
    shape: tuple[int, int] | None  # (prompt, output) tokens of the evidence used
    metrics: dict[str, Predicted]
    evidence: list[EvidenceRef] = field(default_factory=list)  # rows actually used
    notes: list[str] = field(default_factory=list)
    ignored: list[Evidence] = field(default_factory=list)  # this candidate's rows not comparable
    ignored_why: dict[str, int] = field(default_factory=dict)  # why -> how many rows


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
    """A figure for a setup upstream engines refuse to start cannot be reproduced: said once, with
    the most permissive rule it still fails."""
    unmet = unmet_requirements(candidate, ev.compute_capability, builds)
    if not unmet:
        return ()
    f = min(unmet, key=lambda f: f.min_cc)
    return (f"not reproducible with upstream {backends.label(candidate.backend)}: {ev.gpu_name} is compute "
            f"capability {cc_str(ev.compute_capability)} and {f.statement} ({f.source})",)


def read_at(points: dict[int, Evidence], metric: str, users: int) -> Predicted:
    """Exact level, else linear interpolation between the two nearest levels; beyond the measured
    range report the nearest level's figure, flagged, rather than invent a trend."""
    known = sorted((c, ev) for c, ev in points.items() if getattr(ev, metric) is not None)
    if not known:
        return Predicted(metric, None, "none", (), (), "no figure in the evidence")
    for c, ev in known:
        if c == users:
            return Predicted(metric, getattr(ev, metric), "published" if ev.kind == "published" else "measured",
                             (c,), (ev.id,),
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


def model_key(name: str) -> str:
    """'deepseek-ai/DeepSeek-R1-Distill-Qwen-7B' and 'DeepSeek-R1-Distill-Qwen-7B' are one model."""
    return name.strip().lower().rsplit("/", 1)[-1]


def _why_not_comparable(ev: Evidence, gpu: GpuSpec, model: ModelSpec | None, gpus_used: int) -> str:
    if model is not None and model_key(ev.model) != model_key(model.name):
        return f"measured on another model ({ev.model or 'not stated'})"
    if basis_of(ev, gpu) is None:
        return "from other GPUs"
    if ev.gpu_count != gpus_used:
        return f"served by {ev.gpu_count} GPU{'s' if ev.gpu_count != 1 else ''}, not {gpus_used}"
    return ""


def _physical(metrics: dict[str, Predicted], users: int) -> list[str]:
    """What a reading must respect: a level's aggregate output is at most users x per-stream decode
    (the time to first token only lowers it), and is never carried down from more users; peak
    memory grows with the KV cache and the batch, so it is never carried to another load."""
    notes = []
    decode, agg, mem = metrics["decode_tok_s_p50"], metrics["aggregate_tok_s"], metrics["peak_memory_gib"]
    bound = users * decode.value if decode.value is not None and decode.how != "extrapolated" else None
    carried_down = agg.how == "extrapolated" and agg.levels and agg.levels[0] > users
    # 2 %: published figures are rounded (the write-up's 8 x 18.7 = 149.6 against "150").
    if bound is not None and (agg.value is None or carried_down or agg.value > bound * 1.02):
        why = ("Aggregate output throughput was not measured at this load" if agg.value is None else
               f"The aggregate figure at {users_str(agg.levels[0])} ({fmt(agg.value)} tok/s) cannot hold for "
               f"fewer users" if carried_down else f"The aggregate reading ({fmt(agg.value)} tok/s) exceeded it")
        metrics["aggregate_tok_s"] = Predicted(
            "aggregate_tok_s", bound, "derived", decode.levels, decode.evidence_ids,
            f"derived: at most {users_str(users)} x {fmt(decode.value)} tok/s per stream, an upper bound")
        notes.append(f"{why}: derived as {users_str(users)} x the per-stream decode, {fmt(bound)} tok/s, an upper "
                     f"bound (the time to first token is not counted).")
    elif carried_down:
        metrics["aggregate_tok_s"] = Predicted("aggregate_tok_s", None, "none", (), (),
                                               f"no figure: the one at {users_str(agg.levels[0])} cannot hold "
                                               f"for fewer users")
    if mem.how == "extrapolated":
        metrics["peak_memory_gib"] = Predicted("peak_memory_gib", None, "none", (), (),
                                               f"no figure: peak memory grows with the KV cache and the batch, "
                                               f"so the one at {users_str(mem.levels[0])} is not carried here")
    return notes


def predict(candidate: Candidate, gpu: GpuSpec, workload: Workload, evidence: list[Evidence],
            builds: EngineBuilds = EngineBuilds(), *, model: ModelSpec | None = None,
            gpus_used: int = 1) -> Performance:
    """Only rows of this candidate, on this model (when given), on a comparable GPU, served by as
    many GPUs as the fit uses, are read: a figure is never carried to another model or setup."""
    rows = [ev for ev in evidence if ev.candidate == candidate.key and ev.concurrency >= 1]
    usable, ignored, why_counts = [], [], {}
    for ev in rows:
        why = _why_not_comparable(ev, gpu, model, gpus_used)
        if why:
            ignored.append(ev)
            why_counts[why] = why_counts.get(why, 0) + 1
        else:
            usable.append((basis_of(ev, gpu), ev))
    if not usable:
        empty = {m: Predicted(m, None, "none", (), (), "no figure in the evidence") for m in METRICS}
        return Performance(None, None, empty, ignored=ignored, ignored_why=why_counts)

    # One series = one setup (GPU, host, prompt/output shape, engine version, flags): levels are
    # only comparable within it.
    best = min(b for b, _ in usable)
    series: dict[tuple, dict[int, Evidence]] = {}
    for b, ev in usable:
        if b == best:  # first row per level wins: pass newest first
            key = (gpu_key(ev.gpu_name), ev.host_id, ev.prompt_tokens, ev.output_tokens, ev.engine_version,
                   ev.build_flags)
            series.setdefault(key, {}).setdefault(ev.concurrency, ev)
    order = list(series)
    chosen = min(order, key=lambda k: (_shape_distance(next(iter(series[k].values())), workload),
                                       -len(series[k]), order.index(k)))
    points = series[chosen]
    metrics = {m: read_at(points, m, workload.users) for m in METRICS}
    physics_notes = _physical(metrics, workload.users)

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
    notes += physics_notes
    return Performance(BASES[best], shape, metrics, refs, notes, ignored, why_counts)
