"""Regression tests of a new result against its recent history, Django-free.

Each headline figure of a new run's level is compared with the same figure of the last N
comparable runs (one value per run), the way Bencher's and Conbench's threshold models do: a
z-score of the new value against those runs' mean and standard deviation, in the direction that
is worse for the metric (the catalogue's `better`). A figure regressed when it is at least `z`
standard deviations and `min_change_pct` percent worse; with fewer than `min_history` runs
nothing is tested. The standard deviation is taken as at least `noise_floor_pct` of the mean, so
that runs of identical figures (a simulator) do not turn a rounding step into infinite z.

`RegressionReport` is what a run stores: written by its to_dict, read by its from_dict (every
stored version reads).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from benchmarks.engine.catalogue import LOWER, figure as figure_named

VERSION = 1


@dataclass(frozen=True)
class Thresholds:
    window: int = 10  # the last N comparable runs
    min_history: int = 3
    z: float = 3.0
    min_change_pct: float = 5.0
    noise_floor_pct: float = 1.0


@dataclass
class FigureTest:
    """One figure of one level against the same figure of earlier comparable runs."""

    figure: str  # a catalogue figure name: "ttft_ms_p50", "aggregate_tok_s"
    value: float
    history: list[float]  # oldest first
    mean: float | None = None
    std: float | None = None
    z: float | None = None  # standard deviations worse than the mean (negative: better)
    change_pct: float | None = None  # percent worse than the mean (negative: better)
    regressed: bool = False
    spread: float | None = None  # what z is measured in: the std, or the noise floor when larger

    @property
    def change_words(self) -> str:
        """ "4.0 % worse", "2.5 % better", "unchanged" (within 0.05 %); "—" untested."""
        if self.change_pct is None:
            return "—"
        if round(self.change_pct, 1) == 0:
            return "unchanged"
        return f"{abs(self.change_pct):.1f} % {'worse' if self.change_pct > 0 else 'better'}"

    @property
    def floored(self) -> bool:
        """The earlier runs varied less than the noise floor: z counts floors, not their spread."""
        return self.spread is not None and self.std is not None and self.spread > self.std

    @property
    def z_words(self) -> str:
        """ "+3.2", or, where the floor stood in for the runs' spread, what z is then."""
        if self.z is None:
            return "—"
        if self.floored:
            floor = 100.0 * self.spread / abs(self.mean) if self.mean else 0.0
            return (f"{self.z:+.1f} noise floors (the earlier runs varied by less than the {floor:g} % floor: "
                    f"no measured spread to test against)")
        return f"{self.z:+.1f}"

    @property
    def better(self) -> str:
        return figure_named(self.figure).metric.better

    @property
    def label(self) -> str:
        return figure_named(self.figure).title

    @property
    def sentence(self) -> str:
        f = figure_named(self.figure)
        if self.mean is None:
            return f"{f.label}: {self.value:.{f.metric.digits}f} {f.metric.unit} (too little history)"
        return (f"{f.label} {self.value:.{f.metric.digits}f} {f.metric.unit} vs {self.mean:.{f.metric.digits}f} "
                f"over the last {len(self.history)} comparable runs: {self.change_words}, z = {self.z_words}")


@dataclass
class LevelTest:
    endpoint: str
    level_index: int
    load: str
    fingerprint: str
    figures: list[FigureTest] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # public ids of the runs compared with, oldest first

    @property
    def regressions(self) -> list[FigureTest]:
        return [f for f in self.figures if f.regressed]


@dataclass
class RegressionReport:
    thresholds: Thresholds
    levels: list[LevelTest] = field(default_factory=list)
    version: int = VERSION

    @property
    def regressed(self) -> bool:
        return any(lv.regressions for lv in self.levels)

    @property
    def tested(self) -> bool:
        """Whether any figure had enough history to be tested."""
        return any(f.mean is not None for lv in self.levels for f in lv.figures)

    def regressions(self) -> list[tuple[LevelTest, FigureTest]]:
        return [(lv, f) for lv in self.levels for f in lv.regressions]

    def to_dict(self) -> dict:
        return {"version": self.version, "thresholds": asdict(self.thresholds),
                "levels": [asdict(lv) for lv in self.levels]}

    @classmethod
    def from_dict(cls, data: dict | None) -> "RegressionReport | None":
        if not data:
            return None
        levels = [LevelTest(**{**lv, "figures": [FigureTest(**f) for f in lv.get("figures", [])]})
                  for lv in data.get("levels", [])]
        return cls(thresholds=Thresholds(**data.get("thresholds", {})), levels=levels,
                   version=data.get("version", VERSION))


def compare_figure(name: str, value: float, history: list[float], thresholds: Thresholds) -> FigureTest:
    """`value` of the figure `name` against `history` (earlier runs' values, oldest first; the
    last `thresholds.window` count)."""
    better = figure_named(name).metric.better
    history = [float(v) for v in history if v is not None and math.isfinite(v)][-thresholds.window:]
    result = FigureTest(figure=name, value=float(value), history=history)
    if len(history) < max(thresholds.min_history, 2):
        return result
    mean = statistics.fmean(history)
    std = statistics.stdev(history)
    spread = max(std, abs(mean) * thresholds.noise_floor_pct / 100.0)
    if spread == 0:
        return result
    worse = (value - mean) if better == LOWER else (mean - value)
    result.mean, result.std, result.spread = mean, std, spread
    result.z = worse / spread
    result.change_pct = 100.0 * worse / abs(mean) if mean else None
    result.regressed = (result.z >= thresholds.z and result.change_pct is not None
                        and result.change_pct >= thresholds.min_change_pct)
    return result
