"""The ledger's arithmetic (advisor/correction.py), worked by hand: errors, band coverage, the
shrunk correction factor and leave-one-run-out."""
import math

import pytest

from benchmarks.advisor.correction import Correction, Pair, accuracy, factor, leave_one_run_out


def test_one_run_moves_the_estimate_a_third_of_the_way_in_log():
    # measured / estimated = 2 in one run: k = exp(ln 2 / (1 + 2)) = 2^(1/3)
    assert factor([Pair("r1", "aggregate_tok_s", 100.0, 200.0)]) == (pytest.approx(2 ** (1 / 3)), 1)
    assert factor([]) == (1.0, 0)


def test_a_runs_levels_count_as_one_run():
    # One run with ratios 2 and 8 (geometric mean 4), another with 1: k = exp((ln 4 + 0) / (2 + 2)) = √2
    pairs = [Pair("r1", "m", 10.0, 20.0), Pair("r1", "m", 10.0, 80.0), Pair("r2", "m", 10.0, 10.0)]
    assert factor(pairs) == (pytest.approx(math.sqrt(2)), 2)


def test_the_factor_reads_the_estimate_before_any_correction():
    # Said as 150 after a ×1.5 correction, 100 before it: the ratio is 200 / 100.
    assert factor([Pair("r1", "m", 150.0, 200.0, raw=100.0)])[0] == pytest.approx(2 ** (1 / 3))


def test_errors_and_band_coverage():
    pairs = [Pair("r1", "m", 100.0, 110.0, (90.0, 120.0)), Pair("r2", "m", 100.0, 70.0, (80.0, 120.0)),
             Pair("r3", "m", 100.0, 100.0, None)]
    read = accuracy(pairs)
    assert read["pairs"] == 3
    assert read["median_abs_error"] == pytest.approx(0.10)  # |+10 %|, |−30 %|, 0
    assert read["median_error"] == pytest.approx(0.0)
    assert read["in_band_share"] == 0.5  # of the two with a band, one inside


def test_leaving_each_run_out():
    # Three runs measuring 2× the estimate: left out, each is corrected by the other two's
    # k = exp(2 ln 2 / 4) = √2, so its error goes from 100 % to 2 / √2 − 1 = 41 %.
    pairs = [Pair(f"r{i}", "m", 10.0, 20.0) for i in range(3)]
    read = leave_one_run_out(pairs)
    assert read == {"before": pytest.approx(1.0), "after": pytest.approx(math.sqrt(2) - 1), "runs": 3}


def test_a_correction_says_its_factors_and_runs():
    c = Correction.of("7", [Pair("r1", "aggregate_tok_s", 100.0, 200.0), Pair("r1", "ttft_ms_p50", 50.0, 50.0)])
    assert c.factors == {"aggregate_tok_s": pytest.approx(2 ** (1 / 3)), "ttft_ms_p50": pytest.approx(1.0)}
    assert c.words() == "Corrected by the team's 1 run on this host: aggregate ×1.26, TTFT p50 ×1.00."
