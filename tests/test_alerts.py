"""Alerts of a regression: a webhook delivered by a real worker's task, retried after a failure
against a local receiver that fails first and then accepts, every attempt recorded and shown;
its body signed with the secret, which no page renders; e-mail through Django's mail; webhook
URLs held to the address policy."""
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core import mail

from benchmarks import alerts, schedules
from benchmarks.engine import webhooks
from benchmarks.engine.catalogue import figure
from benchmarks.engine.regression import LevelTest, RegressionReport, Thresholds, compare_figure
from benchmarks.models import AlertDelivery, Run, Schedule
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint, measured_run, user

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    """A local webhook receiver: answers `statuses` in turn (then 200), keeping what it got."""

    def __init__(self, statuses):
        self.statuses, self.got = list(statuses), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.got.append((dict(self.headers), body))
                self.send_response(outer.statuses.pop(0) if outer.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/v100?team=infra"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def regressed_run(e, owner, schedule=None) -> Run:
    """A measured run whose TTFT p50 is tested, by the detector, against earlier runs 40 % faster."""
    run = measured_run([e], levels=(1,), requests=3, tokens=8, prompt_tokens=32, owner=owner)
    level = run.levels.get()
    value = level.stats.figure(figure("ttft_ms_p50"))
    history = [value / 1.4 * k for k in (0.99, 1.0, 1.01, 1.0)]
    test = compare_figure("ttft_ms_p50", value, history, Thresholds())
    assert test.regressed
    report = RegressionReport(Thresholds(), [LevelTest(e.name, 0, level.load_label, level.fingerprint, [test])])
    Run.objects.filter(id=run.id).update(regression=report.to_dict(), schedule=schedule)
    return Run.objects.select_related("schedule").get(id=run.id)


def test_a_webhook_is_retried_by_the_worker_until_delivered_and_every_attempt_is_recorded(
        settings, client):
    receiver = Receiver([503])
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]  # the receiver is on loopback
    owner = user()
    e = endpoint(name="vllm-staging")
    schedule = schedules.schedule_create(owner=owner, name="nightly", every=Schedule.CRON, cron="0 3 * * *",
                                         template={}, webhook_url=receiver.url, webhook_secret="hook-secret-1")
    run = regressed_run(e, owner, schedule)
    worker = spawn_worker(worker_env(ALERT_RETRY_BACKOFF_S="0.5", SITE_URL="https://lab.example",
                                     WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8"),
                          name="alerts", queue="housekeeping")
    try:
        [delivery] = alerts.alerts_create(run=run, report=run.regression_report)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            delivery.refresh_from_db()
            if delivery.status != AlertDelivery.PENDING:
                break
            time.sleep(0.2)
    finally:
        stop_worker(worker)
        receiver.close()
    assert delivery.status == AlertDelivery.DELIVERED, (delivery.attempts, worker.log_path.read_text()[-3000:])
    assert [(a["status_code"], bool(a["error"])) for a in delivery.attempts] == [(503, True), (200, False)]
    assert "503" in delivery.attempts[0]["error"]
    assert len(receiver.got) == 2
    headers, body = receiver.got[-1]
    timestamp = headers[webhooks.TIMESTAMP_HEADER]
    expected = "sha256=" + hmac.new(b"hook-secret-1", f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert headers[webhooks.SIGNATURE_HEADER] == expected
    payload = json.loads(body)
    assert payload["event"] == "regression" and payload["run"]["permalink"] == f"https://lab.example/r/{run.public_id}/"
    [regression] = payload["regressions"]
    assert regression["figure"] == "ttft_ms_p50" and regression["endpoint"] == "vllm-staging"
    assert regression["change_pct"] == pytest.approx(40.0, rel=0.05)
    assert regression["history"].endswith(f"/history/{run.levels.get().fingerprint}/")
    # Shown on the run and schedule pages; the secret never, the hook's path (which often holds a
    # key) only in its owner's settings form; what each attempt got (an answer's code, refused,
    # reset) to staff only: to a member it would be a port scanner of the hook's host.
    client.force_login(owner)
    run_page = client.get(run.get_absolute_url()).content.decode()
    schedule_page = client.get(schedule.get_absolute_url()).content.decode()
    for text in (run_page, schedule_page):
        assert "not delivered" in text and "delivered" in text and "hook-secret-1" not in text
        assert "503" not in text and "Service Unavailable" not in text
    assert "/hooks/v100" not in run_page
    client.force_login(user("staff-1", staff=True))
    for url in (run.get_absolute_url(), schedule.get_absolute_url()):
        text = client.get(url).content.decode()
        assert "503" in text and "hook-secret-1" not in text, url


def test_an_endpoints_alert_goes_by_email(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    settings.SITE_URL = "https://lab.example"
    e = endpoint(name="llama-prod")
    e.alert_emails = "ops@example.org, oncall@example.org"
    e.save()
    run = regressed_run(e, user())
    [delivery] = alerts.alerts_create(run=run, report=run.regression_report)
    assert delivery.channel == AlertDelivery.EMAIL and delivery.endpoint == e
    assert alerts.alert_attempt(delivery_id=delivery.id, last=False)
    delivery.refresh_from_db()
    assert delivery.status == AlertDelivery.DELIVERED and delivery.attempts[0]["error"] == ""
    [message] = mail.outbox
    assert message.to == ["ops@example.org", "oncall@example.org"]
    assert "regression" in message.subject and f"https://lab.example/r/{run.public_id}/" in message.body
    assert "TTFT p50" in message.body and "/history/" in message.body


def test_a_webhook_to_a_metadata_address_is_refused_when_set_and_when_delivered(settings):
    from django.core.exceptions import ValidationError

    from benchmarks.models import validate_webhook_url

    with pytest.raises(ValidationError) as refused:
        validate_webhook_url("http://169.254.169.254/latest/meta-data/")
    assert "link-local" in str(refused.value) and "webhook receiver" in str(refused.value)
    # A row that names one anyway (set before a policy change) is refused at delivery, and given up on.
    e = endpoint(name="sneaky")
    e.webhook_url = "http://[::ffff:169.254.169.254]/x"
    e.save()
    run = regressed_run(e, user())
    [delivery] = alerts.alerts_create(run=run, report=run.regression_report)
    assert alerts.alert_attempt(delivery_id=delivery.id, last=True)
    delivery.refresh_from_db()
    assert delivery.status == AlertDelivery.FAILED
    assert delivery.attempts[0]["status_code"] is None and "169.254.169.254" in delivery.attempts[0]["error"]


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:6379/", "http://2130706433:22/", "http://localhost:5432/", "http://[::1]:8000/",
    "http://10.0.0.5:9200/", "http://192.168.1.1/", "http://[fd00::1]/", "http://[::ffff:10.0.0.1]/",
    "http://100.64.0.1/", "http://169.254.169.254/",
])
def test_a_webhook_to_loopback_or_private_addresses_is_refused_unless_the_setting_names_them(settings, url):
    from django.core.exceptions import ValidationError

    from benchmarks.models import validate_webhook_url

    settings.WEBHOOK_ALLOWED_NETWORKS = []
    with pytest.raises(ValidationError):
        validate_webhook_url(url)
    validate_webhook_url("https://hooks.example.org/v100")  # public: fine
    settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8", "10.0.0.0/8", "::1/128"]
    if url.split("//")[1].startswith(("127.", "2130706433", "localhost", "[::1]", "10.", "[::ffff:10.")):
        validate_webhook_url(url)
    else:
        with pytest.raises(ValidationError):
            validate_webhook_url(url)


def test_a_webhook_host_name_that_resolves_to_loopback_is_refused_at_delivery(settings, monkeypatch):
    """The name passes when saved (it is only a name then); the delivery resolves it, refuses
    loopback and connects nowhere: a member's hook cannot probe the site's own ports."""
    import socket

    from benchmarks.models import validate_webhook_url, webhook_addresses

    receiver = Receiver([])
    settings.WEBHOOK_ALLOWED_NETWORKS = []
    port = receiver.server.server_port
    real = socket.getaddrinfo
    monkeypatch.setattr(webhooks.socket, "getaddrinfo", lambda host, *a, **k: real(
        "127.0.0.1" if host == "hooks.attacker.example" else host, *a, **k))
    try:
        url = f"http://hooks.attacker.example:{port}/x"
        validate_webhook_url(url)
        attempt = webhooks.post(url, {"x": 1}, policy=webhook_addresses())
        assert attempt.status_code is None and "loopback" in attempt.error
        assert receiver.got == []
        settings.WEBHOOK_ALLOWED_NETWORKS = ["127.0.0.0/8"]
        assert webhooks.post(url, {"x": 1}, policy=webhook_addresses()).ok and len(receiver.got) == 1
    finally:
        receiver.close()


@pytest.mark.parametrize("url", ["http://xn--/", "http://xn--a/", "https://xn--ls8h.la/"])
def test_a_webhook_url_that_is_not_valid_idna_is_a_field_error_not_a_500(client, url):
    from django.core.exceptions import ValidationError

    from benchmarks.forms import ScheduleForm
    from benchmarks.models import validate_webhook_url

    with pytest.raises(ValidationError) as refused:
        validate_webhook_url(url)
    assert "Not a valid URL" in str(refused.value)
    form = ScheduleForm(data={"webhook_url": url})
    assert not form.is_valid() and "webhook_url" in form.errors
    # The API's schedules: a 400 naming the field, not a 500.
    from django.core.cache import cache

    from test_api import API, token_for

    cache.clear()
    api, _ = token_for("alice")
    run = measured_run([endpoint()], levels=(1,), requests=3, tokens=8, prompt_tokens=32, owner=user("alice"))
    r = api.post(API + "schedules/", data=json.dumps({"run": run.public_id, "every": "daily", "at": "03:00",
                                                       "webhook_url": url}), content_type="application/json")
    assert r.status_code == 400 and any("Not a valid URL" in m for m in r.json()["errors"]["webhook_url"]), r.content
