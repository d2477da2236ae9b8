"""Shared fixtures: real PostgreSQL and Redis (from the environment), a real Celery worker
process, the simulated server, and a real llama.cpp server."""
from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.engine.simulator import SimConfig, SimulatorProcess

ROOT = Path(__file__).resolve().parent.parent
LLM_SERVERS = ROOT / "scripts" / "llm-servers.sh"


def pytest_configure(config):
    """Each pytest-xdist worker gets a Redis database of its own for the broker (gw0 the one
    configured, gw1 the one below...), as pytest-django gives it its own test database: a
    worker's Celery processes must never take another's runs."""
    # The pre-run quiet-host check (engine.host_check) reads the CPUs for a second and would wait
    # while the other test process works: off for the suite (its worker processes inherit this),
    # on in tests/test_host_check.py.
    from django.conf import settings as django_settings

    os.environ.setdefault("RUN_HOST_CHECK_S", "0")
    django_settings.RUN_HOST_CHECK_S = float(os.environ["RUN_HOST_CHECK_S"])
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw"):
        return
    from django.conf import settings

    url = settings.CELERY_BROKER_URL
    head, _, db = url.rpartition("/")
    if url.startswith(("redis://", "rediss://")) and db.isdigit():
        from v100site.celery import app

        index = int(db) - int(worker[2:])
        if index < 0:
            raise pytest.UsageError(f"{worker} has no Redis database below {url}: run fewer test workers")
        url = f"{head}/{index}"
        # Celery prefers the environment's CELERY_BROKER_URL to its settings; the app may have read them.
        os.environ["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL = app.conf.broker_url = url
        if settings.CELERY_RESULT_BACKEND and settings.CELERY_RESULT_BACKEND.startswith("redis"):
            settings.CELERY_RESULT_BACKEND = app.conf.result_backend = url


@pytest.fixture
def simulator():
    """Start a simulator process with the given settings; stopped after the test."""
    started = []

    def start(**settings) -> SimulatorProcess:
        sim = SimulatorProcess(SimConfig(**settings)).__enter__()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.__exit__(None, None, None)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{url}: the server process exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer 200 within {timeout:.0f} s")


def worker_env(**overrides) -> dict:
    """The environment of a worker process: the test database and broker, plus overrides."""
    from django.conf import settings
    from django.db import connection

    db = connection.settings_dict
    env = dict(os.environ)
    env["DATABASE_URL"] = (f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
                           if "postgresql" in db["ENGINE"] else f"sqlite:///{db['NAME']}")
    env["CELERY_BROKER_URL"] = settings.CELERY_BROKER_URL
    env["LAB_ALLOW_INLINE_CODE"] = "1"  # the suite's stand-in servers are `python -c` programs
    env.update({k: str(v) for k, v in overrides.items()})
    return env


def spawn_worker(env: dict, name: str = "worker", queue: str = "") -> subprocess.Popen:
    """Start `celery worker` (solo pool, the shared queue or `queue`) and wait until it is ready."""
    from django.conf import settings

    # One log per test session: two sessions on one machine (different test databases) must not
    # read each other's "ready".
    log_path = ROOT / "var" / f"test-{name}-{os.getpid()}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "v100site", "worker", "--pool", "solo", "--concurrency", "1",
         "-Q", queue or settings.CELERY_TASK_DEFAULT_QUEUE, "--loglevel", "INFO", "-n", f"{name}@%h",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return _started(proc, log_path, "ready", "celery worker")


def spawn_beat(env: dict) -> subprocess.Popen:
    """Start `celery beat` with the database scheduler (django-celery-beat), checking the
    schedules every second, and wait until it has started."""
    log_path = ROOT / "var" / f"test-beat-{os.getpid()}.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "v100site", "beat", "--loglevel", "DEBUG", "--max-interval", "1",
         "--scheduler", "django_celery_beat.schedulers:DatabaseScheduler"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    return _started(proc, log_path, "beat: Starting", "celery beat")


def _started(proc: subprocess.Popen, log_path: Path, marker: str, what: str) -> subprocess.Popen:
    """Wait until `proc`'s log shows `marker` (a minute at most)."""
    proc.log_path = log_path
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if marker in log_path.read_text():
            return proc
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: " + log_path.read_text()[-2000:])
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"{what} did not start")


def stop_worker(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def close_other_sessions(django_db_blocker) -> None:
    """Sessions left by workers or live-server threads would block dropping the test DB."""
    from django.db import connection

    if "postgresql" in connection.settings_dict["ENGINE"]:
        with django_db_blocker.unblock(), connection.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()")


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker):
    """A real `celery worker` process on the test database and the test broker, consuming
    the shared queue. Needs transactional tests (the worker sees committed rows only)."""
    from django.conf import settings

    assert not settings.CELERY_BROKER_URL.startswith("memory"), "tests need a real broker"
    from v100site.celery import app

    app.control.purge()  # nothing left over from an earlier test session
    proc = spawn_worker(worker_env())
    yield proc
    stop_worker(proc)
    close_other_sessions(django_db_blocker)


@pytest.fixture(autouse=True)
def stand_in_servers(settings):
    """This machine is a test bench: the lab may start the suite's `python -c` stand-in servers
    (LAB_ALLOW_INLINE_CODE; off on a real host, where such a recipe is refused)."""
    settings.LAB_ALLOW_INLINE_CODE = True


@pytest.fixture(autouse=True)
def one_real_server_test_at_a_time(request):
    """Tests marked real_server run one at a time across the test processes. Each drives a model
    server that wants a thread per core: two side by side on 2 cores slowed each other tenfold (a
    cold CI run: the variant ranking took 502 s instead of about 50, and the vLLM timing test
    beside it found its client stalled on every attempt for its whole 300 s)."""
    if request.node.get_closest_marker("real_server") is None:
        yield
        return
    (ROOT / "var").mkdir(exist_ok=True)
    with open(ROOT / "var" / "real-server-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        yield


@pytest.fixture(scope="session")
def llama_server():
    """A real llama.cpp llama-server (built from the llama-cpp-python sdist) serving the Gemma 3
    270M Q4_K_M GGUF on the CPU. scripts/test.sh builds and caches both first."""
    binary = subprocess.run(["bash", str(LLM_SERVERS), "path"], capture_output=True, text=True).stdout.split()
    if len(binary) != 2 or not all(Path(p).exists() for p in binary):
        pytest.fail("llama-server or its model is not built: run `scripts/llm-servers.sh build` and `... model` "
                    "(scripts/test.sh does it)")
    port = free_port()
    log_path = ROOT / "var" / f"test-llama-server-{os.getpid()}.log"
    # The script prints why the server died (its log tail and exit signal); keep that for the error.
    proc = subprocess.Popen(["bash", str(LLM_SERVERS), "serve", str(port), "--parallel", "4", "-c", "4096",
                             "-t", "2"], stdout=subprocess.DEVNULL, stderr=open(log_path, "w"),
                            env={**os.environ, "LLAMA_SERVER_LOG": str(log_path.with_suffix(".server.log"))})
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(url + "/health", 120, proc)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{log_path.read_text()[-3000:]}") from exc
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="session")
def vllm_server():
    """`scripts/llm-servers.sh vllm-serve` on a free port; stopped after the session. The setup
    is idempotent (instant when cached, a few minutes on a fresh machine)."""
    subprocess.run(["bash", str(LLM_SERVERS), "vllm-setup"], check=True, stdout=subprocess.DEVNULL,
                   timeout=1800)
    port = free_port()
    (ROOT / "var").mkdir(exist_ok=True)
    log_path = ROOT / "var" / f"test-vllm-{os.getpid()}.log"
    log = open(log_path, "w")
    # Its own process group: vLLM starts an engine-core and a worker process under it.
    proc = subprocess.Popen(["bash", str(LLM_SERVERS), "vllm-serve", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_http(url + "/health", 240, proc)  # ~75-100 s here: imports, torch.compile, warmup
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n{log_path.read_text()[-3000:]}") from exc
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture
def browser(chromium_path, live_server, monkeypatch):
    """Debian's chromium driven by Playwright, against the live test server."""
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # still plain synchronous code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=BROWSER_ARGS)
        yield b
        b.close()


# Chromium aborts the requests in flight whenever the machine's network addresses change, as
# they do each time Docker creates a network or a container interface (the deployment test, in
# the other test process): the machine's doing, not the page's (chromium issue 41465264). The
# page's polls try again; a page that cannot load still fails its test.
MACHINE_NETWORK_EVENTS = ("net::ERR_NETWORK_CHANGED",)


def watched(page):
    """Collect the page's JavaScript errors in `page.js_errors`."""
    page.js_errors = []
    page.on("pageerror", lambda exc: page.js_errors.append(str(exc)))
    page.on("console", lambda msg: msg.type == "error" and not msg.text.endswith(MACHINE_NETWORK_EVENTS)
            and page.js_errors.append(msg.text))
    return page


@pytest.fixture
def page(browser):
    return watched(browser.new_page())


def log_in(page, live_server, path="/runs/new/"):
    """Log in as the member "alice" through the login form, landing on `path`."""
    from factories import user

    user()
    page.goto(live_server.url + path)
    page.fill("input[name=username]", "alice")
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("button[type=submit]")
    # The landing page's scripts have run (its form's fields shown or hidden by them) before a
    # test touches it: a click only waits for the navigation to begin (a CI run checked a radio
    # before run_form.js had set its fields, and saw none shown).
    page.wait_for_load_state("load")


@pytest.fixture
def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(path):
        pytest.fail("Debian's chromium is not installed (scripts/test.sh installs it)")
    return path
