"""One level measured together with what the GPU and the server were doing meanwhile, all on
the client's monotonic clock (series times are seconds from the level's t0)."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

import httpx

from . import gpu as gpu_telemetry
from .client import Load, LevelOutcome, ProgressCallback, Session
from .server_metrics import MetricsSampler, scrape, server_was_idle


async def measure_observed(session: Session, load: Load, progress: ProgressCallback | None = None,
                           should_stop: Callable[[], bool] | None = None, gpu_indices: list[int] | None = None,
                           gpu_note: str = "", gpu_interval_s: float = 0.2,
                           metrics_interval_s: float = 0.5) -> tuple[LevelOutcome, dict, dict]:
    """Measure `load` while sampling the GPUs (a thread, only when `gpu_indices` is given:
    the worker must run on the GPU's host) and the server's /metrics (a task in this loop).
    Returns the outcome and the GPU and server telemetry ({"summary", "series"})."""
    # The pool's tiny opening requests come first, so that the server's own histograms over
    # the sampled span hold only the level's requests.
    await session.open_connections(session.streams_for(load))
    await _settle(session)
    gpus = gpu_telemetry.GpuSampler(gpu_indices, gpu_interval_s) if gpu_indices is not None else None
    if gpus is not None:
        gpus.start()
    server = MetricsSampler(session.target.base_url, metrics_interval_s, client=session.client)
    server.start()
    try:
        outcome = await session.measure(load, progress, should_stop, open_pool=False)
    finally:
        await server.stop()
        if gpus is not None:
            gpus.stop()
    gpu = {"summary": {"status": gpu_note or "not sampled"}, "series": {}}
    if gpus is not None:
        gpu = {"summary": {**gpus.summary(), "status": gpus.status},
               "series": _relative(gpus.series(), outcome.t0) if gpus.status == "ok" else {}}
    metrics = {"summary": server.summary(), "series": _relative(server.series(), outcome.t0)}
    metrics["idle_at_start"] = metrics["summary"].get("idle_at_start")
    return outcome, gpu, metrics


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


def _relative(series: dict, t0: float) -> dict:
    if series.get("t"):
        series = dict(series, t=[round(t - t0, 4) for t in series["t"]])
    return series
