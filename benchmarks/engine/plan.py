"""What a run measures, typed: its workload, its load mode's settings, trials, SLOs, quality step,
client machines and lab settings. Django-free: the run form, the API and a schedule build one;
run_create takes one and judges it against the site's limits whichever door it came by.

Stored shapes (one writer, one reader each):
- a run's columns: `columns()` writes them, `from_columns(row)` reads them;
- a schedule's template: `to_dict()` writes {"version": PLAN_VERSION, ...} in the flat names of the
  run form and the API, `from_dict()` reads it.
Rows of the database (endpoints, recipes, the evaluation text, the reference) are not part of it.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field, fields

from benchmarks.engine import load_modes
from benchmarks.engine.arrivals import ArrivalPattern
from benchmarks.engine.conversations import Conversation
from benchmarks.engine.datasets import Dataset
from benchmarks.engine.quality import DEFAULT_CHUNKS, DEFAULT_CTX

PLAN_VERSION = 1


@dataclass(frozen=True)
class Workload:
    """What each request asks and how many a level sends."""

    prompt_tokens: int
    output_tokens: int
    temperature: float
    requests_per_level: int
    warmup_requests: int
    duration_s: float | None = None
    api: str = "completions"
    seed: int | None = None
    dataset: Dataset | None = None  # None: synthetic prompts of prompt_tokens (the default)


@dataclass(frozen=True)
class Slos:
    """The service levels a request must meet (ms; None: not asked), at `percentile`."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    percentile: int = 99


@dataclass(frozen=True)
class QualityStep:
    """The quality step after the levels: `chunks` windows of `ctx` tokens scored."""

    on: bool = False
    ctx: int = DEFAULT_CTX
    chunks: int = DEFAULT_CHUNKS


@dataclass(frozen=True)
class Clients:
    """Where the load is generated: processes on the run's worker, load-generator workers (0: one)."""

    processes: int = 0
    workers: int = 0


@dataclass(frozen=True)
class Limits:
    """The site's bounds on what one run may ask (the engine reads no settings)."""

    max_requests_per_level: int
    max_requests_per_run: int
    run_time_limit_s: float


@dataclass(frozen=True)
class RunPlan:
    workload: Workload
    load: load_modes.LoadMode = field(default_factory=lambda: load_modes.get(load_modes.DEFAULT)())
    trials: int = 1
    slos: Slos = Slos()
    quality: QualityStep = QualityStep()
    clients: Clients = Clients()
    sweep: dict = field(default_factory=dict)  # the lab's settings: recipe id (str) -> flag -> values

    # ------------------------------------------------------------ run_create's keyword arguments
    @classmethod
    def from_arguments(cls, *, prompt_tokens: int, output_tokens: int, temperature: float, requests_per_level: int,
                       warmup_requests: int, duration_s: float | None = None, api: str = "completions",
                       seed: int | None = None, dataset: Dataset | None = None,
                       load_mode: str = load_modes.DEFAULT, concurrency_levels=(), request_rates=(),
                       arrivals: str = "poisson", arrival_pattern: ArrivalPattern | None = None,
                       conversation: Conversation | None = None, max_concurrency: int | None = 0,
                       search_max_concurrency: int | None = None, search_rates=(), trials: int | None = 1,
                       slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
                       slo_e2e_ms: float | None = None, slo_percentile: int | None = 99, quality: bool = False,
                       quality_ctx: int | None = DEFAULT_CTX, quality_chunks: int | None = DEFAULT_CHUNKS,
                       load_processes: int | None = 0, load_workers: int | None = 0,
                       sweep: dict | None = None) -> "RunPlan":
        """A plan from the flat names the run form's fields and the API's payload use."""
        load = load_modes.from_arguments(
            load_mode, concurrency_levels=concurrency_levels, request_rates=request_rates, arrivals=arrivals,
            arrival_pattern=arrival_pattern, conversation=conversation, max_concurrency=max_concurrency,
            search_max_concurrency=search_max_concurrency, search_rates=search_rates)
        return cls(
            workload=Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, temperature=temperature,
                              requests_per_level=requests_per_level, warmup_requests=warmup_requests,
                              duration_s=duration_s, api=api, seed=seed, dataset=dataset),
            load=load, trials=trials or 1,
            slos=Slos(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, slo_percentile or 99),
            quality=QualityStep(bool(quality), quality_ctx or DEFAULT_CTX, quality_chunks or DEFAULT_CHUNKS),
            clients=Clients(load_processes or 0, load_workers or 0),
            sweep={str(k): v for k, v in (sweep or {}).items()})

    @classmethod
    def split(cls, arguments: dict) -> tuple["RunPlan", dict]:
        """(the plan, the rest) of flat arguments such as a run form's cleaned data: the rest names
        rows (endpoints, recipes, texts) and the title."""
        plan = cls.from_arguments(**{k: v for k, v in arguments.items() if k in ARGUMENTS})
        return plan, {k: v for k, v in arguments.items() if k not in ARGUMENTS}

    # ------------------------------------------------------------ a run's columns
    def columns(self) -> dict:
        """What a run stores of it, column by column (the one writer)."""
        w, s, q = self.workload, self.slos, self.quality
        return {
            "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens, "temperature": w.temperature,
            "requests_per_level": w.requests_per_level, "warmup_requests": w.warmup_requests,
            "duration_s": w.duration_s, "api": w.api, "seed": w.seed,
            "dataset": w.dataset.to_dict() if w.dataset is not None else {},
            "load_mode": self.load.name, **self.load.columns(), "trials": self.trials,
            "slo_ttft_ms": s.ttft_ms, "slo_tpot_ms": s.tpot_ms, "slo_e2e_ms": s.e2e_ms, "slo_percentile": s.percentile,
            "quality": q.on, "quality_ctx": q.ctx, "quality_chunks": q.chunks,
            "load_processes": self.clients.processes, "load_workers": self.clients.workers,
            "sweep": dict(self.sweep)}

    @classmethod
    def from_columns(cls, row) -> "RunPlan":
        """The plan a run stored (attributes named as `columns` writes them; the one reader)."""
        get = row.__getattribute__
        dataset = get("dataset")
        return cls(
            workload=Workload(
                prompt_tokens=get("prompt_tokens"), output_tokens=get("output_tokens"),
                temperature=get("temperature"), requests_per_level=get("requests_per_level"),
                warmup_requests=get("warmup_requests"), duration_s=get("duration_s"), api=get("api"),
                seed=get("seed"),
                dataset=Dataset.from_dict(dataset, get("prompt_tokens"), get("output_tokens")) if dataset else None),
            load=load_modes.from_columns(get("load_mode"), {k: get(k) for k in load_modes.COLUMNS}),
            trials=get("trials"), slos=Slos(get("slo_ttft_ms"), get("slo_tpot_ms"), get("slo_e2e_ms"),
                                            get("slo_percentile")),
            quality=QualityStep(get("quality"), get("quality_ctx"), get("quality_chunks")),
            clients=Clients(get("load_processes"), get("load_workers")), sweep=dict(get("sweep") or {}))

    # ------------------------------------------------------------ stored beside other rows (a schedule)
    def to_dict(self) -> dict:
        """The versioned stored shape: the flat names of `from_arguments` (those of the run form
        and the API), typed settings by their own writers. A schedule's template is this plus
        the rows it names."""
        out = {k: v for k, v in self.arguments().items() if k not in TYPED}
        for k in LISTS:
            out[k] = list(out[k] or [])
        args = self.arguments()
        return {"version": PLAN_VERSION, **out, **{k: args[k].to_dict() if args[k] else None for k in TYPED}}

    @classmethod
    def from_dict(cls, data: dict) -> "RunPlan":
        """The plan `to_dict` stored (keys it does not write, such as a template's rows, are not
        read); a key missing takes `from_arguments`' default."""
        if data.get("version") != PLAN_VERSION:
            raise ValueError(f"a run plan of version {data.get('version')!r}; this code reads {PLAN_VERSION}")
        args = {k: data[k] for k in ARGUMENTS if k in data and k not in TYPED}
        if data.get("dataset"):
            args["dataset"] = Dataset.from_dict(data["dataset"], data.get("prompt_tokens"), data.get("output_tokens"))
        if data.get("arrival_pattern"):
            args["arrival_pattern"] = ArrivalPattern.from_dict(data["arrival_pattern"], data.get("arrivals"))
        if data.get("conversation"):
            args["conversation"] = Conversation.from_dict(data["conversation"])
        return cls.from_arguments(**args)

    def arguments(self) -> dict:
        """The flat arguments `from_arguments` takes that give this plan again."""
        w, s, q = self.workload, self.slos, self.quality
        return {"prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens, "temperature": w.temperature,
                "requests_per_level": w.requests_per_level, "warmup_requests": w.warmup_requests,
                "duration_s": w.duration_s, "api": w.api, "seed": w.seed, "dataset": w.dataset,
                "load_mode": self.load.name, **self.load.arguments(), "trials": self.trials,
                "slo_ttft_ms": s.ttft_ms, "slo_tpot_ms": s.tpot_ms, "slo_e2e_ms": s.e2e_ms,
                "slo_percentile": s.percentile, "quality": q.on, "quality_ctx": q.ctx, "quality_chunks": q.chunks,
                "load_processes": self.clients.processes, "load_workers": self.clients.workers,
                "sweep": dict(self.sweep)}

    def comparable_shape(self) -> dict:
        """What two runs must share for history to compare their levels (the workload's part of
        the fingerprint: change it and no earlier run compares)."""
        w, load = self.workload, self.load.columns()
        return {"api": w.api, "prompt_tokens": w.prompt_tokens, "output_tokens": w.output_tokens,
                "temperature": w.temperature, "load_mode": self.load.name, **self.load.comparable_shape(),
                "requests_per_level": w.requests_per_level, "duration_s": w.duration_s,
                "warmup_requests": w.warmup_requests, "dataset": w.dataset.to_dict() if w.dataset else {},
                "arrival_pattern": load["arrival_pattern"] or {}, "conversation": load["conversation"] or {}}

    # ------------------------------------------------------------ what it asks of the site
    def levels_per_endpoint(self) -> int:
        """Levels one endpoint measures, every trial counted (an SLO search: its most probes)."""
        return self.load.level_count() * self.trials

    def problems(self, limits: Limits, measured: int) -> list[tuple[str | None, str]]:
        """(field or None, message) for each limit the plan passes with `measured` endpoints and
        servers started from recipes, judged now: the run form's field checks come first for a
        submitted run; a schedule's firing meets these alone (the settings may have been lowered
        since it was saved)."""
        w, out = self.workload, []
        if w.requests_per_level > limits.max_requests_per_level:
            out.append(("requests_per_level", f"{w.requests_per_level} requests per level; the limit is "
                                              f"{limits.max_requests_per_level}."))
        if w.duration_s and w.duration_s > limits.run_time_limit_s:
            out.append(("duration_s", f"a duration of {w.duration_s:g} s; the run time limit is "
                                      f"{limits.run_time_limit_s:g} s."))
        total = measured * self.levels_per_endpoint() * w.requests_per_level
        if total > limits.max_requests_per_run:
            out.append((None, f"This run would send {total} requests; the limit is {limits.max_requests_per_run}. It "
                              f"counts endpoints and recipe settings × levels{' × trials' if self.trials > 1 else ''}"
                              f" × requests per level."))
        if problem := self.load.run_time_problem(w.requests_per_level, w.duration_s, self.trials, measured or 1,
                                                 limits.run_time_limit_s):
            out.append(problem)
        return out


def _plain(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# The flat names `RunPlan.from_arguments` reads (a run form's other fields name rows).
ARGUMENTS = frozenset(inspect.signature(RunPlan.from_arguments).parameters)
# Of those, the typed settings stored by their own to_dict, and the lists.
TYPED = ("dataset", "arrival_pattern", "conversation")
LISTS = ("concurrency_levels", "request_rates", "search_rates")
