"""The site's limits on what a run may ask, read from the settings into the engine's typed
bounds (the engine reads no settings): the run form judges its fields against them and
run_create judges every plan, whichever door it came by."""
from django.conf import settings

from benchmarks.engine import load_modes
from benchmarks.engine.plan import Limits


def load_limits() -> load_modes.Limits:
    return load_modes.Limits(max_concurrency=settings.MAX_CONCURRENCY, min_rate=settings.MIN_REQUEST_RATE,
                             max_rate=settings.MAX_REQUEST_RATE)


def plan_limits() -> Limits:
    return Limits(max_requests_per_level=settings.MAX_REQUESTS_PER_LEVEL,
                  max_requests_per_run=settings.MAX_REQUESTS_PER_RUN, run_time_limit_s=settings.RUN_TIME_LIMIT_S)
