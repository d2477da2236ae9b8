"""The normalized shape every imported report is turned into, and its JSON form.

Django-free on purpose: the app stores `ImportedReport.to_dict()` in a JSON field and charts the
levels beside measured runs, always labelled as imported/published.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

KINDS = ("vllm-bench-serve", "guidellm", "llama-bench", "published")
SCHEMA_VERSION = 1  # bump when the stored dict changes shape

# Latency dicts use these keys where the source states them (any other stated percentile,
# e.g. "p95" or "p99.9", is kept under its own "pNN" key).
LATENCY_KEYS = ("mean", "p50", "p90", "p99")


class ReportFormatError(ValueError):
    """The uploaded file cannot be imported; the message says exactly what is wrong."""


@dataclass
class ImportedLevel:
    """One load level (a concurrency or a request rate) as the source file states it.

    Latency dicts hold milliseconds. Every number is None/absent unless the file states it, or it
    is a direct unit conversion (s -> ms, per-stream decode = 1000 / median TPOT ms), which is
    then said in `notes`.
    """

    label: str
    concurrency: float | None = None
    request_rate: float | None = None
    prompt_tokens: float | None = None
    output_tokens: float | None = None
    completed: int | None = None
    failed: int | None = None
    ttft_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    e2e_ms: dict[str, float] = field(default_factory=dict)
    decode_tok_s_per_stream: float | None = None
    aggregate_output_tok_s: float | None = None
    prefill_tok_s: float | None = None
    request_throughput: float | None = None
    notes: list[str] = field(default_factory=list)

    def has_figures(self) -> bool:
        """True when the level carries at least one performance number worth charting."""
        scalars = (self.decode_tok_s_per_stream, self.aggregate_output_tok_s,
                   self.prefill_tok_s, self.request_throughput)
        return any(v is not None for v in scalars) or any(
            (self.ttft_ms, self.tpot_ms, self.itl_ms, self.e2e_ms))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ImportedLevel":
        if not isinstance(data, dict) or not isinstance(data.get("label"), str):
            raise ReportFormatError("stored level: expected an object with a string 'label'")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            kwargs[key] = dict(kwargs.get(key) or {})
        kwargs["notes"] = list(kwargs.get("notes") or [])
        return cls(**kwargs)


@dataclass
class ImportedReport:
    """A whole imported file (or a published write-up): where it came from plus its levels.

    `backend` is the serving engine whose numbers these are ("vllm", "llamacpp") only when the
    source says so; vllm bench serve and GuideLLM are clients that can drive any server, so for
    them it stays None unless the user sets it.
    """

    kind: str
    tool_label: str
    title: str
    model: str | None = None
    backend: str | None = None
    gpu: str | None = None
    created: str | None = None  # ISO 8601, when the file says when it was made
    levels: list[ImportedLevel] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw_meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["schema_version"] = SCHEMA_VERSION
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ImportedReport":
        if not isinstance(data, dict):
            raise ReportFormatError("stored report: expected an object")
        for key in ("kind", "tool_label", "title"):
            if not isinstance(data.get(key), str):
                raise ReportFormatError(f"stored report: missing string field '{key}'")
        if data["kind"] not in KINDS:
            raise ReportFormatError(f"stored report: unknown kind {data['kind']!r}")
        levels = data.get("levels") or []
        if not isinstance(levels, list):
            raise ReportFormatError("stored report: 'levels' must be a list")
        return cls(
            kind=data["kind"], tool_label=data["tool_label"], title=data["title"],
            model=data.get("model"), backend=data.get("backend"), gpu=data.get("gpu"),
            created=data.get("created"),
            levels=[ImportedLevel.from_dict(lv) for lv in levels],
            notes=list(data.get("notes") or []),
            raw_meta=dict(data.get("raw_meta") or {}),
        )
