"""Request rates: at each level, requests leave on a schedule whatever the server does (an open
loop): Poisson, constant, gamma (bursty), a linear ramp, or a recorded trace replayed at one or
more speed-ups (engine/arrivals.py), optionally capped in flight."""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import arrivals as arrival_engine
from ..arrivals import ArrivalPattern
from ..client import Load
from .base import EMPTY_COLUMNS, LoadArguments, LoadMode, capped, over_limit, register, shorter, span


def pattern_columns(pattern: ArrivalPattern, cap: int) -> dict:
    """The columns of a mode that sends at rates: its arrivals (their parameters where Poisson and
    constant have none) and its cap in flight."""
    return {"arrivals": pattern.kind, "arrival_pattern": pattern.to_dict() if pattern.kind not in (
        "poisson", "constant") else {}, "max_concurrency": cap}


@register
@dataclass(frozen=True)
class RateSweep(LoadMode):
    name = "rate"
    label = "request rate (open loop)"
    fields = ("request_rates", "arrivals", "burstiness", "ramp_to", "trace_file", "trace_speedups", "max_concurrency")
    inputs = ("burstiness", "ramp_to", "trace_file", "trace_speedups")
    sends_at_rates = True

    rates: tuple[float, ...] = ()  # none for a trace replay: one level per speed-up
    pattern: ArrivalPattern = field(default_factory=ArrivalPattern)
    cap: int = 0  # most requests in flight, 0 = none

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "RateSweep":
        pattern = arguments.pattern
        rates = () if pattern.kind == "trace" else arguments.request_rates
        return cls(rates=rates, pattern=pattern, cap=arguments.max_concurrency)

    @classmethod
    def clean(cls, data, inputs, problems, limits) -> None:
        rates, kind = data.get("request_rates"), data.get("arrivals") or "poisson"
        super().clean(data, inputs, problems, limits)
        if kind == "trace":
            if inputs.get("trace_file") is None and not problems.has("trace_file"):
                problems.add("trace_file", "Upload the trace file (Mooncake JSONL or BurstGPT CSV), or choose "
                                           "other arrivals.")
            if (data.get("dataset_source") or "synthetic") != "synthetic":
                problems.add("dataset_source", "A trace replay sends the lengths of its trace as random tokens: "
                                               "choose random tokens, or other arrivals.")
            if not inputs.get("trace_speedups") and not problems.has("trace_speedups"):
                problems.add("trace_speedups", "Give at least one speed-up, e.g. 1.")
            data["arrival_pattern"] = ArrivalPattern("trace", trace=inputs.get("trace_file"),
                                                     speedups=tuple(inputs.get("trace_speedups") or (1.0,)))
            return
        if kind == "ramp" and inputs.get("ramp_to") is None and not problems.has("ramp_to"):
            problems.add("ramp_to", "Give the rate the ramp ends at, e.g. 10.")
        data["arrival_pattern"] = ArrivalPattern(kind, burstiness=inputs.get("burstiness") or 1.0,
                                                 ramp_to=inputs.get("ramp_to"))
        if rates is not None and not rates:
            problems.add("request_rates", "Give at least one request rate, e.g. 1,2.")
        data["request_rates"] = rates or []

    def arguments(self) -> dict:
        return {**super().arguments(), "request_rates": list(self.rates), "arrivals": self.pattern.kind,
                "arrival_pattern": self.pattern, "max_concurrency": self.cap}

    def columns(self) -> dict:
        return {**EMPTY_COLUMNS, "request_rates": sorted(set(self.rates)), **pattern_columns(self.pattern, self.cap)}

    def loads(self, requests, duration_s) -> list[Load]:
        pattern = self.pattern
        if pattern.kind == "trace":
            trace = pattern.trace
            return [Load(concurrency=self.cap, rate=trace.mean_rate(requests, s), arrivals="trace", requests=requests,
                         duration_s=duration_s, trace=trace, speedup=s) for s in pattern.speedups]
        return [Load(concurrency=self.cap, rate=r, arrivals=pattern.kind, requests=requests, duration_s=duration_s,
                     burstiness=pattern.burstiness, ramp_to=pattern.ramp_to) for r in self.rates]

    def level_count(self) -> int:
        return len(self.pattern.speedups) if self.pattern.kind == "trace" else len(self.rates)

    def describe(self) -> str:
        pattern, cap = self.pattern, capped(self.cap)
        if pattern.kind == "trace":
            return pattern.describe() + cap
        rates = ", ".join(f"{r:g}" for r in self.rates)
        if pattern.kind == "ramp":
            return f"ramp from {rates} to {pattern.ramp_to:g} req/s{cap}"
        return f"{rates} req/s {pattern.describe()}{cap}"

    def comparable_shape(self) -> dict:
        return {"levels": list(self.rates), "arrivals": self.pattern.kind, "max_concurrency": self.cap}

    def run_time_problem(self, requests, duration_s, trials, endpoints, limit_s):
        """A rate level sends its last request about (requests - 1) ÷ rate after its first (or
        stops at its duration)."""
        pattern, n = self.pattern, requests
        if not n:
            return None
        if pattern.kind == "trace":
            if not pattern.trace:
                return None
            per_level = [shorter(arrival_engine.expected_span_s(pattern, None, n, s), duration_s)
                         for s in pattern.speedups]
            problem = over_limit(
                per_level, trials, endpoints, limit_s,
                f"Replayed at ×{min(pattern.speedups):g}, the trace's first {min(n, len(pattern.trace.requests))} "
                f"requests take {span(max(per_level))}",
                "Speed it up, replay fewer requests per level or set a shorter duration.")
            return problem and ("trace_speedups", problem)
        if not self.rates:
            return None
        slowest = min(self.rates)
        if duration_s and n > 1 and slowest * duration_s < 1:
            return "duration_s", (
                f"At {slowest:g} requests per second requests leave {span(1 / slowest)} apart, so a "
                f"{span(duration_s)} level would send only its first request: make rate × duration at least 1.")
        per_level = [shorter(arrival_engine.expected_span_s(pattern, rate, n), duration_s) for rate in self.rates]
        problem = over_limit(
            per_level, trials, endpoints, limit_s,
            f"At {slowest:g} requests per second, {n} requests take {span(max(per_level))} per level",
            "Raise the rates, send fewer requests per level or set a shorter duration.")
        return problem and ("request_rates", problem)
