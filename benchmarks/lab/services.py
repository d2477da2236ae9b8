"""The lab on a host's worker: servers started from recipes, one per recipe and setting of its
sweep, each measured with the run's levels and quality step and stopped before the next starts.

What this host lets its worker start is read from the worker's own settings (LAB_*), never from
the database. A server that does not start is stored as evidence (exit code or signal, log tail,
cause) and the run goes on to the next.
"""
from __future__ import annotations

import logging
import os
import pwd
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from benchmarks.engine import launcher, llama_perplexity, multi_gpu
from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.client import Cancelled
from benchmarks.engine.launcher import Allowlist, LaunchReport
from benchmarks.models import Endpoint, Run, ServerLaunch, ServerRecipe

log = logging.getLogger(__name__)
FINISHED = (ServerLaunch.REFUSED, ServerLaunch.DID_NOT_START, ServerLaunch.STOPPED)


def allowlist() -> Allowlist:
    """This host's allowlist, from its worker's settings."""
    return Allowlist.from_settings(settings.LAB_EXECUTABLES, settings.LAB_MODEL_DIRS, settings.LAB_PORTS,
                                   settings.LAB_LISTEN_ADDRESSES, settings.LAB_GPUS, settings.LAB_ENV_ALLOWED,
                                   settings.LAB_RUN_AS, inline_code=settings.LAB_ALLOW_INLINE_CODE)


def launches_create(*, run: Run, recipes: list[ServerRecipe], sweep: dict) -> list[ServerLaunch]:
    """One launch per recipe and setting of its sweep (`sweep`: recipe id -> flag -> the values
    chosen; a recipe not in it measures every allowed value)."""
    launches = []
    for recipe in sorted(recipes, key=lambda r: r.name):
        for index, setting in enumerate(recipe.settings(sweep.get(str(recipe.id)))):
            launches.append(ServerLaunch(run=run, recipe=recipe, setting_index=index, setting=setting))
    return ServerLaunch.objects.bulk_create(launches)


def orphans_stop() -> list[dict]:
    """Stop the servers a killed worker on this host left running (its records under
    LAB_STATE_DIR), before anything is measured; the launch each belonged to keeps a note."""
    stopped = launcher.reap_orphans(settings.LAB_STATE_DIR, settings.LAB_STOP_GRACE_S)
    for rec in stopped:
        log.warning("stopped a server left running by a worker that is gone: pid %s, port %s (%s): %s",
                    rec.get("pid"), rec.get("port"), rec.get("label"), rec.get("stopped"))
        with transaction.atomic():
            launch = ServerLaunch.objects.select_for_update().filter(public_id=rec.get("launch") or "").first()
            if launch is not None:
                report = launch.figures
                report.orphans_stopped.append({"pid": rec.get("pid"), "pgid": rec.get("pgid"), "port": rec.get("port"),
                                               "processes": rec.get("members"), "stopped": rec.get("stopped"),
                                               "at": timezone.now().isoformat()})
                launch.report = report.to_dict()
                launch.save(update_fields=["report"])
    return stopped


def _save(launch: ServerLaunch, report: LaunchReport, **fields) -> None:
    launch.report = report.to_dict()
    launch.status = {"refused": ServerLaunch.REFUSED, "did_not_start": ServerLaunch.DID_NOT_START,
                     "running": ServerLaunch.RUNNING, "stopped": ServerLaunch.STOPPED}.get(report.status, launch.status)
    for name, value in fields.items():
        setattr(launch, name, value)
    launch.save(update_fields=["report", "status", *fields])


def lab_endpoint(*, launch: ServerLaunch, base_url: str, command: str) -> Endpoint:
    """The endpoint the levels of a recipe at one setting are stored under: one per recipe and
    setting, reused by every run, its base URL that of the latest start. Never offered in the
    run form (not enabled: nothing serves there between runs)."""
    recipe = launch.recipe
    fields = dict(host=recipe.host, backend=recipe.backend, base_url=base_url, model_name=recipe.served_model_name,
                  variant=recipe.variant, launch_command=command, launch_flags=launch.setting, enabled=False)
    name = recipe.setting_name(launch.setting)[:100]
    indices = recipe.gpu_indices(launch.setting)
    # Its GPUs are the ones the server was given: the ones its levels sample and the advisor counts.
    gpus = list(recipe.host.gpus.filter(index__in=indices)) if indices is not None else []
    fields["tensor_parallel_size"] = _tensor_parallel(recipe, launch.setting)
    existing = Endpoint.objects.filter(recipe=recipe, launch_flags=launch.setting).first()
    if existing is not None:
        Endpoint.objects.filter(id=existing.id).update(**fields)
        existing.refresh_from_db()
        existing.gpus.set(gpus)
        return existing
    for candidate in (name, f"{name[:90]} (lab {recipe.id})"):
        try:
            with transaction.atomic():
                endpoint = Endpoint.objects.create(name=candidate, recipe=recipe, **fields)
                endpoint.gpus.set(gpus)
                return endpoint
        except IntegrityError:  # a registered endpoint already has that name
            continue
    endpoint = Endpoint.objects.create(name=f"lab {launch.public_id}", recipe=recipe, **fields)
    endpoint.gpus.set(gpus)
    return endpoint


def _tensor_parallel(recipe: ServerRecipe, setting: dict) -> int:
    """vLLM's --tensor-parallel-size as the server was started (its setting, else its recipe's
    arguments); 1 when neither says."""
    value = multi_gpu.flag_value(setting, recipe.args, multi_gpu.TENSOR_PARALLEL)
    try:
        return max(int(value or 1), 1)
    except (TypeError, ValueError):
        return 1


def lab_addresses() -> AddressPolicy:
    """Where the worker may connect for a server it started itself: the deployment's networks
    and loopback (where it listens unless its recipe says otherwise)."""
    allowed = list(settings.ENDPOINT_ALLOWED_NETWORKS)
    if allowed:
        allowed += ["127.0.0.0/8", "::1/128", *(f"{a}/{128 if ':' in a else 32}" for a in allowlist().listen_hosts
                                                if a not in ("0.0.0.0", "::"))]
    return AddressPolicy.from_setting(allowed)


def launch_execute(*, run: Run, launch: ServerLaunch, measure: Callable[[Endpoint, list[int] | None, bool], None],
                   should_stop: Callable[[], bool], note: Callable[[str], None] = lambda text: None,
                   rounds: list[list[int] | None] = (None,)) -> None:
    """Start one recipe at one setting on this host, measure it (`measure`: the run's levels of
    the round's trials, None for all, and after the last round its quality step, against its
    endpoint), stop it and check its memory was given back; once per round, so that each
    trial of a repeated run meets a freshly started server. A launch already finished is
    skipped; one left `running` by a killed worker starts again and measures what is missing.
    The launch keeps the report of its latest start."""
    if launch.status in FINISHED:
        return
    recipe = launch.recipe
    if settings.WORKER_HOST != recipe.host.name:
        where = f"this worker runs on {settings.WORKER_HOST}" if settings.WORKER_HOST else "this worker has no WORKER_HOST"
        report = LaunchReport(status="refused", refusal=f"{where}; the recipe is started by the worker of "
                                                        f"{recipe.host.name}")
        _save(launch, report, finished_at=timezone.now())
        return
    rounds = list(rounds) or [None]
    for number, trials in enumerate(rounds, start=1):
        if number > 1 and should_stop():
            raise Cancelled()
        if not _start_and_measure(run, launch, trials, number == len(rounds), measure, should_stop, note,
                                  f" (trial {trials[0] + 1} of {run.trials})" if trials else ""):
            return


def _start_and_measure(run, launch, trials, last, measure, should_stop, note, which: str) -> bool:
    """One start of the launch's server, its measuring and its stop; False when it did not start.
    An earlier start of the launch (the trial before, or a killed worker's) is kept in brief."""
    recipe = launch.recipe
    earlier = LaunchReport.from_dict(launch.report)  # as last saved (`figures` is read once)
    note(f"{launch}: starting the server{which}")
    ServerLaunch.objects.filter(id=launch.id).update(status=ServerLaunch.RUNNING, started_at=timezone.now())
    gpu_indices = recipe.gpu_indices(launch.setting)
    server, report = launcher.start(
        recipe.spec(launch.setting), allowlist(), settings.LAB_STATE_DIR, timeout_s=settings.LAB_START_TIMEOUT_S,
        should_stop=should_stop, stop_grace_s=settings.LAB_STOP_GRACE_S, gpu_indices=gpu_indices,
        owner={"run": run.public_id, "launch": launch.public_id})
    report.orphans_stopped = earlier.orphans_stopped
    report.earlier_starts = earlier.earlier_starts + ([earlier.start_record()] if earlier.pid else [])
    if server is None:
        _save(launch, report, finished_at=timezone.now())
        log.info("%s: %s %s", launch, report.status, report.refusal or report.failure)
        if should_stop():
            raise Cancelled()
        return False
    peak = None
    try:
        endpoint = lab_endpoint(launch=launch, base_url=server.base_url, command=report.command)
        run.endpoints.add(endpoint)
        _save(launch, report, endpoint=endpoint)
        watch = launcher.MemoryWatch(server.pgid, gpu_indices, baseline=report.memory_before).start()
        try:
            measure(endpoint, trials, last)
        finally:
            peak = watch.stop()
    finally:
        note(f"{launch}: stopping the server{which}")
        launcher.finish(server, report, gpu_indices=gpu_indices, stop_grace_s=settings.LAB_STOP_GRACE_S, peak=peak,
                        freed_timeout_s=settings.LAB_FREED_TIMEOUT_S)
        _save(launch, report, finished_at=timezone.now())
        if not last:  # more trials to start it for: a worker killed meanwhile starts it again
            ServerLaunch.objects.filter(id=launch.id).update(status=ServerLaunch.RUNNING)
            launch.status = ServerLaunch.RUNNING
    return True


# ------------------------------------------------------------------ quality by llama-perplexity
TOOL_NAME = "llama-perplexity"


def quality_tool(recipe: ServerRecipe) -> tuple[str, str]:
    """(the llama-perplexity this host's worker allows for `recipe`'s model file, "") or ("", why
    not): a llama.cpp recipe whose model is a GGUF file under LAB_MODEL_DIRS, and a llama-perplexity
    among LAB_EXECUTABLES (the one beside the recipe's executable first)."""
    if recipe.backend != "llamacpp":
        return "", f"{recipe.name} starts {recipe.get_backend_display()}, not llama.cpp from a GGUF file"
    allows = allowlist()
    if not recipe.model_path.endswith(".gguf") or not os.path.isfile(recipe.model_path):
        return "", f"{recipe.name}'s model is not a GGUF file on this host"
    if not allows.allows_model(recipe.model_path):
        return "", f"{recipe.name}'s model is outside the folders this host allows (LAB_MODEL_DIRS)"
    tools = [e for e in allows.executables if os.path.basename(e) == TOOL_NAME]
    if not tools:
        return "", f"this host's worker allows no {TOOL_NAME} (LAB_EXECUTABLES)"
    beside = [t for t in tools if os.path.dirname(t) == os.path.dirname(recipe.executable)]
    return (beside or tools)[0], ""


def quality_folder(run: Run) -> Path:
    """Where a run's quality files live on the host (the text, the reference's distributions)."""
    return Path(settings.LAB_STATE_DIR) / "quality" / f"run-{run.id}"


def tool_scores(*, tool: str, recipe: ServerRecipe, text_path: Path, n_ctx: int, chunks: int, base: str = "",
                compare: bool = False, should_stop: Callable[[], bool]) -> llama_perplexity.ToolScores:
    """llama-perplexity on `recipe`'s file as its server is started: the environment and user the
    launcher gives a server (launcher.server_env, LAB_RUN_AS). Raises ToolError with the reason."""
    allows = allowlist()
    user = pwd.getpwnam(allows.run_as) if allows.run_as else None
    if user is not None:
        for path in (text_path.parent, text_path):
            os.chown(path, user.pw_uid, user.pw_gid)
    argv = llama_perplexity.command(tool, recipe.model_path, str(text_path), n_ctx, chunks, base=base,
                                    compare=compare)
    return llama_perplexity.run(argv, timeout_s=settings.LAB_START_TIMEOUT_S, should_stop=should_stop,
                                env=launcher.server_env(recipe.spec({}), user), **launcher.as_user(user))
