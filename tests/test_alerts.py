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
    owner = user()
    e = endpoint(name="vllm-staging")
    schedule = schedules.schedule_create(owner=owner, name="nightly", every=Schedule.CRON, cron="0 3 * * *",
                                         template={}, webhook_url=receiver.url, webhook_secret="hook-secret-1")
    run = regressed_run(e, owner, schedule)
    worker = spawn_worker(worker_env(ALERT_RETRY_BACKOFF_S="0.5", SITE_URL="https://lab.example"),
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
    # key) only in its owner's settings form.
    client.force_login(owner)
    run_page = client.get(run.get_absolute_url()).content.decode()
    schedule_page = client.get(schedule.get_absolute_url()).content.decode()
    for text in (run_page, schedule_page):
        assert "503" in text and "delivered" in text and "hook-secret-1" not in text
    assert "/hooks/v100" not in run_page


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
