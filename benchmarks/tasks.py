from celery import shared_task

from benchmarks import services


@shared_task(name="benchmarks.run_execute")
def run_execute_task(run_id: int) -> None:
    services.run_execute(run_id=run_id)
