"""Comparisons of runs whose servers the lab started: each such series' start-up times and memory
after load in a small table beside the comparison table, under the catalogue's titles."""
import pytest
from django.test import Client

from benchmarks import services
from benchmarks.compare import startup_table
from benchmarks.engine.catalogue import LAUNCH_FIGURES
from benchmarks.engine.launcher import LaunchReport, MemoryReading
from benchmarks.models import Run, ServerLaunch, ServerRecipe
from factories import user, queue_run
from test_decisions_lab import LLAMA_ARGS, lab, llama_paths, v100_host, variant  # noqa: F401 (lab's fixtures)


def series(label, launch=None):
    return {"label": label, "url": f"/runs/{label}/", "launch": launch}


def test_the_startup_table_has_a_row_per_series_the_lab_started():
    gpu = LaunchReport(health_s=41.25, first_token_s=43.5,
                       memory_loaded=MemoryReading("gpu", 14900.0, note="per process, from NVML"))
    cpu = LaunchReport(health_s=2.0, first_token_s=None, memory_loaded=MemoryReading("rss", 512.0, note="RSS"))
    rows = startup_table([series("vllm-fp8", gpu), series("registered"), series("llama-cpu", cpu)])
    assert [r["label"] for r in rows] == ["vllm-fp8", "llama-cpu"]  # a registered endpoint has no start-up
    assert [c["name"] for c in rows[0]["cells"]] == [f.name for f in LAUNCH_FIGURES]
    assert [c["text"] for c in rows[0]["cells"]] == ["41.25", "43.50", "14.55 GPU"]  # 14900 MiB / 1024
    assert [c["text"] for c in rows[1]["cells"]] == ["2.00", "—", "0.50 RSS"]
    assert rows[0]["memory_note"] == "per process, from NVML"
    assert startup_table([series("registered")]) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.real_server
def test_a_comparison_of_a_lab_sweep_shows_each_settings_start_up_and_memory(lab):
    binary, model = lab
    recipe = ServerRecipe(name="llama-q4-sweep", host=v100_host(), backend="llamacpp", executable=binary,
                          model_path=model, args=LLAMA_ARGS, sweep={"--parallel": [1, 2]},
                          variant=variant("gguf_q4_k_m"))
    recipe.full_clean()
    recipe.save()
    owner = user()
    run = queue_run(owner=owner, endpoints=[], recipes=[recipe], sweep={}, prompt_tokens=16,
                              output_tokens=4, temperature=0.7, concurrency_levels=[1], requests_per_level=1,
                              warmup_requests=0)
    services.run_execute(run_id=run.id, worker="test")  # this process as the host's worker
    run = Run.objects.get(id=run.id)
    assert run.status == Run.SUCCEEDED, (run.error, [lc.report for lc in run.launches.all()])
    launches = list(ServerLaunch.objects.filter(run=run).select_related("endpoint").order_by("setting_index"))
    comparison = services.comparison_create(owner=owner, runs=[run], reports=[])
    page = Client().get(comparison.get_absolute_url()).content.decode()
    table = page[page.index('id="startup"'):]
    table = table[:table.index("</table>")]
    for f in LAUNCH_FIGURES:
        assert f.title in table
    for launch in launches:
        report = launch.figures
        row = table[table.index(launch.endpoint.name):]
        row = row[:row.index("</tr>")]
        assert f"{report.health_s:,.2f}" in row and f"{report.first_token_s:,.2f}" in row
        assert f"{report.memory_loaded.server_mib / 1024:,.2f} RSS" in row
    assert table.count("<tr>") == 1 + len(launches)
    # The run page defines the start-up figures for a run that started servers.
    definitions = Client().get(run.get_absolute_url()).content.decode().split('id="definitions"')[1]
    for f in LAUNCH_FIGURES:
        assert f'<dt id="metric-{f.key}">' in definitions
