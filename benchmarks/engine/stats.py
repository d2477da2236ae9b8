"""Statistics across repeated trials, Django-free: a figure's mean with its Student-t 95 %
confidence interval, and Welch's t-test between two sets of trials. No SciPy: the two-sided 95 %
critical values of Student's t come from the textbook table, interpolated linearly in 1/df
between its rows (exact at every tabulated df, within 0.002 elsewhere), which is all a
confidence interval over a handful of trials and Welch's fractional degrees of freedom need.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Iterable

CONFIDENCE = 0.95
METHOD = "Student-t 95 % confidence interval of the mean across trials (n trials, n − 1 degrees of freedom)"
# t(0.975, df): the two-sided 95 % critical value (any statistics textbook's t table).
T_975 = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060,
         9: 2.2622, 10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199,
         17: 2.1098, 18: 2.1009, 19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639,
         25: 2.0595, 26: 2.0555, 27: 2.0518, 28: 2.0484, 29: 2.0452, 30: 2.0423, 40: 2.0211, 60: 2.0003,
         120: 1.9799}
Z_975 = 1.95996  # df -> infinity: the normal distribution's


def t_critical(df: float) -> float:
    """The two-sided 95 % critical value of Student's t at `df` degrees of freedom (df >= 1;
    fractional df, as Welch's, between table rows by linear interpolation in 1/df)."""
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be at least 1, not {df!r}")
    if df in T_975:
        return T_975[df]
    rows = sorted(T_975)
    if df > rows[-1]:
        lo_df, lo_t, hi_inv, hi_t = rows[-1], T_975[rows[-1]], 0.0, Z_975
    else:
        lo_df = max(r for r in rows if r < df)
        hi = min(r for r in rows if r > df)
        lo_t, hi_inv, hi_t = T_975[lo_df], 1.0 / hi, T_975[hi]
    lo_inv = 1.0 / lo_df
    share = (lo_inv - 1.0 / df) / (lo_inv - hi_inv)
    return lo_t + (hi_t - lo_t) * share


@dataclass(frozen=True)
class Estimate:
    """A figure across trials: n, mean, standard deviation and the 95 % interval of the mean
    (low and high None with fewer than 2 trials: one trial has no interval)."""

    n: int
    mean: float
    sd: float | None = None
    low: float | None = None
    high: float | None = None

    @property
    def half_width(self) -> float | None:
        return None if self.low is None else (self.high - self.low) / 2

    def overlaps(self, other: "Estimate") -> bool | None:
        if self.low is None or other.low is None:
            return None
        return self.low <= other.high and other.low <= self.high


def estimate(values: Iterable[float | None]) -> Estimate | None:
    """Mean and Student-t 95 % interval of the trials' values (None ones left out); None when
    no trial has the figure."""
    vals = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return None
    mean = statistics.fmean(vals)
    if len(vals) < 2:
        return Estimate(n=1, mean=mean)
    sd = statistics.stdev(vals)
    half = t_critical(len(vals) - 1) * sd / math.sqrt(len(vals))
    return Estimate(n=len(vals), mean=mean, sd=sd, low=mean - half, high=mean + half)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance t-test of two sets of trials at the 5 % level (two-sided)."""

    t: float
    df: float
    critical: float
    significant: bool
    n: tuple[int, int]


def welch(a: Iterable[float | None], b: Iterable[float | None]) -> Welch | None:
    """Welch's t-test of `a` against `b`; None when either side has fewer than 2 values (no
    variance to test against)."""
    a = [float(v) for v in a if v is not None and math.isfinite(v)]
    b = [float(v) for v in b if v is not None and math.isfinite(v)]
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff = statistics.fmean(a) - statistics.fmean(b)
    if va + vb == 0:  # no noise on either side: any difference is certain, none is none
        return Welch(t=math.copysign(math.inf, diff) if diff else 0.0, df=len(a) + len(b) - 2.0,
                     critical=t_critical(len(a) + len(b) - 2), significant=diff != 0, n=(len(a), len(b)))
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    critical = t_critical(max(df, 1.0))
    return Welch(t=t, df=df, critical=critical, significant=abs(t) > critical, n=(len(a), len(b)))
