"""Alerts of a run's regressions: an e-mail (Django's mail) and/or a webhook (a signed JSON body)
for the run's schedule and for each regressed endpoint that asks for them, delivered by a Celery
task that tries again with a growing wait (ALERT_ATTEMPTS, ALERT_RETRY_BACKOFF_S), every attempt
recorded on the AlertDelivery row the run and schedule pages show."""
from __future__ import annotations

import logging

from celery import current_app
from django.conf import settings
from django.dispatch import receiver
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from benchmarks.engine import webhooks
from benchmarks.engine.regression import RegressionReport
from benchmarks.services import run_finished_signal
from benchmarks.models import AlertDelivery, Endpoint, Run, email_list, webhook_addresses

log = logging.getLogger(__name__)


DELIVER_TASK = "benchmarks.alert_deliver"  # tasks.py's, sent by name (tasks imports this module)


@receiver(run_finished_signal)
def alerts_for_finished_run(sender, run: Run, **kwargs) -> None:
    report = run.regression_report
    if report is not None and report.regressed:
        alerts_create(run=run, report=report)


def alerts_create(*, run: Run, report: RegressionReport) -> list[AlertDelivery]:
    """One delivery per distinct target (the schedule's, then each regressed endpoint's), sent
    once the transaction commits."""
    sources = [("schedule", run.schedule)] if run.schedule is not None else []
    regressed = {lv.endpoint for lv, _ in report.regressions()}
    sources += [("endpoint", e) for e in Endpoint.objects.filter(name__in=regressed).order_by("name")]
    made, seen = [], set()
    with transaction.atomic():
        for kind, source in sources:
            targets = []
            if source.alert_emails:
                targets.append((AlertDelivery.EMAIL, ", ".join(email_list(source.alert_emails))))
            if source.webhook_url:
                targets.append((AlertDelivery.WEBHOOK, source.webhook_url))
            for channel, target in targets:
                if (channel, target) in seen:
                    continue
                seen.add((channel, target))
                made.append(AlertDelivery.objects.create(run=run, channel=channel, target=target[:500],
                                                         **{kind: source}))
        for delivery in made:
            transaction.on_commit(lambda d=delivery: _enqueue(d))
    return made


def _enqueue(delivery: AlertDelivery) -> None:
    current_app.send_task(DELIVER_TASK, (delivery.id,), queue=settings.HOUSEKEEPING_QUEUE)


def _url(path: str) -> str:
    return settings.SITE_URL + path


def payload(run: Run) -> dict:
    """What an alert says: the run, each regressed figure with its evidence, and the links."""
    report = run.regression_report
    regressions = [{
        "endpoint": lv.endpoint, "load": lv.load, "figure": f.figure, "label": f.label, "better": f.better,
        "value": f.value, "mean": f.mean, "change_pct": f.change_pct, "z": f.z, "z_from_noise_floor": f.floored,
        "compared_runs": len(f.history),
        "history": _url(reverse("history", args=[lv.fingerprint])), "sentence": f.sentence,
    } for lv, f in (report.regressions() if report else [])]
    return {"event": "regression", "site": settings.SITE_NAME,
            "run": {"public_id": run.public_id, "title": str(run), "status": run.status,
                    "permalink": _url(run.get_absolute_url()),
                    "finished": run.finished.isoformat() if run.finished else None},
            "schedule": {"public_id": run.schedule.public_id, "name": run.schedule.name} if run.schedule else None,
            "regressions": regressions}


def _email_text(body: dict) -> tuple[str, str]:
    lines = [f"{r['endpoint']} at {r['load']}: {r['sentence']}\n  history: {r['history']}" for r in body["regressions"]]
    subject = f"[{body['site']}] regression in {body['run']['title']}"[:200]
    text = (f"The run {body['run']['title']} measured worse than its comparable runs:\n\n" + "\n".join(lines)
            + f"\n\nThe run: {body['run']['permalink']}\n")
    return subject, text


def _secret(delivery: AlertDelivery) -> str:
    source = delivery.schedule or delivery.endpoint
    return source.webhook_secret if source is not None else ""


def alert_attempt(*, delivery_id: int, last: bool) -> bool:
    """Try one delivery once and record the attempt. True when there is nothing more to try
    (delivered, given up on the `last` attempt, or no longer pending)."""
    delivery = (AlertDelivery.objects.select_related("run__schedule", "schedule", "endpoint")
                .filter(id=delivery_id, status=AlertDelivery.PENDING).first())
    if delivery is None:
        return True
    body = payload(delivery.run)
    status_code, error = None, ""
    if delivery.channel == AlertDelivery.EMAIL:
        subject, text = _email_text(body)
        try:
            send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, email_list(delivery.target))
        except Exception as exc:  # SMTP refusals, connection errors: recorded, tried again
            error = f"{type(exc).__name__}: {exc}"[:500]
    else:
        attempt = webhooks.post(delivery.target, body, secret=_secret(delivery), policy=webhook_addresses(),
                                timeout_s=settings.ALERT_TIMEOUT_S)
        status_code, error = attempt.status_code, attempt.error
    delivery.attempts = [*delivery.attempts, {"at": timezone.now().isoformat(), "status_code": status_code,
                                              "error": error}]
    if not error:
        delivery.status = AlertDelivery.DELIVERED
    elif last:
        delivery.status = AlertDelivery.FAILED
    delivery.save(update_fields=["attempts", "status"])
    return delivery.status != AlertDelivery.PENDING
