"""A run's life with the real worker beside a simulated server: what preflight records when the
server's model list or tokenizer fails, the API key on the wire, HTTPS endpoints, a cancel
after a level, and the "Probe GPUs now" task on a host's own worker."""
import subprocess
import time

import pytest
from django.urls import reverse

from benchmarks import services
from benchmarks.engine.gpu import probe
from benchmarks.models import Host, RequestRecord, Run
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint, user
from test_fault_tolerance import create_run, finished, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def findings(run, e) -> dict:
    return {f["check"]: f for f in run.preflight[str(e.id)]}


def errors(run, e) -> set:
    return set(RequestRecord.objects.filter(level__run=run, level__endpoint=e).values_list("error", flat=True))


@pytest.fixture
def private_worker(settings):
    """Start a worker of one's own (its own queue, other settings); stopped after the test."""
    started = []

    def start(name, **env):
        settings.CELERY_TASK_DEFAULT_QUEUE = queue = f"{name}-queue"
        started.append(spawn_worker(worker_env(CELERY_DEFAULT_QUEUE=queue, **env), name))
        return started[-1]

    yield start
    for w in started:
        stop_worker(w)


# --- preflight ---------------------------------------------------------------------------------

def test_a_failing_model_list_fails_the_preflight_with_its_cause(simulator, celery_worker_process):
    e = endpoint(simulator(fail_paths="/v1/models=503").url)
    run = finished(create_run([e]))
    assert run.status == Run.FAILED
    found = findings(run, e)
    assert found["health"]["ok"] and list(found) == ["health", "models"]
    detail = found["models"]["detail"]
    assert not found["models"]["ok"] and detail.startswith("/v1/models failed: HTTPStatusError: Server error '503")
    assert errors(run, e) == {f"preflight failed: models: {detail}"}


def test_a_server_whose_tokenizer_fails_is_measured_with_text_prompts_and_says_so(client, simulator,
                                                                                 celery_worker_process):
    broken = endpoint(simulator(fail_paths="/tokenize=500").url, name="broken-tokenizer")
    working = endpoint(simulator().url, name="working-tokenizer")
    run = finished(create_run([broken, working], prompt_tokens=48))
    assert run.status == Run.SUCCEEDED, run.error
    tokenize = findings(run, broken)["tokenize"]
    assert not tokenize["ok"] and tokenize["detail"] == (
        "/tokenize answered HTTP 500: the prompts are text, their length calibrated against the server's "
        "usage.prompt_tokens")
    assert findings(run, working)["tokenize"]["ok"]
    assert "distinct token ids" in findings(run, working)["tokenize"]["detail"]
    # Text prompts calibrated on the warmup still have the asked length (the simulator counts
    # one token per word).
    prompts = set(RequestRecord.objects.filter(level__endpoint=broken).values_list("prompt_tokens", flat=True))
    assert prompts == {48}
    assert "/tokenize answered HTTP 500" in client.get(run.get_absolute_url()).content.decode()


# --- the API key -------------------------------------------------------------------------------

def test_the_api_key_reaches_the_server_as_a_bearer_header(simulator, celery_worker_process):
    sim = simulator(api_key="sk-lab-7f3e")  # 401 for every request without the right key
    right = endpoint(sim.url, name="right-key", api_key="sk-lab-7f3e")
    wrong = endpoint(sim.url, name="wrong-key", api_key="sk-other")
    run = finished(create_run([right, wrong]))
    assert run.status == Run.PARTIAL
    assert set(run.levels.filter(endpoint=right).values_list("completed", "failed")) == {(8, 0)}
    models = findings(run, wrong)["models"]
    assert not models["ok"] and "401 Unauthorized" in models["detail"]
    # Every request of the right endpoint carried the key: the server refused only the other's.
    assert sim.stats()["unauthorized"] == 1  # the wrong endpoint's /v1/models; its run stopped there


# --- HTTPS -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1: (cert.pem, key.pem)."""
    cert, key = (tmp_path_factory.mktemp("tls") / name for name in ("cert.pem", "key.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert], check=True, capture_output=True)
    return cert, key


def test_an_https_endpoint_whose_certificate_is_not_trusted_fails_its_preflight(simulator, certificate,
                                                                                celery_worker_process):
    cert, key = certificate
    sim = simulator(tls_cert=str(cert), tls_key=str(key))
    assert sim.url.startswith("https://127.0.0.1:")
    e = endpoint(sim.url)
    run = finished(create_run([e]))
    assert run.status == Run.FAILED
    health = findings(run, e)["health"]
    assert not health["ok"] and "CERTIFICATE_VERIFY_FAILED" in health["detail"]
    assert "self-signed certificate" in health["detail"]
    assert sim.stats()["requests"] == 0  # nothing was sent over a connection it could not trust


def test_an_https_endpoint_is_measured_when_the_worker_trusts_its_ca(simulator, certificate, private_worker):
    cert, key = certificate
    private_worker("tls", SSL_CERT_FILE=cert)  # the worker's CA bundle: the test's own CA
    sim = simulator(tls_cert=str(cert), tls_key=str(key), decode_ms=2)
    e = endpoint(sim.url)
    run = finished(create_run([e]))
    assert run.status == Run.SUCCEEDED, (run.error, run.preflight)
    assert all(f["ok"] for f in run.preflight[str(e.id)])
    assert set(run.levels.values_list("completed", flat=True)) == {8}
    assert sim.stats()["requests"] >= 16


# --- cancel ------------------------------------------------------------------------------------

def test_a_run_cancelled_after_a_level_keeps_it_and_stores_no_later_level(simulator, celery_worker_process):
    # One request at a time, ~0.25 s each: every level takes 3 s, longer than a worker takes to
    # notice a cancel.
    sim = simulator(decode_ms=25, slots=1)
    run = create_run([endpoint(sim.url)], concurrency_levels=[1, 2, 4], requests_per_level=12, output_tokens=10)
    wait_for(lambda: run.levels.count() == 1, 60, "the first level")
    first = run.levels.get()
    first_requests = list(first.requests.values_list("id", flat=True))
    assert len(first_requests) == 12 and not first.requests.exclude(error="").exists()
    assert services.run_cancel(run=run)
    wait_for(lambda: sim.stats()["open_connections"] == 0, 10, "the worker to stop")
    sent = sim.stats()["requests"]
    time.sleep(2)  # a worker that carried on would send and store more meanwhile
    run.refresh_from_db()
    assert run.status == Run.CANCELLED and run.progress_note == "cancelled by a user"
    assert list(run.levels.values_list("id", flat=True)) == [first.id]
    assert list(first.requests.values_list("id", flat=True)) == first_requests  # kept as it was
    assert sim.stats()["requests"] == sent


# --- "Probe GPUs now" -------------------------------------------------------------------------

def test_probe_now_asks_the_host_s_own_worker_which_probes_its_gpus(client, private_worker):
    private_worker("probe-box", WORKER_HOST="probe-box")
    wait_for(lambda: Host.objects.filter(name="probe-box", probed_at__isnull=False).exists(), 30, "the probe at start")
    host = Host.objects.get(name="probe-box")
    Host.objects.filter(id=host.id).update(probe_status="", probed_at=None)  # forget it
    other = Host.objects.create(name="elsewhere")
    from benchmarks.tasks import host_probe_task
    # A probe meant for another host that reaches this worker is not run here.
    host_probe_task.apply_async((other.name,), queue=host.queue_name)
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_host_changelist"), {"action": "probe_now", "_selected_action": [host.id]},
                    follow=True)
    assert "Asked the workers of 1 host(s) to probe their GPUs" in r.content.decode()
    wait_for(lambda: Host.objects.get(id=host.id).probed_at is not None, 30, "the probe asked for")
    host.refresh_from_db()
    assert host.probe_status == probe().status  # what NVML says on this machine ("no NVIDIA driver: …" here)
    other.refresh_from_db()
    assert other.probed_at is None and other.probe_status == ""  # the worker took it and left it alone
