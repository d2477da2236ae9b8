"""A comparison and advisor point: one load level's headline figures (`catalogue.POINT_FIGURES`),
whether they were measured here or read from an imported report. Django-free.

Charts, the comparison page (its table and sentences) and the advisor's evidence all read
points; they are built only by the two readers below, one per stored shape they come from (a
measured level's summaries, an imported report's level).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .catalogue import POINT_FIGURES, Figure
from .gpu import GpuSummary
from .metrics import LevelSummary

NAMES = tuple(f.name for f in POINT_FIGURES)


@dataclass(frozen=True)
class Point:
    label: str
    concurrency: float | None = None  # streams; None in rate mode
    rate: float | None = None  # requests/s in rate mode
    id: str | None = None  # a measured level's public id
    completed: int | None = None
    failed: int | None = None
    flags: tuple[str, ...] = ()
    figures: dict = field(default_factory=dict)  # Figure.name -> value (None: not measured or stated)

    def __post_init__(self):
        unknown = set(self.figures) - set(NAMES)
        if unknown:
            raise ValueError(f"not point figures: {', '.join(sorted(unknown))}; see catalogue.POINT_FIGURES")

    def get(self, f: Figure | str) -> float | None:
        return self.figures.get(f if isinstance(f, str) else f.name)

    @classmethod
    def measured(cls, summary: LevelSummary, *, label: str, concurrency: int | None, rate: float | None,
                 id: str | None = None, flags=(), gpu: GpuSummary | None = None,
                 gpu_indices=None) -> "Point":
        """A level measured here: its figures from its stored summary, peak memory from its GPU
        telemetry (the endpoint's own GPUs, `gpu_indices`, when known)."""
        figures = {f.name: summary.figure(f) for f in POINT_FIGURES if f.metric.source == "requests"}
        figures["peak_memory_gib"] = gpu.peak_memory_gib(gpu_indices) if gpu is not None else None
        return cls(label=label, concurrency=concurrency, rate=rate, id=id, completed=summary.completed,
                   failed=summary.failed, flags=tuple(flags), figures=figures)

    @classmethod
    def stated(cls, values: dict, *, label: str, concurrency: float | None, rate: float | None,
               completed: int | None = None, failed: int | None = None) -> "Point":
        """A level of an imported report: `values` in the summary's shape, holding only what the
        file states (see `stated`)."""
        figures = {f.name: stated(values, f) for f in POINT_FIGURES}
        return cls(label=label, concurrency=concurrency, rate=rate, completed=completed, failed=failed,
                   figures=figures)


def stated(values: dict, f: Figure) -> float | None:
    """A figure of an imported level: its stated statistic. Where a file states a metric as one
    mean and nothing else (llama-bench's avg_ts, a write-up's "56 tok/s"), its p50 figure is that
    mean, the only figure there is."""
    value = f.read(values)
    if value is None and f.stat == "p50" and set(values.get(f.key) or ()) == {"mean"}:
        value = Figure(f.key, "mean").read(values)
    return value
