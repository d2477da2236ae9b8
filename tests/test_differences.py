"""The one rule behind every sentence that names a winner (engine/differences.py), on data of
known noise: seeded Gaussian trials, so every count below is the same on every machine."""
import random
from types import SimpleNamespace

from benchmarks.engine import catalogue
from benchmarks.engine.differences import NOISE_PCT, judge
from benchmarks.lab.selectors import _best_row

PAIRS = 1000


def trials(rng, mean, noise_pct, n):
    return [rng.gauss(mean, mean * noise_pct / 100) for _ in range(n)]


def test_a_small_shift_is_never_a_winner_and_a_large_one_always_is():
    rng = random.Random(31)
    for _ in range(200):
        # 2 % apart within 3 % noise, one trial a side: below the stated run-to-run noise
        a, b = trials(rng, 100, 3, 1), trials(rng, 102, 3, 1)
        d = judge(a, b)
        assert d.clear is (d.ratio >= 1 + NOISE_PCT / 100)
        assert judge(trials(rng, 100, 3, 1), trials(rng, 200, 3, 1)).clear  # 2×: always named
        assert judge(trials(rng, 100, 3, 3), trials(rng, 200, 3, 3)).significant is True
    assert not judge([100.0], [102.0]).clear and judge([100.0], [102.0]).significant is None
    assert "within the ±10 %" in judge([100.0], [102.0]).why()


def test_false_positives_stay_at_or_below_5_percent_and_power_is_at_least_90_percent():
    rng = random.Random(2026)
    for n in (1, 3, 5):  # trials a side
        false = sum(judge(trials(rng, 100, 3, n), trials(rng, 100, 3, n)).clear for _ in range(PAIRS))
        print(f"same distribution, 3 % noise, {n} trial(s) a side: {false} of {PAIRS} named a winner")
        assert false <= 0.05 * PAIRS
    # the stated effect size: a 10 % shift at 3 % noise, five trials a side (Welch's t-test)
    found = sum(judge(trials(rng, 100, 3, 5), trials(rng, 110, 3, 5)).clear for _ in range(PAIRS))
    print(f"10 % shift, 3 % noise, 5 trials a side: named {found} of {PAIRS} times")
    assert found >= 0.90 * PAIRS


def _setting(label, values, launch_id):
    recipe = SimpleNamespace(name="llama-q4")
    launch = SimpleNamespace(id=launch_id, label=label, recipe=recipe)
    levels = [SimpleNamespace(load_label="c=2", fingerprint="", public_id=f"lv-{launch_id}-{i}",
                              stats=SimpleNamespace(stat=lambda key, stat, v=v: v)) for i, v in enumerate(values)]
    return launch, sum(values) / len(values), levels[0], levels


def test_the_labs_best_setting_is_named_only_beyond_the_noise():
    fig = catalogue.SWEEP_BEST
    close = _best_row([_setting("--parallel 4", [4.8], 1), _setting("--parallel 2", [4.6], 2)], fig)
    assert not close["clear"] and close["runner_up"]["setting"] == "--parallel 2" and "±10 %" in close["why"]
    far = _best_row([_setting("--parallel 4", [9.6], 1), _setting("--parallel 1", [4.6], 2)], fig)
    assert far["clear"] and far["setting"] == "--parallel 4" and far["ratio"] == "2.09×"
    # with trials, Welch decides: 4.8 ± 0.05 against 4.6 ± 0.05 over 3 trials is a difference
    tight = _best_row([_setting("a", [4.75, 4.8, 4.85], 1), _setting("b", [4.55, 4.6, 4.65], 2)], fig)
    assert tight["clear"] and "Welch" in tight["why"]
    alone = _best_row([_setting("only", [4.8], 1)], fig)
    assert alone["clear"] and alone["runner_up"] is None


def _level(rng, mean, noise_pct, requests, fig):
    """A one-trial level of `requests` whose per-request values scatter by noise_pct around mean."""
    from benchmarks.engine.metrics import percentile, percentile_interval
    from benchmarks.engine.points import Point

    values = trials(rng, mean, noise_pct, requests)
    q = float(fig.stat.removeprefix("p"))
    return Point(label="x", concurrency=8, figures={fig.name: percentile(values, q)},
                 intervals={fig.name: percentile_interval(values, q)})


def test_sentences_name_no_winner_from_the_spread_between_requests():
    from benchmarks.compare import sentence

    fig = next(f for f in catalogue.COMPARED if f.stat == "p50")
    rng = random.Random(8)
    for _ in range(200):
        # 2 % apart in 3 % noise over 8 requests: never a winner
        s = sentence(fig, {"label": "A"}, _level(rng, 100, 3, 8, fig), {"label": "B"}, _level(rng, 102, 3, 8, fig),
                     "at 8 concurrent users")
        assert s["text"].startswith("No clear difference") or " is the same for " in s["text"], s["text"]
        # 2× apart: always
        s = sentence(fig, {"label": "A"}, _level(rng, 100, 3, 8, fig), {"label": "B"}, _level(rng, 200, 3, 8, fig),
                     "at 8 concurrent users")
        assert s["significant"] is None and s["text"].startswith("B decodes "), s["text"]
    # 15 % apart (beyond the run-to-run noise) but the requests scatter by 30 %: their intervals
    # overlap, and the sentence says more requests would settle it
    named = 0
    for _ in range(200):
        s = sentence(fig, {"label": "A"}, _level(rng, 100, 30, 8, fig), {"label": "B"}, _level(rng, 115, 30, 8, fig),
                     "at 8 concurrent users")
        named += not (s["text"].startswith("No clear difference") or " is the same for " in s["text"])
        if "intervals overlap" in s["text"]:
            assert "more requests per level would settle it" in s["text"]
    assert named == 0


def test_an_endpoints_own_history_sets_the_noise_a_winner_must_beat():
    from benchmarks.compare import sentence
    from benchmarks.engine.differences import Noise
    from benchmarks.engine.points import Point

    fig = next(f for f in catalogue.COMPARED if f.stat is None)  # a figure of the whole level
    # s / mean = 0.854 / 100.125 = 0.85 %: two runs differ by more than 1.96 × √2 × 0.85 = 2.4 % one
    # time in twenty; 16.52 / 98.75 = 16.7 %: by 46.4 %
    steady = Noise.of_history([100.0, 101.0, 99.0, 100.5])
    shaky = Noise.of_history([80.0, 120.0, 100.0, 95.0])
    assert Noise.of_history([100.0, 101.0]) is None and (steady.pct, shaky.pct) == (2.4, 46.4)

    def point(value, noise):
        return Point(label="x", concurrency=8, figures={fig.name: value}, noise={fig.name: noise} if noise else {})

    # 6 % apart: beyond a steady endpoint's 2.4 %, though within the stated ±10 % default
    s = sentence(fig, {"label": "A"}, point(106.0, steady), {"label": "B"}, point(100.0, steady), "at 8")
    assert not s["text"].startswith("No clear") and s["significant"] is None, s["text"]
    s = sentence(fig, {"label": "A"}, point(106.0, None), {"label": "B"}, point(100.0, None), "at 8")
    assert "within the ±10 % one run of an endpoint varies" in s["text"]
    # 30 % apart: within what a shaky endpoint's runs differ by; the wider side's noise counts
    s = sentence(fig, {"label": "A"}, point(130.0, shaky), {"label": "B"}, point(100.0, steady), "at 8")
    assert s["text"].startswith("No clear difference") and f"±{shaky.pct:g} % two runs of this endpoint" in s["text"]
    assert "from its last 4 comparable runs" in s["text"]
