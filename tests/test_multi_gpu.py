"""Servers given several GPUs: the recipe's GPU list (checked against the host's probed GPUs and its
allowlist), CUDA_VISIBLE_DEVICES in the started server's environment, the multi-GPU flags read
one way, and each GPU's telemetry per level (a fake NVML of two GPUs), side by side on the run page."""
import json
import sys

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from benchmarks import selectors, services
from benchmarks.engine import gpu, launcher
from benchmarks.engine.launcher import Allowlist, ServerSpec
from benchmarks.engine.multi_gpu import Spread, spread
from benchmarks.models import Host, Run, ServerRecipe
from conftest import ROOT
from factories import execute_in_process, user, queue_run
from test_gpu_telemetry import FakeGpu, FakeNVML

ECHO_ENV = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"
SIM_ARGS = ["-c", f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); sys.argv = ['sim', '--host', '{{host}}', "
                  "'--port', '{port}', '--dialect', 'llamacpp', '--decode-ms', '2']; "
                  "runpy.run_module('benchmarks.engine.simulator', run_name='__main__')"]


class PatchedNVML(FakeNVML):
    NVMLError = gpu.pynvml.NVMLError  # what gpu.py looks errors up on when it stands in for pynvml


def two_gpus():
    return PatchedNVML([FakeGpu(used_mib=15200.0, util=(97, 61)),
                        FakeGpu(uuid="GPU-2", used_mib=9000.0, util=(40, 20), temperature=60)],
                       ancestors={(0, 1): 10})  # NVML_TOPOLOGY_SINGLE


def host_with(n_gpus, name="box-2gpu", nvml=None):
    host = Host.objects.create(name=name)
    nvml = nvml or FakeNVML([FakeGpu(uuid=f"GPU-{i}") for i in range(n_gpus)])
    services.host_probe_store(host=host, probe=gpu.probe(nvml=nvml))
    return host


def recipe(host, **fields):
    fields = {"name": "llama-2gpu", "backend": "llamacpp", "executable": "/opt/llama/llama-server",
              "model_path": "/models/m.gguf", "args": ["-m", "{model}", "--port", "{port}"], **fields}
    return ServerRecipe(host=host, **fields)


def errors_of(r):
    with pytest.raises(ValidationError) as caught:
        r.full_clean()
    return caught.value.message_dict


# ------------------------------------------------------------------------------ the flags, read once
def test_the_multi_gpu_flags_are_read_one_way():
    args = ["-m", "{model}", "--port", "{port}"]
    assert spread("llamacpp", {}, args, 2) == Spread(2, "layer split")  # llama.cpp splits by layer by default
    assert spread("llamacpp", {"--split-mode": "row"}, args, 2).label == "2 GPUs, row split"
    assert spread("llamacpp", {"--split-mode": "none"}, args, 2) == Spread(1, "one GPU")
    assert spread("llamacpp", {}, args + ["-sm=none"], 2).gpus_used == 1
    assert spread("llamacpp", {"--tensor-split": "3,0"}, args, 2).gpus_used == 1
    assert spread("llamacpp", {}, args, 1) == Spread(1, "one GPU")
    assert spread("vllm", {"--tensor-parallel-size": 2}, args, None) == Spread(2, "tensor parallel")
    assert spread("vllm", {}, args + ["-tp", "2", "-pp", "2"], None).gpus_used == 4
    for backend, setting, said in [("llamacpp", {"--split-mode": "rows"}, "one of none, layer, row"),
                                   ("vllm", {"--tensor-parallel-size": 0}, "at least 1"),
                                   ("llamacpp", {"--tensor-split": "a,b"}, "shares per GPU")]:
        with pytest.raises(ValueError, match=said):
            spread(backend, setting, args, 2)


# ------------------------------------------------------------------------------ the recipe's GPUs
@pytest.mark.django_db
def test_a_gpu_list_beyond_the_hosts_probed_gpus_is_refused_with_a_field_error():
    host = host_with(2)
    assert errors_of(recipe(host, gpus="0,2"))["gpus"] == ["GPU 2 is beyond box-2gpu's 2 probed GPUs (GPUs 0-1)"]
    assert "listed twice" in errors_of(recipe(host, gpus="1,1"))["gpus"][0]
    assert "indices separated by commas" in errors_of(recipe(host, gpus="first"))["gpus"][0]
    assert "gpus: GPU 3 is beyond" in errors_of(recipe(host, sweep={"gpus": ["0", "0,3"]}))["sweep"][0]
    assert "probe it" in errors_of(recipe(Host.objects.create(name="never-probed"), gpus="0"))["gpus"][0]
    assert "the GPUs field" in errors_of(recipe(host, env={"CUDA_VISIBLE_DEVICES": "1"}))["env"][0]
    # vLLM needs tensor x pipeline GPUs; llama.cpp's split mode must be one it has.
    vllm = recipe(host, backend="vllm", gpus="0", sweep={"--tensor-parallel-size": [1, 2]})
    assert "needs 2 GPUs; the server is given 1" in errors_of(vllm)["sweep"][0]
    assert "one of none, layer, row" in errors_of(recipe(host, args=["--port", "{port}", "-sm", "rows"]))["args"][0]
    ok = recipe(host, gpus="0,1", sweep={"--split-mode": ["none", "layer", "row"], "gpus": ["0", "0,1"]})
    ok.full_clean()
    assert len(ok.settings()) == 6 and ok.gpu_indices({"gpus": "0"}) == (0,) and ok.gpu_indices() == (0, 1)


@pytest.mark.django_db
def test_staff_get_the_field_error_in_the_recipe_form(client):
    host = host_with(1, "one-gpu")
    client.force_login(user("root", staff=True))
    form = {"name": "r", "host": host.id, "backend": "llamacpp", "executable": "/opt/llama-server",
            "model_path": "/models/m.gguf", "args": '["--port", "{port}"]', "sweep": "{}", "env": "{}",
            "listen_address": "127.0.0.1", "gpus": "0,1", "enabled": "on"}
    r = client.post(reverse("admin:benchmarks_serverrecipe_add"), form)
    assert r.status_code == 200
    assert "GPU 1 is beyond one-gpu's 1 probed GPU (GPU 0)" == r.context["adminform"].form.errors["gpus"][0]
    assert client.post(reverse("admin:benchmarks_serverrecipe_add"), {**form, "gpus": "0"}).status_code == 302


# ------------------------------------------------------------------------------ the launcher
def test_the_launcher_gives_the_server_its_gpus_and_nothing_else(tmp_path):
    allow = Allowlist.from_settings(sys.executable, str(tmp_path), "18380-18389", inline_code=True)
    seen = []
    for gpus in [(1,), (0, 1), None]:
        out = tmp_path / f"env-{len(seen)}.json"
        spec = ServerSpec(sys.executable, str(tmp_path), ("-c", ECHO_ENV, str(out), "{port}"), gpus=gpus)
        server = launcher.launch(spec, allow, tmp_path)
        server.proc.wait(30)
        seen.append(json.loads(out.read_text()))
    assert (seen[0]["CUDA_VISIBLE_DEVICES"], seen[0]["CUDA_DEVICE_ORDER"]) == ("1", "PCI_BUS_ID")
    assert seen[1]["CUDA_VISIBLE_DEVICES"] == "0,1"
    # No list: only what the worker's own environment gives (here: none).
    assert "CUDA_DEVICE_ORDER" not in seen[2] or seen[2]["CUDA_DEVICE_ORDER"] != "PCI_BUS_ID"
    assert "CUDA_VISIBLE_DEVICES=0,1" in ServerSpec("/x", "/m", gpus=(0, 1)).command_line(1)
    # The host's allowlist (LAB_GPUS) bounds which GPUs a recipe may give.
    only_0 = Allowlist.from_settings(sys.executable, str(tmp_path), "18380-18389", gpus="0", inline_code=True)
    spec = ServerSpec(sys.executable, str(tmp_path), ("-c", "pass", "{port}"), gpus=(0, 1))
    assert only_0.refusal(spec) == "GPU 1 is not among the GPUs this host lets servers use (LAB_GPUS: 0)"
    assert only_0.refusal(ServerSpec(sys.executable, str(tmp_path), ("-c", "pass", "{port}"), gpus=(0,))) == ""
    assert "its GPU list" in allow.refusal(ServerSpec(sys.executable, str(tmp_path), ("-c", "pass", "{port}"),
                                                      env={"CUDA_VISIBLE_DEVICES": "3"}))


# ------------------------------------------------------------------------------ a lab run on two (fake) GPUs
def lab_run_on_two_gpus(settings, tmp_path, monkeypatch):
    """A recipe serving the simulator (a CPU stand-in server), swept over GPU lists "0" and "0,1",
    measured in this process by the worker's own code with NVML faked as two GPUs."""
    monkeypatch.setattr(gpu, "pynvml", two_gpus())
    host = host_with(2, "fake-2gpu")
    settings.WORKER_HOST, settings.LAB_EXECUTABLES = host.name, sys.executable
    settings.LAB_MODEL_DIRS, settings.LAB_STATE_DIR, settings.LAB_PORTS = str(tmp_path), tmp_path, "18390-18399"
    settings.GPU_SAMPLE_INTERVAL_S = 0.05
    r = recipe(host, name="sim", executable=sys.executable, model_path=str(tmp_path), args=SIM_ARGS,
               sweep={"gpus": ["0", "0,1"]})
    r.full_clean()
    r.save()
    run = queue_run(owner=user(), endpoints=[], recipes=[r], sweep={}, prompt_tokens=32, output_tokens=16,
                              temperature=0.7, concurrency_levels=[1, 4], requests_per_level=8, warmup_requests=0)
    return execute_in_process(run)


@pytest.mark.django_db(transaction=True)
def test_each_gpu_a_server_uses_is_sampled_per_level(settings, tmp_path, monkeypatch):
    run = lab_run_on_two_gpus(settings, tmp_path, monkeypatch)
    assert run.status == Run.SUCCEEDED, run.error
    fake = gpu.pynvml
    by_gpus = {}
    for launch in run.launches.select_related("endpoint"):
        assert launch.status == "stopped"
        assert "CUDA_VISIBLE_DEVICES=" + launch.setting["gpus"] in launch.figures.command
        by_gpus[launch.setting["gpus"]] = launch.endpoint
    assert sorted(g.index for g in by_gpus["0,1"].gpus.all()) == [0, 1]
    for gpus, endpoint in by_gpus.items():
        levels = list(run.levels.filter(endpoint=endpoint).order_by("level_index"))
        assert [lv.concurrency for lv in levels] == [1, 4]
        for lv in levels:
            stats = lv.gpu.gpus
            assert [g.index for g in stats] == [int(i) for i in gpus.split(",")]  # its GPUs, no other
            for g in stats:  # each GPU's own figures, as its (fake) NVML gave them
                assert g.samples >= 1 and g.peak_memory_used_mib == fake.gpus[g.index].used_mib
                assert (g.mean_utilization_gpu, g.mean_utilization_memory) == fake.gpus[g.index].util
    side = selectors.gpus_side_by_side(list(run.levels.select_related("endpoint")))
    assert side["gpus"] == [0, 1] and len(side["rows"]) == 2  # the two levels of the two-GPU server


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_run_page_shows_the_gpus_side_by_side_within_1366_px(settings, tmp_path, monkeypatch, live_server,
                                                                   page):
    from test_pages_at_a_glance import ARTEFACTS, CHARTS, OVERFLOW

    run = lab_run_on_two_gpus(settings, tmp_path, monkeypatch)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(live_server.url + run.get_absolute_url())
    heads = page.locator("#gpu-table thead tr").first.locator("th").all_inner_texts()
    assert heads[1:] == ["GPU 0", "GPU 1"]
    memory = page.locator('#gpu-table tbody td[data-key="peak_memory_used_mib"]').all_inner_texts()
    assert memory[:2] == [f"{15200 / 1024:.2f}", f"{9000 / 1024:.2f}"]
    page.wait_for_function("() => document.querySelector('#chart-gpus .chart')?.dataset.drawn === 'true'",
                           timeout=30000)
    page.wait_for_function("() => document.querySelector('#chart-gpu .chart')?.dataset.drawn === 'true'",
                           timeout=30000)
    assert page.evaluate(OVERFLOW) == []
    for chart in page.evaluate(CHARTS):
        if chart["id"] in ("chart-gpus", "chart-gpu"):
            assert chart["problems"] == [], chart
            assert chart["series"] == 2, chart  # one legend entry per GPU, each its own colour
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.locator("#chart-gpus").screenshot(path=str(ARTEFACTS / "run-gpus-side-by-side-1366.png"))
    assert page.js_errors == []
