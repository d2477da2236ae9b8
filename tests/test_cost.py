"""Cost per million output tokens at a host's stated price, energy per token in comparison points,
and the host's price as staff enter it. The expected figures are worked by hand in the comments."""
import pytest
from django.core.exceptions import ValidationError

from benchmarks.engine import gpu
from benchmarks.engine.cost import OWNED, RENTED, HourlyPrice
from benchmarks.engine.metrics import LevelSummary
from benchmarks.engine.points import Point
from benchmarks.models import Host


def test_an_owned_hosts_cost_is_amortisation_by_the_hour_plus_its_measured_energy_at_its_electricity_price():
    owned = HourlyPrice(OWNED, 0.40, "USD", per_kwh=0.30)
    # 36 s at 0.40/h = 0.004; 18,000 J = 0.005 kWh at 0.30 = 0.0015; 0.0055 over 9,000 tokens.
    assert owned.level_cost(36.0, 18_000.0) == pytest.approx(0.0055)
    assert owned.per_million_tokens(36.0, 18_000.0, 9_000) == pytest.approx(0.611111, rel=1e-5)
    # Electricity is priced but the energy was not measured: the cost is not known.
    assert owned.per_million_tokens(36.0, None, 9_000) is None
    # No electricity price: the amortisation alone, energy or not.
    assert HourlyPrice(OWNED, 0.40, "USD").per_million_tokens(36.0, None, 9_000) == pytest.approx(0.444444, rel=1e-5)
    assert owned.said() == "owned: 0.40 USD/h amortisation, 0.30 USD/kWh"


def test_a_rented_hosts_cost_is_its_rate_over_the_wall_time_whatever_the_energy():
    rented = HourlyPrice(RENTED, 2.50, "EUR")
    # 36 s at 2.50/h = 0.025 over 9,000 tokens = 2.7778 per million.
    assert rented.per_million_tokens(36.0, None, 9_000) == pytest.approx(2.777778, rel=1e-6)
    assert rented.per_million_tokens(36.0, 1e9, 9_000) == rented.per_million_tokens(36.0, None, 9_000)
    # At a steady 235 tok/s: 2.50 / (235 * 3600) * 1e6 = 2.955.
    assert rented.per_million_at(235.0, None) == pytest.approx(2.955083, rel=1e-6)
    assert rented.per_million_tokens(0.0, None, 10) is None and rented.per_million_tokens(36.0, None, 0) is None
    assert rented.said() == "rented at 2.50 EUR/h"


def _level(tokens: int) -> LevelSummary:
    return LevelSummary.from_dict({"completed": 10, "output_tokens": tokens, "wall_s": 10.0})


def _gpu(joules: float) -> gpu.GpuSummary:
    return gpu.GpuSummary.from_dict({"version": 3, "status": "ok", "samples": 10, "energy_j": joules,
                                     "gpus": [{"index": 0, "samples": 10, "energy_j": joules}]})


def test_a_points_energy_per_token_is_each_trials_energy_over_its_tokens_and_their_mean():
    # 500 J over 1,000 tokens = 0.5 J/token; 900 J over 1,000 = 0.9: mean 0.7, tokens per joule (2 + 1.111) / 2.
    point = Point.measured([_level(1000), _level(1000)], label="8 concurrent", concurrency=8, rate=None,
                           gpu=_gpu(900.0), trial_gpus=[_gpu(500.0), _gpu(900.0)])
    assert point.get("energy_per_token_j") == pytest.approx(0.7)
    assert point.samples["energy_per_token_j"] == pytest.approx((0.5, 0.9))
    assert point.get("tokens_per_joule") == pytest.approx((2.0 + 1 / 0.9) / 2)
    one = Point.measured(_level(400), label="1 concurrent", concurrency=1, rate=None, gpu=_gpu(100.0))
    assert one.get("energy_per_token_j") == pytest.approx(0.25) and one.get("tokens_per_joule") == pytest.approx(4.0)
    unmeasured = Point.measured(_level(400), label="1 concurrent", concurrency=1, rate=None)
    assert unmeasured.get("energy_per_token_j") is None


@pytest.mark.django_db
def test_a_hosts_price_needs_its_rate_and_electricity_only_when_owned():
    host = Host(name="v100a", price_ownership=RENTED, price_per_kwh=0.3, price_currency="usd")
    with pytest.raises(ValidationError) as raised:
        host.full_clean()
    assert set(raised.value.message_dict) == {"price_per_hour", "price_per_kwh", "price_currency"}
    host.price_per_kwh, host.price_per_hour, host.price_currency = None, 2.5, "USD"
    host.full_clean()
    assert host.hourly_price == HourlyPrice(RENTED, 2.5, "USD")
    assert Host(name="x").hourly_price is None


def test_an_imported_level_keeps_the_energy_its_tool_states_and_its_point_says_it_as_stated():
    from benchmarks.importers.model import ImportedLevel
    level = ImportedLevel(label="8 concurrent", concurrency=8, aggregate_tok_s=235.0, energy_per_token_j=0.4)
    again = ImportedLevel.from_dict(level.to_dict())
    assert again.energy_per_token_j == 0.4
    point = again.point(rate_mode=False)
    assert point.get("energy_per_token_j") == 0.4 and point.get("tokens_per_joule") == pytest.approx(2.5)
    assert ImportedLevel(label="1", concurrency=1).point(rate_mode=False).get("tokens_per_joule") is None
