"""Where a worker may be sent: endpoint addresses judged in every spelling the resolver reads,
host names checked when the worker connects, a deployment's own networks, and an endpoint
whose URL fails at run time failing alone."""
import asyncio
import ipaddress
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest
from celery import Celery
from django.core.management import CommandError, call_command
from django.urls import reverse
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from benchmarks.engine import addresses
from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.client import Load, Session, Target, Workload
from benchmarks.models import Endpoint, LevelResult, RequestRecord, Run, endpoint_url_problem
from conftest import ROOT, spawn_worker, stop_worker, worker_env
from factories import endpoint, user, queue_run

METADATA = "169.254.169.254"


@pytest.mark.parametrize("url, why", [
    ("http://2852039166:8000", "2852039166 (that is, 169.254.169.254) is link-local (cloud metadata)"),
    ("http://0xa9fea9fe/", "(that is, 169.254.169.254) is link-local"),
    ("http://0xA9.0xFE.0xA9.0xFE/", "(that is, 169.254.169.254) is link-local"),
    ("http://0251.0376.0251.0376/", "Not a valid URL"),  # httpx refuses it; inet_aton would not
    ("http://169.254.43518/", "(that is, 169.254.169.254) is link-local"),
    ("http://169.16689662/", "(that is, 169.254.169.254) is link-local"),
    ("http://169.254.169.254./", "(that is, 169.254.169.254) is link-local"),
    ("http://[::ffff:169.254.169.254]/", "embeds 169.254.169.254 (IPv4-mapped), which is link-local"),
    ("http://[::ffff:a9fe:a9fe]:8000/", "embeds 169.254.169.254 (IPv4-mapped)"),
    ("http://[::ffff:0:a9fe:a9fe]/", "embeds 169.254.169.254 (IPv4-translated)"),
    ("http://[64:ff9b::a9fe:a9fe]/", "embeds 169.254.169.254 (NAT64)"),
    ("http://[64:ff9b:1:a9fe:a9:fe00::]/", "embeds 169.254.169.254 (NAT64)"),
    ("http://[2002:a9fe:a9fe::]/", "embeds 169.254.169.254 (6to4)"),
    ("http://[::a9fe:a9fe]/", "embeds 169.254.169.254 (IPv4-compatible)"),
    ("http://metadata.google.internal./computeMetadata", "metadata.google.internal is a metadata service"),
    ("http://METADATA.Google.Internal/", "metadata.google.internal is a metadata service"),
    ("http://[fd00:ec2::254]/", "cloud metadata address (AWS)"),
    ("http://100.100.100.200/", "cloud metadata address (Alibaba Cloud)"),
    ("http://[fe80::1%25eth0]:8000", "is link-local"),
    ("http://0/", "(that is, 0.0.0.0) is in 0.0.0.0/8"),
    ("http://0.0.0.0:8000", "is in 0.0.0.0/8"),
    ("http://[::]:8000", "the unspecified address"),
    ("http://224.0.0.251/", "multicast"),
    ("http://[ff02::1]/", "multicast"),
    ("http://255.255.255.255/", "the broadcast address"),
    ("http://240.0.0.1/", "reserved"),
    ("http://010.0.0.1:8000", "Not a valid URL: Invalid IPv4 address"),
    ("http://gpu1:80x/", "Not a valid URL: Invalid port"),
    ("http://[::1:8000/", "Not a valid URL"),
    ("http://gpu1:0", "out of range"),
    ("http://gpu1:-1", "out of range"),
    ("http://gpu 1:8000", "not a valid host name"),
    ("http://gpu1:8000/?", "no query string or fragment"),
    ("http://gpu1:8000/#", "no query string or fragment"),
])
def test_it_refuses_every_spelling_of_a_blocked_address(url, why):
    assert why in endpoint_url_problem(url)


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8000", "http://127.1:8000", "http://localhost:8000", "http://localhost.:8000",
    "http://10.0.0.5:8001/", "http://192.168.1.20:8080", "http://100.64.0.1:8000", "http://[::1]:8000",
    "http://[fd12:3456::1]:8000", "http://[::ffff:10.0.0.5]:8000", "http://[64:ff9b::808:808]/",
    "https://gpu1.lab:8443", "http://gpu_1:8000", "http://gpu1.example.com/behind/a/prefix",
])
def test_it_accepts_loopback_private_and_named_servers(url):
    assert endpoint_url_problem(url) == ""


# IPv4 spelled the ways inet_aton (and so getaddrinfo) reads it.
SPELLINGS = [
    lambda n: str(ipaddress.IPv4Address(n)),
    lambda n: str(n),
    lambda n: hex(n),
    lambda n: ".".join(hex(b) for b in n.to_bytes(4, "big")),
    lambda n: ".".join("0%o" % b for b in n.to_bytes(4, "big")),
    lambda n: f"{n >> 24}.{(n >> 16) & 0xFF}.{n & 0xFFFF}",
    lambda n: f"{n >> 24}.{n & 0xFFFFFF}",
    lambda n: f"[::ffff:{ipaddress.IPv4Address(n)}]",
    lambda n: f"[::ffff:0:{n >> 16:x}:{n & 0xFFFF:x}]",
    lambda n: f"[64:ff9b::{n >> 16:x}:{n & 0xFFFF:x}]",
]
BLOCKED_OR_ANY = st.one_of(st.integers(0xA9FE0000, 0xA9FEFFFF), st.integers(0, 0xFFFFFF),
                           st.integers(0xE0000000, 0xFFFFFFFF), st.integers(0, 2 ** 32 - 1))
PROPERTY = hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@given(BLOCKED_OR_ANY, st.sampled_from(range(len(SPELLINGS))))
@PROPERTY
def test_an_address_is_judged_the_same_in_every_spelling_the_resolver_reads(n, k):
    policy, host = AddressPolicy(), SPELLINGS[k](n)
    if not host.startswith("["):  # the resolver reads the spelling as this very address
        numeric = socket.getaddrinfo(host, 8000, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        assert {info[4][0] for info in numeric} == {str(ipaddress.IPv4Address(n))}
    problem = policy.url_problem(f"http://{host}:8000/")
    if policy.reason(ipaddress.IPv4Address(n)):
        assert problem, host
    else:
        assert problem == "" or problem.startswith("Not a valid URL"), (host, problem)


def fake_dns(monkeypatch, answers):
    """The engine's resolver answers `answers[host]` (a list, or a callable giving one) for the
    names given, and asks the system for the rest."""
    real = addresses.getaddrinfo

    async def getaddrinfo(host, port):
        if host not in answers:
            return await real(host, port)
        found = answers[host]() if callable(answers[host]) else answers[host]
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in found]

    monkeypatch.setattr(addresses, "getaddrinfo", getaddrinfo)


def preflight(url, policy=None, **workload):
    async def go():
        session = Session(Target(url, "vllm"), Workload(**workload), addresses=policy)
        try:
            return await session.preflight()
        finally:
            await session.close()
    return asyncio.run(go())


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_name_that_resolves_to_a_metadata_address_is_refused_when_the_worker_connects(monkeypatch, scheme):
    fake_dns(monkeypatch, {"gpu7.lab": [METADATA]})
    assert endpoint_url_problem(f"{scheme}://gpu7.lab:8000") == ""  # a name: judged at connect time
    pf = preflight(f"{scheme}://gpu7.lab:8000")
    assert not pf.ok
    assert "refused: gpu7.lab resolves to 169.254.169.254, which is link-local (cloud metadata)" in pf.cause


def test_a_name_that_resolves_outside_the_allowed_networks_is_refused():
    # The system's own resolver: localhost is a loopback address (127.0.0.1 or ::1) everywhere.
    pf = preflight("http://localhost:8000", AddressPolicy.from_setting("10.0.0.0/8"))
    assert "refused: localhost resolves to" in pf.cause
    assert "which is outside the allowed networks (10.0.0.0/8)" in pf.cause


def test_the_worker_connects_to_the_address_it_checked_and_refuses_a_name_that_changes(monkeypatch, simulator):
    sim = simulator(decode_ms=2)
    port = sim.url.rsplit(":", 1)[1]
    lookups = []

    def rebinding():  # first the simulator, then the metadata address
        lookups.append(time.monotonic())
        return ["127.0.0.1"] if len(lookups) == 1 else [METADATA]

    fake_dns(monkeypatch, {"sim.test": rebinding})  # a name the system cannot resolve

    async def go():
        load = Load(concurrency=2, requests=6)
        session = Session(Target(f"http://sim.test:{port}", "vllm"), Workload(warmup_requests=0, output_tokens=4),
                          loads=[load])
        try:
            pf = await session.preflight()
            await session.prepare(pf.model)
            return pf, await session.measure(load)
        finally:
            await session.close()

    pf, outcome = asyncio.run(go())
    assert pf.ok, pf.cause  # reached through the checked address: nothing else knows sim.test
    ok = [r for r in outcome.results if r.ok]
    refused = [r for r in outcome.results if not r.ok]
    assert ok and refused and len(lookups) >= 2
    assert all("refused: sim.test resolves to 169.254.169.254" in r.error and r.error_kind == "connect"
               for r in refused)


def test_a_key_no_header_can_carry_fails_the_preflight_instead_of_the_run():
    async def go():
        session = Session(Target("http://127.0.0.1:9", "vllm", api_key="sk-clé"), Workload())
        try:
            return await session.preflight()
        finally:
            await session.close()
    pf = asyncio.run(go())
    assert pf.cause == "api key: has characters an HTTP header cannot carry (only ASCII is possible)"


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                    "/CN=sim.test", "-addext", "subjectAltName=DNS:sim.test", "-keyout", str(key),
                    "-out", str(cert)], check=True, capture_output=True)
    return cert, key


async def tls_server(cert, key, names):
    """A tiny HTTPS server with /health and /v1/models; `names` collects the SNI names asked for."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)

    async def handle(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = b'{"data": [{"id": "m"}]}' if head.split(b" ")[1] == b"/v1/models" else b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0, ssl=context)


def test_https_connects_to_the_checked_address_and_verifies_the_certificate_of_the_name(monkeypatch, certificate):
    cert, key = certificate
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trust the test certificate (httpx reads it)
    fake_dns(monkeypatch, {"sim.test": ["127.0.0.1"]})
    names = []

    async def go():
        server = await tls_server(cert, key, names)
        port = server.sockets[0].getsockname()[1]
        session = Session(Target(f"https://sim.test:{port}", "vllm"), Workload())
        try:
            return await session.preflight()
        finally:
            await session.close()
            server.close()

    pf = asyncio.run(go())
    assert pf.ok and pf.model == "m", pf.cause
    assert names and set(names) == {"sim.test"}  # SNI names the host, not the address connected to


@pytest.mark.django_db
def test_a_deployment_can_restrict_endpoints_to_its_networks(client, settings):
    from test_admin_inventory import endpoint_post
    settings.ENDPOINT_ALLOWED_NETWORKS = ["10.0.0.0/8", "fd00::/8"]
    e = endpoint()
    client.force_login(user("root", staff=True))
    change = reverse("admin:benchmarks_endpoint_change", args=[e.id])
    r = client.post(change, endpoint_post(e, base_url="http://192.168.1.5:8000"))
    assert r.status_code == 200
    assert "192.168.1.5 is outside the allowed networks (10.0.0.0/8, fd00::/8)" in r.content.decode()
    assert client.post(change, endpoint_post(e, base_url="http://10.1.2.3:8000")).status_code == 302
    assert Endpoint.objects.get(id=e.id).base_url == "http://10.1.2.3:8000"
    assert client.post(change, endpoint_post(e, base_url="http://[fd00::5]:8000")).status_code == 302
    with pytest.raises(CommandError, match="127.0.0.1 is outside the allowed networks"):
        call_command("register_endpoint", name="x", backend="vllm", url="http://127.0.0.1:8000")
    with pytest.raises(CommandError, match="is link-local"):
        call_command("register_endpoint", name="x", backend="vllm", url="http://2852039166:8000")


def test_a_mistyped_allowed_network_stops_the_site_at_start():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "v100site.settings",
           "ENDPOINT_ALLOWED_NETWORKS": "10.0.0.0/8, 10.0.0.1/8"}
    r = subprocess.run([sys.executable, "-c", "import django; django.setup()"], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    assert r.returncode != 0 and "10.0.0.1/8 has host bits set" in r.stderr


@pytest.fixture
def addresses_queue(settings):
    settings.CELERY_TASK_DEFAULT_QUEUE = "addresses"
    Celery(broker=settings.CELERY_BROKER_URL, set_as_current=False).connection().default_channel.queue_purge("addresses")
    workers = []
    yield workers
    for w in workers:
        stop_worker(w)


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_whose_url_fails_at_run_time_fails_alone_and_the_run_goes_on(addresses_queue, simulator):
    # This worker allows 127.0.0.1 only: the web side saved what its own settings allowed.
    worker = spawn_worker(worker_env(ENDPOINT_ALLOWED_NETWORKS="127.0.0.1/32", CELERY_DEFAULT_QUEUE="addresses"),
                          "addresses")
    addresses_queue.append(worker)
    sim = simulator(decode_ms=2)
    port = sim.url.rsplit(":", 1)[1]
    first = endpoint(sim.url, name="a-first")
    # Stored without validation (objects.create runs no validators), as rows saved before a check.
    bad = {"b-unparsable": ("http://010.0.0.1:9", "Invalid IPv4 address"),
           "c-metadata": ("http://2852039166:9", "(that is, 169.254.169.254) is link-local (cloud metadata)"),
           "d-outside": (f"http://127.0.0.2:{port}", "127.0.0.2 is outside the allowed networks (127.0.0.1/32)")}
    bad_rows = {name: endpoint(url, name=name) for name, (url, _) in bad.items()}
    last = endpoint(sim.url, name="e-last")
    run = queue_run(owner=user(), endpoints=[first, *bad_rows.values(), last], prompt_tokens=16,
                              output_tokens=4, temperature=0.7, concurrency_levels=[1, 2], requests_per_level=3,
                              warmup_requests=0)
    deadline = time.monotonic() + 120
    while not Run.objects.get(id=run.id).is_finished and time.monotonic() < deadline:
        time.sleep(0.2)
    run = Run.objects.get(id=run.id)
    assert run.status == Run.PARTIAL, (run.status, run.error)
    assert run.error == ""
    for good in (first, last):
        assert list(LevelResult.objects.filter(run=run, endpoint=good).values_list("completed", "failed")) \
            == [(3, 0), (3, 0)]
    for name, (_, cause) in bad.items():
        e = bad_rows[name]
        [finding] = run.preflight[str(e.id)]
        assert finding["check"] == "url" and not finding["ok"] and cause in finding["detail"]
        errors = list(RequestRecord.objects.filter(level__run=run, level__endpoint=e).values_list("error", flat=True))
        assert len(errors) == 6 and all(err.startswith("preflight failed: url: ") and cause in err for err in errors)
    assert run.progress_done == run.progress_total == 5 * 2 * 3
