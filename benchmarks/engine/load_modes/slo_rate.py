"""The SLO search by request rate: bisection over a grid of rates, each probe sent at one steady
rate, for the highest rate whose requests stay within the SLOs (engine/slo_search.py)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import arrivals as arrival_engine
from ..arrivals import ArrivalPattern
from ..client import Load
from ..slo_search import SloSearch, max_probes, rate_grid
from .base import EMPTY_COLUMNS, FieldSpec, LoadArguments, SearchMode, capped, of_trials, register, shorter, span
from .rate import pattern_columns

STEADY_ARRIVALS = ("poisson", "constant", "gamma")  # a probe is sent at one rate
DEFAULT_STEP_PCT = 20


@register
@dataclass(frozen=True)
class SloSearchByRate(SearchMode):
    name = "slo_rate"
    label = "find the request rate that meets my SLO (open loop)"
    fields = ("search_min_rate", "search_max_rate", "search_rate_step", "slo_percentile", "arrivals", "burstiness",
              "max_concurrency")
    inputs = ("search_min_rate", "search_max_rate", "search_rate_step", "burstiness")
    own_fields = {
        "search_min_rate": FieldSpec(
            "float", "Lowest rate to try (req/s)", initial=0.5, min_value=0.01, beside="slo",
            help_text="SLO search by rate: the search starts here; if this rate misses the SLOs, nothing higher is "
                      "tried."),
        "search_max_rate": FieldSpec("float", "Highest rate to try (req/s)", initial=32, min_value=0.01,
                                     beside="slo"),
        "search_rate_step": FieldSpec(
            "float", "Rate step (%)", initial=DEFAULT_STEP_PCT, min_value=1, max_value=100, beside="slo",
            help_text="The rates tried are each this much above the last, so the answer is known to within it: the "
                      "rate found meets the SLOs and the next one up misses them. Bisection measures only a few of "
                      "them."),
    }
    sends_at_rates = True

    rates: tuple[float, ...] = ()  # the grid it may probe, lowest first (slo_search.rate_grid)
    pattern: ArrivalPattern = field(default_factory=ArrivalPattern)
    cap: int = 0  # most requests in flight, 0 = none

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "SloSearchByRate":
        return cls(rates=arguments.search_rates, pattern=arguments.pattern, cap=arguments.max_concurrency)

    @classmethod
    def clean(cls, data, inputs, problems, limits) -> None:
        kind = data.get("arrivals") or "poisson"
        super().clean(data, inputs, problems, limits)
        if kind not in STEADY_ARRIVALS and not problems.has("arrivals"):
            problems.add("arrivals", "An SLO search sends each probe at one steady rate: choose Poisson, constant or "
                                     "gamma (bursty) arrivals; a ramp or a trace replay is a request-rate run.")
        data["arrival_pattern"] = ArrivalPattern(kind if kind in STEADY_ARRIVALS else "poisson",
                                                 burstiness=inputs.get("burstiness") or 1.0)
        data["search_rates"] = cls._grid(inputs, problems, limits)

    @staticmethod
    def _grid(inputs, problems, limits) -> list[float]:
        """The rates it may probe (slo_search.rate_grid), within the rate limits."""
        low, high, step = (inputs.get(k) for k in ("search_min_rate", "search_max_rate", "search_rate_step"))
        if low is None and not problems.has("search_min_rate"):
            problems.add("search_min_rate", "Give the lowest request rate to try, e.g. 0.5.")
        if high is None and not problems.has("search_max_rate"):
            problems.add("search_max_rate", "Give the highest request rate to try, e.g. 32.")
        if low is None or high is None or any(problems.has(k) for k in ("search_min_rate", "search_max_rate",
                                                                         "search_rate_step")):
            return []
        if low < limits.min_rate:
            problems.add("search_min_rate", f"{low:g} req/s is below the lowest rate, {limits.min_rate:g}.")
            return []
        if high > limits.max_rate:
            problems.add("search_max_rate", f"{high:g} req/s is above the limit of {limits.max_rate:g}.")
            return []
        if high <= low:
            problems.add("search_max_rate", f"The highest rate must be above the lowest ({low:g} req/s).")
            return []
        try:
            return list(rate_grid(low, high, step or DEFAULT_STEP_PCT))
        except ValueError as exc:
            problems.add("search_rate_step", f"{str(exc)[0].upper()}{str(exc)[1:]}.")
            return []

    def arguments(self) -> dict:
        return {**super().arguments(), "search_rates": list(self.rates), "arrivals": self.pattern.kind,
                "arrival_pattern": self.pattern, "max_concurrency": self.cap}

    def columns(self) -> dict:
        return {**EMPTY_COLUMNS, "search_rates": list(self.rates), **pattern_columns(self.pattern, self.cap)}

    def level_count(self) -> int:
        return max_probes(0, len(self.rates) - 1) if self.rates else 0

    def describe(self) -> str:
        rates = self.rates or (0,)
        return f"SLO search {rates[0]:g}..{rates[-1]:g} req/s {self.pattern.describe()}{capped(self.cap)}"

    def new_search(self, target) -> SloSearch:
        return SloSearch(target=target, rates=tuple(self.rates), gap_cv=self.pattern.gap_cv)

    def probe(self, load, requests, duration_s) -> Load:
        return Load(concurrency=self.cap, rate=load, arrivals=self.pattern.kind, requests=requests,
                    duration_s=duration_s, burstiness=self.pattern.burstiness)

    def probe_load(self, concurrency, rate) -> float:
        return rate

    def widest_probe(self, requests, duration_s) -> Load:
        return self.probe(self.rates[-1] if self.rates else self.cap, requests, duration_s)

    def run_time_problem(self, requests, duration_s, trials, endpoints, limit_s):
        """Bounded by every probe at the lowest rate: a probe at a higher rate is shorter."""
        if not (self.rates and requests):
            return None
        lowest, probes = self.rates[0], self.level_count()
        per_probe = shorter(arrival_engine.expected_span_s(self.pattern, lowest, requests), duration_s)
        total = endpoints * probes * trials * per_probe
        if total <= limit_s:
            return None
        return "search_min_rate", (
            f"At {lowest:g} requests per second, {requests} requests take {span(per_probe)}; a search of up to "
            f"{probes} probes{of_trials(trials)} × {endpoints} endpoint(s) could take {span(total)}, above "
            f"the run time limit of {span(limit_s)}. Start from a higher rate, send fewer requests per level "
            "or set a shorter duration.")
