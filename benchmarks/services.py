"""Services write: creating runs, executing them, storing what the engine measured."""
from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import secrets
import shutil
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone as dt_timezone
from typing import Callable

import httpx
from celery import current_app

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import close_old_connections, connection, models, transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from benchmarks import history
from benchmarks.engine import gpu as gpu_telemetry
from benchmarks.engine import quality as quality_engine  # `quality` is the run's field
from benchmarks.engine.client import (Cancelled, Finding, LevelOutcome, Load, Session, Timeouts, describe_error,
                                      until_stopped)
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine.gpu import GpuSummary
from benchmarks.engine.metrics import summarize_level
from benchmarks import loadgen
from benchmarks.engine import host_check, llama_perplexity, shards
from benchmarks.engine.plan import RunPlan
from benchmarks.limits import plan_limits
from benchmarks.engine.observe import GpuTelemetry, ServerTelemetry, measure_observed
from benchmarks.engine.server_metrics import ServerSummary, server_identity
from benchmarks.engine.slo_search import SloSearch, max_probes
from benchmarks.engine.validity import level_flags, merge
from benchmarks.importers import parse_report, v100_writeup_reports
from benchmarks.lab import services as lab_services
from benchmarks.models import (ApiToken, Comparison, DeletedRun, Endpoint, EvaluationText, Gpu, Host, ImportedReport, LevelResult,
                               QualityMeasurement, RequestRecord, Run, ServerLaunch, endpoint_addresses)
from benchmarks.selectors import quality_problems, runs_in_flight

log = logging.getLogger(__name__)


def run_create(*, owner, endpoints: list[Endpoint], plan: RunPlan, title: str = "", recipes: list = (),
               quality_text: EvaluationText | None = None, quality_upload: dict | None = None,
               quality_reference: Endpoint | None = None, quality_reference_recipe=None, schedule=None) -> Run:
    """Queue a run of `plan` (engine/plan.py) on `endpoints` and on servers started from `recipes`
    (each at every setting of the plan's sweep; all allowed values for a recipe not in it), which
    are measured as an endpoint is. Every door (the run form, the API, a schedule's firing) comes
    here: raises ValidationError when the plan passes the site's limits, or when the owner already
    has MAX_RUNS_IN_FLIGHT runs queued or running (counted and inserted in one transaction that
    holds the owner's row). The quality step scores `quality_text`, or `quality_upload`
    ({"name", "text"}, stored as an EvaluationText), or else the built-in text; `schedule`: the
    schedule whose firing queues it (schedules.schedule_fire)."""
    recipes = list(recipes)
    measured = len(endpoints) + sum(len(r.settings(plan.sweep.get(str(r.id)))) for r in recipes)
    if problems := plan.problems(plan_limits(), measured):
        raise ValidationError([message for _, message in problems])
    per_endpoint = _measured_per_endpoint(plan)
    with transaction.atomic():
        _check_runs_in_flight(owner)
        if plan.quality.on and quality_upload:
            quality_text = evaluation_text_store(owner=owner, **quality_upload)
        if not plan.quality.on:
            quality_text = quality_reference = quality_reference_recipe = None
        run = Run.objects.create(
            owner=owner, title=title, **plan.columns(), quality_text=quality_text,
            quality_reference=quality_reference, quality_reference_recipe=quality_reference_recipe, progress_total=len(endpoints) * per_endpoint,
            queue_name=queue_for(endpoints, recipes), schedule=schedule)
        run.endpoints.set(endpoints)
        run.recipes.set(recipes)
        launches = lab_services.launches_create(run=run, recipes=recipes, sweep=plan.sweep)
        if launches:
            Run.objects.filter(id=run.id).update(progress_total=models.F("progress_total") + len(launches) * per_endpoint)
        transaction.on_commit(lambda: run_enqueue(run=run))
    return run


def _measured_per_endpoint(plan: RunPlan) -> int:
    """What the progress bar counts for one endpoint (or server started from a recipe): its
    requests and, with the quality step, its scored positions."""
    q = plan.quality
    return (plan.levels_per_endpoint() * plan.workload.requests_per_level
            + (quality_engine.scored_positions(q.ctx, q.chunks) if q.on else 0))


def _check_runs_in_flight(owner) -> None:
    """Inside the transaction that inserts the run: lock the owner's row (SELECT ... FOR UPDATE)
    so that one member's submissions are counted and inserted one after another; parallel
    submissions can then never pass the limit together."""
    if owner is None:
        return
    get_user_model().objects.select_for_update().only("pk").get(pk=owner.pk)
    in_flight = runs_in_flight(owner)
    if in_flight >= settings.MAX_RUNS_IN_FLIGHT:
        raise ValidationError(
            f"You already have {in_flight} runs queued or running (the limit is "
            f"{settings.MAX_RUNS_IN_FLIGHT}); wait for one to finish or cancel one.", code="runs_in_flight")


# The tasks services send, by name: tasks.py calls services, never the other way round.
RUN_TASK = "benchmarks.run_execute"
PROBE_TASK = "benchmarks.host_probe"
# Sent with a run's final status (`run`), after it is stored: its schedule and its alerts listen.
run_finished_signal = Signal()


def run_enqueue(*, run: Run) -> None:
    """Send a run to its queue: the one way a run reaches a worker (a new run once its
    transaction has committed, and the sweeper's re-sends). Sending twice is harmless: a run
    can only be claimed once at a time."""
    Run.objects.filter(id=run.id).update(enqueued_at=timezone.now())
    current_app.send_task(RUN_TASK, (run.id,), queue=run.queue_name or settings.CELERY_TASK_DEFAULT_QUEUE)


def queue_for(endpoints: list[Endpoint], recipes=()) -> str:
    """A run goes to its endpoints' host queue (so the worker next to the GPU measures it)
    when host queues are on and all endpoints share one host; else to the shared queue. A run
    with recipes always goes to their host's queue: only the worker there may start them."""
    hosts = {e.host.queue_name for e in endpoints}
    if recipes:
        return recipes[0].host.queue_name
    if settings.HOST_QUEUES and len(hosts) == 1:
        return hosts.pop()
    return settings.CELERY_TASK_DEFAULT_QUEUE


def run_cancel(*, run: Run) -> bool:
    changed = Run.objects.filter(id=run.id, status__in=[Run.QUEUED, Run.RUNNING]).update(
        status=Run.CANCELLED, finished=timezone.now(), progress_note="cancelled by a user")
    return bool(changed)


def run_archive(*, run: Run, archived: bool = True) -> None:
    """Hide a run from the lists (or show it again); its permalink and comparisons are unchanged."""
    run.archived = (run.archived or timezone.now()) if archived else None
    Run.objects.filter(id=run.id).update(archived=run.archived)


class RunInFlight(ValidationError):
    """A queued or running run cannot be deleted: a worker may be storing its levels."""


@transaction.atomic
def run_delete(*, run: Run, by) -> DeletedRun:
    """Delete a finished run and everything measured in it; what is left is its tombstone: the
    permalink answers 410 Gone with it and the comparisons that held the run name it."""
    locked = Run.objects.select_for_update().filter(id=run.id).first()
    if locked is None:
        raise RunInFlight("This run was deleted already.")
    if not locked.is_finished:
        raise RunInFlight(f"This run is {locked.status}: cancel it first, then delete it.")
    deleted = DeletedRun.objects.create(public_id=locked.public_id, name=str(locked)[:300], deleted_by=by)
    deleted.comparisons.set(locked.comparisons.all())
    locked.delete()
    return deleted


def run_execute(*, run_id: int, worker: str = "") -> None:
    """Measure a queued run: every endpoint, every level, stored level by level. A run whose
    earlier worker died resumes here after its finished levels."""
    run = Run.objects.get(id=run_id)
    if not run.claim(worker):
        log.info("run %s not claimed (status %s)", run_id, run.status)
        return
    if run.attempts > settings.RUN_MAX_ATTEMPTS:
        _finish(run, Run.FAILED, error=f"gave up after {run.attempts - 1} attempts: the workers "
                                       "measuring it stopped (killed or crashed)")
        return
    monitor = RunMonitor(run)
    monitor.start()
    loop = asyncio.new_event_loop()
    try:
        if run.recipes.exists():
            lab_services.orphans_stop()  # a killed worker's server would skew what is measured
        _check_host(run, monitor)
        for endpoint in run.endpoints.filter(recipe__isnull=True).select_related("host").order_by("name"):
            _measure_endpoint(run, endpoint, loop, monitor)
        reference = _measure_quality(run, loop, monitor) if run.quality else None
        launches = run.launches.select_related("recipe__host", "recipe__variant").order_by("recipe__name",
                                                                                          "setting_index")
        try:
            if reference is not None and launches.exists():
                _tool_reference(run, reference, monitor)
            for launch in launches:
                if monitor.should_stop():
                    raise Cancelled()
                lab_services.launch_execute(
                    run=run, launch=launch, should_stop=monitor.should_stop, note=lambda text: _note(run, text),
                    rounds=_rounds(run, launch),
                    measure=lambda e, trials, last: _measure_started(run, e, loop, monitor, reference, trials, last))
        finally:
            shutil.rmtree(lab_services.quality_folder(run), ignore_errors=True)
    except Cancelled:
        if monitor.stop_reason == "time limit":
            _finish(run, Run.FAILED, error=f"time limit of {settings.RUN_TIME_LIMIT_S:g} s reached; "
                                           "the finished levels and quality results are kept")
        log.info("run %s stopped: %s", run_id, monitor.stop_reason)
        return
    except Exception as exc:  # a bug or an unexpected fault: keep what was measured, say why
        log.exception("run %s failed", run_id)
        _finish(run, Run.FAILED, error=f"{exc.__class__.__name__}: {exc}")
        return
    finally:
        monitor.stop()
        loop.close()
    _finish(run, *_final_status(run))


def _check_host(run: Run, monitor: "RunMonitor") -> None:
    """Before any level: wait (bounded) while other work keeps this host busy, and keep what
    was found (engine.host_check); the run page says it when the host stayed busy."""
    if settings.RUN_HOST_CHECK_S <= 0:
        return
    _note(run, "checking that the measuring host is quiet")
    check = host_check.wait_for_quiet(settings.RUN_HOST_QUIET_WAIT_S, settings.RUN_HOST_CHECK_S,
                                      should_stop=monitor.should_stop, note=lambda text: _note(run, text))
    if check is None:
        raise Cancelled()
    run.host_check = check.to_dict()
    Run.objects.filter(id=run.id).update(host_check=run.host_check)


def _measure_endpoint(run: Run, endpoint: Endpoint, loop: asyncio.AbstractEventLoop,
                      monitor: "RunMonitor", addresses=None, trials: list[int] | None = None) -> None:
    """The run's levels on one endpoint, trial after trial (`trials`: which, default all), or its
    SLO search; what is already stored (a resumed run) is not measured again."""
    workload = run.workload()
    trials = list(range(run.trials)) if trials is None else trials
    done = set(run.levels.filter(endpoint=endpoint).values_list("level_index", "trial"))
    loads = run.loads()
    searching = run.is_search
    todo = [(index, trial) for trial in trials for index in range(len(loads)) if (index, trial) not in done]
    if not searching and not todo:
        return
    if searching and run.searches().get(str(endpoint.id), SloSearch(run.slo_target)).done:
        return
    timeouts = Timeouts(connect=settings.REQUEST_CONNECT_TIMEOUT_S, first_byte=settings.REQUEST_READ_TIMEOUT_S,
                        total=settings.REQUEST_TOTAL_TIMEOUT_S)
    session = Session(endpoint.target(), workload, timeouts, loads=loads or [run.widest_search_load()],
                      addresses=addresses or endpoint_addresses())
    try:
        _note(run, f"{endpoint.name}: preflight")
        # Every step stops within a poll of a cancel (or the time limit), not only the levels.
        def step(awaitable):
            return loop.run_until_complete(until_stopped(awaitable, monitor.should_stop))

        preflight = step(session.preflight())
        run.preflight[str(endpoint.id)] = [f.to_dict() for f in preflight.findings]
        Run.objects.filter(id=run.id).update(preflight=run.preflight)
        if preflight.ok:
            run.server_config[str(endpoint.id)] = {
                **step(server_identity(session.client, endpoint.base_url, endpoint.backend)),
                "declared": history.declared_identity(endpoint)}
            Run.objects.filter(id=run.id).update(server_config=run.server_config)
            fits = session.context_check(run.server_config[str(endpoint.id)])
            if fits:  # a request past the server's context fails every time: say so once, send none
                preflight.findings.append(fits)
                run.preflight[str(endpoint.id)].append(fits.to_dict())
            if preflight.ok:
                _note(run, f"{endpoint.name}: building prompts and warming up")
                run.preflight[str(endpoint.id)].append(step(session.prepare(preflight.model)).to_dict())
            if session.dataset_problem:  # requests that cannot be built: no level is measured
                problem = Finding("requests", False, session.dataset_problem)
                preflight.findings.append(problem)
                run.preflight[str(endpoint.id)].append(problem.to_dict())
            Run.objects.filter(id=run.id).update(preflight=run.preflight)
        gpu_indices, gpu_note = _gpus_to_sample(endpoint)

        def measure(load: Load, index: int, trial: int) -> LevelResult:
            if monitor.should_stop():
                raise Cancelled()
            gpu = server = None
            if preflight.ok:
                _note(run, f"{endpoint.name}: {load.label}" + (f", trial {trial + 1} of {run.trials}"
                                                               if run.trials > 1 else ""))
                processes, why = _load_processes(run, session, load)
                outcome, gpu, server = step(measure_observed(
                    session, load, monitor.progress, monitor.should_stop, gpu_indices, gpu_note,
                    settings.GPU_SAMPLE_INTERVAL_S, settings.METRICS_SAMPLE_INTERVAL_S, processes=processes, why=why,
                    measure=loadgen.level_over_workers(run, session, load, processes, monitor, why)))
            else:
                outcome = session.failed_level(load.concurrency, load.requests or 0,
                                               f"preflight failed: {preflight.cause}", "preflight")
                outcome.rate = load.rate
            level = level_store(run=run, endpoint=endpoint, outcome=outcome, level_index=index, gpu=gpu,
                                server=server, trial=trial)
            monitor.level_stored(run.progress_done)
            return level

        if searching:
            _search_endpoint(run, endpoint, measure, monitor)
        else:
            for index, trial in todo:
                measure(loads[index], index, trial)
    finally:
        loop.run_until_complete(session.close())


def _load_processes(run: Run, session: Session, load) -> tuple[int, str]:
    """The run's setting, else as many shard processes as the level's expected chunk rate needs
    (the warmup's speed per stream), on the cores this worker may use."""
    if run.load_processes:
        return run.load_processes, f"{run.load_processes} set for the run"
    return shards.processes_for(load, session.stream_tok_s, run.output_tokens)


def _search_endpoint(run: Run, endpoint: Endpoint, measure: Callable[[Load, int, int], LevelResult],
                     monitor: "RunMonitor") -> SloSearch:
    """The SLO search on one endpoint (engine.slo_search): each probe is a level, its number the
    level index, measured once per trial; the probes a resumed run already stored are replayed,
    not measured again. Stored after every probe, and with why it stopped when it is stopped."""
    search = run.new_search()
    stored: dict[int, dict[int, LevelResult]] = {}
    for level in run.levels.filter(endpoint=endpoint).defer("gpu_series", "server_series"):
        stored.setdefault(level.level_index, {})[level.trial] = level
    index = 0
    try:
        while (load := search.next_probe()) is not None:
            trials = stored.setdefault(index, {})
            for trial in range(run.trials):
                if trial not in trials or run.probe_load(trials[trial]) != load:
                    trials[trial] = measure(run.search_load(load), index, trial)
            search.record(load, [trials[t].stats for t in sorted(trials)])
            _search_store(run, endpoint, search)
            index += 1
    except Cancelled:
        search.stopped = monitor.stop_reason or "stopped"
        _search_store(run, endpoint, search)
        raise
    # The progress bar counted the most probes a search can need: take away those it did not.
    unused = (max_probes(search.low, search.high) - len(search.probes)) * run.trials * run.requests_per_level
    Run.objects.filter(id=run.id).update(progress_total=models.F("progress_total") - unused)
    run.refresh_from_db(fields=["progress_total"])
    return search


def _search_store(run: Run, endpoint: Endpoint, search: SloSearch) -> None:
    run.slo_search[str(endpoint.id)] = search.to_dict()
    Run.objects.filter(id=run.id).update(slo_search=run.slo_search)


def _rounds(run: Run, launch: ServerLaunch) -> list[list[int] | None]:
    """How a server started from a recipe is measured: one start per trial still to measure
    (fresh server state each time), or one start for everything (a single trial, or an SLO
    search, whose probes follow one another on one server). None: every missing trial."""
    if run.trials == 1 or run.is_search:
        return [None]
    stored = Counter(run.levels.filter(endpoint_id=launch.endpoint_id).values_list("trial", flat=True))
    return [[t] for t in range(run.trials) if stored[t] < len(run.loads())] or [None]


# What a quality step may meet from a server besides the engine's own refusals (QualityError):
# connections that fail or drop (a server that died mid-step) and answers of the wrong shape.
QUALITY_FAULTS = (quality_engine.QualityError, httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError,
                  IndexError)


def _quality_fault(exc: Exception) -> str:
    if isinstance(exc, quality_engine.QualityError):
        return str(exc)
    if isinstance(exc, httpx.HTTPError):
        return f"the server stopped answering during the quality step ({describe_error(exc)})"
    return f"the server's answer could not be read ({describe_error(exc)})"


@dataclass
class QualityReference:
    """The run's reference as scored once (None when it has none, or it could not be scored:
    `refused` says why), for every other endpoint to be compared with."""

    scores: object = None
    refused: str = ""
    # A recipe as the reference (Run.quality_reference_recipe): its file scored by llama-perplexity,
    # its distributions saved in `base` for the servers the lab starts from GGUF files.
    recipe_id: int | None = None
    name: str = ""
    base: str = ""
    own: object = None  # its own ToolScores
    text_path: object = None


def _tool_reference(run: Run, reference: QualityReference, monitor: "RunMonitor") -> None:
    """Before any server of the run starts: with a recipe as the reference, the host's
    llama-perplexity scores its file once and saves its distributions; and the text is written
    where the tool reads it. Why not, where it cannot, is kept in `reference.refused`."""
    folder = lab_services.quality_folder(run)
    folder.mkdir(parents=True, exist_ok=True)
    reference.text_path = folder / "text.txt"
    reference.text_path.write_text(run.evaluation_text().text, encoding="utf-8")
    recipe = run.quality_reference_recipe
    if recipe is None:
        return
    reference.recipe_id, reference.name = recipe.id, recipe.name
    tool, why = lab_services.quality_tool(recipe)
    if not tool:
        reference.refused = f"the reference {recipe.name} could not be scored: {why}"
        return
    _note(run, f"quality: {recipe.name} (the reference) by llama-perplexity")
    try:
        reference.own = lab_services.tool_scores(
            tool=tool, recipe=recipe, text_path=reference.text_path, n_ctx=run.quality_ctx,
            chunks=run.quality_chunks, base=str(folder / "base.kld"), should_stop=monitor.should_stop)
    except llama_perplexity.ToolError as exc:
        reference.refused = f"the reference {recipe.name} could not be scored: {exc}"
        return
    reference.base = str(folder / "base.kld")


def _quality_by_tool(run: Run, endpoint: Endpoint, reference: QualityReference, monitor: "RunMonitor") -> bool:
    """A server the lab started from a GGUF file, scored by the host's llama-perplexity on that
    file (the same text and windows; against the reference recipe's distributions where there is
    one). False where the tool cannot score it (the endpoint path then does)."""
    recipe = endpoint.recipe
    tool, _ = lab_services.quality_tool(recipe) if recipe is not None else ("", "")
    if not tool or reference.text_path is None or (reference.recipe_id and not reference.base) or \
            run.quality_reference_id:
        return False
    is_reference = recipe.id == reference.recipe_id
    _note(run, f"quality: {endpoint.name} by llama-perplexity")
    try:
        scores = reference.own if is_reference else lab_services.tool_scores(
            tool=tool, recipe=recipe, text_path=reference.text_path, n_ctx=run.quality_ctx,
            chunks=run.quality_chunks, base=reference.base, compare=bool(reference.base),
            should_stop=monitor.should_stop)
    except llama_perplexity.ToolError as exc:
        if monitor.should_stop():
            raise Cancelled() from None
        quality_store(run=run, endpoint=endpoint, error=str(exc))
        return True
    text = run.evaluation_text()
    tokens = scores.tokens_scored
    result = quality_engine.QualityResult(
        text=text.describe(), backend="llamacpp", method=llama_perplexity.METHOD,
        settings={"n_ctx": scores.n_ctx, "windows": scores.chunks, "llama_perplexity":
                  " ".join(scores.command[1:]).replace(recipe.model_path, "MODEL"), "tool": scores.command[0]},
        perplexity=scores.perplexity, perplexity_stderr=scores.perplexity_stderr,
        mean_nll=math.log(scores.perplexity), tokens_scored=tokens, seconds=round(scores.seconds, 3),
        tokens_per_s=tokens / scores.seconds if scores.seconds else 0.0, requests=0,
        reference=None if is_reference else scores.reference(reference.name))
    quality_store(run=run, endpoint=endpoint, result=result)
    return True


def _measure_quality(run: Run, loop: asyncio.AbstractEventLoop, monitor: "RunMonitor") -> QualityReference:
    """The quality step, after every endpoint's levels: the reference first, scored once and kept
    in memory, then every other endpoint, compared with it. An endpoint that already has its
    QualityMeasurement (a resumed run) is not measured again; the reference is scored again
    (without storing) only when others still need it. What fails is stored per endpoint with
    its reason, and the others are measured all the same. Servers started from recipes are
    scored while they run (_measure_started), against the reference returned here."""
    endpoints = list(run.endpoints.filter(recipe__isnull=True).select_related("host").order_by("name"))
    stored = {q.endpoint_id: q for q in run.quality_results.all()}
    ref_endpoint = next((e for e in endpoints if e.id == run.quality_reference_id), None)
    if run.quality_reference_recipe_id:  # scored from its file: registered endpoints get perplexity only
        reference_recipe = run.quality_reference_recipe.name
        refused = (f"the reference is the recipe {reference_recipe}, scored from its file by llama-perplexity: only "
                   "servers the lab starts from GGUF files are compared with it")
    else:
        refused = ""
    todo = [e for e in endpoints if e.id not in stored and e is not ref_endpoint]
    servers_to_score = run.launches.exclude(status__in=lab_services.FINISHED).exists()
    monitor.level_stored(_progress_done(run))
    text = run.evaluation_text()
    reference = QualityReference(refused=refused)
    if ref_endpoint is not None and (ref_endpoint.id not in stored or todo or servers_to_score):
        first = ref_endpoint.id not in stored
        if not first and stored[ref_endpoint.id].error:
            reference.refused = f"the reference {ref_endpoint.name} could not be scored: {stored[ref_endpoint.id].error}"
        else:
            try:
                reference.scores = _quality_call(run, ref_endpoint, loop, monitor, text, reference=None, first=first)
            except QUALITY_FAULTS as exc:
                reference.refused = f"the reference {ref_endpoint.name} could not be scored: {_quality_fault(exc)}"
                quality_store(run=run, endpoint=ref_endpoint, error=_quality_fault(exc))
            else:
                if first:
                    quality_store(run=run, endpoint=ref_endpoint, result=reference.scores.result)
            monitor.level_stored(_progress_done(run))
    for endpoint in todo:
        _quality_one(run, endpoint, loop, monitor, text, reference)
    monitor.follow(None)
    return reference


def _quality_one(run: Run, endpoint: Endpoint, loop: asyncio.AbstractEventLoop, monitor: "RunMonitor",
                 text: quality_engine.EvalText, reference: QualityReference, addresses=None) -> None:
    """One endpoint's quality step against the reference, stored with its result or its reason."""
    try:
        result = _quality_call(run, endpoint, loop, monitor, text, reference=reference.scores, addresses=addresses)
    except QUALITY_FAULTS as exc:
        quality_store(run=run, endpoint=endpoint, error=_quality_fault(exc))
    else:
        if reference.refused:
            result.reference_refused = reference.refused
        quality_store(run=run, endpoint=endpoint, result=result)
    monitor.level_stored(_progress_done(run))


def _measure_started(run: Run, endpoint: Endpoint, loop: asyncio.AbstractEventLoop, monitor: "RunMonitor",
                     reference: QualityReference | None, trials: list[int] | None = None, last: bool = True) -> None:
    """A server started from a recipe, while it runs: the run's levels (of `trials`, default
    all), then, after its `last` start and with the quality step, its quality against the run's
    reference, unless a resumed run stored it already."""
    addresses = lab_services.lab_addresses()
    _measure_endpoint(run, endpoint, loop, monitor, addresses=addresses, trials=trials)
    if last and reference is not None and not run.quality_results.filter(endpoint=endpoint).exists():
        if not _quality_by_tool(run, endpoint, reference, monitor):
            _quality_one(run, endpoint, loop, monitor, run.evaluation_text(), reference, addresses=addresses)
        monitor.level_stored(_progress_done(run))
        monitor.follow(None)


def _quality_call(run: Run, endpoint: Endpoint, loop: asyncio.AbstractEventLoop, monitor: "RunMonitor",
                  text: quality_engine.EvalText, *, reference, first: bool = True, addresses=None):
    """Score one endpoint through the engine (the reference with `reference=None`: its
    ReferenceScores), through the same checked connections as its levels, stopping within a
    poll of a cancel or the time limit. `first`: count its positions in the progress."""
    timeouts = Timeouts(connect=settings.REQUEST_CONNECT_TIMEOUT_S, first_byte=settings.REQUEST_READ_TIMEOUT_S,
                        total=settings.REQUEST_TOTAL_TIMEOUT_S)
    session = Session(endpoint.target(), run.workload(), timeouts,
                      loads=[Load(concurrency=quality_engine.MAX_STREAMS * quality_engine.PIPELINE)], addresses=addresses or endpoint_addresses())
    role = " (reference)" if endpoint.id == run.quality_reference_id else ""
    total = run.quality_positions
    _note(run, f"quality: {endpoint.name}{role}: preflight")

    def step(awaitable):
        return loop.run_until_complete(until_stopped(awaitable, monitor.should_stop))
    try:
        preflight = step(session.preflight())
        if not preflight.ok:
            raise quality_engine.QualityError(f"preflight failed: {preflight.cause}")
        progress = monitor.advance if first else None
        monitor.follow(lambda done: f"quality: {endpoint.name}{role}: {done:,} of {total:,} positions scored")
        args = (session.client, endpoint.base_url, endpoint.backend, text)
        kw = dict(model=preflight.model, n_ctx=run.quality_ctx, chunks=run.quality_chunks, progress=progress)
        if reference is None and role:
            return step(quality_engine.measure_reference(*args, name=endpoint.name, **kw))
        return step(quality_engine.measure(*args, reference=reference, **kw))
    finally:
        monitor.follow(None)
        loop.run_until_complete(session.close())


def quality_store(*, run: Run, endpoint: Endpoint, result: quality_engine.QualityResult | None = None,
                  error: str = "") -> QualityMeasurement:
    """Store one endpoint's quality step: its result (written by QualityResult.to_dict), or why
    it could not be measured. The run's progress counts the endpoint's share as done either way."""
    with transaction.atomic():
        row = QualityMeasurement.objects.create(run=run, endpoint=endpoint,
                                                result=result.to_dict() if result is not None else {},
                                                error=error[:5000])
        Run.objects.filter(id=run.id).update(progress_done=_progress_done(run))
    run.refresh_from_db(fields=["progress_done"])
    return row


def _progress_done(run: Run) -> int:
    """Requests stored, plus each stored quality step's share of positions."""
    return (RequestRecord.objects.filter(level__run=run).count()
            + run.quality_results.count() * run.quality_positions)


def evaluation_text_store(*, owner, name: str, text: str) -> EvaluationText:
    """An uploaded evaluation text, stored once per content: the same text uploaded again (under
    any name) is the row already stored, so figures on it stay comparable by its sha256."""
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    stored, _ = EvaluationText.objects.get_or_create(sha256=sha256, defaults={
        "name": name[:200], "text": text, "uploaded_by": owner})
    return stored


def _gpus_to_sample(endpoint: Endpoint) -> tuple[list[int] | None, str]:
    """GPU telemetry is read next to the GPU: only a worker started on the endpoint's host
    (WORKER_HOST) samples it — the endpoint's GPUs, or all of that host's."""
    if not settings.WORKER_HOST:
        return None, "not sampled: this worker has no WORKER_HOST, so it cannot tell which GPUs are local"
    if settings.WORKER_HOST != endpoint.host.name:
        return None, (f"not sampled: the worker runs on {settings.WORKER_HOST}, the endpoint on "
                      f"{endpoint.host.name}")
    indices = sorted(g.index for g in endpoint.serving_gpus())
    return indices or [0], ""


class RunMonitor:
    """A thread beside the measurement: every second it saves progress and the heartbeat (so
    a dead worker is noticed), and learns whether the run was cancelled or ran past its time
    limit. The event loop only counts; it never waits for the database."""

    def __init__(self, run: Run):
        self.run_id = run.id
        self.started = run.started or timezone.now()
        self.base = run.progress_done
        self.count = 0
        self.stop_reason = ""
        self._note: Callable[[int], str] | None = None
        self._stop = threading.Event()
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"run-{run.id}-monitor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join(10)

    def should_stop(self) -> bool:
        return self._stop.is_set()

    async def progress(self, result) -> bool:
        self.count += 1
        return not self._stop.is_set()

    def advance(self, n: int) -> None:
        """`n` more steps done (the quality step's scored positions)."""
        self.count += n

    def follow(self, note: Callable[[int], str] | None) -> None:
        """While set, every beat also writes the progress note `note` makes of the steps counted
        since the last stored result (the quality step's "120 of 255 positions scored")."""
        self._note = note

    def level_stored(self, stored: int) -> None:
        self.base, self.count = stored, 0

    def _beat(self) -> None:
        try:
            while not self._halt.wait(min(1.0, settings.RUN_HEARTBEAT_S)):
                now = timezone.now()
                note = self._note
                extra = {"progress_note": note(self.count)[:300]} if note is not None else {}
                alive = Run.objects.filter(id=self.run_id, status=Run.RUNNING).update(
                    heartbeat=now, progress_done=self.base + self.count, **extra)
                if not alive:
                    self.stop_reason = "cancelled"
                    self._stop.set()
                elif (now - self.started).total_seconds() > settings.RUN_TIME_LIMIT_S:
                    self.stop_reason = "time limit"
                    self._stop.set()
        finally:
            connection.close()  # this thread's own connection


def runs_requeue(*, startup: bool = False) -> int:
    """Send again what a broker may have lost: queued runs (a Redis restarted without
    persistence loses its queue) and running runs whose worker stopped beating. Extra
    deliveries are harmless: a run can only be claimed once at a time."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.RUN_HEARTBEAT_STALE_S)
    queued = Q(status=Run.QUEUED)
    if not startup:
        queued &= Q(enqueued_at__lt=now - timedelta(seconds=settings.RUN_REQUEUE_AFTER_S)) | Q(enqueued_at=None)
    runs = list(Run.objects.filter(queued | Q(status=Run.RUNNING, heartbeat__lt=stale)).only("id", "queue_name"))
    for run in runs:
        run_enqueue(run=run)
    return len(runs)


def _fingerprint(run: Run, endpoint: Endpoint) -> str:
    """The level's workload fingerprint for the history; none for an SLO search's probes, whose
    level index is the probe's number, not a load another run measured at the same index."""
    return "" if run.is_search else history.workload_fingerprint(run, endpoint)


def level_store(*, run: Run, endpoint: Endpoint, outcome: LevelOutcome, level_index: int = 0,
                gpu: GpuTelemetry | None = None, server: ServerTelemetry | None = None, trial: int = 0) -> LevelResult:
    """Store one measured level with all its requests, in one transaction. Each stored shape is
    written by its own writer (to_dict)."""
    summary = summarize_level(outcome.results, outcome.wall_s, run.slo)
    gpu = gpu or GpuTelemetry(GpuSummary())
    server = server or ServerTelemetry(ServerSummary())
    flags = level_flags(summary, client=outcome.client, gpu=gpu.summary,
                        server_idle_at_start=server.summary.idle_at_start,
                        capped=bool(outcome.rate is not None and outcome.concurrency))
    with transaction.atomic():
        level = LevelResult.objects.create(
            run=run, endpoint=endpoint, level_index=level_index, trial=trial, concurrency=outcome.concurrency,
            rate=outcome.rate, started_at=datetime.fromtimestamp(outcome.started_at, tz=dt_timezone.utc),
            wall_s=outcome.wall_s, completed=summary.completed, failed=summary.failed,
            summary=summary.to_dict(), client=ClientFigures.read(outcome.client).to_dict(),
            flags=[f.to_dict() for f in flags],
            gpu_summary=gpu.summary.to_dict() if gpu.summary != GpuSummary() else {},
            gpu_series=gpu.series.to_dict(),
            server_summary=server.summary.to_dict() if server.summary != ServerSummary() else {},
            server_series=server.series.to_dict(), fingerprint=_fingerprint(run, endpoint))
        RequestRecord.objects.bulk_create([
            RequestRecord(level=level, index=r.index, sent=r.sent, scheduled=r.scheduled, turn=r.turn,
                          conversation=r.conversation,
                          first_content=r.first_content, first_answer=r.first_answer,
                          end=r.e2e, chunk_times=r.chunk_times, prompt_tokens=r.prompt_tokens,
                          output_tokens=r.output_tokens, client_output_tokens=r.client_output_tokens,
                          finish_reason=(r.finish_reason or "")[:30], timings=r.timings,
                          status_code=r.status_code, error=r.error, error_kind=r.error_kind)
            for r in outcome.results], batch_size=500)
        # A level bounded by time may stop before its request bound: shrink the total to match.
        shortfall = max(0, (run.requests_per_level - len(outcome.results)))
        Run.objects.filter(id=run.id).update(  # requests and quality steps stored: it never goes back
            progress_done=_progress_done(run), progress_total=models.F("progress_total") - shortfall,
            flags=merge([run.flags, flags]))
    run.refresh_from_db(fields=["progress_done", "progress_total", "flags"])
    return level


def _note(run: Run, note: str) -> None:
    Run.objects.filter(id=run.id).update(progress_note=note[:300])


def _final_status(run: Run) -> tuple[str, str]:
    """The finished run's status and error. No completed request: failed. Failed requests, or a
    quality step that did not give every endpoint its figures (or its comparison with the
    reference): partial, the quality reasons in the error; what was measured stays either way."""
    levels = list(run.levels.all())
    completed = sum(lv.completed for lv in levels)
    failed = sum(lv.failed for lv in levels)
    problems = quality_problems(run)
    error = ("quality step incomplete: " + "; ".join(f"{name}: {reason}" for name, reason in problems)
             if problems else "")
    if completed == 0:
        return Run.FAILED, error
    unstarted = run.launches.filter(status__in=[ServerLaunch.REFUSED, ServerLaunch.DID_NOT_START]).exists()
    return (Run.PARTIAL if failed or problems or unstarted else Run.SUCCEEDED), error


def _finish(run: Run, status: str, error: str = "") -> None:
    """The run's final status, stored with its regression test (so that whoever sees it finished
    sees the test too); then its schedule counts it and any regression is alerted."""
    # Never overwrite a cancellation that came in meanwhile.
    close_old_connections()
    regression = {}
    if status in history.COMPARABLE_STATUSES:
        try:
            regression = history.regression_report(run).to_dict()
        except Exception:  # a fault in the test must not lose what was measured
            log.exception("regression test of run %s failed", run.id)
    finished = Run.objects.filter(id=run.id, status=Run.RUNNING).update(
        status=status, finished=timezone.now(), error=error[:5000], progress_note="", regression=regression)
    if finished:
        run_finished(run=Run.objects.select_related("schedule").get(id=run.id))


def run_finished(*, run: Run) -> None:
    """After a run's final status: its listeners (its schedule's failure count, alerts of its
    regressions), each on its own: the run is finished and stored whatever happens there."""
    for receiver, outcome in run_finished_signal.send_robust(sender=Run, run=run):
        if isinstance(outcome, Exception):
            log.error("after finishing run %s, %s failed", run.id, getattr(receiver, "__qualname__", receiver),
                      exc_info=outcome)


# ---------------------------------------------------------------- imported reports
QUANTIZATION_GUESS = {"fp8": "fp8_e4m3", "q4_k_m": "gguf_q4_k_m", "q4_k": "gguf_q4_k_m", "awq": "awq"}


def report_import(*, owner, data: bytes, filename: str, title: str = "", backend: str = "",
                  quantization: str = "", gpu: str = ""):
    """Parse an uploaded result file (vllm bench serve, GuideLLM, llama-bench) and store it as an
    imported report. Raises importers.ReportFormatError with what is wrong."""
    # Parsed and checked in full (size, levels, text a database can store) before the one INSERT.
    report = parse_report(data, filename, max_bytes=settings.MAX_IMPORT_MIB * 1024 * 1024,
                          max_levels=settings.MAX_IMPORT_LEVELS)
    return ImportedReport.objects.create(  # one row, one INSERT: nothing half-stored
        kind=report.kind, title=title or report.title, filename=filename[:300],
        gpu=gpu or report.gpu or "", backend=backend or report.backend or "",
        quantization=quantization, report=report.to_dict(), uploaded_by=owner)


def published_reports_load(model=None) -> int:
    """The V100 write-up's figures as published reports (idempotent): always labelled
    "published, not measured here". `model` lets the data migration pass its historical model."""
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
    comparison = Comparison.objects.create(owner=owner, title=title)
    comparison.runs.set(runs)
    comparison.reports.set(reports)
    return comparison


# ---------------------------------------------------------------- endpoints
KEY_DROPPED = ("The base URL changed, so the stored API key was removed: a key is only ever sent to "
               "the server it was given for. Give it again if the new server needs one.")


def endpoint_api_key(*, stored: str, typed: str = "", clear: bool = False, old_url: str = "",
                     new_url: str = "") -> tuple[str, str]:
    """The API key an endpoint keeps after an edit, and a note when a stored key was dropped.
    A key typed in the same change replaces it; with none typed the stored key stays, unless
    the base URL changed: whoever may edit an endpoint could otherwise send its key anywhere."""
    if clear:
        return "", ""
    if typed:
        return typed, ""
    if stored and old_url.rstrip("/") != new_url.rstrip("/"):
        return "", KEY_DROPPED
    return stored, ""


# ---------------------------------------------------------------- hosts
def host_probe_store(*, host, probe) -> None:
    """Write what pynvml reported (engine.gpu.HostProbe) into the inventory: the host's
    driver, CUDA, interconnect and topology (Topology.to_dict, its one writer), and one Gpu row
    per GPU (updated by index)."""
    with transaction.atomic():
        host.probe_status = probe.status[:300]
        host.probed_at = timezone.now()
        if probe.ok:
            host.driver_version = probe.driver_version or host.driver_version
            host.cuda_version = probe.cuda_driver_version or host.cuda_version
            host.interconnect = probe.interconnect or host.interconnect
            host.topology = probe.topology.to_dict()
            for g in probe.gpus:
                ecc_c, ecc_u = (g.ecc_corrected or {}), (g.ecc_uncorrected or {})
                Gpu.objects.update_or_create(host=host, index=g.index, defaults=dict(
                    name=g.name or "", uuid=g.uuid or "", memory_total_mib=g.memory_total_mib,
                    compute_capability=g.compute_capability or "", pcie_generation=g.pcie_generation,
                    pcie_width=g.pcie_width, nvlink=g.nvlink_text[:100], ecc_mode=g.ecc_mode or "",
                    ecc_corrected=ecc_c.get("aggregate"), ecc_uncorrected=ecc_u.get("aggregate")))
        host.save()


def host_register(*, name: str, allows=None) -> Host:
    """The inventory's row for the host a worker runs on (WORKER_HOST), created if new; with
    `allows` (its worker's lab Allowlist) what that worker may start, kept to pre-fill recipes."""
    host, _ = Host.objects.get_or_create(name=name)
    if allows is not None:
        host.lab_executables, host.lab_model_dirs = list(allows.executables), list(allows.model_dirs)
        Host.objects.filter(id=host.id).update(lab_executables=host.lab_executables,
                                               lab_model_dirs=host.lab_model_dirs)
    return host


def host_probe_here(*, host_name: str):
    """Probe this machine's GPUs and store them under `host_name` (created if new)."""
    host = host_register(name=host_name)
    result = gpu_telemetry.probe()
    host_probe_store(host=host, probe=result)
    return host, result


def host_probe_request(*, hosts) -> int:
    """Ask each host's own worker (on its host queue) to probe its GPUs; the results land in
    the inventory when it has. Returns how many hosts were asked."""
    hosts = list(hosts)
    for host in hosts:
        current_app.send_task(PROBE_TASK, (host.name,), queue=host.queue_name)
    return len(hosts)


def api_token_create(*, owner, name: str) -> tuple[ApiToken, str]:
    """A new API token for `owner` and its key, which is stored only as its SHA-256: the caller
    shows the key once."""
    from benchmarks.api.tokens import key_sha256

    key = ApiToken.KEY_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(owner=owner, name=name, prefix=key[:12], key_sha256=key_sha256(key))
    return token, key


def api_token_revoke(*, token: ApiToken) -> bool:
    return bool(ApiToken.objects.filter(pk=token.pk, revoked=None).update(revoked=timezone.now()))
