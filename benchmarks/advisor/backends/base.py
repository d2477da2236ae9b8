"""What an advisor engine is, and the registry that holds them.

An advisor engine is everything the decision page knows about one serving engine, written once:
its candidates (the ways it can serve a model), the facts that decide whether each can start on
a GPU, its speed model and the parameters fitted to real figures, how it allocates memory for the
flags it would be started with, how it spreads a model over several GPUs, the command that
starts it as sized, and the notes a GPU earns when it can run there. The advisor, its memory
model, the launch commands and benchmarks/decisions ask the registry; none of them names an
engine. Its name is the measuring side's backend name (engine.backends), so a registered
endpoint, a recipe and an imported report find their engine by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..facts import Candidate, Fact
from ..specs import EngineBuilds, GpuSpec, ModelSpec

if TYPE_CHECKING:  # the memory model's and the launch's shapes, which are built from these engines
    from ..memory import MemoryFit
    from ..specs import Workload


# A CUDA context and cuBLAS workspace: what an idle CUDA process shows in nvidia-smi (0.3-0.5 GiB).
CUDA_CONTEXT_GIB = 0.5


@dataclass(frozen=True)
class KvCache:
    """How the KV cache is stored: its label, bytes per value, the flags that ask for it, the fact."""

    label: str
    bytes_per_value: float
    flags: str = ""
    fact_id: str = ""


FP16_KV = KvCache("16-bit", 2.0)


@dataclass(frozen=True)
class WeightFormat:
    """How one quantization's weights are stored and multiplied: what the step-time model reads."""

    bits: int  # 16 | 8 | 4: the storage width whose reads the fit gives one bandwidth share
    bits_per_weight: float  # of the layers' weights, as stored (block scales included)
    embedding_bits: float  # of the embedding and lm_head
    precision: str = "fp16"  # the tensor peak its matrix products run at: "fp16" | "fp8" | "int8"
    # Below this compute capability the matrix products fall back to 16 bit (FP8 weights on Ampere
    # run as W8A16).
    precision_min_cc: tuple[int, int] = (0, 0)
    prefill_precision: str = ""  # where prompts multiply at another precision ("" = the same)

    def peak_precision(self, cc: tuple[int, int]) -> str:
        return self.precision if tuple(cc) >= self.precision_min_cc else "fp16"

    def prefill_peak_precision(self, cc: tuple[int, int]) -> str:
        return self.prefill_precision or self.peak_precision(cc)

    def tflops(self, peak) -> tuple[float, float]:
        """The tensor peaks its decode and its prefill multiply at on this GPU (a gpus.GpuPeak)."""
        cc = peak.compute_capability
        return peak.peak(self.peak_precision(cc)), peak.peak(self.prefill_peak_precision(cc))

    def weight_bytes(self, params_b: float, embedding_params_b: float) -> float:
        return ((params_b - embedding_params_b) * self.bits_per_weight
                + embedding_params_b * self.embedding_bits) * 1e9 / 8


@dataclass(frozen=True)
class Launch:
    command: str
    build: str  # how to build the engine for this GPU ("" when a stock install will do)
    why: tuple[str, ...]  # one line per flag that is not the engine's default


class AdvisorEngine:
    """The defaults are an engine that runs one model on one GPU with a 16-bit KV cache, that the
    advisor has no speed model for and no command to start. An engine overrides what it does."""

    name = ""  # the measuring side's backend name (engine.backends): "vllm", "llamacpp"
    candidates: tuple[Candidate, ...] = ()
    facts: tuple[Fact, ...] = ()  # its eligibility and advice facts, with sources
    # A requirement (Candidate.requires) -> the facts that state it, one per range of its releases.
    requirements: dict[str, tuple[str, ...]] = {}
    # Candidate.quantization -> Variant.quantization: how a registered endpoint or a report maps to a
    # candidate (one the inventory cannot name has no measured evidence).
    variant_quantization: dict[str, str] = {}
    runtime_overhead_gib = CUDA_CONTEXT_GIB  # per GPU beyond weights and KV cache (an idle CUDA context)
    overhead_why = "CUDA context"
    several_gpus = "layer split"  # how it spreads a model over several GPUs, in words
    memory_share_fact = ""  # a fact whose value is the share of each GPU it takes at start-up ("" = what it needs)
    # The GPU memory measured after a launch is its weights and runtime plus the KV cache of its own
    # flags (what it allocates at load is what it uses); False where it takes a share whatever it needs.
    load_memory_is_need = False
    # Where the answer depends on the release and none was given: the fact whose bound it names.
    version_fact = ""
    # The step-time model (steptime.py): each quantization's storage and matrix precision, keyed by
    # Candidate.quantization and by the figure table's quantization names; how many sequences it
    # batches at most by default; its fitted parameters are fitted.json's entry of its name.
    formats: dict[str, WeightFormat] = {}
    default_slots = 256
    # The fitted.json entry its steps are estimated with ("" = its own name). An engine with no
    # figures in the table yet may borrow a close one's, which the estimate then says.
    fitted_as = ""

    # --- eligibility ---
    def version(self, builds: EngineBuilds) -> tuple[int, int] | None:
        """The release the team runs, where the facts differ by release; None = unknown or not asked."""
        return None

    def other_version_reason(self, asked: tuple[int, int] | None, measured: tuple[int, int] | None,
                             measured_text: str) -> str:
        """Why a launch of another release says nothing of the one asked about ("" = it does)."""
        return ""

    def read_build(self, version_text: str) -> tuple[str, object] | None:
        """Which EngineBuilds field a registered server's version fills, and with what (None: none)."""
        return None

    def combine_builds(self, values: list):
        """The one build an answer holds for when the team runs several (the first by default)."""
        return values[0]

    # --- memory ---
    def memory_share(self, gpu_memory_utilization: float | None) -> float | None:
        """The share of each GPU it takes at start-up whatever it needs; None = what it needs."""
        return None

    def kv_options(self, candidate: Candidate, cc: tuple[int, int]) -> list[KvCache]:
        """The 16-bit cache first, then the quantized ones this engine offers on this GPU."""
        return [KvCache(FP16_KV.label, candidate.kv_cache_bytes)]

    def gpu_counts(self, candidate: Candidate, gpu: GpuSpec, model: ModelSpec) -> tuple[list[int], list[str]]:
        """The GPU counts it can start the model on, and why the others are refused."""
        return list(range(1, gpu.count + 1)), []

    def default_context_note(self, model: ModelSpec, context_tokens: int, kv: KvCache, pool_gib: float) -> str:
        """What its default context would do when the launch did not set one ("" = nothing to say)."""
        return ""

    def kv_context_tokens(self, flag_value: Callable[[tuple[str, ...]], object]) -> int | None:
        """The tokens of 16-bit KV cache a launch allocates at load, read through `flag_value(flags)`
        (the value the launch gave one of these flags, or None); None where its flags do not say."""
        return None

    def split(self, gpus: int) -> str:
        return "one GPU" if gpus == 1 else self.several_gpus

    # --- speed ---
    def precision(self, candidate: Candidate, cc: tuple[int, int]) -> str:
        """Which tensor peak bounds its matrix work: "fp16" | "fp8" | "int8"."""
        f = self.formats.get(candidate.quantization)
        return f.peak_precision(cc) if f else "fp16"

    def slots(self, users: int) -> int:
        """The sequences it batches at once when started for `users` (its launch's setting)."""
        return self.default_slots

    # --- the command and the notes ---
    def launch(self, candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: "Workload",
               fit: "MemoryFit") -> Launch | None:
        return None

    def hardware_notes(self, gpu: GpuSpec, builds: EngineBuilds, runnable: list[Candidate]) \
            -> list[tuple[str, str | None]]:
        """(fact id, text or None for the fact's own statement) for a GPU it can run on."""
        return []

    def __repr__(self) -> str:
        return f"<advisor engine {self.name}>"


# ---------------------------------------------------------------------------------- registry
ENGINES: dict[str, AdvisorEngine] = {}
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,19}")
# Registered when the registry changes: the merged views (backends/__init__.py) are rebuilt.
_listeners: list[Callable[[], None]] = []


def register(cls: type[AdvisorEngine]) -> type[AdvisorEngine]:
    """Class decorator: add an engine to the registry. Checks what the advisor relies on, so a
    mistake fails at import time: a name, candidates of this engine with unique keys, requirements
    that name facts it (or another engine) states, sizes with a fact."""
    engine = cls()
    problems = []
    if not _NAME.fullmatch(engine.name or ""):
        problems.append("name must be a lowercase slug of 1-20 characters (a backend name)")
    if engine.name in ENGINES:
        problems.append(f"an engine named {engine.name!r} is already registered")
    keys = [c.key for c in engine.candidates]
    if len(set(keys)) != len(keys):
        problems.append("candidate keys repeat")
    taken = {c.key for e in ENGINES.values() for c in e.candidates} & set(keys)
    if taken:
        problems.append(f"candidate keys {sorted(taken)} belong to another engine")
    for c in engine.candidates:
        if c.backend != engine.name:
            problems.append(f"candidate {c.key} names backend {c.backend!r}, not {engine.name!r}")
    fact_ids = {f.id for f in engine.facts}
    for req, ids in engine.requirements.items():
        if not ids:
            problems.append(f"requirement {req!r} names no fact")
    if fact_ids & {f.id for e in ENGINES.values() for f in e.facts}:
        problems.append("fact ids repeat another engine's")
    if problems:
        raise ValueError(f"advisor engine {cls.__name__}: " + "; ".join(problems))
    ENGINES[engine.name] = engine
    for listener in _listeners:
        listener()
    return cls


def unregister(name: str) -> None:
    if ENGINES.pop(name, None) is not None:
        for listener in _listeners:
            listener()


def engine_of(name: str) -> AdvisorEngine:
    """The engine of a backend name; one it does not know gets the defaults (it can be measured,
    not advised on: no candidates of its own)."""
    return ENGINES.get(name) or _UNKNOWN


_UNKNOWN = AdvisorEngine()
