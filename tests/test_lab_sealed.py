"""The lab's allowlist with a real worker (a `celery worker` process for host lab-sealed, on the
test database and broker, holding a database URL, a broker URL and a secret key): a recipe or a
sweep setting whose final command or environment the host does not allow never starts a
process, and its refusal is stored with its launch; a server it does start sees none of the
worker's secrets, and, run as LAB_RUN_AS, cannot read the worker's environment either. The
"server" is a small script (test_launcher's PROBE_SERVER) that marks that it ran and says what
it sees."""
import os
import pwd
from pathlib import Path

import pytest
from celery import Celery
from django.core.exceptions import ValidationError

from benchmarks.engine import backends, launcher
from benchmarks.models import Host, Run, ServerLaunch, ServerRecipe
from conftest import spawn_worker, stop_worker, worker_env
from factories import user, queue_run
from test_fault_tolerance import wait_for
from test_launcher import SECRETS, open_folder, own_env, probe_server, throwaway_user

pytestmark = pytest.mark.django_db(transaction=True)
HOST = "lab-sealed"


@pytest.fixture(scope="module")
def sealed(django_db_setup, django_db_blocker):
    """The worker, its folders and the pretend server it may start (as a throwaway user where
    one can be made); yields (worker, folder, script, run_as)."""
    from django.conf import settings

    with throwaway_user("sealed") as run_as, open_folder() as folder:
        script = probe_server(folder)
        (folder / "models").mkdir()
        (folder / "state").mkdir()
        env = worker_env(WORKER_HOST=HOST, LAB_EXECUTABLES=script, LAB_MODEL_DIRS=folder / "models",
                         LAB_STATE_DIR=folder / "state", LAB_PORTS="18410-18419", LAB_RUN_AS=run_as or "",
                         LAB_START_TIMEOUT_S=20, LAB_STOP_GRACE_S=2, LAB_FREED_TIMEOUT_S=2,
                         SECRET_KEY="sealed-secret-key-the-servers-must-not-see")
        assert set(SECRETS) <= set(env)
        channel = Celery(broker=settings.CELERY_BROKER_URL, set_as_current=False).connection().default_channel
        for queue in ("lab-sealed", f"host-{HOST}"):
            channel.queue_purge(queue)
        worker = spawn_worker(env, "lab-sealed", queue="lab-sealed")
        try:
            yield worker, folder, script, run_as
        finally:
            stop_worker(worker)


def recipe(name, script, folder, args=("--host", "{host}", "--port", "{port}"), form=True, **fields):
    host, _ = Host.objects.get_or_create(name=HOST)
    r = ServerRecipe(name=name, host=host, backend="llamacpp", executable=str(script),
                     model_path=str(folder / "models" / "m.gguf"), args=list(args), **fields)
    if form:
        r.full_clean()
    r.save()
    return r


def measured(recipes) -> Run:
    run = queue_run(owner=user(), endpoints=[], recipes=recipes, sweep={}, prompt_tokens=32,
                              output_tokens=8, temperature=0.7, concurrency_levels=[1], requests_per_level=1,
                              warmup_requests=0)
    wait_for(lambda: Run.objects.get(id=run.id).is_finished, 60, f"run {run.id} to finish")
    return Run.objects.get(id=run.id)


def test_a_recipe_or_sweep_setting_the_host_does_not_allow_never_starts_and_says_why(sealed):
    worker, folder, script, _ = sealed
    state = folder / "state"

    def traces():  # what a start leaves: the pretend server's mark, the worker's log and record of it
        return {*(folder / "ran").iterdir(), *state.glob("logs/*"), *state.glob("servers/*.json")}

    before = traces()
    llama_arg = recipe("llama-arg-host", script, folder, form=False, env={"LLAMA_ARG_HOST": "0.0.0.0"})
    # The form refuses it too; the worker does not trust the database to hold only what the form let by.
    with pytest.raises(ValidationError, match="reads it as a flag"):
        llama_arg.full_clean()
    # The recipe form (the admin's) judges flags as the worker does: by what each does.
    with pytest.raises(ValidationError, match="the flag --mcp-servers-json is refused on a lab host"):
        recipe("mcp", script, folder, args=["--port", "{port}", "--mcp-servers-json", '{"x": {"command": "sh"}}'])
    with pytest.raises(ValidationError, match="the flag --no-such-flag is not a flag llama-server"):
        recipe("unknown", script, folder, args=["--port", "{port}", "--no-such-flag"])
    refused = {  # recipe -> its launches' refusals, in setting order
        recipe("host-in-args", script, folder, args=["--host", "0.0.0.0", "--port", "{port}"]):
            ["not 0.0.0.0 (a --host in its arguments)"],
        recipe("host-in-sweep", script, folder, sweep={"--host": ["0.0.0.0", "::"]}):
            ["not 0.0.0.0", "not ::"],
        recipe("second-port", script, folder, args=["--host", "{host}", "--port", "{port}", "--port", "9999"]):
            ["listen on port 9999"],
        recipe("port-in-sweep", script, folder, sweep={"--port": [9999]}): ["listen on port 9999"],
        llama_arg: ["llama.cpp reads it as a flag"],
        recipe("home", script, folder, env={"HOME": "/root"}): ["may not set HOME on this host"],
        # Rows written past the recipe form (which refuses them too): the worker judges them again.
        recipe("joined-model", script, folder, args=["-m/etc/shadow", "--port", "{port}"], form=False):
            ["the flag -m/etc/shadow is not a flag llama-server"],
        recipe("file-url", script, folder, args=["--port", "{port}", "--chat-template-file", "file:///etc/shadow"]):
            ["names a path outside"],
        recipe("relative", script, folder, args=["--port", "{port}", "--grammar-file", "servers/1.json"]):
            ["the relative path 'servers/1.json', which is refused"],
        recipe("log-over-model", script, folder, args=["--port", "{port}", "--log-file", "{model}"], form=False):
            ["the flag --log-file is refused on a lab host: it writes a file on the host"],
    }
    run = measured(list(refused))
    assert run.status == Run.FAILED, run.error  # nothing was measured
    for r, reasons in refused.items():
        launches = list(run.launches.filter(recipe=r).order_by("setting_index"))
        assert [lc.status for lc in launches] == [ServerLaunch.REFUSED] * len(reasons), r.name
        for launch, reason in zip(launches, reasons):
            f = launch.figures
            assert reason in f.refusal, (r.name, f.refusal)
            assert f.pid is None and f.command == "" and launch.endpoint is None
    # Nothing ran: no mark from the pretend server, no log or record of a start.
    assert traces() == before
    assert worker.poll() is None


def test_a_started_server_sees_none_of_the_workers_secrets(sealed):
    worker, folder, script, run_as = sealed
    probe = recipe("probe", script, folder, env={"OMP_NUM_THREADS": "2"})
    run = measured([probe])
    launch = run.launches.get()
    f = launch.figures
    # It ran (and exited: a pretend server never answers /health), and its log says what it saw.
    assert launch.status == ServerLaunch.DID_NOT_START and f.pid, f.refusal or f.failure
    assert (folder / "ran" / str(f.pid)).exists()
    assert f"parent {worker.pid}" in f.log_tail, f.log_tail  # the worker started it itself
    env = own_env(f.log_tail)
    assert env["OMP_NUM_THREADS"] == "2" and not set(SECRETS) & set(env), env
    assert set(env) <= set(launcher.INHERITED_ENV) | {"OMP_NUM_THREADS"} | set(backends.get("llamacpp").offline_env), env
    assert all(env[name] == "1" for name in backends.get("llamacpp").offline_env), "offline, whatever the recipe says"
    # The worker does hold them (this test, root, can read its environment): the server's is clean.
    worker_environ = Path(f"/proc/{worker.pid}/environ").read_bytes().decode()
    assert all(f"{name}=" in worker_environ for name in SECRETS)
    if not run_as:
        pytest.skip("its own environment is clean; reading the worker's needs servers run as another user "
                    "(LAB_RUN_AS), which needs root and useradd here")
    assert f"uid {pwd.getpwnam(run_as).pw_uid} " in f.log_tail and "parent-environ unreadable" in f.log_tail, f.log_tail
    assert env["HOME"] == "/nonexistent" and env["USER"] == run_as
    assert os.stat(folder / "ran" / str(f.pid)).st_uid == pwd.getpwnam(run_as).pw_uid
