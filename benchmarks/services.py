"""Services write: creating runs, executing them, storing what the engine measured."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone as dt_timezone

from django.conf import settings
from django.db import close_old_connections, connection, models, transaction
from django.utils import timezone

from benchmarks.engine.client import Cancelled, LevelOutcome, Session
from benchmarks.models import Endpoint, LevelResult, RequestRecord, Run

log = logging.getLogger(__name__)
PROGRESS_EVERY_S = 0.5


def run_create(*, owner, endpoints: list[Endpoint], title: str = "", prompt_tokens: int,
               output_tokens: int, temperature: float, requests_per_level: int, warmup_requests: int,
               load_mode: str = "concurrency", concurrency_levels: list[int] = (),
               request_rates: list[float] = (), arrivals: str = "poisson", max_concurrency: int = 0,
               duration_s: float | None = None, api: str = "completions", seed: int | None = None,
               slo_ttft_ms: float | None = None, slo_tpot_ms: float | None = None,
               slo_e2e_ms: float | None = None) -> Run:
    levels = request_rates if load_mode == "rate" else concurrency_levels
    run = Run.objects.create(
        owner=owner, title=title, prompt_tokens=prompt_tokens, output_tokens=output_tokens,
        temperature=temperature, load_mode=load_mode,
        concurrency_levels=sorted(set(concurrency_levels)) if load_mode == "concurrency" else [],
        request_rates=sorted(set(request_rates)) if load_mode == "rate" else [],
        arrivals=arrivals, max_concurrency=max_concurrency or 0, duration_s=duration_s,
        requests_per_level=requests_per_level, warmup_requests=warmup_requests, api=api, seed=seed,
        slo_ttft_ms=slo_ttft_ms, slo_tpot_ms=slo_tpot_ms, slo_e2e_ms=slo_e2e_ms,
        progress_total=len(endpoints) * len(set(levels)) * requests_per_level,
        queue_name=queue_for(endpoints),
    )
    run.endpoints.set(endpoints)
    from benchmarks.tasks import run_execute_task

    transaction.on_commit(lambda: run_execute_task.apply_async((run.id,), queue=run.queue_name))
    return run


def queue_for(endpoints: list[Endpoint]) -> str:
    """A run goes to its endpoints' host queue (so the worker next to the GPU measures it)
    when host queues are on and all endpoints share one host; else to the shared queue."""
    hosts = {e.host.queue_name for e in endpoints}
    if settings.HOST_QUEUES and len(hosts) == 1:
        return hosts.pop()
    return settings.CELERY_TASK_DEFAULT_QUEUE


def run_cancel(*, run: Run) -> bool:
    changed = Run.objects.filter(id=run.id, status__in=[Run.QUEUED, Run.RUNNING]).update(
        status=Run.CANCELLED, finished=timezone.now(), progress_note="cancelled by a user")
    return bool(changed)


def run_execute(*, run_id: int) -> None:
    """Measure a queued run: every endpoint, every level, stored level by level."""
    run = Run.objects.get(id=run_id)
    if not run.claim():
        log.info("run %s not claimed (status %s)", run_id, run.status)
        return
    loop = asyncio.new_event_loop()
    try:
        for endpoint in run.endpoints.select_related("host").order_by("name"):
            _measure_endpoint(run, endpoint, loop)
    except Cancelled:
        log.info("run %s cancelled", run_id)
        return
    except Exception as exc:  # a bug or an unexpected fault: keep what was measured, say why
        log.exception("run %s failed", run_id)
        _finish(run, Run.FAILED, error=f"{exc.__class__.__name__}: {exc}")
        return
    finally:
        loop.close()
    _finish(run, _final_status(run))


def _measure_endpoint(run: Run, endpoint: Endpoint, loop: asyncio.AbstractEventLoop) -> None:
    workload = run.workload()
    done_levels = set(run.levels.filter(endpoint=endpoint).values_list("level_index", flat=True))
    session = Session(endpoint.target(), workload,
                      max_connections=max([run.max_concurrency, *workload.concurrency_levels, 256 if run.load_mode == "rate" else 1]) + 4)
    try:
        _note(run, f"{endpoint.name}: preflight")
        preflight = loop.run_until_complete(session.preflight())
        run.preflight[str(endpoint.id)] = [f.to_dict() for f in preflight.findings]
        Run.objects.filter(id=run.id).update(preflight=run.preflight)
        if preflight.ok:
            _note(run, f"{endpoint.name}: building prompts and warming up")
            loop.run_until_complete(session.prepare(preflight.model))
        for index, load in enumerate(run.loads()):
            if index in done_levels:
                continue
            if preflight.ok:
                _note(run, f"{endpoint.name}: {load.label}")
                outcome = loop.run_until_complete(session.measure(load, _ProgressReporter(run)))
            else:
                outcome = session.failed_level(load.concurrency, load.requests or 0,
                                               f"preflight failed: {preflight.cause}", "preflight")
                outcome.rate = load.rate
            level_store(run=run, endpoint=endpoint, outcome=outcome, level_index=index)
    finally:
        loop.run_until_complete(session.close())


class _ProgressReporter:
    """Called by the engine after each request, inside its event loop: every half second it
    saves progress from a thread (the ORM is synchronous) and learns whether the run was
    cancelled."""

    def __init__(self, run: Run):
        self.run = run
        self.base = run.progress_done
        self.count = 0
        self.last = 0.0

    async def __call__(self, result) -> bool:
        self.count += 1
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S:
            return True
        self.last = now
        return await asyncio.to_thread(self._save, self.base + self.count)

    def _save(self, done: int) -> bool:
        try:
            Run.objects.filter(id=self.run.id, status=Run.RUNNING).update(progress_done=done)
            return Run.objects.filter(id=self.run.id).values_list("status", flat=True).first() == Run.RUNNING
        finally:
            connection.close()  # this thread's own connection


def level_store(*, run: Run, endpoint: Endpoint, outcome: LevelOutcome, level_index: int = 0,
                gpu: dict | None = None, server: dict | None = None) -> LevelResult:
    """Store one measured level with all its requests, in one transaction."""
    from benchmarks.engine.metrics import summarize_level
    from benchmarks.engine.validity import level_flags, merge

    summary = summarize_level(outcome.results, outcome.wall_s, run.slo)
    gpu, server = gpu or {}, server or {}
    flags = level_flags(summary, client=outcome.client, gpu=gpu.get("summary"),
                        server_idle_at_start=server.get("idle_at_start"),
                        capped=bool(outcome.rate is not None and outcome.concurrency))
    with transaction.atomic():
        level = LevelResult.objects.create(
            run=run, endpoint=endpoint, level_index=level_index, concurrency=outcome.concurrency,
            rate=outcome.rate, started_at=datetime.fromtimestamp(outcome.started_at, tz=dt_timezone.utc),
            wall_s=outcome.wall_s, completed=summary["completed"], failed=summary["failed"],
            summary=summary, client=outcome.client, flags=[f.to_dict() for f in flags],
            gpu_summary=gpu.get("summary") or {}, gpu_series=gpu.get("series") or {},
            server_summary=server.get("summary") or {}, server_series=server.get("series") or {})
        RequestRecord.objects.bulk_create([
            RequestRecord(level=level, index=r.index, sent=r.sent, scheduled=r.scheduled,
                          first_content=r.first_content, first_answer=r.first_answer,
                          end=r.e2e, chunk_times=r.chunk_times, prompt_tokens=r.prompt_tokens,
                          output_tokens=r.output_tokens, client_output_tokens=r.client_output_tokens,
                          finish_reason=r.finish_reason or "", timings=r.timings,
                          status_code=r.status_code, error=r.error, error_kind=r.error_kind)
            for r in outcome.results], batch_size=500)
        stored = RequestRecord.objects.filter(level__run=run).count()
        # A level bounded by time may stop before its request bound: shrink the total to match.
        shortfall = max(0, (run.requests_per_level - len(outcome.results)))
        Run.objects.filter(id=run.id).update(
            progress_done=stored, progress_total=models.F("progress_total") - shortfall,
            flags=merge([run.flags, flags]))
    run.refresh_from_db(fields=["progress_done", "progress_total", "flags"])
    return level


def _note(run: Run, note: str) -> None:
    Run.objects.filter(id=run.id).update(progress_note=note[:300])


def _final_status(run: Run) -> str:
    levels = list(run.levels.all())
    completed = sum(lv.completed for lv in levels)
    failed = sum(lv.failed for lv in levels)
    if completed == 0:
        return Run.FAILED
    return Run.PARTIAL if failed else Run.SUCCEEDED


def _finish(run: Run, status: str, error: str = "") -> None:
    # Never overwrite a cancellation that came in meanwhile.
    close_old_connections()
    Run.objects.filter(id=run.id, status=Run.RUNNING).update(
        status=status, finished=timezone.now(), error=error[:5000], progress_note="")


# ---------------------------------------------------------------- imported reports
QUANTIZATION_GUESS = {"fp8": "fp8_e4m3", "q4_k_m": "gguf_q4_k_m", "q4_k": "gguf_q4_k_m", "awq": "awq"}


def report_import(*, owner, data: bytes, filename: str, title: str = "", backend: str = "",
                  quantization: str = "", gpu: str = ""):
    """Parse an uploaded result file (vllm bench serve, GuideLLM, llama-bench) and store it as an
    imported report. Raises importers.ReportFormatError with what is wrong."""
    from benchmarks.importers import parse_report
    from benchmarks.models import ImportedReport

    report = parse_report(data, filename)
    return ImportedReport.objects.create(
        kind=report.kind, title=title or report.title, filename=filename[:300],
        gpu=gpu or report.gpu or "", backend=backend or report.backend or "",
        quantization=quantization, report=report.to_dict(), uploaded_by=owner)


def published_reports_load(model=None) -> int:
    """The V100 write-up's figures as published reports (idempotent): always labelled
    "published, not measured here". `model` lets the data migration pass its historical model."""
    from benchmarks.importers import v100_writeup_reports
    from benchmarks.models import ImportedReport

    model = model or ImportedReport
    created = 0
    for report in v100_writeup_reports():
        text = str((report.raw_meta or {}).get("quantization", "")).lower()
        quant = next((q for key, q in QUANTIZATION_GUESS.items() if key in text), "")
        _, was_created = model.objects.update_or_create(
            kind="published", title=report.title,
            defaults={"gpu": report.gpu or "", "backend": report.backend or "", "quantization": quant,
                      "report": report.to_dict(), "filename": "seed-v100-writeup.md"})
        created += was_created
    return created


def comparison_create(*, owner, runs, reports, title: str = ""):
    from benchmarks.models import Comparison

    comparison = Comparison.objects.create(owner=owner, title=title)
    comparison.runs.set(runs)
    comparison.reports.set(reports)
    return comparison
