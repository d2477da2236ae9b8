"""Hardware and engine facts kept as data with a source and a date, and how they decide whether a
candidate starts. The facts every engine shares are here; each engine's own facts, candidates and
requirements are in its module (backends/).

Versions move: correct a row (and its `as_of`) rather than an `if` in the advisor. A fact with
`min_cc` is a start-up requirement: a candidate listing it in `requires` cannot start below it.
`as_of` is the date the statement was last checked against its source.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from ..engine import backends
from .specs import EngineBuilds, ModelSpec


def _registry():
    """The advisor's engines (backends/), imported when first asked: their modules build on this one."""
    from . import backends as engines
    return engines


def fact(fact_id: str) -> Fact:
    shared = next((f for f in GENERIC_FACTS if f.id == fact_id), None)  # readable while the engines load
    return shared or _registry().facts_by_id()[fact_id]


def __getattr__(name: str):
    """The merged views of the registered engines under their former names here (one definition:
    backends/__init__.py)."""
    engines = _registry()
    views = {"FACTS": engines.all_facts, "DEFAULT_CANDIDATES": lambda: engines.DEFAULT_CANDIDATES,
             "VARIANT_QUANTIZATION": engines.variant_quantization, "CANDIDATE_FOR": engines.candidate_for}
    if name in views:
        return views[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

CHECKED = date(2026, 12, 1)  # each row re-read against its source on this date
WRITEUP = ("the V100 write-up (a blog post: vLLM FP8 against llama.cpp Q4_K_M on 2 x Tesla V100 PCIe 16 GB, "
           "DeepSeek-R1-Distill-Qwen-7B; published, not measured here)")
MEASURED_HERE = ("this project's own runs on an NVIDIA H200, 2026-12-02 (benchmarks/engine/results/"
                 "gpu_lab_h200.json and gpu_check_h200.json in its repository)")


@dataclass(frozen=True)
class Fact:
    """A statement with its source. A fact with `min_cc` is a start-up requirement; `engine`,
    `since` and `until` say for which releases of that engine it holds ([since, until), versions
    as (major, minor); None = no bound)."""

    id: str
    statement: str
    source: str
    as_of: date
    min_cc: tuple[int, int] | None = None
    value: float | None = None
    engine: str = ""
    since: tuple[int, int] | None = None
    until: tuple[int, int] | None = None


# The facts every engine shares (the GPU's, the model's, the write-up's observations); each engine's
# own are in its module (backends/), and `fact()` reads them all.
GENERIC_FACTS: tuple[Fact, ...] = (
    Fact("bf16-min-cc",
         "bfloat16 needs compute capability 8.0: on older GPUs start vLLM with --dtype half",
         "NVIDIA CUDA C++ Programming Guide; vLLM engine arguments (--dtype)", CHECKED, min_cc=(8, 0)),
    Fact("bf16-size",
         "a 16-bit checkpoint (BF16, served as FP16 below compute capability 8.0) stores two bytes per weight",
         "vLLM engine arguments (--dtype)", CHECKED, value=16.0),
    Fact("cuda13-no-sm70",
         "CUDA 13 cannot compile for Maxwell, Pascal or Volta (sm_50 to sm_72): build for this GPU with "
         "CUDA 12.x",
         "NVIDIA CUDA 13.0 release notes (deprecated architectures)", CHECKED, min_cc=(7, 5)),
    Fact("q4km-size-r1-qwen7b",
         "DeepSeek-R1-Distill-Qwen-7B as GGUF Q4_K_M is 4.68 GB (4.36 GiB)",
         "the file's size as llama-quantize writes it; " + MEASURED_HERE, CHECKED, value=4.68e9),
    Fact("tp-over-pcie",
         "tensor parallel all-reduces every layer's output across the cards: over PCIe without NVLink the "
         "write-up's 7B model decoded ~24 tok/s with --tensor-parallel-size 2 against 32 tok/s on one V100",
         WRITEUP, CHECKED),
    Fact("hot-gpu-ecc",
         "watch GPU temperature and correctable ECC counts during runs: in the write-up a hot "
         "V100 logged correctable ECC errors and decode fell under 30 tok/s until it cooled",
         WRITEUP, CHECKED),
)


# Qwen2-7B architecture (config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-7B): 7.62B parameters,
# 28 layers, 28 attention heads, 4 KV heads of 128, intermediate 18944, 131072 tokens; untied
# embedding and lm_head of 152064 x 3584 each.
DEEPSEEK_R1_DISTILL_QWEN_7B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-7B", params_b=7.62, layers=28, kv_heads=4, head_dim=128,
    context_length=131072, embedding_params_b=1.09,
    known_weight_bytes={"q4_k_m": fact("q4km-size-r1-qwen7b").value}, attention_heads=28, intermediate_size=18944,
)
# Qwen2.5-14B and -32B architectures (config.json of deepseek-ai/DeepSeek-R1-Distill-Qwen-14B / -32B):
# hidden 5120, 40 attention heads, 8 KV heads of 128, intermediate 13824 / 27648, 131072 tokens;
# untied embedding and lm_head of 152064 x 5120 each.
DEEPSEEK_R1_DISTILL_QWEN_14B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-14B", params_b=14.77, layers=48, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.557, attention_heads=40, intermediate_size=13824)
DEEPSEEK_R1_DISTILL_QWEN_32B = ModelSpec(
    name="DeepSeek-R1-Distill-Qwen-32B", params_b=32.76, layers=64, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.557, attention_heads=40, intermediate_size=27648)
# Llama-3.1-8B and Llama-3.3-70B architectures (config.json of deepseek-ai/DeepSeek-R1-Distill-Llama-8B /
# -70B): 32 / 80 layers, 32 / 64 attention heads, 8 KV heads of 128, intermediate 14336 / 28672,
# 131072 tokens; untied embedding and lm_head of 128256 x 4096 / 8192 each.
DEEPSEEK_R1_DISTILL_LLAMA_8B = ModelSpec(
    name="DeepSeek-R1-Distill-Llama-8B", params_b=8.03, layers=32, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=1.051, attention_heads=32, intermediate_size=14336)
DEEPSEEK_R1_DISTILL_LLAMA_70B = ModelSpec(
    name="DeepSeek-R1-Distill-Llama-70B", params_b=70.55, layers=80, kv_heads=8, head_dim=128,
    context_length=131072, embedding_params_b=2.101, attention_heads=64, intermediate_size=28672)
BUILTIN_MODELS = {m.name: m for m in (DEEPSEEK_R1_DISTILL_QWEN_7B, DEEPSEEK_R1_DISTILL_LLAMA_8B,
                                      DEEPSEEK_R1_DISTILL_QWEN_14B, DEEPSEEK_R1_DISTILL_QWEN_32B,
                                      DEEPSEEK_R1_DISTILL_LLAMA_70B)}


@dataclass(frozen=True)
class Candidate:
    """A way to serve the model: its engine's module (backends/) lists it (or pass your own to advise())."""

    key: str
    label: str
    backend: str  # a backend name (engine.backends): "vllm", "llamacpp", ...
    quantization: str  # key into ModelSpec.known_weight_bytes and advise(variant_bytes=...)
    requires: tuple[str, ...]  # its engine's requirement keys (or fact ids with a min_cc)
    size_fact: str  # fact id whose value is the bits per layer weight
    embedding_bits: float  # bits per embedding/lm_head weight
    kv_cache_bytes: float = 2.0  # fp16 KV cache ("auto" on an fp16 model)
    # What `vllm serve --quantization` would name ("" = none: a 16-bit checkpoint). Only GGUF is passed
    # on the command line; a pre-quantized checkpoint's method is read from its config (fact
    # "vllm-prequantized").
    vllm_quantization: str = ""
    # False: no published or measured figure of its kernels to fit a prior on (it is not estimated,
    # and its missing figure does not hold the others' comparison open).
    estimable: bool = True
    order: int = 100  # where the page lists it among every engine's candidates (lower first)


def engine_version(backend: str, builds: EngineBuilds) -> tuple[int, int] | None:
    return _registry().engine_of(backend).version(builds)


def _facts_of(requirement: str) -> list[Fact]:
    return [fact(fid) for fid in _registry().requirement_facts(requirement)]


def _holds_for(f: Fact, version: tuple[int, int]) -> bool:
    return (f.since is None or version >= f.since) and (f.until is None or version < f.until)


def _boundaries(facts: list[Fact]) -> list[tuple[int, int]]:
    """The versions where some fact starts or stops holding, and the first: each range between
    two of them has the same facts."""
    return sorted({(0, 0)} | {b for f in facts for b in (f.since, f.until) if b is not None})


def version_str(v: tuple[int, int]) -> str:
    return f"v{v[0]}.{v[1]}"


@dataclass(frozen=True)
class StartCheck:
    """Can a candidate start on this compute capability, and with which releases of its engine."""

    eligible: bool
    facts: tuple[Fact, ...]  # the facts that decide, for the version given (or every release)
    unmet: tuple[Fact, ...]  # facts whose minimum this GPU is below (for the version, or all)
    releases: tuple[tuple[tuple[int, int], tuple[int, int] | None], ...]  # where it starts
    version_known: bool

    @property
    def releases_text(self) -> str:
        """'' when every release starts it (or the version was given), else which do."""
        if self.version_known or not self.eligible or self.releases == (((0, 0), None),):
            return ""
        parts = []
        for lo, hi in self.releases:
            if lo == (0, 0):
                parts.append(f"before {version_str(hi)}")
            elif hi is None:
                parts.append(f"{version_str(lo)} or later")
            else:
                parts.append(f"{version_str(lo)} to the last release before {version_str(hi)}")
        return " or ".join(parts)


def start_check(candidate: Candidate, cc: tuple[int, int], builds: EngineBuilds = EngineBuilds()) -> StartCheck:
    cc = tuple(cc)
    facts = [f for req in candidate.requires for f in _facts_of(req)]
    version = engine_version(candidate.backend, builds)
    if version is not None:
        used = [f for f in facts if _holds_for(f, tuple(version))]
        unmet = [f for f in used if f.min_cc and cc < f.min_cc]
        return StartCheck(not unmet, tuple(used), tuple(unmet),
                          ((tuple(version), tuple(version)),) if not unmet else (), True)
    releases, unmet = [], []
    points = _boundaries(facts)
    for lo, hi in zip(points, points[1:] + [None]):
        used = [f for f in facts if _holds_for(f, lo)]
        missing = [f for f in used if f.min_cc and cc < f.min_cc]
        if missing:
            unmet += [f for f in missing if f not in unmet]
        elif releases and releases[-1][1] == lo:
            releases[-1] = (releases[-1][0], hi)
        else:
            releases.append((lo, hi))
    return StartCheck(bool(releases), tuple(facts), tuple(unmet) if not releases else (), tuple(releases), False)


def required_facts(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    """The facts that decide whether it starts: for the version given, or for every release."""
    return list(start_check(candidate, (99, 0), builds).facts)


def cc_str(cc: tuple[int, int]) -> str:
    return f"{cc[0]}.{cc[1]}"


def unmet_requirements(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[Fact]:
    """Why it cannot start ([] = it can, with some release when the version is not given)."""
    return list(start_check(candidate, cc, builds).unmet)


def ineligible_reasons(candidate: Candidate, cc: tuple[int, int],
                       builds: EngineBuilds = EngineBuilds()) -> list[str]:
    """Why the candidate cannot start on a GPU of this compute capability ([] = it can)."""
    check = start_check(candidate, cc, builds)
    version = engine_version(candidate.backend, builds)
    with_version = f" with {backends.label(candidate.backend)} {version_str(version)}" if version else ""
    reasons = [
        f"Cannot start on compute capability {cc_str(cc)}{with_version}: {f.statement} "
        f"(source: {f.source}, as of {f.as_of.isoformat()})."
        for f in check.unmet
    ]
    other = start_check(candidate, cc) if version and reasons else None
    if other is not None and other.eligible:  # refused by this release only: say which still start it
        reasons.append(f"{backends.label(candidate.backend)} releases {other.releases_text} still start it on "
                       f"this GPU; other engines (llama.cpp) run here too.")
    return reasons


def min_compute_capability(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> tuple[int, int]:
    """The lowest compute capability some release (or the given one) starts it on."""
    facts = [f for req in candidate.requires for f in _facts_of(req)]
    version = engine_version(candidate.backend, builds)
    points = [tuple(version)] if version is not None else _boundaries(facts)
    return min(max((f.min_cc for f in facts if f.min_cc and _holds_for(f, v)), default=(0, 0)) for v in points)


def requirements(candidate: Candidate, builds: EngineBuilds = EngineBuilds()) -> dict:
    """What the candidate needs, for display."""
    facts = required_facts(candidate, builds)
    return {
        "backend": backends.label(candidate.backend),
        "quantization": candidate.quantization,
        "min_compute_capability": cc_str(min_compute_capability(candidate, builds)),
        "facts": [{"id": f.id, "statement": f.statement, "source": f.source,
                   "as_of": f.as_of.isoformat()} for f in facts],
    }


def users_str(n: int) -> str:
    return f"{n} user" if n == 1 else f"{n} users"


def fmt(x: float) -> str:
    """A number for a reason string: 3 significant figures at most, no exponent."""
    digits = 0 if abs(x) >= 100 else 1 if abs(x) >= 10 else 2
    s = f"{x:.{digits}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s
