import logging
import threading

from celery import shared_task
from celery.signals import celeryd_after_setup, worker_ready, worker_shutdown
from django.conf import settings
from django.db import connection

from benchmarks import loadgen  # noqa: F401  (its task: a shard on a load-generator worker)
from benchmarks import alerts, schedules, services
from benchmarks.lab import services as lab_services

log = logging.getLogger(__name__)


@shared_task(name=services.RUN_TASK)
def run_execute_task(run_id: int) -> None:
    services.run_execute(run_id=run_id, worker=run_execute_task.request.hostname or "")


@shared_task(name=schedules.FIRE_TASK)
def schedule_fire_task(schedule_id: int) -> None:
    """Sent by Celery beat (django-celery-beat's PeriodicTask of the schedule)."""
    schedules.schedule_fire(schedule_id=schedule_id)


@shared_task(bind=True, name=alerts.DELIVER_TASK)
def alert_deliver_task(self, delivery_id: int) -> None:
    """One try; again after ALERT_RETRY_BACKOFF_S, then twice and four times as long..., until
    delivered or ALERT_ATTEMPTS tries were made (each recorded on the delivery)."""
    tries = settings.ALERT_ATTEMPTS
    if not alerts.alert_attempt(delivery_id=delivery_id, last=self.request.retries + 1 >= tries):
        raise self.retry(countdown=settings.ALERT_RETRY_BACKOFF_S * 2 ** self.request.retries, max_retries=tries - 1)


@shared_task(name=services.PROBE_TASK)
def host_probe_task(host_name: str) -> None:
    """Sent to a host's queue, so the worker on that host probes its own GPUs."""
    if settings.WORKER_HOST != host_name:
        log.warning("probe for %s reached the worker of %r; not probing", host_name, settings.WORKER_HOST)
        return
    services.host_probe_here(host_name=host_name)


@celeryd_after_setup.connect
def consume_host_queue(sender, instance, **kwargs) -> None:
    """A worker started with WORKER_HOST also consumes that host's queue, so runs of its
    endpoints come to it (with HOST_QUEUES on) and it can sample their GPUs."""
    if not settings.WORKER_HOST:
        return
    try:
        allows = lab_services.allowlist()
    except ValueError as exc:  # a recipe's launch says why; the queue is taken all the same
        log.warning("the lab's settings cannot be read: %s", exc)
        allows = None
    host = services.host_register(name=settings.WORKER_HOST, allows=allows)
    instance.app.amqp.queues.select_add(host.queue_name)
    log.info("consuming %s, the queue of host %s", host.queue_name, host.name)


_sweeper_stop = threading.Event()


@worker_ready.connect
def start_sweeper(sender=None, **kwargs) -> None:
    """Each worker re-sends, at start and then periodically, the runs a broker may have lost
    (queued runs after a Redis restart, running runs whose worker was killed)."""

    def sweep() -> None:
        first = True
        while True:
            try:
                n = services.runs_requeue(startup=first)
                if n:
                    log.info("re-sent %d run(s) that may have been lost", n)
            except Exception:  # the database or broker may be restarting: try again later
                log.exception("sweep failed")
            finally:
                connection.close()
            first = False
            if _sweeper_stop.wait(settings.RUN_SWEEP_EVERY_S):
                return

    if settings.WORKER_HOST:
        try:  # before any run: a server a killed worker left would skew what is measured next
            lab_services.orphans_stop()
        except Exception:
            log.exception("stopping servers left by a killed worker failed")
        finally:
            connection.close()
    threading.Thread(target=sweep, name="run-sweeper", daemon=True).start()
    if settings.WORKER_HOST:
        try:
            host, result = services.host_probe_here(host_name=settings.WORKER_HOST)
            log.info("probed %s: %s, %d GPU(s)", host, result.status, len(result.gpus))
        except Exception:  # a probe must never keep a worker from measuring
            log.exception("GPU probe failed")


@worker_shutdown.connect
def stop_sweeper(**kwargs) -> None:
    _sweeper_stop.set()
