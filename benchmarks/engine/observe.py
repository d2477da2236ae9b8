"""One level measured together with what the GPU and the server were doing meanwhile, all on
the client's monotonic clock (series times are seconds from the level's t0)."""
from __future__ import annotations

from typing import Callable

from . import gpu as gpu_telemetry
from .client import Load, LevelOutcome, ProgressCallback, Session
from .server_metrics import MetricsSampler


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


def _relative(series: dict, t0: float) -> dict:
    if series.get("t"):
        series = dict(series, t=[round(t - t0, 4) for t in series["t"]])
    return series
