"""The normalized shape every imported report is turned into, and its JSON form.

Django-free on purpose: the app stores `ImportedReport.to_dict()` in a JSON field (the one
writer; `ImportedReport.from_dict` is the one reader, of every schema version) and charts the
levels beside measured runs, always labelled as imported/published. A level's figures are
named and shaped as in the metric catalogue (engine/catalogue.py), as a measured level's are.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..engine.catalogue import DISTRIBUTION, METRICS
from ..engine.points import QUALITY_NAMES, Point, QualityPoint

KINDS = ("vllm-bench-serve", "guidellm", "llama-bench", "published")
# 3: an optional "quality" (StatedQuality: the report's stated quality figures); 2: figures
# under the catalogue's keys and shapes (decode_tok_s and prefill_tok_s a dict of the stated
# statistics, aggregate_tok_s); 1: decode_tok_s_per_stream, aggregate_output_tok_s and a plain
# prefill_tok_s number.
SCHEMA_VERSION = 3

# Latency dicts use these keys where the source states them (any other stated percentile,
# e.g. "p95" or "p99.9", is kept under its own "pNN" key).
LATENCY_KEYS = ("mean", "p50", "p90", "p99")


class ReportFormatError(ValueError):
    """The uploaded file cannot be imported; the message says exactly what is wrong."""


@dataclass
class ImportedLevel:
    """One load level (a concurrency or a request rate) as the source file states it.

    Figures are named as in the metric catalogue: a distribution is a dict of the statistics
    the file states ("mean", "p50", ...; latencies in milliseconds), a scalar a number. Every
    number is None/absent unless the file states it, or it is a direct unit conversion (s -> ms,
    per-stream decode = 1000 / median TPOT ms), which is then said in `notes`.
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
    decode_tok_s: dict[str, float] = field(default_factory=dict)  # per stream
    prefill_tok_s: dict[str, float] = field(default_factory=dict)
    aggregate_tok_s: float | None = None
    request_throughput: float | None = None
    energy_per_token_j: float | None = None  # GPU energy per output token, where the tool states it
    notes: list[str] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        """The level's figures in a level summary's shape: catalogue key -> stats dict or number."""
        return {key: getattr(self, key) for key in FIGURE_FIELDS}

    def has_figures(self) -> bool:
        """True when the level carries at least one performance number worth charting."""
        return any(v not in (None, {}) for v in self.values().values())

    def point(self, *, rate_mode: bool) -> Point:
        return Point.stated(self.values(), label=self.label, concurrency=self.concurrency,
                            rate=self.request_rate if rate_mode else None, completed=self.completed,
                            failed=self.failed)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], version: int = SCHEMA_VERSION,
                  kind: str = "") -> "ImportedLevel":
        if not isinstance(data, dict) or not isinstance(data.get("label"), str):
            raise ReportFormatError("stored level: expected an object with a string 'label'")
        if version < 2:
            data = _level_v1(data, kind)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in FIGURE_FIELDS:
            if METRICS[key].summary == DISTRIBUTION:
                kwargs[key] = dict(kwargs.get(key) or {})
        kwargs["notes"] = list(kwargs.get("notes") or [])
        return cls(**kwargs)


# The level's figure fields: each a catalogue key, shaped as the catalogue summarises it.
FIGURE_FIELDS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "decode_tok_s", "prefill_tok_s",
                 "aggregate_tok_s", "request_throughput", "energy_per_token_j")
# Version 1 stated the per-stream decode as one number: 1000 / median TPOT (a median) from vllm
# bench serve and GuideLLM, avg_ts (a mean) from llama-bench, a write-up's typical figure.
_V1_DECODE_STAT = {"llama-bench": "mean", "published": "mean"}


def _level_v1(data: dict[str, Any], kind: str) -> dict[str, Any]:
    data = dict(data)
    decode = data.pop("decode_tok_s_per_stream", None)
    data["decode_tok_s"] = {} if decode is None else {_V1_DECODE_STAT.get(kind, "p50"): decode}
    data["aggregate_tok_s"] = data.pop("aggregate_output_tok_s", None)
    prefill = data.get("prefill_tok_s")  # only llama-bench stated it: avg_ts of a pp test
    data["prefill_tok_s"] = {"mean": prefill} if isinstance(prefill, (int, float)) else {}
    return data


@dataclass
class StatedQuality:
    """Quality figures a report states (the write-up's perplexity), under the catalogue's keys,
    with what it says of how they were measured: the evaluation text ({"name", "sha256"}) and
    the windows ({"n_ctx", "windows"}) where stated, else None, which keeps them from being
    compared with anything."""

    figures: dict[str, float] = field(default_factory=dict)
    text: dict[str, Any] | None = None
    windows: dict[str, int] | None = None
    notes: list[str] = field(default_factory=list)

    def point(self, *, label: str, kind: str, model: str | None) -> QualityPoint:
        return QualityPoint.stated(self.figures, label=label, kind=kind, model=model, text=self.text,
                                   windows=self.windows, note=" ".join(self.notes))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StatedQuality":
        if not isinstance(data, dict):
            raise ReportFormatError("stored report: 'quality' must be an object")
        figures = dict(data.get("figures") or {})
        unknown = set(figures) - set(QUALITY_NAMES)
        if unknown:
            raise ReportFormatError(f"stored report: not quality figures: {', '.join(sorted(unknown))}")
        return cls(figures=figures, text=data.get("text"), windows=data.get("windows"),
                   notes=list(data.get("notes") or []))


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
    quality: StatedQuality | None = None  # the quality figures it states, if any

    @property
    def rate_mode(self) -> bool:
        """Levels are request rates (none states a concurrency)."""
        return any(lv.request_rate is not None and lv.concurrency is None for lv in self.levels)

    def points(self) -> list[Point]:
        return [lv.point(rate_mode=self.rate_mode) for lv in self.levels]

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
        version = data.get("schema_version", 1)
        return cls(
            kind=data["kind"], tool_label=data["tool_label"], title=data["title"],
            model=data.get("model"), backend=data.get("backend"), gpu=data.get("gpu"),
            created=data.get("created"),
            levels=[ImportedLevel.from_dict(lv, version, data["kind"]) for lv in levels],
            notes=list(data.get("notes") or []),
            raw_meta=dict(data.get("raw_meta") or {}),
            quality=StatedQuality.from_dict(data["quality"]) if data.get("quality") else None,
        )
