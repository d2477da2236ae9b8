"""Energy per token and cost per million tokens where a run's results are read: the run page's
telemetry table and energy chart, the export and the API, the history. Each level's GPU samples
are 200 W then 300 W 0.2 s apart (factories.gpu_samples): 50 J by trapezoids, and each level
serves 20 requests of 20 output tokens, 400 tokens: 0.125 J a token, 8 tokens a joule."""
import csv
import io

import pytest
from django.urls import reverse

from benchmarks import history
from benchmarks.engine.cost import OWNED, RENTED
from factories import endpoint, gpu_samples, measured_run

pytestmark = pytest.mark.django_db


def _run(**price):
    e = endpoint(name="llama", backend="llamacpp")
    for k, v in price.items():
        setattr(e.host, k, v)
    e.host.save()
    return measured_run([e], levels=(1, 4), requests=20, tokens=20, gpu=gpu_samples())


def test_the_run_page_export_and_api_give_energy_per_token_and_cost_at_the_hosts_price(client, django_user_model):
    run = _run(price_ownership=RENTED, price_per_hour=3.60, price_currency="EUR")
    levels = list(run.levels.order_by("level_index"))
    assert [lv.stats.output_tokens for lv in levels] == [400, 400]
    page = client.get(reverse("run-detail", args=[run.public_id])).content.decode()
    for lv in levels:
        # 3.60 an hour is 0.001 a second: wall_s / 1000 over 400 tokens, times a million.
        cost = lv.stats.wall_s / 1000 / 400 * 1e6
        assert f"{cost:.2f} EUR" in page
        assert lv.energy_per_token_j == pytest.approx(0.125)
    assert "rented at 3.60 EUR/h" in page and "charts/energy.json" in page

    export = client.get(reverse("run-export", args=[run.public_id])).json()
    assert export["version"] == 6
    for row in export["levels"]:
        figures = row["energy_and_cost"]
        assert figures["energy_per_token_j"] == pytest.approx(0.125) and figures["tokens_per_joule"] == pytest.approx(8.0)
        assert figures["cost_per_mtok"] == pytest.approx(row["summary"]["wall_s"] / 1000 / 400 * 1e6)
        assert figures["price"] == {"ownership": RENTED, "per_hour": 3.60, "currency": "EUR", "per_kwh": None}
    client.force_login(django_user_model.objects.create_user("reader"))
    api = client.get(reverse("api-run-results", args=[run.public_id])).json()
    assert api["levels"][0]["energy_and_cost"] == export["levels"][0]["energy_and_cost"]


def test_the_energy_chart_draws_tokens_per_joule_against_load_and_its_csv_says_the_same(client):
    run = _run()
    fig = client.get(reverse("run-chart", args=[run.public_id, "energy", "json"])).json()
    [trace] = fig["data"]
    assert trace["x"] == [1, 4] and trace["y"] == pytest.approx([8.0, 8.0])
    assert fig["layout"]["yaxis"]["title"]["text"] == "Tokens per joule (tok/J)"
    rows = list(csv.reader(io.StringIO(client.get(reverse("run-chart", args=[run.public_id, "energy", "csv"]))
                                       .content.decode())))
    assert [float(r[-1]) for r in rows[1:]] == [8.0, 8.0]


def test_a_run_without_gpu_energy_offers_no_energy_chart_and_a_host_without_a_price_says_so(client):
    e = endpoint(name="plain")
    run = measured_run([e], levels=(1,), requests=5)
    page = client.get(reverse("run-detail", args=[run.public_id])).content.decode()
    assert "charts/energy.json" not in page
    assert client.get(reverse("run-chart", args=[run.public_id, "energy", "json"])).status_code == 404


def test_an_owned_hosts_cost_adds_the_measured_energy_at_its_electricity_price(client):
    run = _run(price_ownership=OWNED, price_per_hour=0.36, price_per_kwh=0.36, price_currency="USD")
    for lv in run.levels.all():
        # 0.36/h is 0.0001 a second; 50 J is 50 / 3.6e6 kWh, at 0.36: 5e-6.
        expected = (lv.stats.wall_s * 0.0001 + 5e-6) / 400 * 1e6
        assert lv.cost_per_mtok == pytest.approx(expected)


def test_the_history_shows_energy_per_token_beside_the_speed_and_charts_it_only_where_measured(client):
    run = _run()
    level = run.levels.order_by("level_index").first()
    if not level.fingerprint:
        pytest.fail("the measured run's levels have no workload fingerprint")
    points = history.history_points(level.fingerprint)
    assert [p["figures"]["energy_per_token_j"] for p in points if p["level"].id == level.id] == [pytest.approx(0.125)]
    energy_chart = reverse("history-chart", args=[level.fingerprint, "energy_per_token_j", "json"])
    assert energy_chart in client.get(reverse("history", args=[level.fingerprint])).content.decode()
    unmeasured = measured_run([endpoint(name="no-gpu")], levels=(1,), requests=5).levels.get()
    page = client.get(reverse("history", args=[unmeasured.fingerprint])).content.decode()
    assert reverse("history-chart", args=[unmeasured.fingerprint, "ttft_ms_p50", "json"]) in page
    assert "energy_per_token_j" not in page.split('id="history-points"')[0]  # no chart of nothing
