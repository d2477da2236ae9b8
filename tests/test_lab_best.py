"""The lab's best setting per recipe (lab/selectors._best_row) is named against the settings' own
run-to-run noise where earlier runs give it, else against the stated default."""
import pytest

from benchmarks.lab.selectors import run_lab
from benchmarks.models import Host, LevelResult, ServerLaunch, ServerRecipe
from factories import endpoint, measured_run, user


def sweep_run(recipe, settings, aggregate: dict):
    """A finished lab run of `recipe` at two settings (their endpoints), one level each, whose
    aggregate throughput is set to `aggregate[setting]` (tok/s)."""
    run = measured_run(list(settings.values()), levels=(2,), requests=4, tokens=4, owner=user())
    for index, (flag, e) in enumerate(settings.items()):
        ServerLaunch.objects.create(run=run, recipe=recipe, setting_index=index, setting={"--parallel": flag},
                                    endpoint=e, status=ServerLaunch.STOPPED)
        level = LevelResult.objects.get(run=run, endpoint=e)
        level.summary = {**level.summary, "aggregate_tok_s": aggregate[flag]}
        level.save(update_fields=["summary"])
    return run


@pytest.mark.django_db
def test_a_five_percent_lead_is_a_best_only_where_the_settings_history_is_steadier():
    host = Host.objects.create(name="lab-host")
    recipe = ServerRecipe.objects.create(name="llama-q4", host=host, backend="llamacpp", executable="/bin/true",
                                         model_path="/models/q4.gguf", args=["--port", "{port}"])
    settings = {}
    for flag in (1, 8):
        e = endpoint(f"http://127.0.0.1:{9000 + flag}", name=f"llama-q4 --parallel {flag}", host="lab-host")
        e.recipe, e.launch_flags = recipe, {"--parallel": flag}
        e.save(update_fields=["recipe", "launch_flags"])
        settings[flag] = e
    # No history: 105 against 100 tok/s is within the stated ±10 %, so no best is named.
    first = sweep_run(recipe, settings, {1: 100.0, 8: 105.0})
    best = run_lab(first)["best"][0]
    assert not best["clear"] and "within the ±10 %" in best["why"], best
    # Three more runs in which each setting varied by under 1 %: 1.96 × √2 × that is about 1.3 %.
    for wobble in (0.5, -0.5):
        sweep_run(recipe, settings, {1: 100.0 + wobble, 8: 105.0 - wobble})
    last = sweep_run(recipe, settings, {1: 100.0, 8: 105.0})
    best = run_lab(last)["best"][0]
    assert best["clear"] and best["setting"] == "--parallel 8", (best["why"], best)
    assert "beyond the ±" in best["why"] and "from its last 3 comparable runs" in best["why"], best
    assert best["ratio"] == "1.05×"


def test_gpu_memory_is_said_per_process_and_per_device():
    """The H200 lab run read 8,815 MiB for the server's processes (as nvidia-smi lists them) and
    9,430 MiB used on the device: the driver's reserve is the difference; both are said."""
    from benchmarks.engine.launcher import MemoryReading
    from benchmarks.lab.selectors import memory_text

    gpu = MemoryReading("gpu", 8815.0, {"0": 9430.0}, {"4242": 8815.0}, "per process, from NVML")
    assert memory_text(gpu) == "8 815 MiB GPU (its processes) · 9 430 MiB on the device"
    assert memory_text(MemoryReading("rss", 352.4, note="no GPU here")) == "352 MiB RSS"
    assert memory_text(MemoryReading()) == "—"
