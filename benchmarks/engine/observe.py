"""One level measured together with what the GPU and the server were doing meanwhile, all on
the client's monotonic clock (series times are seconds from the level's t0)."""
from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

import httpx

from . import gpu as gpu_telemetry
from .client import Load, LevelOutcome, ProgressCallback, Session
from .shards import measure_level
from .server_metrics import MetricsSampler, ServerSeries, ServerSummary, scrape, server_was_idle


@dataclass(frozen=True)
class GpuTelemetry:
    summary: gpu_telemetry.GpuSummary
    series: gpu_telemetry.GpuSeries = field(default_factory=gpu_telemetry.GpuSeries)


@dataclass(frozen=True)
class ServerTelemetry:
    summary: ServerSummary
    series: ServerSeries = field(default_factory=ServerSeries)


async def measure_observed(session: Session, load: Load, progress: ProgressCallback | None = None,
                           should_stop: Callable[[], bool] | None = None, gpu_indices: list[int] | None = None,
                           gpu_note: str = "", gpu_interval_s: float = 0.2,
                           metrics_interval_s: float = 0.5, processes: int = 1, why: str = "",
                           measure=None) -> tuple[LevelOutcome, GpuTelemetry, ServerTelemetry]:
    """Measure `load` while sampling the GPUs (a thread, only when `gpu_indices` is given:
    the worker must run on the GPU's host) and the server's /metrics (a task in this loop).
    `processes` > 1 splits the level over that many shard processes (shards.py), each opening
    its own connections; `measure` (an awaitable factory) replaces how the level itself is
    measured (the run's worker splitting it over load-generator workers). Returns the outcome
    and the GPU and server telemetry."""
    # The pool's tiny opening requests come first, so that the server's own histograms over
    # the sampled span hold only the level's requests.
    if processes <= 1 and measure is None:
        await session.open_connections(session.streams_for(load))
    await _settle(session)
    gpus = gpu_telemetry.GpuSampler(gpu_indices, gpu_interval_s) if gpu_indices is not None else None
    if gpus is not None:
        gpus.start()
    server = MetricsSampler(session.target.base_url, metrics_interval_s, client=session.client)
    server.start()
    await server.first_scraped()
    try:
        if measure is not None:
            outcome = await measure()
        else:
            outcome = await measure_level(session, load, processes, progress, should_stop, why)
    finally:
        await server.stop()
        if gpus is not None:
            gpus.stop()
    gpu = GpuTelemetry(gpu_telemetry.not_sampled(gpu_note or "not sampled"))
    if gpus is not None:
        gpu = GpuTelemetry(gpus.summary(), gpus.series().shifted(outcome.t0) if gpus.status == "ok"
                           else gpu_telemetry.GpuSeries())
    return outcome, gpu, ServerTelemetry(server.summary(), server.series().shifted(outcome.t0))


async def _settle(session: Session, timeout_s: float = 2.0) -> None:
    """Give the server a moment to retire our own opening requests (it may still count one as
    running just after its last byte reached us), so that "idle at start" speaks of others'
    load only. Returns at once when the server has no /metrics."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        try:
            response = await session.client.get(session.target.url("/metrics"), timeout=2.0)
        except httpx.HTTPError:
            return
        if response.status_code != 200 or server_was_idle(scrape(response.text)) is not False:
            return
        await asyncio.sleep(0.05)
