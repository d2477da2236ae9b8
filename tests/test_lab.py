"""The lab: the host's worker starts servers itself from recipes (real llama-server and vLLM on
the CPU, real worker processes, PostgreSQL and Redis), measures start-up, memory and the run's
levels, stops them, keeps what did not start as evidence, and stops what a killed worker left."""
from html import escape
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from celery import Celery
from django.test import Client
from django.urls import reverse

from benchmarks.engine import launcher
from benchmarks.engine.differences import NOISE_PCT
from benchmarks.models import Host, LevelResult, Run, ServerLaunch, ServerRecipe
from conftest import LLM_SERVERS, spawn_worker, stop_worker, worker_env
from factories import execute_in_process, user, queue_run
from test_fault_tolerance import FAST_RECOVERY, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "lab-1"
LLAMA_ARGS = ["-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "1024", "-t", "2", "--metrics"]
# A flag the allowlist knows with a value llama-server refuses at start (an unknown flag never reaches it).
BAD_VALUE = ["--numa", "bogus"]
BAD_VALUE_SAID = 'handling argument "--numa": invalid value'


@pytest.fixture(scope="module")
def llama_paths():
    binary = subprocess.run(["bash", str(LLM_SERVERS), "path"], capture_output=True, text=True).stdout.split()
    if len(binary) != 2 or not all(Path(p).exists() for p in binary):
        pytest.fail("llama-server or its model is not built: run `scripts/llm-servers.sh build` and `... model`")
    return binary


@pytest.fixture(scope="module")
def vllm_paths():
    venv = subprocess.run(["bash", str(LLM_SERVERS), "vllm-setup"], check=True, capture_output=True, text=True,
                          timeout=1800).stdout.split()[-1]
    return f"{venv}/bin/python", str(Path(venv).parent / "tiny-qwen2")


@pytest.fixture(scope="module")
def lab_dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("lab")
    (base / "models").mkdir()
    (base / "state").mkdir()
    return base


def lab_env(llama_paths, vllm_paths, lab_dirs, **overrides):
    cache = str(Path(llama_paths[1]).parent)
    return worker_env(**{"WORKER_HOST": HOST, "LAB_EXECUTABLES": f"{llama_paths[0]},{vllm_paths[0]}",
                         "LAB_MODEL_DIRS": f"{cache},{lab_dirs / 'models'}", "LAB_STATE_DIR": lab_dirs / "state",
                         "LAB_PORTS": "18300-18339", "LAB_STOP_GRACE_S": 10,
                         # A cold vLLM start on a loaded 2-core machine took over 300 s (its first
                         # compile); scripts/test.sh warms that compile during setup.
                         "LAB_START_TIMEOUT_S": 600,
                         "CELERY_DEFAULT_QUEUE": "lab", **overrides})


def purge(*queues):
    from django.conf import settings

    channel = Celery(broker=settings.CELERY_BROKER_URL, set_as_current=False).connection().default_channel
    for queue in queues:
        channel.queue_purge(queue)


@pytest.fixture(scope="module")
def lab_worker(django_db_setup, django_db_blocker, llama_paths, vllm_paths, lab_dirs):
    """One worker on host lab-1 whose settings allow the cached llama-server and vLLM and their
    models (and a folder for missing ones), for the tests that do not kill it."""
    purge("lab", f"host-{HOST}")
    proc = spawn_worker(lab_env(llama_paths, vllm_paths, lab_dirs), "lab")
    why.worker = proc  # its log tail goes into the module's failure messages
    yield proc
    why.worker = None
    stop_worker(proc)


def recipe(name, executable, model, args=LLAMA_ARGS, host=HOST, **fields):
    host, _ = Host.objects.get_or_create(name=host)
    r = ServerRecipe(name=name, host=host, backend=fields.pop("backend", "llamacpp"), executable=executable,
                     model_path=model, args=list(args), **fields)
    r.full_clean()
    r.save()
    return r


def lab_run(recipes, sweep=None, levels=(1,), requests=2, output_tokens=8, trials=1):
    return queue_run(owner=user(), endpoints=[], recipes=recipes, sweep=sweep or {}, prompt_tokens=32,
                               output_tokens=output_tokens, temperature=0.7, concurrency_levels=list(levels),
                               requests_per_level=requests, warmup_requests=0, trials=trials)


def finished(run, timeout):
    try:
        wait_for(lambda: Run.objects.get(id=run.id).is_finished, timeout, f"run {run.id} to finish")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{why(run)}") from None
    return Run.objects.get(id=run.id)


def why(run, worker=None) -> str:
    """What a failed lab run recorded, for an assertion's message: its status and error, each
    launch's refusal or cause with its log tail, and the worker's own log tail."""
    run = Run.objects.get(id=run.id)
    lines = [f"run {run.id}: {run.status} {run.error!r} ({run.progress_note})"]
    for launch in run.launches.order_by("setting_index"):
        f = launch.figures
        lines.append(f"- {launch.recipe.name} {launch.setting}: {launch.status} {f.refusal or f.failure} "
                     f"cause={f.cause.code}: {f.cause.line}\n  log tail: {f.log_tail[-1500:]}")
    worker = worker or getattr(why, "worker", None)
    if worker is not None and getattr(worker, "log_path", None):
        lines.append("worker log tail:\n" + Path(worker.log_path).read_text()[-3000:])
    return "\n".join(lines)


def gone(pid):
    return not launcher.alive(pid)


@pytest.mark.real_server
def test_a_sweep_over_parallel_starts_measures_and_stops_three_llama_servers(lab_worker, llama_paths, lab_dirs):
    r = recipe("llama-q4", *llama_paths, sweep={"--parallel": [1, 2, 4]})
    run = finished(lab_run([r], levels=(1, 2)), 240)
    assert run.status == Run.SUCCEEDED, why(run)
    launches = list(run.launches.order_by("setting_index"))
    assert [lc.setting for lc in launches] == [{"--parallel": 1}, {"--parallel": 2}, {"--parallel": 4}]
    for launch, slots in zip(launches, (1, 2, 4)):
        f = launch.figures
        assert launch.status == ServerLaunch.STOPPED, f
        assert f"--parallel {slots}" in f.command and "--port" in f.command
        assert 0 < f.health_s <= f.first_token_s < 120, (f.health_s, f.first_token_s)
        assert f.probe_ttft_ms > 0 and not f.probe_error
        # No GPU here: the memory is the server's resident memory, and says so.
        assert f.memory_loaded.source == "rss" and "RSS" in f.memory_loaded.note
        assert f.memory_loaded.server_mib > 100, f.memory_loaded  # a 250 MB model is loaded
        assert f.memory_peak.server_mib >= f.memory_loaded.server_mib * 0.9
        assert f.memory_freed is True and gone(f.pid), f.memory_freed_check
        assert f.stopped.startswith("SIGTERM")
        # The server measured is the one started at this setting: its own /props says so.
        assert run.server_config[str(launch.endpoint_id)]["total_slots"] == slots
        levels = LevelResult.objects.filter(run=run, endpoint=launch.endpoint).order_by("level_index")
        assert [(lv.concurrency, lv.completed, lv.failed) for lv in levels] == [(1, 2, 0), (2, 2, 0)]
    assert len({lc.figures.port for lc in launches}) >= 1 and len({lc.endpoint_id for lc in launches}) == 3
    assert run.progress_done == run.progress_total == 3 * 2 * 2
    assert not list((lab_dirs / "state" / "servers").glob("*.json")), "nothing recorded as running"
    # The run page: the sweep table (start-up, memory, each level) and each recipe's best setting.
    page = Client().get(run.get_absolute_url()).content.decode()
    table = page[page.index('id="sweep"'):page.index("</table>", page.index('id="sweep"'))]
    assert table.count('data-status="stopped"') == 3 and "Start → /health (s)" in table
    for launch in launches:
        row = table[table.index(f"launch-{launch.public_id}"):]
        row = row[:row.index("</tr>")]
        assert f"<td>{launch.figures.health_s:,.2f}</td>" in row and "MiB RSS" in row
        assert f"{launch.endpoint.levels.get(run=run, level_index=1).stats.stat('aggregate_tok_s'):.1f}" in row
    # The best setting is named only when it beats the next one by more than the stated run-to-run
    # noise (one trial each); else the page says there is no clear best, naming the top one first.
    top = {}
    for lv in LevelResult.objects.filter(run=run).select_related("endpoint"):
        top[lv.endpoint_id] = max(top.get(lv.endpoint_id, (0.0, lv))[0], lv.stats.stat("aggregate_tok_s")), lv
    (first, best), (second, _) = sorted(top.values(), key=lambda t: -t[0])[:2]
    setting = f"--parallel {best.endpoint.launch_flags['--parallel']} at"
    if first / second >= 1 + NOISE_PCT / 100:
        assert f"<strong>llama-q4</strong> {setting}" in page
    else:
        assert f'<strong>llama-q4</strong>: <span class="no-clear-best">no clear best</span>, {setting}' in page
    assert "resident memory (RSS)" in page and "Command lines" not in page  # anonymous: no commands


@pytest.mark.real_server
def test_each_trial_meets_a_freshly_started_server(lab_worker, llama_paths):
    r = recipe("llama-trials", *llama_paths)
    run = finished(lab_run([r], levels=(1, 2), trials=2), 240)
    assert run.status == Run.SUCCEEDED, why(run)
    launch = run.launches.get()
    f = launch.figures
    assert launch.status == ServerLaunch.STOPPED and len(f.earlier_starts) == 1, f
    first = f.earlier_starts[0]
    # Two processes, one per trial: each stopped (and its memory given back) before the next began.
    assert first["pid"] != f.pid and gone(first["pid"]) and gone(f.pid)
    assert first["stopped"].startswith("SIGTERM") and first["memory_freed"] is True
    trials = sorted(LevelResult.objects.filter(run=run).values_list("trial", "level_index", "completed"))
    assert trials == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]
    page = Client().get(run.get_absolute_url()).content.decode()
    assert "started 2 times, once per trial" in page and 'id="trials-note"' in page
    assert run.progress_done == run.progress_total == 2 * 2 * 2


@pytest.mark.real_server
def test_a_bad_flag_and_a_missing_model_did_not_start_and_the_run_goes_on(lab_worker, llama_paths, lab_dirs):
    binary, model = llama_paths
    # A flag the allowlist knows (it never lets an unknown one reach the server) with a value the server refuses.
    bad = recipe("a-bad-flag", binary, model, args=LLAMA_ARGS + BAD_VALUE)
    missing = recipe("b-missing-model", binary, str(lab_dirs / "models" / "absent.gguf"))
    good = recipe("c-good", binary, model)
    run = finished(lab_run([good, missing, bad]), 180)
    assert run.status == Run.PARTIAL, why(run)
    by_name = {lc.recipe.name: lc for lc in run.launches.all()}
    flag = by_name["a-bad-flag"].figures
    assert by_name["a-bad-flag"].status == ServerLaunch.DID_NOT_START
    assert flag.cause.code == "bad_flag" and "--numa" in flag.cause.line
    assert BAD_VALUE_SAID in flag.log_tail and flag.exit_code is not None and flag.health_s is None
    lost = by_name["b-missing-model"].figures
    assert by_name["b-missing-model"].status == ServerLaunch.DID_NOT_START
    assert lost.cause.code == "missing_file" and "absent.gguf" in lost.cause.line
    assert lost.exit_code not in (None, 0) and "absent.gguf" in lost.log_tail
    assert by_name["b-missing-model"].endpoint is None and not gone(os.getpid())
    ok = by_name["c-good"]
    assert ok.status == ServerLaunch.STOPPED and ok.figures.health_s > 0
    assert LevelResult.objects.get(run=run, endpoint=ok.endpoint).completed == 2
    assert list(run.levels.values_list("endpoint__recipe__name", flat=True)) == ["c-good"]
    page = Client().get(run.get_absolute_url()).content.decode()
    failures = page[page.index("<h3>Did not start</h3>"):]
    assert "<strong>a-bad-flag</strong>" in failures and "an argument it does not accept" in failures
    assert "<strong>b-missing-model</strong>" in failures and "a file it needs is missing" in failures
    assert escape(BAD_VALUE_SAID) in failures and "Last lines of its log" in failures


def test_a_recipe_outside_the_hosts_allowlist_is_refused_before_anything_starts(lab_worker, lab_dirs, llama_paths):
    marker = lab_dirs / "started"
    script = lab_dirs / "models" / "pretend-server"
    script.write_text(f"#!/bin/sh\ntouch {marker}\nsleep 60\n")
    script.chmod(0o755)
    outside_exe = recipe("not-allowed-exe", str(script), llama_paths[1], args=["--port", "{port}"])
    outside_model = recipe("not-allowed-model", llama_paths[0], "/etc/hostname")
    outside_arg = recipe("not-allowed-arg", llama_paths[0], llama_paths[1],
                         args=LLAMA_ARGS + ["--grammar-file", "/etc/hostname"])
    run = finished(lab_run([outside_exe, outside_model, outside_arg]), 60)
    assert run.status == Run.FAILED  # nothing was measured
    reports = {lc.recipe.name: lc for lc in run.launches.all()}
    assert {lc.status for lc in reports.values()} == {ServerLaunch.REFUSED}
    exe = reports["not-allowed-exe"].figures
    assert "is not among the executables this host allows" in exe.refusal and "LAB_EXECUTABLES" in exe.refusal
    assert exe.pid is None and exe.command == ""
    assert "/etc/hostname is outside the folders" in reports["not-allowed-model"].figures.refusal
    assert "the flag --grammar-file's value '/etc/hostname' names a path outside" in \
        reports["not-allowed-arg"].figures.refusal
    time.sleep(0.5)
    assert not marker.exists(), "the refused executable was never run"
    assert not list((lab_dirs / "state" / "servers").glob("*.json"))


@pytest.mark.real_server
def test_the_cpu_vllm_is_started_from_a_recipe_measured_and_stopped(lab_worker, vllm_paths):
    python, tiny = vllm_paths
    r = recipe("vllm-tiny", python, tiny, backend="vllm", served_model_name="tiny-qwen2", args=[
        "-m", "vllm.entrypoints.openai.api_server", "--model", "{model}", "--served-model-name", "tiny-qwen2",
        "--host", "{host}", "--port", "{port}", "--max-model-len", "2048", "--dtype", "bfloat16"],
        # As `llm-servers.sh vllm-serve` starts it, whose compile the setup warmed (same cache).
        env={"VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
             "VLLM_NO_USAGE_STATS": "1", "VLLM_CACHE_ROOT": str(Path(tiny).parent / "vllm-cache")})
    run = finished(lab_run([r], requests=3), 720)
    launch = run.launches.get()
    f = launch.figures
    assert run.status == Run.SUCCEEDED, why(run)
    assert launch.status == ServerLaunch.STOPPED
    assert 0 < f.health_s <= f.first_token_s, (f.health_s, f.first_token_s)
    assert f.memory_loaded.source == "rss" and f.memory_loaded.server_mib > 300, f.memory_loaded
    assert f.memory_freed is True and gone(f.pid)
    assert run.server_config[str(launch.endpoint_id)]["backend"] == "vllm"
    level = LevelResult.objects.get(run=run, endpoint=launch.endpoint)
    # (not the decode speed: on a busy machine vLLM may deliver a request's tokens in one read)
    assert level.completed == 3 and level.stats.stat("aggregate_tok_s") > 0


def test_a_member_cannot_create_or_edit_recipes(client, llama_paths):
    host, _ = Host.objects.get_or_create(name=HOST)
    existing = recipe("staff-made", *llama_paths)
    client.force_login(user("bob"))
    add = reverse("admin:benchmarks_serverrecipe_add")
    change = reverse("admin:benchmarks_serverrecipe_change", args=[existing.id])
    form = {"name": "member-made", "host": host.id, "backend": "llamacpp", "executable": "/bin/sh",
            "model_path": "/tmp/x", "args": '["--port", "{port}"]', "sweep": "{}", "env": "{}",
            "listen_address": "127.0.0.1"}
    for url in (add, change):
        assert client.get(url).status_code == 302  # to the admin login: members are not staff
        assert client.post(url, form).status_code == 302
    assert list(ServerRecipe.objects.values_list("name", flat=True)) == ["staff-made"]
    # Staff can, and a recipe the worker could not start is refused with the field's reason.
    client.force_login(user("root", staff=True))
    r = client.post(add, {**form, "args": '["-m", "{model}"]', "sweep": '{"parallel": [4]}'})
    assert r.status_code == 200
    errors = r.context["adminform"].form.errors
    assert "must contain {port}" in str(errors["args"]) and "is not a flag" in str(errors["sweep"])
    r = client.post(add, {**form, "sweep": '{"--parallel": [4, 8]}'})
    assert r.status_code == 302, r.context["adminform"].form.errors
    assert ServerRecipe.objects.get(name="member-made").settings() == [{"--parallel": 4}, {"--parallel": 8}]


@pytest.mark.real_server
def test_a_killed_workers_server_is_stopped_by_the_next_worker_before_the_run_resumes(
        django_db_setup, llama_paths, vllm_paths, tmp_path):
    dirs = tmp_path
    (dirs / "models").mkdir()
    (dirs / "state").mkdir()
    # A host of its own: the module's other worker (host lab-1) must not take this run.
    purge("lab-kill", "host-lab-kill")
    env = lab_env(llama_paths, vllm_paths, dirs, **{**FAST_RECOVERY, "CELERY_DEFAULT_QUEUE": "lab-kill",
                                                    "WORKER_HOST": "lab-kill", "LAB_PORTS": "18360-18379"})
    r = recipe("llama-q4", *llama_paths, host="lab-kill", sweep={"--parallel": [2]})
    workers = [spawn_worker(env, "lab-killed")]
    try:
        run = lab_run([r], levels=(1, 2), requests=4, output_tokens=48)
        wait_for(lambda: LevelResult.objects.filter(run=run).exists(), 120, "the first level")
        first = ServerLaunch.objects.get(run=run).figures
        os.kill(workers[0].pid, signal.SIGKILL)
        workers[0].wait(10)
        assert launcher.alive(first.pid), "the server outlives its worker (its own process group)"
        assert list((dirs / "state" / "servers").glob("*.json")), "and its record is left"
        workers.append(spawn_worker(env, "lab-rescuer"))
        run = finished(run, 240)
        assert run.status == Run.SUCCEEDED and run.attempts == 2, why(run, workers[-1])
        launch = ServerLaunch.objects.get(run=run)
        f = launch.figures
        assert gone(first.pid) and f.pid != first.pid
        assert [o["pid"] for o in f.orphans_stopped] == [first.pid]
        assert f.orphans_stopped[0]["stopped"].startswith("SIGTERM")
        assert f.orphans_stopped[0]["at"] < launch.started_at.isoformat()  # before its new start
        assert launch.status == ServerLaunch.STOPPED and gone(f.pid)
        assert list(run.levels.order_by("level_index").values_list("level_index", "completed")) == [(0, 4), (1, 4)]
        assert not list((dirs / "state" / "servers").glob("*.json"))
    finally:
        for w in workers:
            if w.poll() is None:
                stop_worker(w)


@pytest.mark.real_server
@pytest.mark.browser
def test_the_run_page_shows_the_sweep_and_what_did_not_start_within_1366_px(
        settings, llama_paths, tmp_path, live_server, page):
    """Measured in this process by the worker's own code (services.run_execute) on host lab-2,
    whose queue no worker consumes, then read in a real browser."""
    binary, model = llama_paths
    settings.WORKER_HOST, settings.LAB_EXECUTABLES = "lab-2", binary
    settings.LAB_MODEL_DIRS, settings.LAB_STATE_DIR = f"{Path(model).parent},{tmp_path}", tmp_path
    settings.LAB_PORTS = "18340-18359"
    good = recipe("llama-q4", binary, model, host="lab-2", sweep={"--parallel": [1, 2]})
    bad = recipe("llama-bad-flag", binary, model, host="lab-2", args=LLAMA_ARGS + BAD_VALUE)
    run = lab_run([good, bad], levels=(1, 2))
    execute_in_process(run)
    purge("host-lab-2")
    run.refresh_from_db()
    assert run.status == Run.PARTIAL, why(run)
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(live_server.url + run.get_absolute_url())
    assert page.locator("#sweep tbody tr").count() == 3
    page.click("text=Last lines of its log")
    assert BAD_VALUE_SAID in page.locator(".launch-failure pre").inner_text()
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the page is {width[0]} px wide in a {width[1]} px window"
    page.wait_for_function("() => document.querySelector('#chart-sweep .chart')?.dataset.drawn === 'true'", timeout=30000)
    sweep = page.locator("#chart-sweep .table-holder tbody tr")
    page.click("#chart-sweep summary")
    assert sweep.count() == 4  # 2 settings x 2 load levels
    assert "--parallel" in page.locator("#chart-sweep .xtitle").text_content()
    page.screenshot(path=str(Path(__file__).parent.parent / "var" / "lab-run-page.png"), full_page=True)
    assert page.js_errors == []


def test_a_member_picks_recipes_and_a_sweep_in_the_run_form(client, llama_paths):
    binary, model = llama_paths
    llama = recipe("llama-q4", binary, model, sweep={"--parallel": [1, 2, 4], "-c": [1024, 2048]})
    far = recipe("far-away", binary, model, host="lab-2")
    client.force_login(user())
    form = {"title": "", "prompt_tokens": 32, "output_tokens": 8, "temperature": 0.7, "api": "completions",
            "load_mode": "concurrency", "concurrency_levels": "1,2", "request_rates": "", "arrivals": "poisson",
            "max_concurrency": "", "requests_per_level": 2, "duration_s": "", "warmup_requests": 0, "seed": "",
            "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": ""}
    page = client.get(reverse("run-new")).content.decode()
    assert "llama-q4: --parallel" in page and "far-away" in page
    nothing = client.post(reverse("run-new"), form)
    assert "Choose at least one endpoint or server recipe." in nothing.content.decode()
    llama.refresh_from_db()  # the database keeps the sweep's flags in its own order
    field = {flag: f"sweep_{llama.id}_{i}" for i, flag in enumerate(llama.sweep)}
    unticked = client.post(reverse("run-new"), {**form, "recipes": [llama.id], field["--parallel"]: ["0", "2"]})
    assert "Tick at least one value of -c, or untick llama-q4." in unticked.content.decode()
    two_hosts = client.post(reverse("run-new"), {**form, "recipes": [llama.id, far.id], field["--parallel"]: ["0"],
                                                 field["-c"]: ["0"]})
    assert "these are on lab-1, lab-2" in two_hosts.content.decode()
    forged = client.post(reverse("run-new"), {**form, "recipes": [llama.id], field["--parallel"]: ["7"],
                                              field["-c"]: ["0"]})
    assert "7 is not one of the values llama-q4 allows for --parallel" in forged.content.decode()
    assert not Run.objects.exists()
    r = client.post(reverse("run-new"), {**form, "recipes": [llama.id], field["--parallel"]: ["0", "2"],
                                         field["-c"]: ["1"]})
    assert r.status_code == 302
    run = Run.objects.get()
    assert [lc.setting for lc in run.launches.order_by("setting_index")] == [
        {"--parallel": 1, "-c": 2048}, {"--parallel": 4, "-c": 2048}]
    assert run.queue_name == "host-lab-1" and run.progress_total == 2 * 2 * 2
    purge("host-lab-1")


@pytest.mark.real_server
def test_each_started_server_gets_the_quality_step_against_the_runs_reference(lab_worker, llama_paths):
    """A registered Q8_0 server is the reference; the recipe's Q4_K_M servers, started at each
    setting, are scored against it while they run, then stopped."""
    from benchmarks.models import QualityMeasurement
    from conftest import free_port, wait_http
    from factories import endpoint

    q8_path = subprocess.run(["bash", str(LLM_SERVERS), "variant", "Q8_0"], check=True, capture_output=True,
                             text=True, timeout=1800).stdout.split()[-1]
    port = free_port()
    proc = subprocess.Popen(["bash", str(LLM_SERVERS), "serve", str(port), "--parallel", "2", "-c", "512", "-t", "2",
                             "--swa-full"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "LLAMA_SERVER_MODEL": q8_path}, start_new_session=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 120, proc)
        q8 = endpoint(f"http://127.0.0.1:{port}", name="gemma-q8", backend="llamacpp", host=HOST,
                      quantization="gguf_q8_0")
        q4 = recipe("gemma-q4", *llama_paths, args=LLAMA_ARGS + ["--swa-full"], sweep={"--parallel": [1, 2]})
        run = queue_run(owner=user(), endpoints=[q8], recipes=[q4], prompt_tokens=32, output_tokens=8,
                                  temperature=0.7, concurrency_levels=[1], requests_per_level=2, warmup_requests=0,
                                  quality=True, quality_reference=q8, quality_ctx=32, quality_chunks=2)
        run = finished(run, 300)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)
    assert run.status == Run.SUCCEEDED, why(run)
    rows = {q.endpoint.name: q for q in QualityMeasurement.objects.filter(run=run).select_related("endpoint")}
    assert set(rows) == {"gemma-q8", "gemma-q4 · --parallel 1", "gemma-q4 · --parallel 2"}
    ref = rows["gemma-q8"].figures
    for name in ("gemma-q4 · --parallel 1", "gemma-q4 · --parallel 2"):
        tested = rows[name].figures
        assert not rows[name].error and tested.tokens_scored == ref.tokens_scored == 2 * (32 - 1 - 16)
        assert tested.reference["name"] == "gemma-q8" and 0 <= tested.value("kl_mean") < 0.1
        launch = ServerLaunch.objects.get(run=run, endpoint=rows[name].endpoint)
        assert launch.status == ServerLaunch.STOPPED and gone(launch.figures.pid)
        # Scored while its server ran: after its levels, before it was stopped.
        assert launch.started_at < rows[name].measured_at < launch.finished_at
    assert run.progress_done == run.progress_total


@pytest.mark.browser
def test_the_run_form_offers_recipes_and_their_sweep_within_1366_px(llama_paths, live_server, page):
    from conftest import log_in

    recipe("llama-q4", *llama_paths, sweep={"--parallel": [1, 2, 4, 8, 16], "-c": [8192, 32768]})
    page.set_viewport_size({"width": 1366, "height": 900})
    log_in(page, live_server)
    assert page.locator("#field-recipes input[type=checkbox]").count() == 1
    sweep = page.locator("[id^=field-sweep_] input[type=checkbox]")
    assert sweep.count() == 7 and all(sweep.nth(i).is_checked() for i in range(7))
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], f"the form is {width[0]} px wide in a {width[1]} px window"
    assert page.js_errors == []
