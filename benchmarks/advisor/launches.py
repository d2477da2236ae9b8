"""Did it start on this GPU? What the lab measured when a host's worker started a candidate's
server from a recipe: a start that failed for a reason of the GPU (its compute capability, or the
quantization on it) is measured evidence that it cannot start here, and beats the facts table; a
start where the facts table says it cannot is a measured contradiction, said as such. Servers that
started give their start-up time and their memory after load.

Read as speed evidence is: only this candidate, on this model, measured on this host, then on the
same GPU model, then on the same compute capability (the best tier that has any); with the vLLM
version asked about when one was given and the launch's is known.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

from ..engine import backends
from .facts import Candidate, cc_str, fmt
from .backends import FP16_KV, engine_of
from .memory import GIB, MemoryFit
from .performance import BASES, basis_of, model_key
from .specs import EngineBuilds, GpuSpec, LaunchEvidence, ModelSpec, parse_version

# engine.launcher.CAUSES' codes that say the GPU itself is the reason: measured "cannot start here".
# Other causes (out of memory at its flags, a bad flag, a missing file, a port) are the recipe's own.
GPU_CAUSES = ("unsupported_gpu", "unsupported_quantization")


@dataclass(frozen=True)
class LaunchRef:
    """A launch as the decision shows it, with where it was measured."""

    id: str
    label: str
    url: str | None
    basis: str  # one of performance.BASES[:3]
    gpu_name: str
    compute_capability: str
    engine_version: str
    flags: str
    started: bool
    cause_code: str = ""
    cause: str = ""
    cause_line: str = ""
    log_excerpt: str = ""
    exit: str = ""

    @property
    def where(self) -> str:
        version = self.engine_version or "engine version not recorded"
        flags = f", {self.flags}" if self.flags else ""
        return f"{self.gpu_name}, compute capability {self.compute_capability}, {version}{flags}"


@dataclass(frozen=True)
class StartupRead:
    """Measured start-up of the newest server of this candidate that started on a GPU like this
    one, with as many GPUs as the memory fit uses."""

    health_s: float | None
    first_token_s: float | None
    memory_loaded_gib: float | None
    memory_source: str  # "gpu" | "rss" | ""
    memory_note: str
    launch: LaunchRef
    kv_context_tokens: int | None = None  # LaunchEvidence's


@dataclass
class LaunchRead:
    outcome: str  # "did not start" | "started" | "not measured"
    decided_by: list[LaunchRef] = field(default_factory=list)  # the launches the outcome rests on
    other_failures: list[LaunchRef] = field(default_factory=list)  # did not start, for their own reasons
    startup: StartupRead | None = None
    ignored_why: dict[str, int] = field(default_factory=dict)


def _why_not_comparable(ev: LaunchEvidence, candidate: Candidate, gpu: GpuSpec, model: ModelSpec,
                        builds: EngineBuilds) -> str:
    if model_key(ev.model) != model_key(model.name):
        return f"started with another model ({ev.model or 'not stated'})"
    if basis_of(ev, gpu) is None:
        return "started on other GPUs"
    engine = engine_of(candidate.backend)
    return engine.other_version_reason(engine.version(builds), parse_version(ev.engine_version), ev.engine_version)


def _ref(ev: LaunchEvidence, basis: int) -> LaunchRef:
    return LaunchRef(ev.id, ev.label, ev.url, BASES[basis], ev.gpu_name, cc_str(ev.compute_capability),
                     ev.engine_version, ev.flags, ev.started, ev.cause_code, ev.cause, ev.cause_line, ev.log_excerpt, ev.exit)


def read_launches(candidate: Candidate, gpu: GpuSpec, model: ModelSpec, launches: Sequence[LaunchEvidence],
                  builds: EngineBuilds = EngineBuilds(), *, gpus_used: int = 1) -> LaunchRead:
    """This candidate's launches on a GPU like this one (pass newest first). In the best tier a
    server that started proves it can (a failure beside it was that setup's own); else failures
    with a GPU cause say it cannot."""
    usable, ignored = [], {}
    for ev in launches:
        if ev.candidate != candidate.key:
            continue
        why = _why_not_comparable(ev, candidate, gpu, model, builds)
        if why:
            ignored[why] = ignored.get(why, 0) + 1
        else:
            usable.append((basis_of(ev, gpu), ev))
    if not usable:
        return LaunchRead("not measured", ignored_why=ignored)
    best = min(b for b, _ in usable)
    tier = [(ev, _ref(ev, best)) for b, ev in usable if b == best]
    started = [r for ev, r in tier if ev.started]
    gpu_failures = [r for ev, r in tier if not ev.started and ev.cause_code in GPU_CAUSES]
    others = [r for ev, r in tier if not ev.started and ev.cause_code not in GPU_CAUSES]
    startup = next((StartupRead(ev.health_s, ev.first_token_s,
                                ev.memory_loaded_mib / 1024 if ev.memory_loaded_mib is not None else None,
                                ev.memory_source, ev.memory_note, r, ev.kv_context_tokens)
                    for ev, r in tier if ev.started and ev.gpu_count == gpus_used), None)
    if started:
        return LaunchRead("started", started, others + gpu_failures, startup, ignored)
    if gpu_failures:
        return LaunchRead("did not start", gpu_failures, others, None, ignored)
    return LaunchRead("not measured", [], others, None, ignored)


def _quoted(line: str, limit: int = 240) -> str:
    line = " ".join(line.split())
    return f"“{line[:limit]}{'…' if len(line) > limit else ''}”"


def did_not_start_reason(refs: Sequence[LaunchRef], facts_refuse: bool) -> str:
    """The measured refusal: the newest launch's log line and where it was measured, and how many
    more did not start either."""
    ref = refs[0]
    said = f": {_quoted(ref.cause_line)}" if ref.cause_line else ""
    more = f"; {len(refs) - 1} more launch{'es' if len(refs) > 2 else ''} did not start either" if len(refs) > 1 else ""
    agree = ("; the facts table says the same" if facts_refuse else
             "; the facts table says it can start here, but the measurement wins")
    return (f"Did not start on {ref.where} ({ref.basis}, {ref.label}): {ref.cause}{said} ({ref.exit})"
            f"{more}{agree}.")


def contradiction_reason(refs: Sequence[LaunchRef], candidate: Candidate, needs_cc: tuple[int, int]) -> str:
    """A start measured where the facts table says it cannot: the measurement is used, and said."""
    ref = refs[0]
    return (f"Measured contradiction: it started on {ref.where} ({ref.basis}, {ref.label}), where the facts "
            f"table says it needs compute capability {cc_str(needs_cc)} or more (its hardware facts below). The "
            f"measurement is used; check which {backends.label(candidate.backend)} build it was (a patched or "
            f"newer one may explain it).")


def other_failure_reason(ref: LaunchRef, started: Sequence[LaunchRef]) -> str:
    """A launch that did not start, beside the outcome: a GPU cause next to a start is another
    setup's; any other cause is the launch's own."""
    cause = ref.cause or "no cause recognised in its log"
    said = f": {_quoted(ref.cause_line)}" if ref.cause_line else ""
    if ref.cause_code in GPU_CAUSES and started:
        return (f"Did not start in {ref.label} ({ref.where}): {cause}{said} ({ref.exit}), yet it started in "
                f"{started[0].label}: the two setups differ (engine build or flags).")
    return (f"Did not start in {ref.label} ({ref.where}): {cause}{said} ({ref.exit}); a problem of that launch's "
            f"own setup, not evidence about the GPU.")


def measured_fit(candidate: Candidate, fit: MemoryFit, startup: StartupRead | None) -> MemoryFit | None:
    """The memory fit on the measured load memory: llama.cpp allocates at load what it will use
    (weights, the KV cache of its -c shared by its slots, compute buffers), so the GPU memory
    measured after load less the KV cache of the launch's own -c is its weights and runtime,
    measured; this workload's KV cache is added, modelled. None where that cannot be said: no
    GPU reading, vLLM (it takes its --gpu-memory-utilization share whatever it needs), the
    launch's -c unknown or its cache quantized, or a fit that needs a quantized cache."""
    if (startup is None or startup.memory_source != "gpu" or startup.memory_loaded_gib is None
            or not engine_of(candidate.backend).load_memory_is_need or not startup.kv_context_tokens
            or fit.kv_cache != FP16_KV.label):
        return None
    launch_kv = fit.kv_bytes_per_token * startup.kv_context_tokens / GIB
    base = startup.memory_loaded_gib - launch_kv
    if base <= 0:
        return None  # less than its own KV cache: the launch was of another shape than this model's
    required = base + fit.kv_cache_gib
    fits = required <= fit.usable_gib
    where = "one GPU" if fit.gpus_used == 1 else f"{fit.gpus_used} GPUs ({fit.split})"
    how = (f"measured: {fmt(startup.memory_loaded_gib)} GiB after load ({startup.launch.label}) less the "
           f"{fmt(launch_kv)} GiB KV cache of its -c {startup.kv_context_tokens}")
    explanation = (f"{'Fits on' if fits else 'Does not fit on'} {where}, measured: {fmt(base)} GiB weights and "
                   f"runtime ({how}) + {fmt(fit.kv_cache_gib)} GiB KV cache, modelled ({fit.kv_tokens} tokens x "
                   f"{fmt(fit.kv_bytes_per_token)} bytes) = {fmt(required)} GiB, against {fmt(fit.usable_gib)} GiB "
                   f"usable.")
    return dataclasses.replace(fit, fits=fits, weights_gib=base, weights_source=f"weights and runtime, {how}",
                               overhead_gib=0.0, overhead_why="in the measured figure (weights and runtime)",
                               required_gib=required, headroom_gib=fit.usable_gib - required,
                               explanation=explanation, allocated_gib=required, basis="measured")


def startup_sentence(s: StartupRead) -> str:
    parts = []
    if s.health_s is not None:
        parts.append(f"{fmt(s.health_s)} s to /health")
    if s.first_token_s is not None:
        parts.append(f"{fmt(s.first_token_s)} s to a first token")
    if s.memory_loaded_gib is not None:
        what = "GPU memory" if s.memory_source == "gpu" else "resident memory (RSS, no GPU: not GPU memory)"
        parts.append(f"{fmt(s.memory_loaded_gib)} GiB {what} after load")
    figures = ", ".join(parts) if parts else "no start-up figures"
    return f"Start-up measured ({s.launch.basis}, {s.launch.label}): {figures}."
