"""The statistics across trials (engine/stats.py) against textbook values and first principles,
and the coverage its intervals claim on data with known noise."""
import math
import random

import pytest

from benchmarks.engine.stats import estimate, t_critical, welch


@pytest.mark.parametrize("df, textbook", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (29, 2.045),
                                          (60, 2.000), (120, 1.980)])
def test_the_critical_values_are_the_t_tables(df, textbook):
    assert t_critical(df) == pytest.approx(textbook, abs=0.0005)


def test_between_table_rows_and_beyond_the_critical_value_is_close_to_the_exact_one():
    # Exact t(0.975, df) from a full table: 35 -> 2.0301, 50 -> 2.0086, 1000 -> 1.9623; 1.5 -> 6.2053
    # (the last, Welch's fractional df between 1 and 2, from the t distribution's quantile function).
    assert t_critical(35) == pytest.approx(2.0301, abs=0.002)
    assert t_critical(50) == pytest.approx(2.0086, abs=0.002)
    assert t_critical(1000) == pytest.approx(1.9623, abs=0.002)
    assert 4.303 < t_critical(1.5) < 12.706
    with pytest.raises(ValueError):
        t_critical(0.5)


def test_the_interval_of_one_to_five_is_the_textbook_one():
    # mean 3, s = sqrt(2.5) = 1.5811, s/sqrt(5) = 0.7071, t(0.975, 4) = 2.7764: 3 ± 1.9632.
    e = estimate([1, 2, 3, 4, 5])
    assert (e.n, e.mean) == (5, 3)
    assert e.sd == pytest.approx(math.sqrt(2.5))
    assert e.low == pytest.approx(3 - 1.9632, abs=1e-3) and e.high == pytest.approx(3 + 1.9632, abs=1e-3)


def test_one_trial_has_no_interval_and_no_trial_no_estimate():
    e = estimate([42.0, None])
    assert (e.n, e.mean, e.low, e.high, e.half_width) == (1, 42.0, None, None, None)
    assert estimate([None, float("nan")]) is None


def test_welch_on_two_worked_examples():
    # 10, 11, 12 against 14, 15, 16: means 11 and 15, both variances 1: se = sqrt(1/3 + 1/3) = 0.8165,
    # t = -4 / 0.8165 = -4.899, df = (2/3)^2 / ((1/3)^2/2 + (1/3)^2/2) = 4 -> critical 2.776: significant.
    w = welch([10, 11, 12], [14, 15, 16])
    assert w.t == pytest.approx(-4.899, abs=1e-3) and w.df == pytest.approx(4.0) and w.significant
    # 10, 12, 14 against 11, 13, 15: variances 4: t = -1 / sqrt(8/3) = -0.612, df 4: not significant.
    w = welch([10, 12, 14], [11, 13, 15])
    assert w.t == pytest.approx(-0.6124, abs=1e-3) and not w.significant
    # Unequal variances and sizes: 1,2,3,4 (var 5/3) against 10,10.5,11 (var 0.25):
    # se^2 = 5/12 + 1/12 = 0.5, t = (2.5 - 10.5) / 0.7071 = -11.31,
    # df = 0.25 / ((5/12)^2 / 3 + (1/12)^2 / 2) = 0.25 / 0.0613426 = 4.0755.
    w = welch([1, 2, 3, 4], [10, 10.5, 11])
    assert w.t == pytest.approx(-11.314, abs=1e-3) and w.df == pytest.approx(4.0755, abs=1e-3) and w.significant
    assert welch([1.0], [2.0, 3.0]) is None  # one trial: nothing to test against


def test_intervals_have_their_stated_coverage_on_data_with_known_noise():
    """3000 simulated runs of 3 trials, each trial's figure the true 100 ms plus normal noise of
    sd 8: the 95 % interval holds 100 in 95 % of them (binomial sd 0.4 %: ±1.5 % is ~4 sd)."""
    rng = random.Random(15)
    runs = 3000
    covered = sum(1 for _ in range(runs) if (e := estimate([rng.gauss(100, 8) for _ in range(3)])).low <= 100 <= e.high)
    assert abs(covered / runs - 0.95) < 0.015


def test_welch_rejects_at_its_level_and_finds_a_real_difference():
    rng = random.Random(7)
    trials = 2000
    same = sum(welch([rng.gauss(50, 5) for _ in range(5)], [rng.gauss(50, 5) for _ in range(5)]).significant
               for _ in range(trials))
    assert same / trials < 0.075  # a 5 % test (Welch is slightly conservative at small n)
    # Means 3 sd apart with 5 trials a side: the test's power is above 90 %.
    apart = sum(welch([rng.gauss(50, 5) for _ in range(5)], [rng.gauss(65, 5) for _ in range(5)]).significant
                for _ in range(500))
    assert apart / 500 > 0.9
