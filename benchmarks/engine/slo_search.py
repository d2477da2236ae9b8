"""Finding the load that meets an SLO, Django-free: the highest concurrency (closed loop) or
request rate (open loop) at which TTFT, TPOT and E2E stay within their targets at one
percentile, by bisection over whole concurrency levels between a lowest and a highest, or over
a geometric grid of rates (`rate_grid`: each a fixed step above the last, so the answer is
known within that step).

A probe (one concurrency level, measured once per trial) meets the targets when, in every trial,
no request failed and each targeted metric's percentile over the level's requests is at most its
target (a rate's TTFT and E2E counted from each request's scheduled send). The search probes the lowest level first (if it misses, nothing does), then the highest
(if it meets, the answer is "at least the highest"), then halves the interval between the highest
level that met and the lowest that missed until they are adjacent: at most 2 + ceil(log2(high -
low)) probes, which bounds its requests (`max_probes` × requests per level × trials) and so its
time. The answer assumes latency grows with load (a level that meets is taken to mean every
lower one does), which is what queueing does. A rate search works on the grid's positions as a
concurrency search works on concurrencies; its probes are the rates themselves.

`SloSearch` is the shape stored per endpoint in Run.slo_search: `to_dict` its one writer,
`from_dict` its one reader. A search is replayed from the probes already stored (a resumed run
measures only what is missing), since the next probe follows from the earlier ones alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .catalogue import METRICS, PERCENTILES
from .metrics import LevelSummary
from .validity import THRESHOLDS

SEARCH_VERSION = 2  # 2: searches by rate (probes with "rate"); 1 reads as a concurrency search
TARGET_KEYS = ("ttft_ms", "tpot_ms", "e2e_ms")
# A search by rate judges these from each request's scheduled send (catalogue: rate mode's figures).
FROM_SCHEDULE = {"ttft_ms": "ttft_from_schedule_ms", "e2e_ms": "e2e_from_schedule_ms"}


@dataclass(frozen=True)
class SloTarget:
    """Targets in ms at one percentile (50, 90 or 99); None: not targeted."""

    percentile: int = 99
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def __post_init__(self):
        if self.percentile not in PERCENTILES:
            raise ValueError(f"the percentile is one of {', '.join(map(str, PERCENTILES))}")

    @property
    def limits(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TARGET_KEYS if getattr(self, k) is not None}

    @property
    def words(self) -> str:
        """ "TTFT p99 ≤ 2000 ms, TPOT p99 ≤ 50 ms"."""
        return ", ".join(f"{METRICS[k].label} p{self.percentile} ≤ {v:g} ms" for k, v in self.limits.items())

    def misses(self, summary: LevelSummary, from_schedule: bool = False) -> list[str]:
        """What one measured level misses, in words ([] when it meets every target). With
        `from_schedule` (a probe sent at a rate) TTFT and E2E count from when each request was due
        to leave: a request that waited in the client (behind a cap on requests in flight, or a
        client behind its schedule) waited for the server all the same."""
        out = []
        if summary.failed or not summary.completed:
            out.append(f"{summary.failed} of {summary.requests} requests failed")
        for key, limit in self.limits.items():
            key = FROM_SCHEDULE.get(key, key) if from_schedule and summary.value(
                FROM_SCHEDULE.get(key, key)).count else key
            value = summary.stat(key, f"p{self.percentile}")
            if value is None:
                out.append(f"{METRICS[key].label} p{self.percentile} not measured")
            elif value > limit:
                out.append(f"{METRICS[key].label} p{self.percentile} {value:.1f} ms > {limit:g} ms")
        return out

    def within(self, wanted: list[tuple[str, int, float]]) -> bool:
        """Whether meeting these targets means meeting each `wanted` (metric key, percentile,
        limit in ms): each wanted metric targeted here at that percentile or a higher one, no
        looser. A level whose p99 TTFT is at most 2 s has its p90 at most 2 s too."""
        return all(self.percentile >= q and key in self.limits and self.limits[key] <= limit
                   for key, q, limit in wanted)

    def to_dict(self) -> dict:
        return {"percentile": self.percentile, **self.limits}

    @classmethod
    def from_dict(cls, data) -> "SloTarget":
        data = data if isinstance(data, dict) else {}
        percentile = data.get("percentile") if data.get("percentile") in PERCENTILES else 99
        return cls(percentile, **{k: float(data[k]) for k in TARGET_KEYS
                                  if isinstance(data.get(k), (int, float)) and not isinstance(data.get(k), bool)})


def max_probes(low: int, high: int) -> int:
    """The most levels a search between positions `low` and `high` measures (for a rate
    search, 0 and the grid's length - 1)."""
    return 1 if high <= low else 2 + math.ceil(math.log2(high - low))


MAX_RATE_GRID = 200  # rates a search may choose from: at most 10 probes


def rate_grid(lowest: float, highest: float, step_pct: float) -> tuple[float, ...]:
    """The rates a search by rate chooses from: `lowest`, then each `step_pct` % above the last
    (4 significant figures), and `highest` itself. Raises ValueError when the bounds are
    reversed or the grid would be longer than MAX_RATE_GRID."""
    if not (0 < lowest < highest) or step_pct <= 0:
        raise ValueError("the lowest rate must be above 0 and below the highest, the step above 0")
    ratio = 1 + step_pct / 100
    count = math.ceil(math.log(highest / lowest) / math.log(ratio) - 1e-9)
    if count + 1 > MAX_RATE_GRID:
        raise ValueError(f"{lowest:g} to {highest:g} req/s in steps of {step_pct:g} % is {count + 1} rates; "
                         f"at most {MAX_RATE_GRID}: take a larger step or a narrower range")
    grid = [float(f"{lowest * ratio ** k:.4g}") for k in range(count)]
    return tuple(sorted(set(grid + [float(f"{highest:.4g}")])))


@dataclass(frozen=True)
class Probe:
    load: float  # the concurrency (a whole number) or the rate in req/s
    met: bool
    misses: tuple[str, ...] = ()  # across trials, each miss once

    @property
    def concurrency(self) -> int:
        return int(self.load)


@dataclass
class SloSearch:
    """One endpoint's search: its bounds, targets and probes so far; `next_probe` the load to
    measure next (None when the answer is known), `best` the answer. With `rates` it searches
    those request rates (low and high are then positions in them: 0 and len - 1)."""

    target: SloTarget
    low: int = 1
    high: int = 1
    probes: list[Probe] = field(default_factory=list)
    stopped: str = ""  # why it ended before its answer (cancelled, time limit), "" otherwise
    rates: tuple[float, ...] = ()
    gap_cv: float | None = None  # by rate: how irregular the sends are (ArrivalPattern.gap_cv)

    def __post_init__(self):
        if self.rates:
            self.low, self.high = 0, len(self.rates) - 1

    @property
    def by(self) -> str:
        return "rate" if self.rates else "concurrency"

    def _load(self, position: int) -> float:
        return self.rates[position] if self.rates else position

    def _position(self, load: float) -> int:
        return self.rates.index(load) if self.rates else int(load)

    def record(self, load: float, summaries: list[LevelSummary]) -> Probe:
        """A probe measured (one summary per trial): it meets the targets only if every trial did,
        and, by rate, only if each trial delivered the rate it was offered (`undelivered`)."""
        misses: list[str] = []
        for s in summaries:
            found = self.target.misses(s, from_schedule=bool(self.rates))
            if self.rates and self.gap_cv is not None:
                found += [m for m in [undelivered(load, s, self.gap_cv)] if m]
            misses += [m for m in found if m not in misses]
        probe = Probe(load, met=bool(summaries) and not misses, misses=tuple(misses))
        self.probes.append(probe)
        return probe

    def _bracket(self) -> tuple[int | None, int | None]:
        """(the highest position that met, the lowest that missed) of the probes so far."""
        met = [self._position(p.load) for p in self.probes if p.met]
        missed = [self._position(p.load) for p in self.probes if not p.met]
        return (max(met) if met else None), (min(missed) if missed else None)

    def next_probe(self) -> float | None:
        if self.stopped:
            return None
        if not self.probes:
            return self._load(self.low)
        best, worst = self._bracket()
        if best is None:
            return None  # the lowest level already misses
        if worst is None:
            return self._load(self.high) if best < self.high else None
        if worst - best <= 1:
            return None
        return self._load((best + worst) // 2)

    @property
    def done(self) -> bool:
        return not self.stopped and bool(self.probes) and self.next_probe() is None

    @property
    def best(self) -> float | None:
        """The highest load measured within the targets (None: not even the lowest)."""
        best = self._bracket()[0]
        return None if best is None else self._load(best)

    @property
    def missed_above(self) -> float | None:
        """The lowest load measured above the answer that missed (None when none did)."""
        worst = self._bracket()[1]
        return None if worst is None else self._load(worst)

    @property
    def status(self) -> str:
        """found | none (even the lowest missed) | at_least (the highest met) | unfinished."""
        if not self.done:
            return "unfinished"
        best, worst = self._bracket()
        if best is None:
            return "none"
        return "at_least" if worst is None else "found"

    def load_words(self, load: float) -> str:
        """ "3 concurrent users", "9.31 req/s"."""
        if self.rates:
            return f"{load:g} req/s"
        return f"{int(load)} concurrent user" + ("" if load == 1 else "s")

    @property
    def words(self) -> str:
        """The answer in a sentence (without the endpoint's name)."""
        shown, status, best = self.load_words, self.status, self.best
        verb = "sustains" if self.rates else "serves"
        if status == "found":
            above = self.missed_above
            return f"{verb} {shown(best)} within {self.target.words} ({shown(above)} {'misses' if self.rates else 'miss'})"
        if status == "at_least":
            return f"{verb} at least {shown(best)} within {self.target.words} (the highest {self.by} searched)"
        if status == "none":
            return f"misses {self.target.words} even at {shown(self._load(self.low))}"
        so_far = f"; {shown(best)} met them so far" if best is not None else ""
        return f"search unfinished ({self.stopped or 'not measured yet'}){so_far}"

    # The one writer and the one reader of Run.slo_search's entries.
    def to_dict(self) -> dict:
        return {"version": SEARCH_VERSION, "by": self.by, "target": self.target.to_dict(), "low": self.low,
                "high": self.high, "rates": list(self.rates),
                "probes": [{self.by: p.load, "met": p.met, "misses": list(p.misses)} for p in self.probes],
                "stopped": self.stopped, "best": self.best, "status": self.status, "gap_cv": self.gap_cv}

    @classmethod
    def from_dict(cls, data) -> "SloSearch":
        data = data if isinstance(data, dict) else {}
        rates = tuple(float(r) for r in data.get("rates") or () if _number(r) and r > 0)
        by = "rate" if rates else "concurrency"
        probes = [Probe(float(p[by]) if rates else int(p[by]), bool(p.get("met")),
                        tuple(str(m) for m in p.get("misses") or ()))
                  for p in data.get("probes") or () if isinstance(p, dict) and _number(p.get(by))
                  and (not rates or float(p[by]) in rates) and (rates or isinstance(p[by], int))]
        return cls(target=SloTarget.from_dict(data.get("target")), low=int(data.get("low") or 1),
                   high=int(data.get("high") or 1), probes=probes, stopped=str(data.get("stopped") or ""),
                   rates=rates, gap_cv=float(data["gap_cv"]) if _number(data.get("gap_cv")) else None)


SCHEDULE_SIGMAS = 3.0  # how far a random schedule may run long by chance (about 1 in 700)


def undelivered(rate: float, summary: LevelSummary, gap_cv: float) -> str | None:
    """Why a probe at `rate` did not deliver it, or None. An answer never exceeds the throughput
    its own probe delivered: requests sent on their schedule finish within the schedule's length
    ((n - 1) / rate, longer by chance by at most SCHEDULE_SIGMAS standard deviations of a sum of
    n - 1 gaps of this irregularity), the lateness a client keeping time may have
    (THRESHOLDS["send_lag_ms"]) and the slowest request's own time from its actual send.
    A level that took longer had requests leave late (a cap on requests in flight, a client
    behind its schedule): the server was not offered that rate, whatever its latencies."""
    n, delivered = summary.requests, summary.stat("request_throughput")
    slowest = summary.stat("e2e_ms", "max")
    if n < 2 or not summary.completed or delivered is None or slowest is None:
        return None
    allowed_s = ((n - 1) / rate * (1 + SCHEDULE_SIGMAS * gap_cv / math.sqrt(n - 1))
                 + (THRESHOLDS["send_lag_ms"] + slowest) / 1000.0)
    if summary.wall_s <= allowed_s:
        return None
    return (f"delivered {delivered:.2f} req/s of the {rate:g} offered (the level took {summary.wall_s:.1f} s; "
            f"sent on schedule it ends within {allowed_s:.1f} s)")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
