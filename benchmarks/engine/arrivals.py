"""When a rate level's requests leave: Poisson or constant arrivals, gamma-distributed bursts,
a linear ramp of the rate, or the timestamps of a recorded trace replayed (with its lengths).

`ArrivalPattern` is the one description of how a run's rate levels send (the kind and its
parameters); a Run stores its `to_dict` and the worker reads it back with `from_dict`.
`send_times` turns a level into the times (seconds after its start) its requests are due.

Gamma arrivals are those of `vllm bench serve --burstiness`: each gap between two requests is
drawn from a gamma distribution of shape = burstiness and scale = 1 / (rate × burstiness), so
the mean gap stays 1 / rate and the gaps' coefficient of variation is 1 / √burstiness
(burstiness 1 is Poisson, below 1 burstier, above 1 more even). A ramp is vllm's linear
ramp-up: request i of N is sent at the rate r0 + (r1 - r0) × i / (N - 1), its gap drawn as
above at that rate. Unlike vllm, the first request leaves at once and the drawn times are not
rescaled to end at exactly N / rate (that rescaling moves every gap by the same factor).

Traces: Mooncake's JSONL (one object per line: "timestamp" in milliseconds, "input_length",
"output_length" and optional "hash_ids", each one a block of 512 prompt tokens that requests
with the same id share) and BurstGPT's CSV (a header naming "Timestamp" in seconds, "Request
tokens" and "Response tokens"; rows with 0 response tokens are BurstGPT's failed requests and
are left out). A replay sends each request at its time from the first one, divided by the
speed-up, with its prompt and output lengths.
"""
from __future__ import annotations

import csv
import io
import math
import random
from dataclasses import dataclass

from .datasets import json_lines

KINDS = ("poisson", "constant", "gamma", "ramp", "trace")
MAX_TRACE_REQUESTS = 20_000  # requests one uploaded trace may hold
MOONCAKE_BLOCK_TOKENS = 512  # the prompt tokens one Mooncake hash id stands for
BURSTINESS_RANGE = (0.01, 100.0)
SPEEDUP_RANGE = (0.01, 1000.0)
TRACE_FORMATS = {"mooncake": "Mooncake JSONL", "burstgpt": "BurstGPT CSV"}


class TraceError(ValueError):
    """A trace file that cannot be replayed, with the reason and its line."""


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrived (seconds from the trace's first), its prompt and
    output lengths, the Mooncake prefix blocks it shares (if any) and its line in the file."""

    at_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    line: int = 0

    def to_dict(self) -> list:
        out = [round(self.at_s, 6), self.input_tokens, self.output_tokens, self.line]
        return out + [list(self.hash_ids)] if self.hash_ids else out

    @classmethod
    def from_dict(cls, data) -> "TraceRequest":
        at, n_in, n_out, line, *rest = data
        return cls(float(at), int(n_in), int(n_out), tuple(rest[0]) if rest else (), int(line))


@dataclass(frozen=True)
class Trace:
    name: str
    format: str  # a key of TRACE_FORMATS
    requests: tuple[TraceRequest, ...]
    skipped: int = 0  # BurstGPT rows of failed requests, left out

    @property
    def span_s(self) -> float:
        return self.requests[-1].at_s - self.requests[0].at_s if self.requests else 0.0

    def first(self, n: int | None) -> tuple[TraceRequest, ...]:
        return self.requests if n is None else self.requests[:n]

    def mean_rate(self, n: int | None = None, speedup: float = 1.0) -> float:
        """Requests per second of the first `n` requests replayed at `speedup` (their count less
        one over their span; their count over one second for a trace of one instant)."""
        sent = self.first(n)
        span = (sent[-1].at_s - sent[0].at_s) / speedup if len(sent) > 1 else 0.0
        return (len(sent) - 1) / span if span > 0 else float(len(sent))

    @property
    def label(self) -> str:
        return f"{TRACE_FORMATS.get(self.format, self.format)} {self.name}".strip()

    def to_dict(self) -> dict:
        return {"name": self.name, "format": self.format, "skipped": self.skipped,
                "requests": [r.to_dict() for r in self.requests]}

    @classmethod
    def from_dict(cls, data) -> "Trace | None":
        if not isinstance(data, dict) or not data.get("requests"):
            return None
        return cls(name=str(data.get("name") or ""), format=str(data.get("format") or ""),
                   requests=tuple(TraceRequest.from_dict(r) for r in data["requests"]),
                   skipped=int(data.get("skipped") or 0))


@dataclass(frozen=True)
class ArrivalPattern:
    """How a run's rate levels send. `kind`: one of KINDS. `burstiness`: the gamma shape (gamma
    and ramp); `ramp_to`: the rate a ramp ends at (it starts at each level's rate); `trace` and
    its `speedups` (one level per speed-up) for a replay."""

    kind: str = "poisson"
    burstiness: float = 1.0
    ramp_to: float | None = None
    trace: Trace | None = None
    speedups: tuple[float, ...] = (1.0,)

    def to_dict(self) -> dict:
        out: dict = {"kind": self.kind}
        if self.kind in ("gamma", "ramp"):
            out["burstiness"] = self.burstiness
        if self.kind == "ramp":
            out["ramp_to"] = self.ramp_to
        if self.kind == "trace" and self.trace is not None:
            out.update(trace=self.trace.to_dict(), speedups=list(self.speedups))
        return out

    @classmethod
    def from_dict(cls, data, kind: str = "poisson") -> "ArrivalPattern":
        """Reads what to_dict wrote; {} (runs stored before) is `kind` without parameters, as those
        runs were measured (Poisson or constant)."""
        data = data if isinstance(data, dict) else {}
        ramp_to = data.get("ramp_to")
        return cls(kind=str(data.get("kind") or kind), burstiness=float(data.get("burstiness") or 1.0),
                   ramp_to=float(ramp_to) if isinstance(ramp_to, (int, float)) else None,
                   trace=Trace.from_dict(data.get("trace")),
                   speedups=tuple(float(s) for s in data.get("speedups") or (1.0,)))

    @property
    def gap_cv(self) -> float | None:
        """The coefficient of variation of the gaps between sends at a fixed rate (None: a ramp
        or a trace, whose rate is not fixed)."""
        return {"constant": 0.0, "poisson": 1.0, "gamma": 1 / self.burstiness ** 0.5}.get(self.kind)

    def describe(self, rate: float | None = None) -> str:
        """In words, for a level at `rate` (a ramp's start) or for the whole run."""
        shown = f"{rate:g} req/s " if rate is not None else ""
        if self.kind == "gamma":
            return f"{shown}gamma (burstiness {self.burstiness:g})"
        if self.kind == "ramp":
            start = f"{rate:g}" if rate is not None else "each rate"
            extra = f", burstiness {self.burstiness:g}" if self.burstiness != 1 else ""
            return f"ramp {start} → {self.ramp_to:g} req/s{extra}"
        if self.kind == "trace":
            name = self.trace.label if self.trace else "trace"
            return f"{name} replayed ×{', ×'.join(f'{s:g}' for s in self.speedups)}"
        return f"{shown}{self.kind}"


def send_times(kind: str, rate: float | None, n: int | None, rng: random.Random, *, burstiness: float = 1.0,
               ramp_to: float | None = None, duration_s: float | None = None, trace: Trace | None = None,
               speedup: float = 1.0) -> list[float]:
    """When each request of a level is due, in seconds after the level's start (the first at 0).
    `n` requests at most (None: as many as `duration_s` holds); none at or past `duration_s`."""
    if kind == "trace":
        if trace is None:
            return []
        sent = trace.first(n)
        times = [(r.at_s - sent[0].at_s) / speedup for r in sent] if sent else []
        return [t for t in times if duration_s is None or t < duration_s]
    limit = n if n is not None else 10**7
    times, t = [], 0.0
    for i in range(limit):
        if i:
            current = rate
            if kind == "ramp" and ramp_to is not None:
                current = rate + (ramp_to - rate) * i / max(limit - 1, 1)
            if kind == "constant":
                t += 1.0 / current
            elif kind in ("gamma", "ramp"):
                t += rng.gammavariate(burstiness, 1.0 / (current * burstiness))
            else:
                t += rng.expovariate(current)
        if duration_s is not None and t >= duration_s:
            break
        times.append(t)
    return times


def expected_span_s(pattern: ArrivalPattern, rate: float | None, n: int, speedup: float = 1.0) -> float:
    """About how long a level sends for: its last request's expected time (for the run time
    limit, before anything is drawn)."""
    if pattern.kind == "trace":
        sent = pattern.trace.first(n) if pattern.trace else ()
        return (sent[-1].at_s - sent[0].at_s) / speedup if sent else 0.0
    if pattern.kind == "ramp" and pattern.ramp_to is not None and n > 1:
        return sum(1.0 / (rate + (pattern.ramp_to - rate) * i / (n - 1)) for i in range(1, n))
    return (n - 1) / rate if rate else 0.0


# ---------------------------------------------------------------- trace files
def parse_trace(text: str, name: str = "", max_tokens: int | None = None) -> Trace:
    """A trace from its text, Mooncake JSONL or BurstGPT CSV (told apart by the first line that is
    not blank: a JSON object, or a header). Raises TraceError naming the first bad line."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not first:
        raise TraceError("the file is empty: a trace needs one request per line.")
    if first.startswith("{"):
        return _checked(Trace(name, "mooncake", tuple(_mooncake(text, max_tokens))))
    if "timestamp" in first.lower():
        requests, skipped = _burstgpt(text, max_tokens)
        return _checked(Trace(name, "burstgpt", tuple(requests), skipped))
    raise TraceError("line 1 is neither a JSON object (Mooncake: {\"timestamp\": ms, \"input_length\": …, "
                     "\"output_length\": …}) nor a CSV header with Timestamp, Request tokens and Response tokens "
                     "(BurstGPT).")


def _checked(trace: Trace) -> Trace:
    if not trace.requests:
        raise TraceError("the file holds no request to replay.")
    requests = sorted(trace.requests, key=lambda r: r.at_s)  # stable: same-time requests keep their order
    t0 = requests[0].at_s
    return Trace(trace.name, trace.format, tuple(TraceRequest(r.at_s - t0, r.input_tokens, r.output_tokens,
                                                              r.hash_ids, r.line) for r in requests), trace.skipped)


def _length(value, what: str, number: int, max_tokens: int | None, minimum: int = 1) -> int:
    if isinstance(value, str):
        value = value.strip()
        value = int(value) if value.isascii() and value.isdigit() else value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TraceError(f"line {number}: {what} must be a whole number of at least {minimum}.")
    if max_tokens is not None and value > max_tokens:
        raise TraceError(f"line {number}: {what} is {value}, above the limit of {max_tokens} tokens.")
    return value


def _time(value, what: str, number: int, scale: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise TraceError(f"line {number}: {what} {value.strip()[:40]!r} is not a number.") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise TraceError(f"line {number}: {what} must be a number of at least 0.")
    return float(value) * scale


def _too_many(count: int) -> None:
    if count > MAX_TRACE_REQUESTS:
        raise TraceError(f"more than {MAX_TRACE_REQUESTS:,} requests; replay at most {MAX_TRACE_REQUESTS:,} "
                         "(cut the file).")


def _mooncake(text: str, max_tokens: int | None) -> list[TraceRequest]:
    requests = []
    example = '{"timestamp": 0, "input_length": 512, "output_length": 64}'
    for number, obj in json_lines(text, TraceError, example):
        for key in ("timestamp", "input_length", "output_length"):
            if key not in obj:
                raise TraceError(f'line {number} has no "{key}".')
        at = _time(obj["timestamp"], '"timestamp" (milliseconds)', number, 0.001)
        n_in = _length(obj["input_length"], '"input_length"', number, max_tokens)
        n_out = _length(obj["output_length"], '"output_length"', number, max_tokens)
        if max_tokens is not None and n_in + n_out > max_tokens:
            raise TraceError(f"line {number}: input and output lengths ({n_in} + {n_out}) exceed the limit of "
                             f"{max_tokens} tokens.")
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise TraceError(f'line {number}: "hash_ids" must be a list of whole numbers.')
        if len(hash_ids) > math.ceil(n_in / MOONCAKE_BLOCK_TOKENS):
            raise TraceError(f'line {number}: {len(hash_ids)} "hash_ids" of {MOONCAKE_BLOCK_TOKENS} tokens each are '
                             f"more than its {n_in} input tokens hold.")
        requests.append(TraceRequest(at, n_in, n_out, tuple(hash_ids), number))
        _too_many(len(requests))
    return requests


BURSTGPT_COLUMNS = {"timestamp": "Timestamp", "request tokens": "Request tokens", "response tokens": "Response tokens"}


def _burstgpt(text: str, max_tokens: int | None) -> tuple[list[TraceRequest], int]:
    reader = csv.reader(io.StringIO(text))
    header, number = None, 0
    requests, skipped = [], 0
    try:
        for row in reader:
            number = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = {cell.strip().lower(): k for k, cell in enumerate(row)}
                missing = [name for key, name in BURSTGPT_COLUMNS.items() if key not in header]
                if missing:
                    raise TraceError(f"line {number}: the header lacks {', '.join(missing)} (BurstGPT's columns: "
                                     "Timestamp, Model, Request tokens, Response tokens, Total tokens, Log Type).")
                columns = [header[key] for key in BURSTGPT_COLUMNS]
                continue
            if len(row) <= max(columns):
                raise TraceError(f"line {number} has {len(row)} columns; the header has {len(header)}.")
            at = _time(row[columns[0]], "Timestamp (seconds)", number, 1.0)
            n_in = _length(row[columns[1]], "Request tokens", number, max_tokens)
            n_out = _length(row[columns[2]], "Response tokens", number, max_tokens, minimum=0)
            if n_out == 0:  # BurstGPT's failed requests
                skipped += 1
                continue
            if max_tokens is not None and n_in + n_out > max_tokens:
                raise TraceError(f"line {number}: request and response tokens ({n_in} + {n_out}) exceed the limit "
                                 f"of {max_tokens} tokens.")
            requests.append(TraceRequest(at, n_in, n_out, (), number))
            _too_many(len(requests))
    except csv.Error as exc:
        raise TraceError(f"line {reader.line_num}: not CSV ({exc}).") from None
    return requests, skipped


def block_tokens(pool: list[int], seed, hash_id: int) -> list[int]:
    """The prompt tokens a Mooncake hash id stands for: the same ids for the same hash id in every
    request of a run, so that requests sharing it share a prefix the server can cache."""
    return random.Random(f"{seed}:block:{hash_id}").choices(pool, k=MOONCAKE_BLOCK_TOKENS)
