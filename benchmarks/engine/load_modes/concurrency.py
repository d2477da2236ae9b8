"""A concurrency sweep: at each level, that many streams send one request after another
(a closed loop)."""
from __future__ import annotations

from dataclasses import dataclass

from ..client import Load
from .base import EMPTY_COLUMNS, LoadArguments, LoadMode, register


@register
@dataclass(frozen=True)
class ConcurrencySweep(LoadMode):
    name = "concurrency"
    label = "concurrency sweep (closed loop)"
    fields = ("concurrency_levels",)

    levels: tuple[int, ...] = ()

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "ConcurrencySweep":
        return cls(levels=arguments.concurrency_levels)

    @classmethod
    def clean(cls, data, inputs, problems, limits) -> None:
        levels = data.get("concurrency_levels")
        super().clean(data, inputs, problems, limits)
        if levels is not None and not levels:
            problems.add("concurrency_levels", "Give at least one concurrency level, e.g. 1,8.")
        data["concurrency_levels"] = levels or []

    def arguments(self) -> dict:
        return {**super().arguments(), "concurrency_levels": list(self.levels)}

    def columns(self) -> dict:
        return {**EMPTY_COLUMNS, "concurrency_levels": sorted(set(self.levels))}

    def loads(self, requests, duration_s) -> list[Load]:
        return [Load(concurrency=c, requests=requests, duration_s=duration_s) for c in self.levels]

    def level_count(self) -> int:
        return len(self.levels)

    def describe(self) -> str:
        return "c=" + ",".join(str(c) for c in self.levels)

    def comparable_shape(self) -> dict:
        return {**super().comparable_shape(), "levels": list(self.levels)}
