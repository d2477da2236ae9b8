"""Every metric the product shows is defined here, once.

Definitions (also rendered on the run page):
- TTFT: request sent -> first chunk carrying generated content (text, reasoning or a tool
  call). Role-only and usage-only chunks do not count.
- E2E latency: request sent -> last content chunk.
- TPOT: (E2E - TTFT) / (output tokens - 1), per request; output tokens from the server's usage.
- ITL: gaps between content chunks (a chunk can carry several tokens).
- Per-stream decode speed: 1 / TPOT.
- Aggregate output throughput: output tokens of all requests / wall time of the level.
- Prefill throughput: prompt tokens / TTFT (and the server's own figure when it reports one).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

PERCENTILES = (50, 90, 99)

METRIC_DEFINITIONS = {
    "ttft_ms": "Time to first token: request sent until the first chunk carrying generated "
               "content (text, reasoning or tool call). Role-only and usage-only chunks do not count.",
    "e2e_ms": "End-to-end latency: request sent until the last content chunk.",
    "tpot_ms": "Time per output token: (E2E - TTFT) / (output tokens - 1), output tokens from the "
               "server's usage.",
    "itl_ms": "Inter-token latency: gaps between content chunks (a chunk can carry several tokens).",
    "decode_tok_s": "Per-stream decode speed: 1 / TPOT.",
    "aggregate_tok_s": "Aggregate output throughput: output tokens of all completed requests / wall "
                       "time of the level.",
    "prefill_tok_s": "Prefill throughput: prompt tokens / TTFT.",
    "answer_ms": "Time to first answer token: request sent until the first non-reasoning content "
                 "(equals TTFT for models that do not reason).",
    "goodput": "Goodput: requests that met every SLO (TTFT, TPOT, E2E) per second of the level; "
               "failed requests count as missing every SLO.",
    "server_decode_tok_s": "The server's own decode speed (llama.cpp timings.predicted_per_second).",
    "server_prefill_tok_s": "The server's own prefill speed (llama.cpp timings.prompt_per_second).",
}


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolation percentile (numpy's default method); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Iterable[float]) -> dict:
    """Summary of one metric over requests: count, mean, min, max and p50/p90/p99."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"count": 0}
    out = {"count": len(vals), "mean": sum(vals) / len(vals), "min": min(vals), "max": max(vals)}
    for q in PERCENTILES:
        out[f"p{q}"] = percentile(vals, q)
    return out


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
        }


def _ms(seconds: Iterable[float | None]) -> list[float]:
    return [s * 1000.0 for s in seconds if s is not None]


def summarize_level(results: Sequence[RequestResult], wall_s: float, slo: dict | None = None) -> dict:
    """Aggregate one endpoint x load level. `wall_s` is the level's wall time: first send
    until last completion. `slo`: optional limits in ms (ttft_ms, tpot_ms, e2e_ms)."""
    ok = [r for r in results if r.ok]
    good = sum(1 for r in results if r.meets(slo))
    output_tokens = sum((r.output_tokens if r.output_tokens is not None else r.client_output_tokens)
                        for r in ok)
    tpots = [r.tpot for r in ok]
    decode = [1.0 / t for t in tpots if t]
    prefill = [r.prompt_tokens / r.ttft for r in ok if r.prompt_tokens and r.ttft]
    server_decode = [r.timings["predicted_per_second"] for r in ok
                     if r.timings and r.timings.get("predicted_per_second")]
    server_prefill = [r.timings["prompt_per_second"] for r in ok
                      if r.timings and r.timings.get("prompt_per_second")]
    itls = [gap for r in ok for gap in r.itls]
    per_token_itls = [gap / max(n, 1) for r in ok for gap, n in zip(r.itls, r.chunk_tokens[1:])]
    return {
        "requests": len(results),
        "completed": len(ok),
        "failed": len(results) - len(ok),
        "stopped_short": sum(1 for r in ok if r.stopped_short),
        "token_mismatch": sum(1 for r in ok if r.token_mismatch),
        "prompt_drift": sum(1 for r in ok if r.prompt_drift),
        "server_usage_missing": sum(1 for r in ok if r.output_tokens is None),
        "client_output_tokens": sum(r.client_output_tokens for r in ok),
        "wall_s": wall_s,
        "output_tokens": output_tokens,
        "prompt_tokens": sum(r.prompt_tokens or 0 for r in ok),
        "ttft_ms": distribution(_ms(r.ttft for r in ok)),
        "tpot_ms": distribution(_ms(tpots)),
        "e2e_ms": distribution(_ms(r.e2e for r in ok)),
        "answer_ms": distribution(_ms(r.first_answer for r in ok)),
        "itl_ms": distribution(_ms(itls)),
        "itl_per_token_ms": distribution(_ms(per_token_itls)),
        "decode_tok_s": distribution(decode),
        "prefill_tok_s": distribution(prefill),
        "server_decode_tok_s": distribution(server_decode),
        "server_prefill_tok_s": distribution(server_prefill),
        "aggregate_tok_s": output_tokens / wall_s if wall_s > 0 else None,
        "request_throughput": len(ok) / wall_s if wall_s > 0 else None,
        "slo": dict(slo or {}),
        "good_requests": good,
        "goodput": good / wall_s if wall_s > 0 else None,
        "goodput_ratio": good / len(results) if results else None,
    }


def level_wall_time(results: Sequence[RequestResult]) -> float:
    """First send until the last completion (failed requests count until they were sent)."""
    if not results:
        return 0.0
    start = min(r.sent for r in results)
    ends = [r.finished for r in results if r.finished is not None] or [r.sent for r in results]
    return max(ends) - start
