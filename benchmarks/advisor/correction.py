"""What the team's own runs teach the estimates: each stored estimate beside the figure a run later
measured (a pair, the prediction ledger's), the error and band coverage of such pairs, and a
correction per host and engine fitted to them.

The correction of one figure on one host and engine is a factor k = measured / estimated, the
geometric mean over the host's runs (each run's levels averaged first, so a long sweep counts as
one run), shrunk toward 1 as if PRIOR_RUNS runs had measured exactly the estimate: one run moves
the estimate a third of the way, ten runs most of the way. How much that helps is checked by
leaving each run out: its pairs are corrected with the factor the other runs give.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from .facts import fmt
from .performance import Predicted

PRIOR_RUNS = 2.0  # the weight of "the fit is right" (k = 1), in runs
# Which figures a correction scales (the estimate's own; memory and energy are not estimated this way).
CORRECTED = ("decode_tok_s_p50", "aggregate_tok_s", "tpot_ms_p50", "ttft_ms_p50", "ttft_ms_p90")
SHORT = {"decode_tok_s_p50": "per-user decode", "aggregate_tok_s": "aggregate", "tpot_ms_p50": "TPOT",
         "ttft_ms_p50": "TTFT p50", "ttft_ms_p90": "TTFT p90"}


@dataclass(frozen=True)
class Pair:
    """One estimate beside its measurement: `run` names the run it came from (for leave-one-run-out)."""

    run: str
    metric: str
    estimated: float  # as the page said it, corrected or not
    measured: float
    band: tuple[float, float] | None = None
    raw: float | None = None  # before any correction (None: none was applied)

    @property
    def error(self) -> float:
        """measured / estimated - 1: +0.12 means the run measured 12 % more than the estimate."""
        return self.measured / self.estimated - 1

    @property
    def in_band(self) -> bool | None:
        return None if self.band is None else self.band[0] <= self.measured <= self.band[1]

    @property
    def uncorrected(self) -> float:
        return self.raw if self.raw is not None else self.estimated


def _run_log_ratios(pairs: list[Pair]) -> dict[str, float]:
    """Per run, the mean log(measured / uncorrected estimate) of its pairs."""
    by_run: dict[str, list[float]] = {}
    for p in pairs:
        if p.measured > 0 and p.uncorrected > 0:
            by_run.setdefault(p.run, []).append(math.log(p.measured / p.uncorrected))
    return {run: sum(v) / len(v) for run, v in by_run.items()}


def factor(pairs: list[Pair]) -> tuple[float, int]:
    """(k, runs) for pairs of one figure on one host and engine: 1.0 with no runs."""
    ratios = _run_log_ratios(pairs)
    if not ratios:
        return 1.0, 0
    return math.exp(sum(ratios.values()) / (len(ratios) + PRIOR_RUNS)), len(ratios)


@dataclass(frozen=True)
class Correction:
    """One engine on one host: per figure its factor, and how many runs it rests on."""

    host: str
    factors: dict[str, float]
    runs: dict[str, int]

    @classmethod
    def of(cls, host: str, pairs: list[Pair]) -> "Correction | None":
        factors, runs = {}, {}
        for metric in CORRECTED:
            k, n = factor([p for p in pairs if p.metric == metric])
            if n:
                factors[metric], runs[metric] = k, n
        return cls(host, factors, runs) if factors else None

    def words(self) -> str:
        n = max(self.runs.values())
        parts = ", ".join(f"{SHORT[m]} ×{self.factors[m]:.2f}" for m in CORRECTED if m in self.factors)
        return f"Corrected by the team's {n} run{'s' if n != 1 else ''} on this host: {parts}."


def correct(metrics: dict[str, Predicted], correction: Correction | None) -> dict[str, Predicted]:
    """The estimate's figures with the correction applied (values and bands scaled, the note
    saying so); as they are without one."""
    if correction is None:
        return metrics
    out = dict(metrics)
    for metric, k in correction.factors.items():
        p = metrics.get(metric)
        if p is None or p.value is None:
            continue
        band = tuple(b * k for b in p.band) if p.band else p.band
        out[metric] = dataclasses.replace(p, value=p.value * k, band=band,
                                          note=f"{p.note}; ×{k:.2f} from the team's {correction.runs[metric]} "
                                               f"run{'s' if correction.runs[metric] != 1 else ''} on this host")
    return out


def ledger_record(metrics: dict[str, Predicted], raw: dict[str, Predicted]) -> dict[str, dict]:
    """What the ledger stores of an estimate: per figure its value and band as said, and the value
    before any correction."""
    return {m: {"value": p.value, "band": list(p.band) if p.band else None, "raw": raw[m].value}
            for m, p in metrics.items() if p.value is not None and m in raw}


# --- how accurate ------------------------------------------------------------------------------

def accuracy(pairs: list[Pair]) -> dict:
    """Pairs, median |error| (a share: 0.12 = 12 %) and the share of measurements inside the band."""
    if not pairs:
        return {"pairs": 0, "median_abs_error": None, "in_band_share": None, "median_error": None}
    banded = [p.in_band for p in pairs if p.in_band is not None]
    return {"pairs": len(pairs), "median_abs_error": statistics.median(abs(p.error) for p in pairs),
            "median_error": statistics.median(p.error for p in pairs),
            "in_band_share": sum(banded) / len(banded) if banded else None}


def leave_one_run_out(pairs: list[Pair]) -> dict:
    """The median |error| of one figure's pairs on one host and engine before any correction and
    after the correction the other runs give (leave-one-run-out): {"before", "after", "runs"}."""
    before, after = [], []
    for p in pairs:
        k, _ = factor([q for q in pairs if q.run != p.run])
        before.append(abs(p.measured / p.uncorrected - 1))
        after.append(abs(p.measured / (p.uncorrected * k) - 1))
    runs = len({p.run for p in pairs})
    if not pairs:
        return {"before": None, "after": None, "runs": 0}
    return {"before": statistics.median(before), "after": statistics.median(after), "runs": runs}


def said(pair_error: float) -> str:
    """+12 % / −8 %."""
    return f"{pair_error * 100:+.0f} %".replace("-", "−")


def band_said(band) -> str:
    return f"{fmt(band[0])}–{fmt(band[1])}" if band else "no band"
