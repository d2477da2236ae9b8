"""A run's stored per-endpoint records read through their one reader each: the preflight's
findings (Run.preflight_findings) on the run page and in the export."""
import pytest
from django.urls import reverse

from benchmarks import selectors
from benchmarks.engine.client import Finding
from factories import endpoint, measured_run, user


@pytest.mark.django_db
def test_the_preflight_is_read_in_order_and_what_it_did_not_write_is_skipped(client):
    e, other = endpoint(name="checked"), endpoint(name="never-checked", url="http://127.0.0.1:10")
    run = measured_run([e, other], levels=(1,), requests=2, tokens=4, owner=user())
    run.preflight = {str(e.id): [{"check": "health", "ok": True, "detail": "200 from http://127.0.0.1:9/health"},
                                 "junk", {"ok": False}, {"check": "model", "ok": "yes", "detail": None}]}
    run.save(update_fields=["preflight"])
    assert run.preflight_findings(e.id) == [Finding("health", True, "200 from http://127.0.0.1:9/health"),
                                            Finding("model", False, "")]  # "yes" is no True
    assert run.preflight_findings(other.id) is None
    shown = selectors.run_preflight(run, hide_addresses=True)
    assert [(en.name, [f.check for f in found]) for en, found in shown] == [("checked", ["health", "model"])]
    assert "127.0.0.1:9" not in shown[0][1][0].detail
    export = selectors.run_export(run, hide_addresses=False)
    client.force_login(run.owner)
    page = client.get(run.get_absolute_url()).content.decode()
    assert "health" in page and "200 from http://127.0.0.1:9/health" in page
    assert export["endpoints"]["never-checked"]["preflight"] is None
    assert export["endpoints"]["checked"]["preflight"][1] == {"check": "model", "ok": False, "detail": ""}


@pytest.mark.django_db
def test_every_export_gives_a_requests_times_from_its_levels_start(client):
    """The API's request pages, the JSON export and the CSV: one convention for each time."""
    import csv
    import io

    from benchmarks.models import RequestRecord

    run = measured_run([endpoint()], levels=(2,), requests=4, tokens=4, owner=user())
    client.force_login(run.owner)
    stored = RequestRecord.objects.filter(level__run=run).order_by("index").first()
    expected = round(stored.sent + stored.first_content, 6)
    api = client.get(reverse("api-run-requests", args=[run.public_id])).json()["results"][0]
    export = client.get(reverse("run-export", args=[run.public_id])).json()["levels"][0]["requests"][0]
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("run-requests-csv", args=[run.public_id])).content.decode())))
    assert api["first_content"] == export["first_content"] == expected
    assert float(rows[0]["first content (s from the level start)"]) == expected
    assert api["end"] == export["end"] == round(stored.sent + stored.end, 6) >= expected  # one chunk: equal


@pytest.mark.django_db
def test_a_contended_level_is_said_at_the_top_of_the_run_page(client):
    from benchmarks.models import LevelResult

    quiet = measured_run([endpoint(name="quiet")], levels=(1, 2), requests=2, tokens=4, owner=user())
    # this machine may itself be busy while the engine measures: the flags are set here
    LevelResult.objects.filter(run=quiet).update(flags=[{"code": "few_samples", "reason": "2 requests"}])
    assert 'id="contended-banner"' not in client.get(quiet.get_absolute_url()).content.decode()
    run = measured_run([endpoint(name="busy", url="http://127.0.0.1:10")], levels=(1, 2), requests=2, tokens=4,
                       owner=user("bob"))
    LevelResult.objects.filter(run=run).update(flags=[])
    level = LevelResult.objects.get(run=run, level_index=1)
    level.flags = [{"code": "host_busy", "reason": "load average 6.0 on 2 CPUs"}]
    level.save(update_fields=["flags"])
    page = client.get(run.get_absolute_url()).content.decode()
    banner = page[page.index('id="contended-banner"'):]
    banner = banner[:banner.index("</p>")]
    assert "Not comparable:" in banner and "1 of 2 levels was measured" in banner
    assert f"busy · {level.load_label}: measuring host busy" in banner
    assert page.index('id="contended-banner"') < page.index('id="progress"')  # before any number


@pytest.mark.django_db
def test_a_comparison_point_carries_its_endpoints_noise_from_earlier_comparable_runs():
    e = endpoint()
    first = measured_run([e], levels=(2,), requests=4, tokens=4, owner=user())
    assert selectors.run_series(first)[0]["levels"][0].noise == {}  # no history yet: the stated default
    for _ in range(3):
        last = measured_run([e], levels=(2,), requests=4, tokens=4, owner=first.owner)
    noise = selectors.run_series(last)[0]["levels"][0].noise
    assert noise and all("from its last 3 comparable runs" in n.words for n in noise.values()), noise


@pytest.mark.django_db
def test_progress_never_goes_back_when_a_level_is_stored_after_a_quality_step():
    """A lab run scores each started server's quality before the next server's levels: storing
    those levels counted the requests alone and the bar fell from 20 % to 1 %."""
    from benchmarks.models import Run
    from benchmarks.services import level_store, quality_store
    from factories import _measure

    a, b = endpoint(name="first"), endpoint(name="second", url="http://127.0.0.1:10")
    run = measured_run([a], levels=(1,), requests=2, tokens=4, owner=user(), quality=True, quality_ctx=128,
                       quality_chunks=2)
    quality_store(run=run, endpoint=a, error="the server refused prompt log-probabilities")
    before = Run.objects.get(id=run.id).progress_done
    assert run.quality_positions > 0 and before == 2 + run.quality_positions
    outcome, _ = _measure("vllm", (1,), 2, 512, 4, False, None)[0]
    level_store(run=run, endpoint=b, outcome=outcome, level_index=0)
    assert Run.objects.get(id=run.id).progress_done == before + 2


@pytest.mark.django_db
def test_the_export_carries_each_started_servers_start_up_and_memory():
    """Export version 5: the lab's launches with their LaunchReport (start-up times, GPU memory at
    each point, how the server ended); an anonymous reader gets no command and no model path."""
    from benchmarks.engine.launcher import LaunchReport, MemoryReading
    from benchmarks.models import ServerLaunch, ServerRecipe

    e = endpoint(name="lab q4", url="http://127.0.0.1:18101")
    recipe = ServerRecipe.objects.create(name="q4", host=e.host, backend="llamacpp", executable="/opt/bin/llama-server",
                                         model_path="/srv/models/q4.gguf", args=["-m", "{model}", "--port", "{port}"])
    e.recipe = recipe
    e.save(update_fields=["recipe"])
    run = measured_run([e], levels=(1,), requests=2, tokens=4, owner=user())
    report = LaunchReport(status="stopped", command="/opt/bin/llama-server -m /srv/models/q4.gguf --port 18101",
                          health_s=2.5, first_token_s=2.75, memory_loaded=MemoryReading("gpu", 9430.0, note="device"),
                          memory_peak=MemoryReading("gpu", 9600.0), memory_freed=True,
                          log_tail="loaded /srv/models/q4.gguf")
    ServerLaunch.objects.create(run=run, recipe=recipe, setting={"--parallel": 4}, endpoint=e,
                                status=ServerLaunch.STOPPED, report=report.to_dict())
    member = selectors.run_export(run, hide_addresses=False)
    assert member["version"] == 6
    (launch,) = member["launches"]
    assert (launch["recipe"], launch["setting"], launch["endpoint"], launch["status"]) == (
        "q4", {"--parallel": 4}, "lab q4", "stopped")
    assert LaunchReport.from_dict(launch["report"]) == report  # the stored shape, read back whole
    anonymous = selectors.run_export(run, hide_addresses=True)["launches"][0]["report"]
    assert anonymous["command"] is None and "/srv/models/q4.gguf" not in str(anonymous)
    assert anonymous["health_s"] == 2.5 and anonymous["memory_loaded"]["server_mib"] == 9430.0


@pytest.mark.django_db
def test_the_run_page_says_each_levels_gpu_energy_per_output_token(client):
    """A level whose GPU drew 1,200 J by its counter (400 J of it the idle draw: 100 W over 4 s)
    for its output tokens: the energy, J per token and the idle share, in the telemetry table."""
    from benchmarks.engine.gpu import GpuStats, GpuSummary
    from benchmarks.models import LevelResult

    run = measured_run([endpoint(name="gpu-box")], levels=(1,), requests=4, tokens=8, owner=user())
    level = LevelResult.objects.get(run=run)
    tokens = level.stats.output_tokens
    g = GpuStats(index=0, samples=20, max_power_w=310.0, energy_j=1200.0, energy_s=4.0, energy_integrated_j=1188.0,
                 sampled_s=3.9, idle_power_w=100.0)
    level.gpu_summary = GpuSummary(status="ok", samples=20, max_power_w=310.0, energy_j=1200.0, energy_s=4.0,
                                   energy_integrated_j=1188.0, idle_power_w=100.0, gpus=[g]).to_dict()
    level.save(update_fields=["gpu_summary"])
    client.force_login(run.owner)
    page = client.get(run.get_absolute_url()).content.decode()
    cell = page[page.index('<td class="energy"'):]
    cell = cell[:cell.index("</td>")]
    assert f"1200.0 · {1200.0 / tokens:.3f} · 33 %" in cell, cell
    assert "power samples integrated: 1188.0 J over 3.90 s" in cell
    assert "Energy per token (J/token)" in page
