"""How every metric is computed from the requests the client measured, once. What each one
means (its label, unit, definition, which direction is better) is in `catalogue.py`; this
module computes them:

- per request (`PER_REQUEST`: TTFT, TPOT, E2E, first answer, decode and prefill speeds, the
  server's own speeds), summarised over a level's requests as a `Distribution`;
- per gap between chunks (ITL, ITL per token), and per level (aggregate output and request
  throughput, goodput), in `summarize_level`.

`summarize_level` returns a `LevelSummary`: the shape a LevelResult stores (`to_dict`, the one
writer) and reads back (`from_dict`, the one reader, which also reads rows stored before it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from .catalogue import DISTRIBUTION, METRICS, PERCENTILES, Figure

def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default method); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_interval(values: Sequence[float], q: float, confidence: float = 0.95) -> tuple[float, float] | None:
    """A distribution-free `confidence` interval of the q-th percentile from order statistics
    (the ranks a Binomial(n, q/100) count puts the true percentile between, each tail at most
    (1 - confidence) / 2); None when the requests are too few for one (a p99 needs 368, a p90
    36, a p50 6). It holds for any shape of distribution, as latencies need."""
    ordered = sorted(values)
    n, p, tail = len(ordered), q / 100.0, (1.0 - confidence) / 2
    if n == 0:
        return None
    cdf, below = [], 0.0  # cdf[k] = P(B <= k), the pmf in logs (no underflow at large n)
    for k in range(n + 1):
        below += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                          + (k * math.log(p) if k else 0.0) + ((n - k) * math.log1p(-p) if n - k else 0.0))
        cdf.append(below)
    # lowest value below the percentile with probability >= 1 - tail: P(B <= l - 1) <= tail
    low = max((rank for rank in range(1, n + 1) if cdf[rank - 1] <= tail), default=None)
    # highest above it likewise: P(B <= u - 1) >= 1 - tail
    high = min((rank for rank in range(1, n + 1) if cdf[rank - 1] >= 1 - tail), default=None)
    if low is None or high is None:
        return None
    return ordered[low - 1], ordered[high - 1]


@dataclass(frozen=True)
class Distribution:
    """One metric over a level's requests: count, mean, min, max and p50/p90/p99, and each
    percentile's 95 % interval over the requests where there are enough (`intervals`)."""

    count: int = 0
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    intervals: dict = field(default_factory=dict, hash=False)  # "p50" -> (low, high)

    def get(self, stat: str) -> float | int | None:
        return getattr(self, stat, None) if stat in _DISTRIBUTION_FIELDS else None

    def interval(self, stat: str) -> tuple[float, float] | None:
        """The stat's 95 % interval over the requests; None when too few for one (or stored
        before intervals were)."""
        return self.intervals.get(stat)

    def to_dict(self) -> dict:
        if not self.count:
            return {"count": 0}
        return {"count": self.count, "mean": self.mean, "min": self.min, "max": self.max,
                **{f"p{q}": getattr(self, f"p{q}") for q in PERCENTILES},
                "intervals": {k: list(v) for k, v in self.intervals.items()}}

    @classmethod
    def from_dict(cls, data) -> "Distribution":
        if not isinstance(data, dict) or not data.get("count"):
            return cls()
        intervals = data.get("intervals") if isinstance(data.get("intervals"), dict) else {}
        return cls(**{k: _number(data.get(k)) for k in _DISTRIBUTION_FIELDS if k != "count"},
                   count=int(data["count"]), intervals={
                       k: (lo, hi) for k, v in intervals.items() if k in _DISTRIBUTION_FIELDS
                       and isinstance(v, list) and len(v) == 2
                       and (lo := _number(v[0])) is not None and (hi := _number(v[1])) is not None})


_DISTRIBUTION_FIELDS = ("count", "mean", "min", "max", *(f"p{q}" for q in PERCENTILES))


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


def distribution(values: Iterable[float]) -> Distribution:
    """Summary of one metric over requests: count, mean, min, max and p50/p90/p99."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return Distribution()
    intervals = {f"p{q}": i for q in PERCENTILES if (i := percentile_interval(vals, q)) is not None}
    return Distribution(count=len(vals), mean=sum(vals) / len(vals), min=min(vals), max=max(vals),
                        **{f"p{q}": percentile(vals, q) for q in PERCENTILES}, intervals=intervals)


@dataclass
class RequestResult:
    """One request as the client saw it. Times are seconds on the client's monotonic clock,
    relative to the start of its level; chunk times are relative to `sent`."""

    index: int
    sent: float
    prompt_tokens_asked: int
    output_tokens_asked: int
    first_content: float | None = None  # seconds after `sent`
    first_answer: float | None = None  # first non-reasoning content, seconds after `sent`
    reasoning_chunks: int = 0
    scheduled: float | None = None  # open loop: when it was due to leave, from the level start
    prompt_tokens_sent: int | None = None  # token ids we sent (None for text prompts)
    chunk_times: list[float] = field(default_factory=list)  # content chunks, seconds after `sent`
    chunk_tokens: list[int] = field(default_factory=list)  # our own token count per content chunk
    prompt_tokens: int | None = None  # server usage
    output_tokens: int | None = None  # server usage
    client_output_tokens: int = 0  # our own count (content chunks, or token ids when streamed)
    finish_reason: str | None = None
    timings: dict | None = None  # llama.cpp's own timings, verbatim
    status_code: int | None = None
    error: str = ""  # empty when the request succeeded
    error_kind: str = ""  # short class: connect, timeout, http, protocol, server, preflight
    dispatch_delay: float = 0.0  # seconds between asking the HTTP client and the first byte sent
    turn: int | None = None  # a conversation's turn (0 = its first), None outside conversations
    conversation: int | None = None  # which conversation of the level
    reply: list[str] | None = None  # a conversation turn's reply text, for the next turn's history (not stored)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def send_lag(self) -> float | None:
        """Open loop: how late the request left against its schedule."""
        return None if self.scheduled is None else self.sent - self.scheduled

    @property
    def ttft(self) -> float | None:
        return self.first_content

    @property
    def ttft_from_schedule(self) -> float | None:
        """Open loop: TTFT counted from when the request was due, not when it left: the time it
        waited in the client (behind a cap, or a client that fell behind) included."""
        return None if self.scheduled is None or self.ttft is None else self.sent - self.scheduled + self.ttft

    @property
    def e2e_from_schedule(self) -> float | None:
        return None if self.scheduled is None or self.e2e is None else self.sent - self.scheduled + self.e2e

    @property
    def e2e(self) -> float | None:
        return self.chunk_times[-1] if self.chunk_times else None

    @property
    def finished(self) -> float | None:
        """Completion time relative to the level start."""
        return None if self.e2e is None else self.sent + self.e2e

    @property
    def tpot(self) -> float | None:
        tokens = self.output_tokens if self.output_tokens is not None else self.client_output_tokens
        if self.ttft is None or self.e2e is None or tokens is None or tokens < 2:
            return None
        return (self.e2e - self.ttft) / (tokens - 1)

    @property
    def itls(self) -> list[float]:
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def token_mismatch(self) -> bool:
        """The server's usage and our own count of content chunks disagree (servers that
        pack several tokens into one chunk show up here too)."""
        return self.ok and self.output_tokens is not None and self.output_tokens != self.client_output_tokens

    @property
    def prompt_drift(self) -> bool:
        """The server counted another prompt length than asked. A conversation's later turns are
        left out: their history carries the chat template's tokens per message, which the client
        cannot count before the server does."""
        if self.turn:
            return False
        return self.ok and self.prompt_tokens is not None and self.prompt_tokens != self.prompt_tokens_asked

    def meets(self, slo: dict | None) -> bool:
        """Met every SLO given (milliseconds); a failed request meets none."""
        if not self.ok:
            return False
        slo = slo or {}
        for key, value in (("ttft_ms", self.ttft), ("tpot_ms", self.tpot), ("e2e_ms", self.e2e)):
            limit = slo.get(key)
            if limit is not None and (value is None or value * 1000.0 > limit):
                return False
        return True

    @property
    def stopped_short(self) -> bool:
        tokens = self.output_tokens if self.output_tokens is not None else self.client_output_tokens
        return self.ok and tokens < self.output_tokens_asked

    def to_dict(self) -> dict:
        return {
            "index": self.index, "sent": self.sent, "first_content": self.first_content,
            "chunk_times": self.chunk_times, "chunk_tokens": self.chunk_tokens,
            "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
            "client_output_tokens": self.client_output_tokens, "finish_reason": self.finish_reason,
            "timings": self.timings, "status_code": self.status_code,
            "error": self.error, "error_kind": self.error_kind,
            "prompt_tokens_asked": self.prompt_tokens_asked,
            "output_tokens_asked": self.output_tokens_asked,
            "dispatch_delay": self.dispatch_delay, "first_answer": self.first_answer,
            "reasoning_chunks": self.reasoning_chunks, "scheduled": self.scheduled,
            "turn": self.turn, "conversation": self.conversation,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _timing(name: str) -> Callable[[RequestResult], float | None]:
    return lambda r: (r.timings or {}).get(name) or None


# Each metric that has one value per request: the value of a request, in the catalogue's unit
# (None when the request does not have it). The level's distribution, the distribution charts
# and the requests CSV all read these.
PER_REQUEST: dict[str, Callable[[RequestResult], float | None]] = {
    "ttft_ms": lambda r: _ms(r.ttft),
    "tpot_ms": lambda r: _ms(r.tpot),
    "e2e_ms": lambda r: _ms(r.e2e),
    "ttft_from_schedule_ms": lambda r: _ms(r.ttft_from_schedule),
    "e2e_from_schedule_ms": lambda r: _ms(r.e2e_from_schedule),
    "answer_ms": lambda r: _ms(r.first_answer),
    "decode_tok_s": lambda r: 1.0 / r.tpot if r.tpot else None,
    "prefill_tok_s": lambda r: r.prompt_tokens / r.ttft if r.prompt_tokens and r.ttft else None,
    "server_decode_tok_s": _timing("predicted_per_second"),
    "server_prefill_tok_s": _timing("prompt_per_second"),
}


def request_value(key: str, r: RequestResult) -> float | None:
    """One request's value of a per-request metric (None for a failed request)."""
    return PER_REQUEST[key](r) if r.ok else None


SUMMARY_VERSION = 2  # 2: "version" stored, every catalogue metric present; absent: the first rows (a distribution's "intervals" may be absent: unknown)
_COUNTS = ("requests", "completed", "failed", "stopped_short", "token_mismatch", "prompt_drift",
           "server_usage_missing", "client_output_tokens", "output_tokens", "prompt_tokens", "good_requests")


@dataclass(frozen=True)
class LevelSummary:
    """One endpoint x load level, as stored in LevelResult.summary: request counts, token
    accounting, the SLOs it was judged against and every metric of the catalogue measured from
    requests (`values`: key -> Distribution for a distribution, a number or None for a scalar)."""

    requests: int = 0
    completed: int = 0
    failed: int = 0
    stopped_short: int = 0
    token_mismatch: int = 0
    prompt_drift: int = 0
    server_usage_missing: int = 0
    client_output_tokens: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    good_requests: int = 0
    wall_s: float = 0.0
    slo: dict = field(default_factory=dict)
    values: dict = field(default_factory=dict)

    def value(self, key: str):
        """A metric's Distribution, or its number (None when not measured)."""
        m = METRICS[key]
        found = self.values.get(key)
        if m.summary == DISTRIBUTION:
            return found if isinstance(found, Distribution) else Distribution()
        return found

    def stat(self, key: str, stat: str | None = None) -> float | None:
        value = self.value(key)
        return value.get(stat) if isinstance(value, Distribution) else value

    def figure(self, f: Figure) -> float | None:
        return self.stat(f.key, f.stat)

    def interval(self, f: Figure) -> tuple[float, float] | None:
        """A percentile figure's 95 % interval over the level's requests (None: a scalar, or
        too few requests)."""
        value = self.value(f.key)
        return value.interval(f.stat) if isinstance(value, Distribution) and f.stat else None

    # The one writer and the one reader of LevelResult.summary.
    def to_dict(self) -> dict:
        out: dict = {"version": SUMMARY_VERSION, **{k: getattr(self, k) for k in _COUNTS},
                     "wall_s": self.wall_s, "slo": dict(self.slo)}
        for key, m in METRICS.items():
            if m.source == "requests":
                value = self.value(key)
                out[key] = value.to_dict() if isinstance(value, Distribution) else value
        return out

    @classmethod
    def from_dict(cls, data) -> "LevelSummary":
        """Reads every version: rows without "version" (the first ones) may lack the counts and
        metrics added since (goodput, answer time, ITL per token, ...): those read as not
        measured. Keys the catalogue does not know are left out."""
        data = data if isinstance(data, dict) else {}
        counts = {k: int(data[k]) for k in _COUNTS if isinstance(data.get(k), (int, float))}
        values = {}
        for key, m in METRICS.items():
            if key in data and m.source == "requests":
                values[key] = (Distribution.from_dict(data[key]) if m.summary == DISTRIBUTION
                               else _number(data[key]))
        return cls(**counts, wall_s=_number(data.get("wall_s")) or 0.0,
                   slo=dict(data.get("slo") or {}), values=values)

    @classmethod
    def read(cls, summary: "LevelSummary | dict | None") -> "LevelSummary":
        return summary if isinstance(summary, LevelSummary) else cls.from_dict(summary)


def summarize_level(results: Sequence[RequestResult], wall_s: float, slo: dict | None = None) -> LevelSummary:
    """Aggregate one endpoint x load level. `wall_s` is the level's wall time: first send
    until last completion. `slo`: optional limits in ms (ttft_ms, tpot_ms, e2e_ms)."""
    ok = [r for r in results if r.ok]
    good = sum(1 for r in results if r.meets(slo))
    output_tokens = sum((r.output_tokens if r.output_tokens is not None else r.client_output_tokens)
                        for r in ok)
    itls = [gap for r in ok for gap in r.itls]
    per_token_itls = [gap / max(n, 1) for r in ok for gap, n in zip(r.itls, r.chunk_tokens[1:])]
    per_level = wall_s > 0
    values = {key: distribution(request_value(key, r) for r in ok) for key in PER_REQUEST}
    values.update({
        "itl_ms": distribution(gap * 1000.0 for gap in itls),
        "itl_per_token_ms": distribution(gap * 1000.0 for gap in per_token_itls),
        "aggregate_tok_s": output_tokens / wall_s if per_level else None,
        "request_throughput": len(ok) / wall_s if per_level else None,
        "goodput": good / wall_s if per_level else None,
        "goodput_ratio": good / len(results) if results else None,
    })
    return LevelSummary(
        requests=len(results), completed=len(ok), failed=len(results) - len(ok),
        stopped_short=sum(1 for r in ok if r.stopped_short),
        token_mismatch=sum(1 for r in ok if r.token_mismatch),
        prompt_drift=sum(1 for r in ok if r.prompt_drift),
        server_usage_missing=sum(1 for r in ok if r.output_tokens is None),
        client_output_tokens=sum(r.client_output_tokens for r in ok),
        output_tokens=output_tokens, prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        good_requests=good, wall_s=wall_s, slo=dict(slo or {}), values=values)


def ttft_by_turn(results: Sequence[RequestResult]) -> dict[int, Distribution]:
    """A conversation level's TTFT (ms) over its completed requests, per turn (0 = the first)."""
    turns: dict[int, list[float]] = {}
    for r in results:
        if r.ok and r.turn is not None:
            turns.setdefault(r.turn, []).append(request_value("ttft_ms", r))
    return {turn: distribution(values) for turn, values in sorted(turns.items())}


def level_wall_time(results: Sequence[RequestResult]) -> float:
    """First send until the last completion (failed requests count until they were sent)."""
    if not results:
        return 0.0
    start = min(r.sent for r in results)
    ends = [r.finished for r in results if r.finished is not None] or [r.sent for r in results]
    return max(ends) - start
