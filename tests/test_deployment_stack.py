"""The team deployment for real: docker/compose.yml built and run on a Docker engine, driven
from this machine as a team would use it, then taken down.

scripts/docker-engine.sh installs and starts the engine where it can (Debian's docker.io,
dockerd started by hand) and builds the images no registry is needed for: a debootstrapped
Debian base and, on it, stand-ins for the official python/postgres/redis images from Debian's
packages (docker/from-debian/). Everything is cached: the base tarball under
~/.cache/v100site-docker, the images in the engine. The stack then runs with exactly the
README's commands (`up -d --build`, `exec web python manage.py createsuperuser`, `register_endpoint`,
the GPU host's `compose.gpu-worker.yml`), in its own compose projects, ports and volumes, with
the official images swapped for the stand-ins through PYTHON_IMAGE / POSTGRES_IMAGE /
REDIS_IMAGE. The inference server is the engine's simulator, a process on the Docker bridge's
host address, which both the team worker (bridge network) and the GPU host's worker (host
network) reach.

Where the engine cannot start (not root, no cgroups, no network for the packages) every test
here is skipped with the reason, in capitals, and a warning. V100SITE_DOCKER_TESTS=require turns
that skip into a failure; =skip skips on purpose.

The restart drills' times (and the build's) go to var/test-deployment-stack.json and to the
terminal.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from conftest import BROWSER_ARGS, free_port, watched

pytestmark = [pytest.mark.docker, pytest.mark.browser]

ROOT = Path(__file__).resolve().parent.parent
DOCKER = ROOT / "docker"
ENGINE = ROOT / "scripts" / "docker-engine.sh"
NO_GPU = ROOT / "tests" / "data" / "compose.gpu-worker.without-gpu.yml"
TIMES_FILE = ROOT / "var" / "test-deployment-stack.json"
PROJECT = "v100site-test"
GPU_PROJECT = "v100site-test-gpu"
APP_IMAGE = "v100site-test:local"
GPU_HOST = "gpu-test"
# The team worker measures the shared queue and the queue of the host "lab" (the simulator's
# machine, which has no worker of its own): the README's WORKER_QUEUES=runs,host-<name>.
LAB_HOST = "lab"
ADMIN_PASSWORD = "admin-pw-" + secrets.token_urlsafe(8)
MEMBER, MEMBER_PASSWORD = "alice", "alice-pw-" + secrets.token_urlsafe(8)
# Short enough for a test, long enough that a run is caught mid-level: a worker that stops
# beating is taken over after RUN_HEARTBEAT_STALE_S; every worker sweeps every RUN_SWEEP_EVERY_S.
TEST_KNOBS = {"RUN_HEARTBEAT_S": "1", "RUN_HEARTBEAT_STALE_S": "8", "RUN_SWEEP_EVERY_S": "2",
              "WEB_CONCURRENCY": "2", "WORKER_STOP_GRACE_PERIOD": "10s",
              # The other test process keeps this host busy: the drills' runs say so but do not wait.
              "RUN_HOST_QUIET_WAIT_S": "0"}


def note(what: str, seconds: float) -> None:
    TIMES[what] = round(seconds, 1)


TIMES: dict[str, float] = {}


# --- the engine and the stack ----------------------------------------------------------------

def clean_env() -> dict:
    """This process's environment without its settings (DATABASE_URL, CELERY_BROKER_URL...):
    compose interpolates the shell's variables before the env file's, and the test's own would
    point the containers at this machine's test database."""
    env = {k: v for k, v in os.environ.items()
           if not re.fullmatch(r"[A-Z0-9_]+", k) or k in ("HOME", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CACHE", "LANG")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return env


def engine_images() -> dict[str, str]:
    """Start the engine and build the local base images (cached); skip, loudly, where it cannot."""
    mode = os.environ.get("V100SITE_DOCKER_TESTS", "")
    if mode == "skip":
        pytest.skip("V100SITE_DOCKER_TESTS=skip: THE DOCKER DEPLOYMENT WAS NOT TESTED")
    started = time.monotonic()
    result = subprocess.run(["bash", str(ENGINE), "images"], capture_output=True, text=True,
                            env=clean_env(), timeout=1200)
    note("engine, base and stand-in images", time.monotonic() - started)
    if result.returncode == 3:  # the engine cannot run here: the script says why
        reason = ("DOCKER CANNOT START ON THIS MACHINE, SO THE DOCKER DEPLOYMENT WAS NOT TESTED: "
                  + result.stderr.strip()[-600:])
        if mode == "require":
            pytest.fail(reason)
        warnings.warn(reason)
        pytest.skip(reason)
    assert result.returncode == 0, f"scripts/docker-engine.sh images failed:\n{result.stderr[-3000:]}"
    return dict(line.split("=", 1) for line in result.stdout.split())


@dataclass
class Stack:
    folder: Path
    team_cmd: list[str]
    gpu_cmd: list[str]
    web_url: str
    db_url: str
    sim_url: str = ""
    sim: subprocess.Popen | None = None
    public_ids: dict[str, str] = field(default_factory=dict)

    def team(self, *args, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return self._run(self.team_cmd, args, timeout, check)

    def gpu(self, *args, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        return self._run(self.gpu_cmd, args, timeout, check)

    def _run(self, cmd, args, timeout, check):
        result = subprocess.run(cmd + list(args), capture_output=True, text=True, env=clean_env(), timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stderr[-3000:]}\n"
                                 + self.logs())
        return result

    def container(self, service: str) -> str:
        cmd = self.gpu if service == "gpu-worker" else self.team
        ids = cmd("ps", "-aq", service).stdout.split()
        assert ids, f"no container for {service}"
        return ids[0]

    def health(self, service: str) -> str:
        out = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{if .State.Health}}"
                              "{{.State.Health.Status}}{{end}}", self.container(service)],
                             capture_output=True, text=True, env=clean_env()).stdout.split()
        return out[-1] if len(out) > 1 else (out[0] if out else "missing")

    def wait_healthy(self, services: list[str], timeout: float) -> float:
        started = time.monotonic()
        while True:
            states = {s: self.health(s) for s in services}
            if all(v == "healthy" for v in states.values()):
                return time.monotonic() - started
            if time.monotonic() - started > timeout or "exited" in states.values():
                raise AssertionError(f"not healthy within {timeout:.0f} s: {states}\n" + self.logs())
            time.sleep(0.5)

    def logs(self) -> str:
        out = []
        for cmd in (self.team_cmd, self.gpu_cmd):
            result = subprocess.run(cmd + ["logs", "--no-color", "--tail", "40"], capture_output=True,
                                    text=True, env=clean_env())
            out.append(result.stdout[-6000:] + result.stderr[-1000:])
        return "\n--- container logs ---\n" + "\n".join(out)

    def sql(self, query: str, *params):
        import psycopg

        with psycopg.connect(self.db_url, connect_timeout=5) as conn:
            return conn.execute(query, params).fetchall()

    def run_row(self, public_id: str) -> dict:
        rows = self.sql("SELECT r.status, r.worker, r.attempts, r.queue_name, r.error, "
                        "(SELECT count(*) FROM benchmarks_levelresult l WHERE l.run_id = r.id) "
                        "FROM benchmarks_run r WHERE r.public_id = %s", public_id)
        assert rows, f"no run {public_id}"
        status, worker, attempts, queue, error, levels = rows[0]
        return dict(status=status, worker=worker, attempts=attempts, queue=queue, error=error, levels=levels)

    def wait_run(self, public_id: str, until, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            row = self.run_row(public_id)
            if until(row):
                return row
            if row["status"] in ("failed", "cancelled", "partial") or time.monotonic() > deadline:
                raise AssertionError(f"run {public_id}: waiting for {what}, got {row}\n" + self.logs())
            time.sleep(0.3)


def write_env(path: Path, values: dict) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def compose_base(project: str, env_file: Path, *files: Path) -> list[str]:
    cmd = ["docker", "compose", "-p", project, "--env-file", str(env_file)]
    for f in files:
        cmd += ["-f", str(f)]
    return cmd


def bridge_gateway(stack: Stack) -> str:
    """This machine's address on the stack's bridge network: a server listening there is
    reached by the containers of that network and by host-network ones alike."""
    out = subprocess.run(["docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}",
                          f"{PROJECT}_default"], capture_output=True, text=True, env=clean_env())
    assert out.returncode == 0 and out.stdout.strip(), out.stderr
    return out.stdout.strip()


def start_simulator(host: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.engine.simulator", "--host", host, "--port", "0",
         "--dialect", "llamacpp", "--prefill-ms", "20", "--decode-ms", "40", "--slots", "4"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"simulator did not start: {line!r}")
    return proc, line.split()[-1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, request):
    images = engine_images()
    # One stack at a time on this machine (its project names are fixed, so that what an
    # interrupted run left is found and removed): a second test session waits here.
    lock = open(Path(os.environ.get("DOCKER_CACHE", Path.home() / ".cache" / "v100site-docker")) / ".stack.lock", "w")
    waited = time.monotonic()
    fcntl.flock(lock, fcntl.LOCK_EX)
    if time.monotonic() - waited > 1:
        note("waited for another test session's stack", time.monotonic() - waited)
    folder = tmp_path_factory.mktemp("stack")
    secret = folder / "secret_key"
    secret.write_text(secrets.token_urlsafe(50) + "\n")
    secret.chmod(0o644)  # read by the containers' user, uid 10001
    pg_password, redis_password = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    ports = {"WEB_PORT": free_port(), "POSTGRES_PORT": free_port(), "REDIS_PORT": free_port()}
    shared = {"SECRET_KEY_HOST_FILE": secret, "V100SITE_IMAGE": APP_IMAGE,
              "PYTHON_IMAGE": images["PYTHON_IMAGE"], **TEST_KNOBS}
    # docker/.env as the README has a team fill it in, plus the stand-ins and the test's ports.
    team_env = write_env(folder / "team.env", {
        "POSTGRES_PASSWORD": pg_password, "REDIS_PASSWORD": redis_password,
        "POSTGRES_IMAGE": images["POSTGRES_IMAGE"], "REDIS_IMAGE": images["REDIS_IMAGE"],
        "WORKER_QUEUES": f"runs,host-{LAB_HOST}", **ports, **shared})
    # docker/gpu-worker.env on the GPU host: the team's services at the addresses it publishes.
    gpu_env = write_env(folder / "gpu-worker.env", {
        "HOST_NAME": GPU_HOST,
        "DATABASE_URL": f"postgres://v100site:{pg_password}@127.0.0.1:{ports['POSTGRES_PORT']}/v100site",
        "CELERY_BROKER_URL": f"redis://:{redis_password}@127.0.0.1:{ports['REDIS_PORT']}/0", **shared})
    s = Stack(folder=folder,
              team_cmd=compose_base(PROJECT, team_env, DOCKER / "compose.yml"),
              gpu_cmd=compose_base(GPU_PROJECT, gpu_env, DOCKER / "compose.gpu-worker.yml", NO_GPU),
              web_url=f"http://127.0.0.1:{ports['WEB_PORT']}",
              db_url=f"postgres://v100site:{pg_password}@127.0.0.1:{ports['POSTGRES_PORT']}/v100site")
    # What an interrupted earlier run may have left.
    s.gpu("down", "-v", "--remove-orphans", check=False)
    s.team("down", "-v", "--remove-orphans", check=False)
    try:
        started = time.monotonic()
        # --build: a team's first `up -d` builds the image because it has none; here one from an
        # earlier checkout may be cached, and this checkout's code is what must be tested.
        s.team("up", "-d", "--build", timeout=900)
        note("team `up -d` (app image build, db, redis, migrate)", time.monotonic() - started)
        started = time.monotonic()
        s.gpu("up", "-d")
        note("gpu worker `up -d`", time.monotonic() - started)
        note("web, worker, gpu-worker healthy after `up`", s.wait_healthy(["db", "redis", "web", "worker", "gpu-worker"], 180))
        migrate = subprocess.run(["docker", "inspect", "-f", "{{.State.ExitCode}}", s.container("migrate")],
                                 capture_output=True, text=True).stdout.strip()
        assert migrate == "0", "migrate did not succeed" + s.logs()
        s.team("exec", "-T", "-e", f"DJANGO_SUPERUSER_PASSWORD={ADMIN_PASSWORD}", "web", "python", "manage.py",
               "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.org")
        s.sim, s.sim_url = start_simulator(bridge_gateway(s))
        yield s
    finally:
        if s.sim is not None:
            s.sim.terminate()
            s.sim.wait(10)
        started = time.monotonic()
        s.gpu("down", "-v", "--remove-orphans", check=False, timeout=120)
        s.team("down", "-v", "--remove-orphans", check=False, timeout=120)
        note("`down` (both projects)", time.monotonic() - started)
        lock.close()  # releases the lock
        TIMES_FILE.parent.mkdir(exist_ok=True)
        TIMES_FILE.write_text(json.dumps(TIMES, indent=2) + "\n")
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print("\ndeployment stack, seconds:\n" + "\n".join(f"  {k}: {v}" for k, v in TIMES.items()))


# --- the browser -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium(stack):
    from playwright.sync_api import sync_playwright

    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        pytest.fail("Debian's chromium is not installed (scripts/test.sh installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, args=BROWSER_ARGS)
        yield browser
        browser.close()


def new_page(browser_or_context):
    """A page of a new context (a new visitor), or of a logged-in context (that member again)."""
    if hasattr(browser_or_context, "new_context"):
        browser_or_context = browser_or_context.new_context(viewport={"width": 1366, "height": 900})
    return watched(browser_or_context.new_page())


def log_in(page, stack: Stack, username: str, password: str, path: str = "/runs/new/") -> None:
    page.goto(f"{stack.web_url}/accounts/login/?next={path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.web_url}{path}")


@pytest.fixture(scope="module")
def admin_page(stack, chromium):
    page = new_page(chromium)
    log_in(page, stack, "admin", ADMIN_PASSWORD, "/admin/")
    return page


@pytest.fixture(scope="module")
def member(stack, chromium, admin_page):
    """The staff member adds a colleague in the admin; she logs in. Her browser: each test opens
    its pages in it, as tabs, because a run page left open reloads itself when a level lands and
    would cut short the next page's navigation."""
    admin_page.goto(f"{stack.web_url}/admin/auth/user/add/")
    admin_page.fill("#id_username", MEMBER)
    admin_page.fill("#id_password1", MEMBER_PASSWORD)
    admin_page.fill("#id_password2", MEMBER_PASSWORD)
    admin_page.click("input[name=_save]")
    admin_page.wait_for_selector(".messagelist .success")
    page = new_page(chromium)
    log_in(page, stack, MEMBER, MEMBER_PASSWORD)
    context = page.context
    page.close()
    return context


@pytest.fixture(scope="module")
def lab_endpoint(stack, admin_page) -> str:
    """The simulator registered in the admin, in Chromium, on the host "lab"."""
    admin_page.goto(f"{stack.web_url}/admin/benchmarks/host/add/")
    admin_page.fill("#id_name", LAB_HOST)
    admin_page.click("input[name=_save]")
    admin_page.wait_for_selector(".messagelist .success")
    admin_page.goto(f"{stack.web_url}/admin/benchmarks/endpoint/add/")
    admin_page.fill("#id_name", "lab-sim")
    admin_page.select_option("#id_host", label=LAB_HOST)
    admin_page.select_option("#id_backend", "llamacpp")
    admin_page.fill("#id_base_url", stack.sim_url)
    admin_page.click("input[name=_save]")
    admin_page.wait_for_selector(".messagelist .success")
    return "lab-sim"


@pytest.fixture(scope="module")
def gpu_endpoint(stack) -> str:
    """The same server registered with the README's command, on the GPU host, whose worker
    created the host when it started (WORKER_HOST)."""
    out = stack.team("exec", "-T", "web", "python", "manage.py", "register_endpoint", "--name", "gpu-sim",
                     "--backend", "llamacpp", "--url", stack.sim_url, "--host", GPU_HOST,
                     "--model", "simulated-7B", "--variant", "Q4_K_M", "--quantization", "gguf_q4_k_m").stdout
    assert "Registered endpoint gpu-sim" in out, out
    return "gpu-sim"


def submit_run(member, stack: Stack, endpoints: list[str], levels: str = "1,2", requests: int = 4,
               output_tokens: int = 10):
    """Queue a run in the form, in a new tab, as a member does; returns the tab, on the run page,
    and the run's public id."""
    page = new_page(member)
    page.goto(f"{stack.web_url}/runs/new/")
    for name in endpoints:
        page.check(f"label:has-text('{name}') input")
    page.fill("input[name=prompt_tokens]", "32")
    page.fill("input[name=output_tokens]", str(output_tokens))
    page.fill("input[name=concurrency_levels]", levels)
    page.fill("input[name=requests_per_level]", str(requests))
    page.click("#more-options summary")  # warm-up is folded with the other options
    page.fill("input[name=warmup_requests]", "1")
    page.click("text=Queue run")
    page.wait_for_url(re.compile(r".*/r/[A-Za-z0-9_-]+/$"))
    return page, page.url.rstrip("/").rsplit("/", 1)[-1]


def queue(member, stack: Stack, endpoints: list[str], **fields) -> str:
    """submit_run, the tab closed: the run is followed in the database."""
    page, public_id = submit_run(member, stack, endpoints, **fields)
    assert page.js_errors == []
    page.close()
    return public_id


def wait_until_served(stack: Stack, started: float, timeout: float = 90) -> None:
    while True:
        try:
            if httpx.get(f"{stack.web_url}/accounts/login/", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() - started < timeout, "web does not answer" + stack.logs()
        time.sleep(0.2)


# --- the tests -------------------------------------------------------------------------------

def test_web_serves_the_static_files_collected_and_compressed_in_the_image(stack):
    login = httpx.get(f"{stack.web_url}/accounts/login/", timeout=10)
    assert login.status_code == 200 and "gunicorn" in login.headers.get("server", "")
    plotly = httpx.get(f"{stack.web_url}/static/plotly/plotly.min.js", headers={"Accept-Encoding": "gzip"}, timeout=30)
    assert plotly.status_code == 200
    assert plotly.headers.get("content-encoding") == "gzip"  # whitenoise's .gz from collectstatic
    assert int(plotly.headers["content-length"]) < 2_000_000


def test_a_member_runs_a_benchmark_through_the_stack_in_chromium(stack, chromium, member, lab_endpoint):
    page, public_id = submit_run(member, stack, [lab_endpoint], levels="1,2", requests=4)
    page.wait_for_selector("#run-status.succeeded", timeout=90_000)
    assert page.locator("#results tbody tr").count() == 2
    cell = page.locator("#results tbody tr[data-concurrency='2'] td[data-metric='aggregate_tok_s']").inner_text()
    assert cell not in ("", "—")
    row = stack.run_row(public_id)
    assert row["queue"] == f"host-{LAB_HOST}" and row["worker"].startswith("shared@"), row
    assert page.js_errors == []
    stack.public_ids["first"] = public_id
    # The permalink, logged out.
    anonymous = new_page(chromium)
    anonymous.goto(f"{stack.web_url}/r/{public_id}/")
    assert anonymous.locator("#run-status").inner_text() == "succeeded"
    assert anonymous.locator("#results tbody tr").count() == 2
    assert anonymous.js_errors == []


def test_a_gpu_hosts_worker_measures_the_run_routed_to_its_queue(stack, member, gpu_endpoint):
    public_id = queue(member, stack, [gpu_endpoint], levels="1", requests=3)
    row = stack.wait_run(public_id, lambda r: r["status"] == "succeeded", 90, "succeeded")
    assert row["queue"] == f"host-{GPU_HOST}", row
    assert row["worker"].startswith(f"{GPU_HOST}@"), row
    probe = stack.sql("SELECT probe_status FROM benchmarks_host WHERE name = %s", GPU_HOST)
    assert probe and "no NVIDIA driver" in probe[0][0], probe  # this machine has none: said so


def test_drill_restarting_redis_with_runs_queued_loses_none(stack, member, lab_endpoint):
    busy = queue(member, stack, [lab_endpoint], levels="1,2", requests=6, output_tokens=40)
    stack.wait_run(busy, lambda r: r["status"] == "running", 60, "running")
    queued = [queue(member, stack, [lab_endpoint], levels="1", requests=2) for _ in range(2)]
    assert stack.run_row(busy)["status"] == "running"  # Redis goes away under a run being measured
    redis_llen = ["exec", "-T", "redis", "redis-cli", "--no-auth-warning", "LLEN", f"host-{LAB_HOST}"]
    assert stack.team(*redis_llen).stdout.strip() == "2"
    started = time.monotonic()
    stack.team("restart", "redis")
    note("redis drill: `restart redis`", time.monotonic() - started)
    stack.wait_healthy(["redis"], 60)
    note("redis drill: restart -> redis healthy", time.monotonic() - started)
    # The append-only file kept both messages: each is still queued, or the worker took it once the
    # busy run ended (a loaded machine can stretch the restart past it) and claimed its run.
    deadline = time.monotonic() + 15
    while True:
        waiting = int(stack.team(*redis_llen).stdout.strip())
        taken = sum(stack.run_row(p)["status"] != "queued" for p in queued)
        if waiting + taken >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)  # a message just taken is claimed within moments
    assert waiting + taken >= 2, f"{waiting} message(s) in the queue, {taken} run(s) taken: one was lost"
    for public_id in [busy] + queued:
        stack.wait_run(public_id, lambda r: r["status"] == "succeeded", 120, "succeeded")
    note("redis drill: restart -> the 3 runs finished", time.monotonic() - started)
    assert {stack.run_row(p)["attempts"] for p in queued} == {1}


def test_drill_killing_the_worker_mid_run_another_resumes_it(stack, member, lab_endpoint, gpu_endpoint):
    # Two hosts: the shared queue, which both workers consume.
    public_id = queue(member, stack, [lab_endpoint, gpu_endpoint], levels="1,2", requests=6, output_tokens=20)
    first = stack.wait_run(public_id, lambda r: r["status"] == "running" and r["levels"] >= 1, 90, "a level stored")
    assert first["queue"] == "runs", first
    kept = {r[0] for r in stack.sql("SELECT l.id FROM benchmarks_levelresult l JOIN benchmarks_run r "
                                    "ON r.id = l.run_id WHERE r.public_id = %s", public_id)}
    victim = "gpu-worker" if first["worker"].startswith(f"{GPU_HOST}@") else "worker"
    subprocess.run(["docker", "kill", stack.container(victim)], check=True, capture_output=True)
    killed = time.monotonic()
    resumed = stack.wait_run(public_id, lambda r: r["status"] == "running" and r["worker"] != first["worker"],
                             90, "another worker")
    note(f"kill drill: `docker kill` {victim} -> resumed by the other worker", time.monotonic() - killed)
    done = stack.wait_run(public_id, lambda r: r["status"] == "succeeded", 120, "succeeded")
    note("kill drill: kill -> run finished", time.monotonic() - killed)
    assert resumed["attempts"] == 2 and done["levels"] == 4, done
    after = {r[0] for r in stack.sql("SELECT l.id FROM benchmarks_levelresult l JOIN benchmarks_run r "
                                     "ON r.id = l.run_id WHERE r.public_id = %s", public_id)}
    assert kept <= after, "the levels stored before the kill were measured again"
    # The killed worker comes back (a killed container is not restarted: `docker kill` is a stop).
    started = time.monotonic()
    (stack.gpu if victim == "gpu-worker" else stack.team)("start", victim)
    stack.wait_healthy([victim], 120)
    note(f"kill drill: `start` {victim} -> healthy", time.monotonic() - started)


def test_drill_restarting_web_keeps_sessions_and_permalinks(stack, chromium, member):
    public_id = stack.public_ids.get("first")
    assert public_id, "needs the run of test_a_member_runs_a_benchmark_through_the_stack_in_chromium"
    started = time.monotonic()
    stack.team("restart", "web")
    note("web drill: `restart web`", time.monotonic() - started)
    wait_until_served(stack, started)
    note("web drill: restart -> first page served", time.monotonic() - started)
    stack.wait_healthy(["web"], 60)
    note("web drill: restart -> healthy", time.monotonic() - started)
    # Still logged in: the session lives in PostgreSQL and the key came from the secret file.
    member_page = new_page(member)
    member_page.goto(f"{stack.web_url}/runs/new/")
    assert member_page.url == f"{stack.web_url}/runs/new/"
    assert member_page.locator("text=Queue run").count() == 1
    anonymous = new_page(chromium)
    anonymous.goto(f"{stack.web_url}/r/{public_id}/")
    assert anonymous.locator("#run-status").inner_text() == "succeeded"
    assert anonymous.js_errors == [] and member_page.js_errors == []


def test_drill_upgrading_runs_the_migrations_once_then_starts_the_new_web_and_worker(stack, chromium, member):
    """The README's upgrade, `up -d --build`; --force-recreate stands in for a new image (this
    checkout has no newer commit to pull). PostgreSQL and Redis are left running."""
    public_id = stack.public_ids.get("first")
    assert public_id, "needs the run of test_a_member_runs_a_benchmark_through_the_stack_in_chromium"
    since = subprocess.run(["date", "+%s.%N"], capture_output=True, text=True).stdout.strip()
    db_before = stack.container("db")
    started = time.monotonic()
    stack.team("up", "-d", "--build", "--force-recreate", "migrate", "web", "worker", timeout=600)
    note("upgrade drill: `up -d --build` (recreating migrate, web, worker)", time.monotonic() - started)
    wait_until_served(stack, started)
    note("upgrade drill: start -> first page served", time.monotonic() - started)
    until = subprocess.run(["date", "+%s.%N"], capture_output=True, text=True).stdout.strip()
    events = subprocess.run(
        ["docker", "events", "--since", since, "--until", until, "--filter", f"label=com.docker.compose.project={PROJECT}",
         "--filter", "type=container", "--format", "{{.Actor.Attributes.name}} {{.Action}}"],
        capture_output=True, text=True, env=clean_env(), timeout=30).stdout.splitlines()
    order = [e for e in events if e.split()[1] in ("start", "die")]
    migrate = [i for i, e in enumerate(order) if e.startswith(f"{PROJECT}-migrate-1 ")]
    assert [order[i].split()[1] for i in migrate] == ["start", "die"], order  # once
    for service in ("web", "worker"):
        stopped = order.index(f"{PROJECT}-{service}-1 die")
        restarted = order.index(f"{PROJECT}-{service}-1 start")
        # The old one is gone before the migrations; the new one starts once they succeeded.
        assert stopped < migrate[0] < migrate[1] < restarted, order
    assert not any(e.startswith((f"{PROJECT}-db-1 ", f"{PROJECT}-redis-1 ")) for e in order), order
    assert stack.container("db") == db_before
    # Every migration of this checkout is applied (exit 1 if one is not).
    stack.team("exec", "-T", "web", "python", "manage.py", "migrate", "--check")
    stack.wait_healthy(["web", "worker"], 90)
    note("upgrade drill: start -> web and worker healthy", time.monotonic() - started)
    member_page = new_page(member)
    member_page.goto(f"{stack.web_url}/runs/new/")
    assert member_page.url == f"{stack.web_url}/runs/new/"  # still logged in
    anonymous = new_page(chromium)
    anonymous.goto(f"{stack.web_url}/r/{public_id}/")
    assert anonymous.locator("#run-status").inner_text() == "succeeded"
