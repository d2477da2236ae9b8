"""What a load mode is, and the registry that holds them.

A load mode is one way of loading a server, written once: the run-form fields it shows, how
they are judged and turned into its typed settings, the levels it measures (or, for an SLO
search, how it probes), how long it may take (for the run time limit), how it is named on a
page and what of it makes two runs comparable. The run form, the run service, the run model,
schedules and history ask the mode; none of them branches on a mode's name.

The settings come in by one door, `from_arguments` (run_create's arguments: what the run form
cleans, what a schedule keeps, what a stored run's columns hold), and go out by one, `columns`
(what the run stores). Those argument names are the run's load columns, spelled here once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from ..arrivals import ArrivalPattern
from ..client import Load
from ..conversations import Conversation


class UnknownLoadMode(LookupError):
    """A load mode name the registry does not hold."""


@dataclass(frozen=True)
class Limits:
    """The site's bounds a mode judges its fields against (the engine reads no settings)."""

    max_concurrency: int
    min_rate: float
    max_rate: float


@dataclass(frozen=True)
class LoadArguments:
    """A run's load, as run_create takes it and a run stores it: every mode reads what it needs.
    `max_concurrency` is the cap in flight of modes that send at a rate; `search_max_concurrency`
    the highest concurrency an SLO search by concurrency tries (a stored run keeps it in
    `max_concurrency`: None then)."""

    concurrency_levels: tuple[int, ...] = ()
    request_rates: tuple[float, ...] = ()
    pattern: ArrivalPattern = field(default_factory=ArrivalPattern)
    conversation: Conversation | None = None
    max_concurrency: int = 0
    search_max_concurrency: int | None = None
    search_rates: tuple[float, ...] = ()


# What every mode stores when it has nothing of its own there (the run's load columns).
EMPTY_COLUMNS = {"concurrency_levels": [], "request_rates": [], "arrivals": "poisson", "arrival_pattern": {},
                 "conversation": {}, "max_concurrency": 0, "search_rates": []}
COLUMNS = tuple(EMPTY_COLUMNS)
# run_create's load arguments (from_arguments' keywords, beside the mode's name).
ARGUMENTS = ("concurrency_levels", "request_rates", "arrivals", "arrival_pattern", "conversation", "max_concurrency",
             "search_max_concurrency", "search_rates")
# run_create's load arguments as the run form leaves them for a mode that does not use them.
EMPTY_ARGUMENTS = {"concurrency_levels": [], "request_rates": [], "search_rates": [], "search_max_concurrency": None,
                   "arrival_pattern": None, "conversation": None}


@dataclass(frozen=True)
class FieldSpec:
    """A run-form field a mode owns: the run form, the API and its schema build theirs from it.
    Blank is allowed (None): the mode's `clean` says when it needs a value."""

    kind: str  # "int", "float" or "choice"
    label: str
    help_text: str = ""
    initial: object = None
    min_value: float | None = None
    max_value: float | None = None
    choices: tuple[tuple[str, str], ...] = ()
    beside: str = "load"  # where the form shows it: "load" with the load's fields, "slo" after the SLOs


class Problems(Protocol):
    """Where a mode says what is wrong with its fields (the run form, or a schedule's firing)."""

    def add(self, field: str, message: str) -> None: ...

    def has(self, field: str) -> bool: ...


@dataclass(frozen=True)
class LoadMode:
    """The settings of one load mode; a subclass per mode, registered with `@register`."""

    name: ClassVar[str] = ""  # stored in Run.load_mode: at most 20 characters
    label: ClassVar[str] = ""  # the choice in the run form
    fields: ClassVar[tuple[str, ...]] = ()  # the run-form fields it shows
    own_fields: ClassVar[dict[str, FieldSpec]] = {}  # of those, the ones no other part of the form has
    inputs: ClassVar[tuple[str, ...]] = ()  # of those, the ones it turns into its settings (not stored as such)
    is_search: ClassVar[bool] = False  # an SLO search: its levels are probes found as it goes
    sends_at_rates: ClassVar[bool] = False  # its levels are sent at request rates (their lateness is measured)

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "LoadMode":
        raise NotImplementedError

    @classmethod
    def clean(cls, data: dict, inputs: dict, problems: Problems, limits: Limits) -> None:
        """Judge the form's cleaned `data` (and the values of its `inputs`, taken out of it) and
        leave in `data` run_create's load arguments."""
        data.update(EMPTY_ARGUMENTS)

    def arguments(self) -> dict:
        """run_create's load arguments that queue it again (a schedule's template)."""
        return {**EMPTY_ARGUMENTS, "arrivals": "poisson", "max_concurrency": 0}

    def columns(self) -> dict:
        """What the run stores of it: every load column."""
        return dict(EMPTY_COLUMNS)

    def loads(self, requests: int, duration_s: float | None) -> list[Load]:
        """Its levels, in order (an SLO search has none fixed)."""
        return []

    def level_count(self) -> int:
        """The levels one trial measures on one endpoint (an SLO search: its most probes)."""
        return 0

    def describe(self) -> str:
        """Its levels in words, e.g. "c=1,8" (the run's name and page)."""
        raise NotImplementedError

    def comparable_shape(self) -> dict:
        """What of it two runs must share to be compared in history (a part of the workload's
        fingerprint: change it and no earlier run compares)."""
        return {"levels": [], "arrivals": "", "max_concurrency": 0}

    def run_time_problem(self, requests: int, duration_s: float | None, trials: int, endpoints: int,
                         limit_s: float) -> tuple[str, str] | None:
        """(field, message) when the run could not end within `limit_s`, else None: by default
        each level lasts at most its duration; levels, trials and endpoints one after another."""
        levels = self.level_count()
        if not (levels and duration_s):
            return None
        total = endpoints * levels * trials * duration_s
        if total <= limit_s:
            return None
        return "duration_s", (
            f"{levels} level(s){of_trials(trials)} × {endpoints} endpoint(s) × {span(duration_s)} could take "
            f"{span(total)}, above the run time limit of {span(limit_s)}. Set a shorter duration or fewer levels.")


class SearchMode(LoadMode):
    """An SLO search (engine/slo_search.py): probes one load at a time for the highest that meets
    the SLOs."""

    is_search: ClassVar[bool] = True

    def new_search(self, target):
        raise NotImplementedError

    def probe(self, load: float, requests: int, duration_s: float | None) -> Load:
        """A probe at `load` (users, or requests/s) as a level."""
        raise NotImplementedError

    def probe_load(self, concurrency: int, rate: float | None) -> float:
        """The load a stored probe was measured at, from its level's concurrency and rate."""
        raise NotImplementedError

    def widest_probe(self, requests: int, duration_s: float | None) -> Load:
        """Its heaviest possible probe (what the connection pool is sized for)."""
        raise NotImplementedError

    @classmethod
    def clean(cls, data: dict, inputs: dict, problems: Problems, limits: Limits) -> None:
        super().clean(data, inputs, problems, limits)
        if not any(data.get(k) for k in SLO_FIELDS) and not any(problems.has(k) for k in SLO_FIELDS):
            problems.add("slo_ttft_ms", "The SLO search needs a target to meet: give a TTFT, TPOT or E2E SLO.")


SLO_FIELDS = ("slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms")


# ---------------------------------------------------------------- words for messages
def span(seconds: float) -> str:
    """A duration for messages: 40 s, 25 min, 6 h."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def of_trials(trials: int) -> str:
    """ " × 3 trials", said only when there are several."""
    return f" × {trials} trials" if trials > 1 else ""


def over_limit(per_level: list[float], trials: int, endpoints: int, limit_s: float, why: str, advice: str,
               at_least: bool = False) -> str | None:
    """What a run whose levels last `per_level` seconds each, one trial after another on each
    endpoint, is told when it would pass the run time limit (None when it would not)."""
    total = endpoints * sum(per_level) * trials
    if total <= limit_s:
        return None
    return (f"{why}; this run ({len(per_level)} level(s){of_trials(trials)} × {endpoints} endpoint(s)) would take "
            f"{'at least' if at_least else 'about'} {span(total)}, above the run time limit of {span(limit_s)}. "
            f"{advice}")


def capped(cap: int) -> str:
    return f", cap {cap}" if cap else ""


def shorter(per_level: float, duration_s: float | None) -> float:
    return min(per_level, duration_s or math.inf)


# ---------------------------------------------------------------- the registry
LOAD_MODES: dict[str, type[LoadMode]] = {}


def register(cls: type[LoadMode]) -> type[LoadMode]:
    if not cls.name or len(cls.name) > 20:
        raise ValueError(f"a load mode's name is 1 to 20 characters: {cls.name!r}")
    LOAD_MODES[cls.name] = cls
    return cls


def unregister(name: str) -> None:
    LOAD_MODES.pop(name, None)


def get(name: str) -> type[LoadMode]:
    try:
        return LOAD_MODES[name]
    except KeyError:
        raise UnknownLoadMode(f"no load mode {name!r} is registered here (a site's own are named in "
                              "LOAD_MODES_EXTRA, alike for the web app and every worker)") from None


def choices() -> list[tuple[str, str]]:
    return [(m.name, m.label) for m in LOAD_MODES.values()]


def names() -> list[str]:
    return list(LOAD_MODES)


def search_names() -> tuple[str, ...]:
    return tuple(m.name for m in LOAD_MODES.values() if m.is_search)


def from_arguments(load_mode: str, *, concurrency_levels=(), request_rates=(), arrivals: str = "poisson",
                   arrival_pattern: ArrivalPattern | None = None, conversation: Conversation | None = None,
                   max_concurrency: int | None = 0, search_max_concurrency: int | None = None,
                   search_rates=()) -> LoadMode:
    """A mode's typed settings from run_create's load arguments (or a stored run's columns)."""
    return get(load_mode).from_arguments(LoadArguments(
        concurrency_levels=tuple(concurrency_levels or ()), request_rates=tuple(request_rates or ()),
        pattern=arrival_pattern or ArrivalPattern(arrivals or "poisson"), conversation=conversation,
        max_concurrency=max_concurrency or 0, search_max_concurrency=search_max_concurrency,
        search_rates=tuple(search_rates or ())))


def from_columns(load_mode: str, columns) -> LoadMode:
    """A stored run's load, from the columns `LoadMode.columns` wrote (the one reader of them)."""
    arrivals = columns.get("arrivals") or "poisson"
    return from_arguments(load_mode, concurrency_levels=columns.get("concurrency_levels"),
                          request_rates=columns.get("request_rates"), arrivals=arrivals,
                          arrival_pattern=ArrivalPattern.from_dict(columns.get("arrival_pattern"), arrivals),
                          conversation=Conversation.from_dict(columns.get("conversation")),
                          max_concurrency=columns.get("max_concurrency"), search_rates=columns.get("search_rates"))
