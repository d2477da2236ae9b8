"""What a backend is, and the registry that holds them.

A backend is one serving engine's dialect of the OpenAI-compatible API, written once: what it
needs in a request so that every request generates exactly the asked tokens, how it tokenizes,
what its /metrics samples are called, where it says who it is, and how the simulator speaks
like it. The load generator, the server-metrics scraper, the simulator, the model's choices,
the forms and the advisor all ask the registry; none of them names a backend.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Awaitable, Callable

from benchmarks.engine import multi_gpu
from benchmarks.engine.backends.flags import GENERIC_FLAGS, FlagTable, Reading

# The server's figures under the product's own keys. Each backend maps its /metrics sample names
# onto these (newer name first). Gauges are read as they are, counters (`_total`) as their
# change over a level, histograms as `<key>_sum` and `<key>_count` (a mean over a level).
METRIC_KEYS = {
    "running": "requests being generated",
    "waiting": "requests queued, not started",
    "kv_cache_usage": "share of the KV cache in use, 0..1",
    "prompt_tokens_total": "prompt tokens processed",
    "generation_tokens_total": "tokens generated",
    "prompt_seconds_total": "seconds spent processing prompts",
    "generation_seconds_total": "seconds spent generating",
    "cached_prompt_tokens_total": "prompt tokens taken from the prefix cache instead of computed",
    "prefix_cache_queries_total": "prompt tokens looked up in the prefix cache",
    "ttft_seconds": "histogram: time to first token",
    "itl_seconds": "histogram: gap between two tokens of a request",
    "request_tpot_seconds": "histogram: a request's mean time per output token",
    "e2e_seconds": "histogram: a request's whole latency",
}
HISTOGRAM_KEYS = frozenset({"ttft_seconds", "itl_seconds", "request_tpot_seconds", "e2e_seconds"})

# Fetch one identity endpoint: tries each path in turn, returns the first JSON answer (None when
# none answered; the last failure is noted).
Get = Callable[..., Awaitable[object]]


class UnknownBackend(LookupError):
    """A backend name the registry does not hold."""


# Environment variables any server may be given by a recipe: thread counts, offline and telemetry
# switches, allocator and NCCL tuning. None of them loads code, names a flag or listens anywhere.
SAFE_ENV = frozenset({
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY", "DO_NOT_TRACK",
    "PYTORCH_CUDA_ALLOC_CONF", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE"})

_PYTHON = re.compile(r"python[\d.]*")
_SHELL = re.compile(r"(ba|da|k|z)?sh")


def inline_code_at(argv) -> int | None:
    """Where a Python or a shell is given its program in the arguments (`python -c CODE`, `sh -c
    CODE`): the index of that code in `argv`, whose flags and paths no backend can read (what it
    runs is the code's to say); None for any other command."""
    if not argv:
        return None
    name = os.path.basename(argv[0])
    python, shell = _PYTHON.fullmatch(name), _SHELL.fullmatch(name)
    if not (python or shell):
        return None
    code_next = False
    for i, arg in enumerate(argv[1:], start=1):  # the interpreter's own options, up to its program
        if python and arg.startswith("-c"):
            if arg != "-c":
                return i  # -cCODE
            return i + 1 if i + 1 < len(argv) else None
        if not arg.startswith("-") or arg in ("-", "--") or arg.startswith("--") or (python and arg.startswith("-m")):
            return i if code_next and not arg.startswith("-") else None
        code_next = code_next or bool(shell and "c" in arg[1:])
    return None


def _long(flag: str) -> str:
    # llama.cpp and vLLM read --n_gpu_layers as --n-gpu-layers.
    return flag.replace("_", "-") if flag.startswith("--") else flag


def flag_values(args, flags) -> list[tuple[int, str]]:
    """Every value `args` gives one of `flags`, with its index: `--flag value`, `--flag=value`,
    and a long flag abbreviated (`--ho` for `--host`, as argparse takes it). Every occurrence:
    the last wins in some servers, the first in others."""
    out = []
    for i, arg in enumerate(args):
        name, eq, value = _long(arg).partition("=") if arg.startswith("--") else (arg, "", "")
        hit = any(name == f or (len(name) > 2 and name.startswith("--") and f.startswith(name)) for f in flags)
        if hit and eq:
            out.append((i, value))
        elif hit:
            out.append((i + 1, args[i + 1] if i + 1 < len(args) else ""))
    return out


@dataclass(frozen=True)
class ServerFlags:
    """What a server's final arguments tell it to do, as its backend reads them."""

    hosts: tuple[str, ...] = ()  # every address it is told to listen on (its default when none)
    host_is_default: bool = False  # no flag names one: `hosts` is where it listens by default
    ports: tuple[str, ...] = ()  # every port it is told to listen on
    models: tuple[str, ...] = ()  # every model (or adapter) it is told to load
    configs: tuple[str, ...] = ()  # files it is told to read more flags from
    not_paths: frozenset = frozenset()  # indices into argv of names (--served-model-name) and inline code


class Backend:
    """The defaults are a server of unknown make that speaks plain OpenAI: no extra request
    fields, no /tokenize (prompts are text), no /metrics names, no identity endpoints. A
    backend overrides what its server does differently."""

    name = ""  # stored in Endpoint.backend: a lowercase slug of at most 20 characters
    label = ""  # the engine's name in prose ("llama.cpp")
    choice_label = ""  # in choice lists, when it should say more than `label`
    generic = False  # a catch-all for servers of unknown make: listed after the named engines

    # ------------------------------------------------------------------ request dialect
    serves_any_model = False  # answers any model name with its one model (llama-server)

    # Fields that turn the server's prompt cache back on, for a run whose requests share a prefix
    # (request_extras turns it off where a request can).
    prompt_cache_fields: dict = {}

    def request_extras(self, max_tokens: int) -> dict:
        """Fields beyond the OpenAI request, so that a request generates exactly `max_tokens`
        (past an end-of-sequence token) and its prompt is computed, not taken from a cache."""
        return {}

    # ------------------------------------------------------------------ tokenize
    def tokenize_requests(self, model: str, text: str, special: bool = False) -> list[tuple[str, dict]]:
        """(path, JSON body) of the POSTs that tokenize `text` without special tokens (with them,
        e.g. a BOS, when `special`), tried in turn. None: prompts are sent as text, their length
        calibrated from `usage`."""
        return []

    def read_tokens(self, payload) -> list[int] | None:
        """Token ids from a tokenize answer; None when it holds none."""
        tokens = payload.get("tokens") if isinstance(payload, dict) else None
        if isinstance(tokens, list) and tokens and all(
                isinstance(t, int) and not isinstance(t, bool) for t in tokens):
            return tokens
        return None

    # ------------------------------------------------------------------ quality (engine.quality)
    # How the server scores given tokens: "prompt_logprobs" (log-probabilities of the prompt's
    # own tokens, one request per window), "teacher_forcing" (one generated token per position,
    # forced to the actual one, with the top-k beside it) or None (it cannot).
    quality_method: str | None = None

    def top_k_probe(self, model: str, k: int) -> tuple[str, dict] | None:
        """(path, body) of a small scoring request that asks a top-k of `k`, to learn whether the
        server caps the top-k; None: it sets no cap (llama-server lists as many as asked)."""
        return None

    def read_top_k_cap(self, refusal: str) -> int | None:
        """The cap that the server's refusal of that request states; None when it states none."""
        return None

    def greedy_request(self, model: str, prompt: list[int], n: int) -> tuple[str, dict]:
        """(path, body) of a non-streamed request that generates `n` tokens greedily."""
        return "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": n, "temperature": 0.0,
                                   "stream": False, **self.request_extras(n)}

    def read_generated_ids(self, answer) -> list[int] | None:
        """The generated token ids of a greedy answer; None when it gives only text."""
        return None

    # ------------------------------------------------------------------ /metrics
    metrics: dict[str, tuple[str, ...]] = {}  # METRIC_KEYS key -> sample names, newer first

    # ------------------------------------------------------------------ GPUs (engine/multi_gpu.py)
    spread_flags: tuple[str, ...] = ()  # the flags that spread a model over several GPUs
    spread_needs_its_gpus = False  # a spread over more GPUs than the server is given cannot start

    def spread(self, setting: dict | None, args, visible: int | None) -> multi_gpu.Spread:
        """How the server spreads the model over `visible` GPUs (None: as its environment gives)
        at this setting of its flags; ValueError for flags it cannot read."""
        return multi_gpu.as_given(visible)

    # ------------------------------------------------------------------ identity
    async def identity(self, get: Get) -> dict:
        """What the server says it is, small enough to store with a run. Reads answers
        defensively (a field of the wrong type is left out, never raised on)."""
        return {}

    version_keys: tuple[str, ...] = ("version",)  # where its identity holds the version it says it is
    version_source = "its /version"  # where that came from, in prose

    def served_version(self, identity: dict) -> str:
        """The version the server said it was in its stored identity; "" when it said none."""
        for key in self.version_keys:
            value = identity.get(key)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value):
                return str(value)[:100]
        return ""

    def reported_flags(self, identity: dict) -> dict:
        """Settings the server reported of itself that read as launch flags (history shows them
        beside the declared flags)."""
        return {}

    context_hint = ""  # how to give a request more context on this server, said when one does not fit

    def context_per_request(self, identity: dict) -> int | None:
        """The most tokens (prompt + output) one request may hold on this server, from its
        identity; None when the server does not say."""
        return None

    # ------------------------------------------------------------------ simulator dialect
    # How `engine.simulator` behaves when it speaks this backend (SimConfig.dialect = name).
    sim_bos_tokens = 0  # tokens the server adds to every prompt
    sim_checks_model = False  # a request for a model it does not serve answers 404
    sim_finish_in_last_token = True  # finish_reason rides on the last token's chunk
    sim_metrics: tuple[str, ...] = ()  # figures its /metrics exports (none: no /metrics)
    sim_metric_labels = ""  # label set of every sample, formatted with model=
    sim_tokenize_paths: tuple[str, ...] = ()  # POST routes that tokenize

    def sim_model_card(self, config) -> dict:
        """Fields of its own in each /v1/models entry."""
        return {}

    def sim_health(self):
        """The body of a healthy GET /health."""
        return b""

    def sim_routes(self, config) -> dict[str, object]:
        """GET path -> JSON answer: the identity endpoints, for a simulator with `config`."""
        return {}

    def sim_tokenize(self, request: dict, tokenize: Callable[[object], list[int]]) -> dict:
        """The answer to a tokenize request; `tokenize` is the simulator's tokenizer. A missing
        field may raise KeyError (the simulator answers 400)."""
        raise KeyError("this server has no tokenize route")

    def sim_refuses(self, request: dict) -> str | None:
        """Why the server answers a generation request with 400, or None."""
        return None

    def sim_exact_length(self, request: dict) -> bool:
        """The request asks to generate past an end-of-sequence token."""
        return bool(request.get("ignore_eos"))

    def sim_final_chunks(self, base: dict, chat: bool, finish: str, usage: dict, timings: dict) -> list[dict]:
        """The chunks after the last token (before [DONE])."""
        return [{**base, "choices": [], "usage": usage}]

    def sim_exposition(self, values: dict[str, float], model: str) -> str:
        """A /metrics page as this server writes it: each figure of `sim_metrics` under its
        newest name. Empty when the server has no /metrics."""
        labels = self.sim_metric_labels.format(model=model)
        lines = []
        for key in self.sim_metrics:
            name = self.metrics[key][0]
            lines.append(f"# TYPE {name} {'counter' if key.endswith('_total') else 'gauge'}")
            lines.append(f"{name}{labels} {values[key]}")
        return "".join(line + "\n" for line in lines)

    # ------------------------------------------------------------------ its command line (the lab's allowlist)
    # How the lab reads a server's final arguments, so that the host's allowlist judges what the
    # server will do, whatever the spelling. The defaults are what an unknown server most likely
    # takes; a backend names its own.
    host_flags: tuple[str, ...] = ("--host",)
    port_flags: tuple[str, ...] = ("--port",)
    model_flags: tuple[str, ...] = ()  # their values must be models under the host's model folders
    name_flags: tuple[str, ...] = ("--api-key",)  # their values are names, never opened as paths
    config_flags: tuple[str, ...] = ()  # read more flags from a file: refused, the allowlist cannot see in
    default_host: str | None = None  # where it listens without a host flag; None: not known
    safe_env: frozenset = SAFE_ENV  # environment variables a recipe may set (the host may add more)
    flag_env: tuple[str, ...] = ()  # prefixes of environment variables it reads as flags: never set
    path_env: frozenset = frozenset()  # of its safe variables, those it reads as one path (held whole)
    # Set on every server the lab starts, over anything a recipe sets: offline, nothing downloaded.
    offline_env: dict = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

    # Its server's declared flags (flags.py): every flag judged by what it does, an unknown one refused.
    # A backend that declares none gets the generic few (where it listens, its model, its names).
    flag_table: FlagTable = GENERIC_FLAGS
    positional_words: bool = True  # words outside flags are its program's (held to the model folders as paths)
    needs_model: bool = False  # with no model named it would fetch a default one (vLLM's is on the hub)
    entry_prefixes: tuple[tuple[str, ...], ...] = ()  # how it is started before its flags (`-m vllm…`, `serve`)
    positional_model: bool = False  # one word outside a flag is the model it serves (`vllm serve MODEL`)

    def read_flags(self, argv) -> Reading | None:
        """`argv` (the executable and its final arguments) read flag by flag against the declared
        flags: after inline code (a stand-in's flags are the server's) or the entry it is started
        by. Its `problem` names the first flag refused, unknown or short of a value, or a word
        outside any flag. None when the backend declares no flags."""
        argv = list(argv)
        if inline_code_at(argv) is not None:
            return None  # what runs is the code's to say: no flag reading can judge it (docs/operating.md)
        entry = next((p for p in self.entry_prefixes if tuple(argv[1:1 + len(p)]) == p), ())
        modules = [" ".join(p) for p in self.entry_prefixes if p[0] == "-m"]
        if not entry and modules and _PYTHON.fullmatch(os.path.basename(argv[0])):
            return Reading(problem=f"{os.path.basename(argv[0])} would run whatever its first argument names: "
                                   f"{self.label} is started as {' or '.join(modules)}")
        reading = self.flag_table.read(argv, 1 + len(entry))
        reading.problem = reading.problem or self.flag_table.refused(reading)
        name = os.path.basename(argv[0])
        if (not reading.problem and not entry and reading.positional and reading.positional[0][0] == 1
                and (_PYTHON.fullmatch(name) or _SHELL.fullmatch(name))):
            reading.problem = f"{name} would run the program {reading.positional[0][1]!r}, which no allowlist can judge"
        extra = reading.positional[1:] if self.positional_model else reading.positional
        if not reading.problem and extra and not self.positional_words:
            reading.problem = (f"the argument {extra[0][1]!r} is no value of a flag, and {self.label} takes "
                               f"{'one model' if self.positional_model else 'nothing'} outside its flags")
        return reading

    def server_flags(self, argv) -> ServerFlags:
        """What `argv` (the executable and its final arguments) tells the server to do."""
        args = list(argv[1:])

        def values(flags):
            return tuple(v for _, v in flag_values(args, flags))

        code = inline_code_at(argv)
        hosts = values(self.host_flags)
        default = not hosts and self.default_host is not None and code is None
        return ServerFlags(hosts=hosts or ((self.default_host,) if default else ()), host_is_default=default,
                           ports=values(self.port_flags), configs=values(self.config_flags),
                           models=values(self.model_flags) + self.positional_models(args),
                           not_paths=frozenset({i + 1 for i, _ in flag_values(args, self.name_flags)}
                                               | ({code} if code is not None else set())))

    def positional_models(self, args: list[str]) -> tuple[str, ...]:
        """Models given without a flag (`vllm serve MODEL`)."""
        return ()

    served_model_flags: tuple[str, ...] = ("--model",)  # the flag that names the model it serves

    def with_model_placeholder(self, args: list[str]) -> tuple[str, list[str]]:
        """(the model it serves, `args` with the worker's {model} in its place): a launch command
        made a recipe. ("", args) when no model is named."""
        hits = flag_values(args, self.served_model_flags)
        if not hits:
            return "", list(args)
        i, model = hits[0]
        out = list(args)
        flag, eq, value = args[i].partition("=")
        joined = args[i].startswith("--") and eq and value == model  # --model=PATH: one word
        out[i] = f"{flag}={{model}}" if joined else "{model}"
        return model, out

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


# ---------------------------------------------------------------------------------- registry
BACKENDS: dict[str, Backend] = {}
_NAME = re.compile(r"[a-z][a-z0-9_-]{0,19}")


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: add a backend to the registry (a second one of the same name is an
    error). Checks what the rest of the code relies on, so a mistake fails at import time."""
    backend = cls()
    problems = []
    if not _NAME.fullmatch(backend.name or ""):
        problems.append("name must be a lowercase slug of 1-20 characters")
    if not backend.label:
        problems.append("label is empty")
    unknown = set(backend.metrics) - set(METRIC_KEYS)
    if unknown:
        problems.append(f"unknown metric keys {sorted(unknown)} (known: {', '.join(METRIC_KEYS)})")
    if any(not names or not all(isinstance(n, str) and n for n in names) for names in backend.metrics.values()):
        problems.append("every metric key needs at least one sample name")
    exported = set(backend.sim_metrics)
    if exported - set(backend.metrics) or exported & HISTOGRAM_KEYS:
        problems.append("sim_metrics must be gauges or counters the backend names in `metrics`")
    if backend.name in BACKENDS:
        problems.append(f"a backend named {backend.name!r} is already registered")
    if problems:
        raise ValueError(f"backend {cls.__name__}: " + "; ".join(problems))
    BACKENDS[backend.name] = backend
    return cls


def unregister(name: str) -> None:
    BACKENDS.pop(name, None)


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise UnknownBackend(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))})") from None


def names() -> list[str]:
    return sorted(BACKENDS)


def ordered() -> list[Backend]:
    """Named engines by label, then the catch-alls."""
    return sorted(BACKENDS.values(), key=lambda b: (b.generic, b.label.lower()))


def choices() -> list[tuple[str, str]]:
    """(name, label) for choice fields; a callable, so a backend registered later is offered."""
    return [(b.name, b.choice_label or b.label) for b in ordered()]


def label(name: str) -> str:
    """The engine's name in prose; the stored name itself for one no longer registered."""
    backend = BACKENDS.get(name)
    return backend.label if backend else name


# ---------------------------------------------------------------------------------- helpers
def trim(obj, max_str: int = 300, max_items: int = 32, depth: int = 4):
    """A copy small enough to store: long strings (chat templates) and long lists cut, with
    a note of what was cut."""
    if isinstance(obj, str):
        return obj if len(obj) <= max_str else obj[:max_str] + f"... [{len(obj) - max_str} chars trimmed]"
    if isinstance(obj, dict):
        if depth <= 0:
            return f"[object with {len(obj)} keys trimmed]"
        return {k: trim(v, max_str, max_items, depth - 1) for k, v in obj.items()}
    if isinstance(obj, list):
        if depth <= 0:
            return f"[list of {len(obj)} trimmed]"
        head = [trim(v, max_str, max_items, depth - 1) for v in obj[:max_items]]
        return head + ([f"[{len(obj) - max_items} more trimmed]"] if len(obj) > max_items else [])
    return obj
