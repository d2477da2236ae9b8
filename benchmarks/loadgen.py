"""A level spread over several load-generator workers (machines), with Celery's own primitives.

When one machine cannot read a level's chunks fast enough, the run's worker (the coordinator)
splits the level (engine/shards.py `split`) into one shard per load-generator worker and sends
them as a Celery `group` of `loadgen_shard` tasks to LOADGEN_QUEUE; their outcomes come back
through the result backend (Redis) and are merged as a level of local shards is.

Clocks. Each machine measures durations on its own monotonic clock, and a shard's request
records are relative to its own t0. The t0s must be one instant: the coordinator chooses a start
time ahead (LOADGEN_START_LEAD_S) on the Redis server's clock (TIME), and each shard converts it
to its own monotonic clock with its own measured offset to that clock (NTP-style: the offset at
the middle of the shortest of several round trips, so the error is at most half that round
trip). The coordinator measures its own offset the same way: a shard's offset to the
coordinator is the difference, stored in its client figures (`clock_offset_ms`, with the round
trip), and the level's wall window (`started_at`) is the start time on the coordinator's clock.

Stop. A cancel or the run's time limit sets a stop key the shards poll (as `should_stop`); a
shard whose task fails fails the level with its cause (ShardFailed); a shard not ready by the
start time fails too (its figures would not share the level's t0).
"""
from __future__ import annotations

import asyncio
import base64
import pickle
import time
import uuid

import redis
from celery import group, shared_task
from django.conf import settings
from django.core import signing

from benchmarks.engine.client import Cancelled, Load
from benchmarks.engine.client_figures import ShardFigures
from benchmarks.engine.metrics import RequestResult
from benchmarks.engine.shards import SessionSpec, ShardFailed, merge, run_shard, split

KEY_TTL_S = 3600
_SALT = "benchmarks.loadgen.shard"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(settings.CELERY_RESULT_BACKEND or settings.CELERY_BROKER_URL)


def clock_offset(r: redis.Redis, samples: int = 7) -> tuple[float, float]:
    """(Redis TIME - this machine's wall clock, round trip), both in seconds, from the shortest of
    `samples` round trips: the offset is read at the middle of it."""
    best = None
    for _ in range(samples):
        before = time.time()
        sec, usec = r.time()
        after = time.time()
        rtt = after - before
        offset = sec + usec / 1e6 - (before + after) / 2
        if best is None or rtt < best[1]:
            best = (offset, rtt)
    return best


def _pack(parts: tuple) -> str:
    """What a shard needs (plain engine objects), signed: a shard unpickles only what the site
    itself sent."""
    return signing.Signer(salt=_SALT).sign(base64.b64encode(pickle.dumps(parts)).decode("ascii"))


def _unpack(blob: str) -> tuple:
    return pickle.loads(base64.b64decode(signing.Signer(salt=_SALT).unsign(blob)))


def _result_from(data: dict) -> RequestResult:
    return RequestResult(**data)


# acks_late (the site's default) also keeps a busy worker from reserving a second shard of the
# same level, which would then start late.
@shared_task(name="benchmarks.loadgen_shard", ignore_result=False)
def loadgen_shard(blob: str, shard: int, start_ref: float, key: str) -> dict:
    """One shard of a level, on a load-generator worker: see the module's docstring. `blob`
    holds the prepared session, this shard's part of the level and its share of the requests."""
    spec, load, share = _unpack(blob)
    r = _redis()
    offset, rtt = clock_offset(r)
    stop_key, done_key = f"{key}:stop", f"{key}:done"
    polled = [0.0, False]

    def should_stop() -> bool:
        now = time.monotonic()
        if now - polled[0] > 0.2:
            polled[0], polled[1] = now, bool(r.exists(stop_key))
        return polled[1]

    async def wait_start():
        # The start on this machine's monotonic clock: the shared time on Redis's clock, less
        # this machine's offset to it, is this machine's wall time of the start.
        start_wall = start_ref - offset
        start_mono = time.perf_counter() + (start_wall - time.time())
        if start_mono < time.perf_counter():
            raise ShardFailed(f"not ready by the start time (late by {time.perf_counter() - start_mono:.2f} s): "
                              "raise LOADGEN_START_LEAD_S")
        while start_mono - time.perf_counter() > 0.3:
            if should_stop():
                return None
            await asyncio.sleep(0.1)
        return start_mono

    async def progress(result) -> bool:
        r.incr(done_key)
        return True

    try:
        outcome = asyncio.run(run_shard(spec, shard, load, share, wait_start, should_stop, progress))
    except Cancelled:
        return {"cancelled": True}
    outcome.client["clock_offset_ms"] = offset * 1000  # to Redis; the coordinator makes it relative
    outcome.client["clock_rtt_ms"] = rtt * 1000
    return {"results": [x.to_dict() for x in outcome.results], "client": outcome.client}


def level_over_workers(run, session, load: Load, processes: int, monitor, why: str):
    """The measuring step for measure_observed when the run spreads its levels over
    load-generator workers (run.load_workers > 1), else None (measured here)."""
    if run.load_workers <= 1 or not settings.LOADGEN_QUEUE:
        return None
    return lambda: over_workers(session, load, run.load_workers, monitor.progress, monitor.should_stop)


async def over_workers(session, load: Load, workers: int, progress=None, should_stop=None):
    r = _redis()
    offset, _ = clock_offset(r)
    key = f"v100site:loadgen:{uuid.uuid4().hex}"
    start_ref = time.time() + offset + settings.LOADGEN_START_LEAD_S
    spec = SessionSpec.of(session)
    shares = split(session, load, workers)
    tasks = group(loadgen_shard.s(_pack((spec, part, share)), k, start_ref, key)
                  for k, (part, share) in enumerate(shares))
    pending = tasks.apply_async(queue=settings.LOADGEN_QUEUE)
    seen = 0
    try:
        while not pending.ready():
            done = int(r.get(f"{key}:done") or 0)
            for _ in range(done - seen):
                if progress is not None and not await progress(None):
                    raise Cancelled()
            seen = done
            if should_stop is not None and should_stop():
                raise Cancelled()
            await asyncio.sleep(0.2)
        outcomes = []
        for k, task in enumerate(pending.results):
            if task.failed():
                raise ShardFailed(f"load-generator shard {k + 1} of {len(shares)} failed: "
                                  f"{task.result.__class__.__name__}: {task.result}")
            outcomes.append(task.result)
    finally:
        r.set(f"{key}:stop", 1, ex=KEY_TTL_S)
        r.expire(f"{key}:done", KEY_TTL_S)
    if any(o.get("cancelled") for o in outcomes):
        raise Cancelled()
    started_at = start_ref - offset
    t0 = time.perf_counter() - (time.time() - started_at)
    levels = []
    for o in outcomes:
        figures = dict(o["client"])
        figures["clock_offset_ms"] = offset * 1000 - figures["clock_offset_ms"]  # shard clock - coordinator clock
        levels.append(_Outcome([_result_from(x) for x in o["results"]], figures))
    hosts = {ShardFigures.read(o.client).host for o in levels}
    host = {}
    return merge(load, levels, started_at, t0, host, processes=len(levels), machines=len(hosts),
                 why=f"spread over {workers} load-generator workers")


class _Outcome:
    def __init__(self, results, client):
        self.results, self.client = results, client
