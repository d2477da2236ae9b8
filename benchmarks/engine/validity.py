"""Validity flags: reasons a measured number may not mean what it seems to.

Each check reads figures that were measured (the level summary, the client's own load, the
GPU and server samples) and returns flags with a code and a plain-language reason.
"""
from __future__ import annotations

from dataclasses import dataclass

from .gpu import THROTTLING, GpuSummary
from .client_figures import ClientFigures
from .metrics import LevelSummary

THRESHOLDS = {
    "error_rate": 0.05,  # more than 5 % of requests failed
    "gpu_temperature_c": 85,  # V100 slows down from ~83-87 °C
    "loop_lag_ms": 5.0,  # event-loop ticks late by more than this (p99) → timings late too
    "send_lag_ms": 10.0,  # open loop: requests left this much later than scheduled (p99)
    # Open loop: TTFT counted from the scheduled send differs materially from TTFT counted from the
    # actual send when, at p50 or p99, it is longer by both this share and this many ms.
    "schedule_gap": {"share": 0.10, "ms": 10.0},
    "client_cpu_percent": 90.0,  # the client used nearly a whole core
    "host_load_per_cpu": 1.0,  # more runnable tasks than CPUs (1-minute load average)
    "host_cpu_busy_percent": 90.0,  # the host's CPUs, all of them, nearly always busy
    "host_cpu_steal_percent": 5.0,  # a virtual machine's CPUs taken by its neighbours
    # Before a run nothing of it runs yet: CPUs busier than this are other work (engine.host_check).
    "host_busy_before_run_percent": 25.0,
    # Fewest samples for a percentile to mean something: p99 needs ~100 requests.
    "min_samples": {"p50": 5, "p90": 20, "p99": 100},
}

# A level measured while something else competed for the host, the client or the server: its
# figures are the basis of no sentence that names a winner, and the run page says so first.
CONTENDED = ("host_busy", "client_saturated", "server_busy")

# Every flag code the checks below raise, named in a few words (the runs list filters by them).
FLAG_NAMES = {
    "error_rate": "many requests failed", "stopped_short": "output stopped short",
    "prompt_drift": "prompt length drifted", "few_samples": "few samples", "client_saturated": "client saturated",
    "host_busy": "measuring host busy", "server_busy": "server already busy", "ecc": "ECC errors",
    "throttled": "GPU throttled", "hot": "GPU hot",
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
    flags += client_flags(client, capped)
    flags += schedule_flags(summary)
    flags += host_flags(client)
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


def schedule_flags(summary: LevelSummary) -> list[Flag]:
    """Coordinated omission: requests that waited in the client before they left (behind the cap
    on requests in flight, or a client that fell behind the schedule) have a TTFT from their
    actual send that hides the wait; the figures from the scheduled send show it."""
    gap = THRESHOLDS["schedule_gap"]
    for stat in ("p99", "p50"):
        actual, scheduled = summary.stat("ttft_ms", stat), summary.stat("ttft_from_schedule_ms", stat)
        if actual is None or scheduled is None:
            continue
        if scheduled - actual > gap["ms"] and scheduled > actual * (1 + gap["share"]):
            return [Flag("coordinated_omission", (
                f"TTFT {stat} is {scheduled:.0f} ms from the scheduled send but {actual:.0f} ms from the actual "
                f"one: requests waited in the client before they left (the cap on requests in flight, or a "
                f"client that fell behind), a wait the actual-send figures hide. Read the from-schedule "
                f"figures (flagged beyond {gap['share']:.0%} and {gap['ms']:g} ms)."))]
    return []


def client_flags(client: dict, capped: bool = False) -> list[Flag]:
    """`client_saturated`, judged shard by shard: one process that fell behind (its event loop
    late, its requests leaving after their schedule, its core full) timed its own chunks late,
    whatever the other shards did. The first such shard gives the reason."""
    t = THRESHOLDS
    figures = ClientFigures.read(client)
    for shard in figures.shards:
        who = figures.label(shard)
        who = who[:1].upper() + who[1:]
        if (shard.loop_lag_ms_p99 or 0) > t["loop_lag_ms"]:
            return [Flag("client_saturated", f"{who}The client's event loop ran "
                                             f"{shard.loop_lag_ms_p99:.1f} ms late (p99): its timings may be late too.")]
        if not capped and (shard.send_lag_ms_p99 or 0) > t["send_lag_ms"]:
            return [Flag("client_saturated", f"{who}Requests left "
                                             f"{shard.send_lag_ms_p99:.1f} ms after their schedule (p99): the client "
                                             "could not keep the rate.")]
        if (shard.cpu_percent or 0) > t["client_cpu_percent"]:
            return [Flag("client_saturated", f"{who}The client used "
                                             f"{shard.cpu_percent:.0f} % of a CPU core.")]
    if not capped and (figures.send_lag_ms_p99 or 0) > t["send_lag_ms"]:
        return [Flag("client_saturated", f"Requests left {figures.send_lag_ms_p99:.1f} ms after their schedule "
                                         "(p99): the client could not keep the rate.")]
    return []


def host_flags(client: dict) -> list[Flag]:
    """Host contention beside the client's own lag: a loaded host slows a server on it (and the
    client) even when the client's loop keeps time."""
    t = THRESHOLDS
    cpus = client.get("host_cpus") or 0
    load, busy, steal = (client.get(k) for k in ("host_load_1m", "host_cpu_busy_percent", "host_cpu_steal_percent"))
    said = []
    if cpus and load is not None and load > t["host_load_per_cpu"] * cpus:
        said.append(f"load average {load:.1f} on {cpus} CPUs")
    if busy is not None and busy > t["host_cpu_busy_percent"]:
        said.append(f"its CPUs {busy:.0f} % busy")
    if steal is not None and steal > t["host_cpu_steal_percent"]:
        said.append(f"{steal:.0f} % CPU steal (taken by other virtual machines)")
    if not said:
        return []
    own = client.get("cpu_percent")
    mine = f"; the client itself used {own:.0f} % of one CPU" if own is not None else ""
    return [Flag("host_busy", "The measuring host was contended: " + ", ".join(said) + mine +
                 ". A server on this host competed for CPU, so its figures (and the client's timings) may be "
                 "low; measure again on a quiet host.")]


def merge(flag_lists) -> list[dict]:
    """A run's flags: each code once, with the first reason."""
    seen: dict[str, dict] = {}
    for flags in flag_lists:
        for f in flags:
            d = f.to_dict() if isinstance(f, Flag) else f
            seen.setdefault(d["code"], d)
    return list(seen.values())
