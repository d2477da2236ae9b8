"""Whether two measured figures differ by more than the noise they carry: the one rule behind
every sentence that names a winner (comparisons, the lab's best setting). Django-free.

With two trials or more on each side, Welch's t-test at 5 % decides. With one trial on either
side there is no spread between trials to test: a winner is named only beyond the run-to-run
noise one endpoint shows on a shared host (NOISE_PCT, a stated default), and, for a percentile,
only when its 95 % intervals over the two levels' requests are apart; said to be untested.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from benchmarks.engine.stats import welch

# One run of an endpoint differs from the next on a shared host by this much (a stated default until
# the endpoint's own history gives its spread): with one trial a side, a smaller ratio names no winner.
NOISE_PCT = 10.0
DEFAULT_NOISE_WORDS = "one run of an endpoint varies from the next on a shared host"
# Two runs, each off by a relative standard deviation s, differ by more than 1.96 × √2 × s one
# time in twenty: the run-to-run noise an endpoint's own history shows, as a threshold.
TWO_RUNS_95 = 1.96 * 2 ** 0.5
MIN_HISTORY_RUNS = 3


@dataclass(frozen=True)
class Noise:
    """The run-to-run noise of one figure at one level: its threshold in percent, and from what."""

    pct: float = NOISE_PCT
    words: str = DEFAULT_NOISE_WORDS

    @classmethod
    def of_history(cls, values: Sequence[float | None], floor_pct: float = 1.0) -> "Noise | None":
        """From the figure's values in an endpoint's earlier comparable runs (None: fewer than
        MIN_HISTORY_RUNS): two runs differ by more than `pct` one time in twenty."""
        values = [float(v) for v in values if v is not None and v > 0]
        if len(values) < MIN_HISTORY_RUNS:
            return None
        cv = 100.0 * statistics.stdev(values) / statistics.fmean(values)
        pct = max(TWO_RUNS_95 * cv, floor_pct)
        return cls(round(pct, 1), f"two runs of this endpoint differ by one time in twenty (from its last "
                                  f"{len(values)} comparable runs)")

    def said(self, within: bool = True) -> str:
        """ "within the ±10 % one run of an endpoint varies …" (or "beyond")."""
        return f"{'within' if within else 'beyond'} the ±{self.pct:g} % {self.words}"

    @staticmethod
    def wider(*noises: "Noise | None") -> "Noise":
        """The widest known of two sides' noise; the stated default where neither has history."""
        known = [n for n in noises if n is not None]
        return max(known, key=lambda n: n.pct) if known else Noise()


@dataclass(frozen=True)
class Difference:
    a: float  # the mean of each side's trials
    b: float
    n: tuple[int, int]  # trials a side
    clear: bool  # a winner may be named
    significant: bool | None  # Welch's verdict with trials on both sides; None: untested (one trial)
    overlap: bool = False  # one trial a side: the two percentiles' intervals over requests overlap

    @property
    def ratio(self) -> float:
        """The larger over the smaller (≥ 1)."""
        return max(self.a, self.b) / min(self.a, self.b)

    def why(self, noise: "Noise | None" = None) -> str:
        """The test behind the verdict, in words ("" for a clear, untested one-trial difference)."""
        na, nb = self.n
        if self.significant is not None:
            return f"Welch's t-test at 5 %, n={na} and n={nb} trials"
        if self.overlap:
            return "within the spread between requests: the two percentiles' 95 % intervals overlap"
        if not self.clear:
            return (noise or Noise()).said()
        if na > 1 or nb > 1:
            return f"not tested for significance: n={na} and n={nb} trials, and one trial has no spread to test"
        return ""


def judge(a: Sequence[float | None], b: Sequence[float | None], noise_pct: float = NOISE_PCT,
          intervals: tuple = (None, None)) -> Difference | None:
    """The difference between two sides' trial values (each a figure of one trial); None when
    either side has no positive value to compare. `intervals`: with one trial a side, each
    percentile's 95 % interval over its level's requests where known: a winner then also needs
    them apart (the spread between requests is noise too)."""
    a = [float(v) for v in a if v is not None]
    b = [float(v) for v in b if v is not None]
    if not a or not b:
        return None
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    if ma <= 0 or mb <= 0:
        return None
    test = welch(a, b) if len(a) > 1 and len(b) > 1 else None
    if test is not None:
        return Difference(ma, mb, (len(a), len(b)), clear=test.significant, significant=test.significant)
    beyond = max(ma, mb) / min(ma, mb) >= 1 + noise_pct / 100
    ia, ib = intervals
    overlap = ia is not None and ib is not None and ia[0] <= ib[1] and ib[0] <= ia[1]
    return Difference(ma, mb, (len(a), len(b)), clear=beyond and not overlap, significant=None,
                      overlap=overlap and beyond)
