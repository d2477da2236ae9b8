"""Validity flags: reasons a measured number may not mean what it seems to.

Each check reads figures that were measured (the level summary, the client's own load, the
GPU and server samples) and returns flags with a code and a plain-language reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from .gpu import THROTTLING, GpuSummary
from .metrics import LevelSummary

THRESHOLDS = {
    "error_rate": 0.05,  # more than 5 % of requests failed
    "gpu_temperature_c": 85,  # V100 slows down from ~83-87 °C
    "loop_lag_ms": 5.0,  # event-loop ticks late by more than this (p99) → timings late too
    "send_lag_ms": 10.0,  # open loop: requests left this much later than scheduled (p99)
    "client_cpu_percent": 90.0,  # the client used nearly a whole core
    # Fewest samples for a percentile to mean something: p99 needs ~100 requests.
    "min_samples": {"p50": 5, "p90": 20, "p99": 100},
}


@dataclass
class Flag:
    code: str
    reason: str

    def to_dict(self) -> dict:
        return {"code": self.code, "reason": self.reason}


def level_flags(summary: LevelSummary, *, client: dict | None = None, gpu: GpuSummary | None = None,
                server_idle_at_start: bool | None = None, capped: bool = False) -> list[Flag]:
    """Flags for one endpoint × load level. `gpu` is the level's GPU telemetry summary (peak
    memory, max temperature, throttle reasons seen, ECC delta) when it was sampled. Stored
    dicts are read through their readers."""
    t = THRESHOLDS
    summary = LevelSummary.read(summary)
    flags: list[Flag] = []
    n, failed = summary.requests, summary.failed
    if n and failed / n > t["error_rate"]:
        flags.append(Flag("error_rate", f"{failed} of {n} requests failed (over {t['error_rate']:.0%})."))
    if summary.stopped_short:
        flags.append(Flag("stopped_short", f"{summary.stopped_short} requests stopped before the asked "
                                           "output length (ignore_eos not honoured?)."))
    if summary.prompt_drift:
        flags.append(Flag("prompt_drift", f"{summary.prompt_drift} requests had a prompt length other "
                                          "than asked (server usage.prompt_tokens)."))
    completed = summary.completed
    for stat in ("p99", "p90"):
        need = t["min_samples"][stat]
        if 0 < completed < need:
            flags.append(Flag("few_samples", f"Only {completed} completed requests: {stat} needs at least "
                                             f"{need} to mean much."))
            break
    client = client or {}
    if (client.get("loop_lag_ms_p99") or 0) > t["loop_lag_ms"]:
        flags.append(Flag("client_saturated", f"The client's event loop ran {client['loop_lag_ms_p99']:.1f} ms "
                                              f"late (p99): its timings may be late too."))
    if not capped and (client.get("send_lag_ms_p99") or 0) > t["send_lag_ms"]:
        flags.append(Flag("client_saturated", f"Requests left {client['send_lag_ms_p99']:.1f} ms after their "
                                              "schedule (p99): the client could not keep the rate."))
    if (client.get("cpu_percent") or 0) > t["client_cpu_percent"]:
        flags.append(Flag("client_saturated", f"The client used {client['cpu_percent']:.0f} % of a CPU core."))
    if server_idle_at_start is False:
        flags.append(Flag("server_busy", "The server was already processing requests when the level "
                                         "started (someone else is using it?)."))
    gpu = GpuSummary.read(gpu)
    if gpu.ecc_corrected_delta or gpu.ecc_uncorrected_delta:
        flags.append(Flag("ecc", f"ECC error counts rose during the level (corrected "
                                 f"+{gpu.ecc_corrected_delta or 0}, uncorrected "
                                 f"+{gpu.ecc_uncorrected_delta or 0}): a hot or failing GPU."))
    throttles = [r for r in gpu.throttle_reasons if r in THROTTLING]
    if throttles:
        flags.append(Flag("throttled", "The GPU was throttled: " + ", ".join(sorted(throttles)) + "."))
    if (gpu.max_temperature_c or 0) > t["gpu_temperature_c"]:
        flags.append(Flag("hot", f"The GPU reached {gpu.max_temperature_c} °C "
                                 f"(over {t['gpu_temperature_c']} °C)."))
    return flags


def merge(flag_lists) -> list[dict]:
    """A run's flags: each code once, with the first reason."""
    seen: dict[str, dict] = {}
    for flags in flag_lists:
        for f in flags:
            d = f.to_dict() if isinstance(f, Flag) else f
            seen.setdefault(d["code"], d)
    return list(seen.values())
