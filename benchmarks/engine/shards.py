"""One load level split over several load-generator processes (shards), merged into one result.

One event loop can read only so many chunks a second before it times them late (its loop lag
grows, and `client_saturated` says so). A level whose expected chunk rate is beyond one
process's (`CHUNKS_PER_S_PER_PROCESS`) is split: each shard is a process of its own (started
with `spawn`: a clean interpreter, no inherited event loop or sockets) with its own event loop,
socket-reading thread and connection pool, built from the prepared session (`SessionSpec`: the
same prompts, dataset plan and calibration, no second warmup). Every shard opens its
connections, says it is ready, and the coordinator then releases them all at one start time on
the machine's monotonic clock (time.perf_counter: CLOCK_MONOTONIC, one clock for every process
of a Linux machine), which every shard takes as the level's t0. So their request records share
one time base and are merged as they are: every RequestResult kept (each with the level's own
request index), the metrics then computed once from the merged records by the caller
(summarize_level), exactly as for one process.

A closed loop's streams are dealt out (shard k takes every n-th request index, starting at k);
an open loop's arrival schedule is drawn once, by the coordinator, and dealt out the same way,
so the merged level follows the one schedule.

Across machines, the same shard runs as a Celery task on a load-generator worker
(`benchmarks/loadgen.py`): `run_shard` is the part both share.
"""
from __future__ import annotations

import asyncio
import math
import multiprocessing
import os
import socket
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Callable

from .addresses import AddressPolicy
from .client import (Cancelled, ClientMonitor, LevelOutcome, Load, ProgressCallback, Session, Share, Target,
                     Timeouts, Workload, host_cpu_times, host_load)
from .client_figures import ClientFigures, ShardFigures
from .datasets import RequestPlan
from .metrics import level_wall_time

# Chunks a second one load-generator process is given: between what one process was measured to
# time correctly and where it was over the limits (loop lag p99 < 5 ms, TTFT error p99 < 1 ms), by
# scripts/bench_capacity.py. On a quiet 16-core machine (capacity-16core.md) every process count
# passed at ~1,600 chunks/s a process (1,596 / 3,172 / 1,595 / 1,590 / 1,552 for 1 / 2 / 4 / 8 /
# 16 processes) and all but 2 were over at ~3,150 (loop lag p99 7.5-10.5 ms); on the 2-core
# machine 3,166 passed and 6,146 did not (capacity-2core.md). Streams that decode in step (a
# batching server's) arrive in bursts, and a burst is what makes the loop late.
CHUNKS_PER_S_PER_PROCESS = 2000
# The coordinator's lead between the last shard ready and the level's start: time for the start
# message to reach every shard and for each to wake from its sleep.
START_LEAD_S = 0.25
# How long shards may take to start and open their connections.
READY_TIMEOUT_S = 120.0


class ShardFailed(RuntimeError):
    """A shard of a level died or raised: the level cannot be measured; the cause is kept."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def expected_chunk_rate(load: Load, tok_s_per_stream: float, output_tokens: int) -> float:
    """Chunks a second a level should bring (one token a chunk): its streams (or its cap) times
    each stream's speed; an open loop at most its rate times the output length."""
    streams = load.max_in_flight
    rate = streams * tok_s_per_stream
    if load.rate is not None:
        rate = min(rate, load.rate * output_tokens) if load.concurrency else load.rate * output_tokens
    return rate


def processes_for(load: Load, tok_s_per_stream: float | None, output_tokens: int,
                  cores: int | None = None) -> tuple[int, str]:
    """How many shards a level needs, and why: its expected chunk rate over one process's
    capacity, at most one per core the process may use, and never more than the level has
    streams (closed loop). One process when the speed is unknown or one suffices."""
    cores = cores or available_cores()
    if not tok_s_per_stream:
        return 1, "one process: the server's speed was not measured in the warmup"
    rate = expected_chunk_rate(load, tok_s_per_stream, output_tokens)
    wanted = max(1, math.ceil(rate / CHUNKS_PER_S_PER_PROCESS))
    n = min(wanted, cores, load.concurrency if load.rate is None else wanted)
    why = (f"expected {rate:,.0f} chunks/s ({tok_s_per_stream:.0f} tok/s per stream in the warmup); one process "
           f"reads {CHUNKS_PER_S_PER_PROCESS:,} chunks/s")
    if n < wanted:
        why += f"; {wanted} wanted, {n} possible ({cores} cores)"
    return max(1, n), why


def split(session: Session, load: Load, n: int) -> list[tuple[Load, Share]]:
    """Each shard's load and share of the requests (see the module's docstring)."""
    def part(total: int, k: int) -> int:
        return total // n + (1 if k < total % n else 0)

    if load.rate is None:
        n = max(1, min(n, load.concurrency))
        return [(replace(load, concurrency=part(load.concurrency, k)), Share(first=k, every=n)) for k in range(n)]
    timetable = list(enumerate(session.schedule(load)))
    return [(replace(load, concurrency=max(1, part(load.concurrency, k)) if load.concurrency else 0),
             Share(schedule=timetable[k::n])) for k in range(n)]


@dataclass
class SessionSpec:
    """What a shard needs to send a prepared session's requests: the target, workload and
    limits, and what preparation learned (the prompt token pool and how the server counts
    prompts, the dataset plan, its prompts tokenized). Plain data: it is pickled to the shard."""

    target: Target
    workload: Workload
    timeouts: Timeouts
    addresses: AddressPolicy
    pool: list[int] | None
    offset: int
    words_per_token: float
    plan: RequestPlan
    entry_ids: dict = field(default_factory=dict)
    entry_outputs: dict = field(default_factory=dict)
    entry_offset: int = 0
    prefix: list[int] | str = field(default_factory=list)
    kind: type = Session  # the session's class (a subclass may build its requests its own way)

    @classmethod
    def of(cls, session: Session) -> "SessionSpec":
        p = session.prompts
        return cls(session.target, session.workload, session.timeouts, session.addresses, p.pool, p.offset,
                   p.words_per_token, session.plan, session.entry_ids, session.entry_outputs,
                   session.entry_offset, session.prefix, type(session))

    def session(self, load: Load, shard: int) -> Session:
        """A Session like the prepared one, for `load` (the shard's part): its own pool and
        random prompts drawn from its own seed (the level's lengths stay those of the plan)."""
        session = self.kind(self.target, self.workload, self.timeouts, loads=[load], addresses=self.addresses)
        seed = self.workload.seed
        session.rng.seed(None if seed is None else f"{seed}:shard{shard}")
        session.prompts.pool, session.prompts.offset = self.pool, self.offset
        session.prompts.words_per_token = self.words_per_token
        session.plan, session.entry_ids, session.entry_outputs = self.plan, self.entry_ids, self.entry_outputs
        session.entry_offset, session.prefix = self.entry_offset, self.prefix
        return session


async def run_shard(spec: SessionSpec, shard: int, load: Load, share: Share,
                    wait_start: Callable[[], "asyncio.Future[float | None]"],
                    should_stop: Callable[[], bool], progress: ProgressCallback | None = None,
                    ready: Callable[[], None] | None = None) -> LevelOutcome:
    """One shard, in its own process: open its connections, say it is `ready`, wait for the
    start time (`wait_start` answers it on this machine's monotonic clock, None to give up),
    measure its share, read what its chunks said (in `measure`, in parallel with the other
    shards) and return its outcome, its client figures describing this shard alone."""
    session = spec.session(load, shard)
    try:
        await session.open_connections(session.streams_for(load))
        if ready is not None:
            ready()
        start = await wait_start()
        if start is None:
            raise Cancelled()
        outcome = await session.measure(load, progress, should_stop, open_pool=False, start_at=start, share=share)
    finally:
        await session.close()
    sends = [r.sent for r in outcome.results if r.status_code is not None or r.ok]
    outcome.client.update(shard=shard, host=socket.gethostname(), pid=os.getpid(), requests=len(outcome.results),
                          first_send_ms=min(sends) * 1000 if sends else None)
    return outcome


def merge(load: Load, outcomes: list[LevelOutcome], started_at: float, t0: float, host: dict,
          processes: int, machines: int = 1, why: str = "") -> LevelOutcome:
    """The shards' outcomes as one level: every request record, in index order; the level's wall
    time from the merged records; the client figures of every shard (ClientFigures)."""
    results = sorted((r for o in outcomes for r in o.results), key=lambda r: r.index)
    figures = ClientFigures.merged([ShardFigures.read(o.client) for o in outcomes], results, host,
                                   processes=processes, machines=machines, why=why)
    return LevelOutcome(load.concurrency, results, started_at, level_wall_time(results), t0, rate=load.rate,
                        client=figures.to_dict())


# ----------------------------------------------------------------------------- processes
def _shard_process(spec: SessionSpec, shard: int, load: Load, share: Share, conn) -> None:
    """A shard process's body: messages to the coordinator over `conn` (ready, progress counts,
    then its result, "cancelled" or the error it died of)."""
    try:
        outcome = asyncio.run(_shard_loop(spec, shard, load, share, conn))
        conn.send(("result", outcome))
    except Cancelled:
        conn.send(("cancelled",))
    except BaseException as exc:  # sent to the coordinator, which fails the level with it
        conn.send(("error", f"{exc.__class__.__name__}: {exc}\n{traceback.format_exc(limit=8)}"))


async def _shard_loop(spec: SessionSpec, shard: int, load: Load, share: Share, conn) -> LevelOutcome:
    loop = asyncio.get_running_loop()
    start: asyncio.Future = loop.create_future()
    stopped = [False]

    def message() -> None:
        try:
            kind, *args = conn.recv()
        except (EOFError, OSError):  # the coordinator is gone: stop
            kind, args = "stop", []
        if kind == "start" and not start.done():
            start.set_result(args[0])
        elif kind == "stop":
            stopped[0] = True
            if not start.done():
                start.set_result(None)

    loop.add_reader(conn.fileno(), message)
    done = [0]

    async def count(result) -> bool:
        done[0] += 1
        return True

    async def report() -> None:
        sent = 0
        while True:
            await asyncio.sleep(0.25)
            if done[0] != sent:
                conn.send(("progress", done[0] - sent))
                sent = done[0]

    reporter = loop.create_task(report())
    try:
        return await run_shard(spec, shard, load, share, lambda: start, lambda: stopped[0], count,
                               ready=lambda: conn.send(("ready",)))
    finally:
        reporter.cancel()
        loop.remove_reader(conn.fileno())


class ShardedLevel:
    """One level over `processes` shard processes of this machine. `pids` lists them once
    started, `t0` is set once they were released (a shard killed then fails the level with
    ShardFailed)."""

    def __init__(self, session: Session, load: Load, processes: int, why: str = ""):
        self.session, self.load, self.why = session, load, why
        self.shares = split(session, load, processes)
        self.pids: list[int] = []
        self.t0: float | None = None

    async def run(self, progress: ProgressCallback | None = None,
                  should_stop: Callable[[], bool] | None = None) -> LevelOutcome:
        ctx = multiprocessing.get_context("spawn")
        spec = SessionSpec.of(self.session)
        procs, conns = [], []
        n = len(self.shares)
        try:
            for k, (load, share) in enumerate(self.shares):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_shard_process, args=(spec, k, load, share, theirs),
                                   name=f"load-shard-{k}", daemon=True)
                proc.start()
                theirs.close()
                procs.append(proc)
                conns.append(mine)
            self.pids = [p.pid for p in procs]
            await self._until(conns, procs, "ready", should_stop, deadline=time.perf_counter() + READY_TIMEOUT_S)
            host0 = host_cpu_times()
            t0 = time.perf_counter() + START_LEAD_S
            started_at = time.time() + START_LEAD_S
            for k, conn in enumerate(conns):
                try:
                    conn.send(("start", t0))
                except OSError:  # it died just after it was ready
                    procs[k].join(1.0)
                    raise ShardFailed(f"load-generator shard {k + 1} of {n} stopped (exit code "
                                      f"{procs[k].exitcode}) before the start") from None
            self.t0 = t0
            outcomes = await self._until(conns, procs, "result", should_stop, progress=progress)
            host = host_load(host0, host_cpu_times())
        finally:
            for conn in conns:
                try:
                    conn.send(("stop",))
                except (OSError, ValueError):
                    pass
            for proc in procs:
                proc.join(2.0)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(2.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            for conn in conns:
                conn.close()
        return merge(self.load, outcomes, started_at, t0, host, processes=n, why=self.why)

    async def _until(self, conns, procs, wanted: str, should_stop, deadline: float | None = None,
                     progress: ProgressCallback | None = None) -> list:
        """Wait until every shard has sent `wanted` (its payload returned, by shard), answering
        progress counts and stopping everything at a cancel. A shard that dies or raises fails
        the level at once, with its cause."""
        got: dict[int, object] = {}
        stopping = False
        while len(got) < len(conns):
            for k, conn in enumerate(conns):
                while k not in got and conn.poll():
                    try:
                        kind, *args = conn.recv()
                    except (EOFError, OSError):  # its end of the pipe closed: it died
                        procs[k].join(1.0)
                        raise ShardFailed(f"load-generator shard {k + 1} of {len(conns)} stopped (exit code "
                                          f"{procs[k].exitcode}) before its {wanted}") from None
                    if kind == wanted:
                        got[k] = args[0] if args else None
                    elif kind == "progress" and progress is not None:
                        for _ in range(args[0]):
                            if not await progress(None):
                                stopping = True
                    elif kind == "cancelled":
                        raise Cancelled()
                    elif kind == "error":
                        raise ShardFailed(f"load-generator shard {k + 1} of {len(conns)} failed: {args[0]}")
                if k not in got and not procs[k].is_alive() and not conn.poll(0.05):
                    raise ShardFailed(f"load-generator shard {k + 1} of {len(conns)} stopped (exit code "
                                      f"{procs[k].exitcode}) before its {wanted}")
            if stopping or (should_stop is not None and should_stop()):
                raise Cancelled()
            if deadline is not None and time.perf_counter() > deadline:
                raise ShardFailed(f"load-generator shards not {wanted} after {READY_TIMEOUT_S:g} s")
            if len(got) < len(conns):
                await asyncio.sleep(0.005)
        return [got[k] for k in range(len(conns))]


async def measure_level(session: Session, load: Load, processes: int = 1, progress: ProgressCallback | None = None,
                        should_stop: Callable[[], bool] | None = None, why: str = "") -> LevelOutcome:
    """One level, in this process (processes=1, with its own client figures) or over shards."""
    if processes <= 1:
        outcome = await session.measure(load, progress, should_stop, open_pool=False)
        outcome.client = ClientFigures.single(outcome.client, why=why).to_dict()
        return outcome
    return await ShardedLevel(session, load, processes, why).run(progress, should_stop)


__all__ = ["CHUNKS_PER_S_PER_PROCESS", "ClientMonitor", "SessionSpec", "ShardFailed", "ShardedLevel",
           "available_cores", "measure_level", "merge", "processes_for", "run_shard", "split"]
