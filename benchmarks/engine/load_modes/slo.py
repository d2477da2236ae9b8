"""The SLO search by concurrency: bisection from one user up to a highest, for the most users
whose requests stay within the SLOs (engine/slo_search.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ..client import Load
from ..slo_search import SloSearch, max_probes
from .base import EMPTY_COLUMNS, FieldSpec, LoadArguments, SearchMode, register

LOWEST_USERS = 1  # a search by concurrency starts at one user


@register
@dataclass(frozen=True)
class SloSearchByUsers(SearchMode):
    name = "slo"
    label = "find the load that meets my SLO (closed loop)"
    fields = ("search_max_concurrency", "slo_percentile")
    own_fields = {"search_max_concurrency": FieldSpec(
        "int", "Highest concurrency to try", initial=64, min_value=LOWEST_USERS, beside="slo",
        help_text="SLO search: bisection from 1 up to this many concurrent users, for the highest that stays "
                  "within the SLOs above.")}

    high: int = LOWEST_USERS  # the most concurrent users it may try

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "SloSearchByUsers":
        return cls(high=arguments.search_max_concurrency or arguments.max_concurrency or LOWEST_USERS)

    @classmethod
    def clean(cls, data, inputs, problems, limits) -> None:
        high = data.get("search_max_concurrency")
        super().clean(data, inputs, problems, limits)
        if high is None and not problems.has("search_max_concurrency"):
            problems.add("search_max_concurrency", "Give the highest concurrency to try, e.g. 64.")
        elif high is not None and high > limits.max_concurrency:
            problems.add("search_max_concurrency",
                         f"{high} is above the limit of {limits.max_concurrency} concurrent requests.")
        data["search_max_concurrency"] = high

    def arguments(self) -> dict:
        return {**super().arguments(), "max_concurrency": self.high, "search_max_concurrency": self.high}

    def columns(self) -> dict:
        return {**EMPTY_COLUMNS, "max_concurrency": self.high}

    def level_count(self) -> int:
        return max_probes(LOWEST_USERS, self.high)

    def describe(self) -> str:
        return f"SLO search c={LOWEST_USERS}..{self.high}"

    def new_search(self, target) -> SloSearch:
        return SloSearch(target=target, low=LOWEST_USERS, high=max(self.high, LOWEST_USERS))

    def probe(self, load, requests, duration_s) -> Load:
        return Load(concurrency=int(load), requests=requests, duration_s=duration_s)

    def probe_load(self, concurrency, rate) -> float:
        return concurrency

    def widest_probe(self, requests, duration_s) -> Load:
        return self.probe(self.high, requests, duration_s)
