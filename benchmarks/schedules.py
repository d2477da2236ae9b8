"""Scheduled runs: a run's settings saved with a time to repeat them, fired by Celery beat from
the database (django-celery-beat's PeriodicTask, one per schedule), each firing queued through
the run service the form uses. A schedule pauses itself after SCHEDULE_PAUSE_AFTER_FAILURES
consecutive failures (failed runs, or firings that could not queue one) and says why."""
from __future__ import annotations

import json
import logging

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.dispatch import receiver
from django.utils import timezone
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from benchmarks import selectors, services
from benchmarks.engine.plan import RunPlan
from benchmarks.models import Endpoint, EvaluationText, RequestRecord, Run, Schedule, ServerRecipe

log = logging.getLogger(__name__)

FIRE_TASK = "benchmarks.schedule_fire"


# ---------------------------------------------------------------- the template (one writer, one reader)
def run_template(*, plan: RunPlan, endpoints=(), recipes=(), title: str = "", quality_text=None,
                 quality_reference=None, quality_upload: dict | None = None, owner=None) -> dict:
    """What a schedule keeps of a run: the plan's stored shape (engine/plan.py, versioned) and
    the rows it runs on by id. An uploaded evaluation text is stored first (as the run service
    does) and kept by id."""
    if quality_upload and plan.quality.on:
        quality_text = services.evaluation_text_store(owner=owner, **quality_upload)
    return {**plan.to_dict(), "title": title, "endpoints": [e.id for e in endpoints], "recipes": [r.id for r in recipes],
            "quality_text": quality_text.id if quality_text else None,
            "quality_reference": quality_reference.id if quality_reference else None}


def template_from_run(run: Run) -> dict:
    """The template that queues `run` again, as it was submitted."""
    return run_template(plan=run.plan, title=run.title, endpoints=list(run.endpoints.filter(recipe__isnull=True)),
                        recipes=list(run.recipes.all()), quality_text=run.quality_text,
                        quality_reference=run.quality_reference)


def template_kwargs(template: dict) -> dict:
    """run_create's arguments from a stored template. Raises ValidationError when what it names
    is gone or disabled (an endpoint, a recipe, a text), or when this code cannot read it."""
    try:
        plan = RunPlan.from_dict(template)
    except (ValueError, TypeError, KeyError) as exc:
        raise ValidationError(f"the schedule's saved run cannot be read: {exc}") from exc
    endpoints = list(Endpoint.objects.filter(id__in=template.get("endpoints") or [], enabled=True)
                     .select_related("host"))
    recipes = list(ServerRecipe.objects.filter(id__in=template.get("recipes") or [], enabled=True)
                   .select_related("host"))
    missing = len(template.get("endpoints") or []) - len(endpoints) + len(template.get("recipes") or []) - len(recipes)
    if missing:
        raise ValidationError(f"{missing} of the schedule's endpoints or recipes were removed or disabled.")
    if not endpoints and not recipes:
        raise ValidationError("The schedule names no endpoint or recipe.")
    kwargs = {"plan": plan, "title": template.get("title") or "", "endpoints": endpoints, "recipes": recipes}
    if template.get("quality_text"):
        kwargs["quality_text"] = EvaluationText.objects.filter(id=template["quality_text"]).first()
    if template.get("quality_reference"):
        kwargs["quality_reference"] = Endpoint.objects.filter(id=template["quality_reference"]).first()
    return kwargs


def template_endpoints(template: dict) -> list[str]:
    return list(Endpoint.objects.filter(id__in=template.get("endpoints") or []).values_list("name", flat=True))


# ---------------------------------------------------------------- create, pause, resume, delete
NOT_YOURS = "Only the member who queued this run, or a staff member, can repeat it on a schedule."


def may_repeat(run: Run, user) -> bool:
    """A schedule reuses the run's uploaded prompts and evaluation text: its owner's (or staff's) to repeat."""
    return selectors.run_manage_allowed(run, user)


def _beat_schedule(schedule: Schedule) -> dict:
    if schedule.every == Schedule.INTERVAL:
        interval, _ = IntervalSchedule.objects.get_or_create(every=schedule.interval_s, period=IntervalSchedule.SECONDS)
        return {"interval": interval, "crontab": None}
    if schedule.every == Schedule.CRON:
        minute, hour, day_of_month, month_of_year, day_of_week = schedule.cron.split()
    else:
        minute, hour, day_of_month, month_of_year = str(schedule.at.minute), str(schedule.at.hour), "*", "*"
        day_of_week = str(schedule.weekday) if schedule.every == Schedule.WEEKLY else "*"
    crontab, _ = CrontabSchedule.objects.get_or_create(
        minute=minute, hour=hour, day_of_month=day_of_month, month_of_year=month_of_year, day_of_week=day_of_week,
        timezone="UTC")
    return {"crontab": crontab, "interval": None}


def _sync_beat(schedule: Schedule) -> None:
    """The schedule's PeriodicTask, as beat reads it: when, and whether it is enabled."""
    fields = dict(_beat_schedule(schedule), task=FIRE_TASK, args=json.dumps([schedule.id]),
                  queue=settings.HOUSEKEEPING_QUEUE, enabled=schedule.active,
                  description=f"{schedule.name}: {schedule.when}"[:200])
    if schedule.periodic_task_id:
        PeriodicTask.objects.filter(id=schedule.periodic_task_id).update(**fields)
        PeriodicTask.objects.get(id=schedule.periodic_task_id).save()  # tells beat (PeriodicTasks.changed)
    else:
        task = PeriodicTask.objects.create(name=f"schedule {schedule.public_id}", **fields)
        Schedule.objects.filter(id=schedule.id).update(periodic_task=task)
        schedule.periodic_task = task


def schedule_create(*, owner, name: str, template: dict, every: str, at=None, weekday=None, cron: str = "",
                    interval_s=None, alert_emails: str = "", webhook_url: str = "", webhook_secret: str = "") -> Schedule:
    with transaction.atomic():
        schedule = Schedule.objects.create(
            owner=owner, name=name, template=template, every=every, at=at, weekday=weekday, cron=cron,
            interval_s=interval_s, alert_emails=alert_emails, webhook_url=webhook_url, webhook_secret=webhook_secret)
        _sync_beat(schedule)
    return schedule


def schedule_pause(*, schedule: Schedule, reason: str = "") -> None:
    with transaction.atomic():
        schedule.active, schedule.paused_reason = False, reason[:1000]
        schedule.save(update_fields=["active", "paused_reason"])
        _sync_beat(schedule)


def schedule_resume(*, schedule: Schedule) -> None:
    with transaction.atomic():
        schedule.active, schedule.paused_reason, schedule.consecutive_failures = True, "", 0
        schedule.save(update_fields=["active", "paused_reason", "consecutive_failures"])
        _sync_beat(schedule)


def schedule_delete(*, schedule: Schedule) -> None:
    """The schedule and its beat entry; the runs it queued stay (no longer linked to it)."""
    with transaction.atomic():
        task_id = schedule.periodic_task_id
        schedule.delete()
        PeriodicTask.objects.filter(id=task_id).delete()


def alerts_update(*, schedule: Schedule, alert_emails: str, webhook_url: str, webhook_secret: str = "",
                  clear_secret: bool = False) -> None:
    """New alert settings; a blank secret keeps the stored one (it is never shown to be edited)."""
    schedule.alert_emails, schedule.webhook_url = alert_emails, webhook_url
    if clear_secret:
        schedule.webhook_secret = ""
    elif webhook_secret:
        schedule.webhook_secret = webhook_secret
    schedule.save(update_fields=["alert_emails", "webhook_url", "webhook_secret"])


# ---------------------------------------------------------------- firing and counting
def schedule_fire(*, schedule_id: int) -> Run | None:
    """Beat's firing: queue the schedule's run through the run service (its worker picks it up
    once the transaction commits). A firing that cannot queue one counts as a failure."""
    schedule = Schedule.objects.select_related("owner").filter(id=schedule_id).first()
    if schedule is None or not schedule.active:
        return None
    Schedule.objects.filter(id=schedule.id).update(last_fired=timezone.now())
    try:
        kwargs = template_kwargs(schedule.template)
        if not schedule.owner.is_active:
            raise ValidationError("the schedule's owner can no longer log in")
        # run_create judges the plan against the limits now: a firing gets no more than a submitted run
        return services.run_create(owner=schedule.owner, schedule=schedule, **kwargs)
    except ValidationError as exc:
        log.warning("schedule %s could not queue a run: %s", schedule.public_id, " ".join(exc.messages))
        schedule_failure(schedule=schedule, why=f"could not queue a run: {' '.join(exc.messages)}")
        return None


@receiver(services.run_finished_signal)
def schedule_of_finished_run(sender, run: Run, **kwargs) -> None:
    if run.schedule_id:
        schedule_run_finished(run=run)


def schedule_run_finished(*, run: Run) -> None:
    """A run of the schedule finished: a failed one counts, a measured one clears the count."""
    if run.status == Run.FAILED:
        # A run whose every request failed has no run error: its first request's says why.
        cause = run.error or (RequestRecord.objects.filter(level__run=run).exclude(error="")
                              .values_list("error", flat=True).first()) or "no reason given"
        schedule_failure(schedule=run.schedule, why=f"run {run.public_id} failed: {cause}")
    elif run.status in (Run.SUCCEEDED, Run.PARTIAL):
        Schedule.objects.filter(id=run.schedule_id).update(consecutive_failures=0)


def schedule_failure(*, schedule: Schedule, why: str) -> None:
    limit = settings.SCHEDULE_PAUSE_AFTER_FAILURES
    with transaction.atomic():
        locked = Schedule.objects.select_for_update().get(id=schedule.id)
        locked.consecutive_failures += 1
        locked.save(update_fields=["consecutive_failures"])
        if locked.active and locked.consecutive_failures >= limit:
            log.info("schedule %s paused after %d failures", locked.public_id, locked.consecutive_failures)
            schedule_pause(schedule=locked, reason=(
                f"Paused after {locked.consecutive_failures} consecutive failures (the limit is {limit}); "
                f"the last: {why}")[:1000])
