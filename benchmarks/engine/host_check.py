"""Before a run: is the measuring host quiet? Django-free.

Nothing of the run is running yet, so whatever keeps the host's CPUs busy is someone else's
work, and it would slow a server on this host and the client alike. The worker reads the CPUs
over a short window (/proc/stat, as the per-level `host_busy` flag does, client.host_load) and,
while other work keeps them busier than THRESHOLDS["host_busy_before_run_percent"] or takes
CPU steal, waits (bounded) for it to pass; then it starts anyway and the run says so. The
1-minute load average is not read here: it lags a minute behind, so it would still count the
previous run's own work.

`HostCheck` is the shape stored in Run.host_check: `to_dict` its one writer, `from_dict` its
one reader.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from .client import host_cpu_times, host_load
from .validity import THRESHOLDS


@dataclass(frozen=True)
class HostCheck:
    quiet: bool
    waited_s: float  # how long the run waited for the host to quiet
    bound_s: float  # the most it would wait
    busy_percent: float | None  # the host's CPUs, the last window read (all of them, %)
    steal_percent: float | None
    cpus: int | None
    window_s: float

    @property
    def words(self) -> str:
        """What the last read found, in words: "its 2 CPUs 64 % busy with other work"."""
        said = busy_words(self.busy_percent, self.steal_percent, self.cpus)
        return "; ".join(said) if said else f"its CPUs {self.busy_percent or 0:.0f} % busy"

    @property
    def sentence(self) -> str:
        """The run page's and the API's sentence."""
        waited = f" after waiting {self.waited_s:.0f} s" if self.waited_s >= 1 else ""
        if self.quiet:
            return f"The measuring host was quiet before the run{waited} ({self.words})."
        if self.bound_s > 0:
            return (f"The measuring host was still busy when the run started, {self.bound_s:.0f} s later "
                    f"({self.words}): other work competed with the run, so its figures may be low.")
        return (f"The measuring host was busy when the run started ({self.words}); the run did not wait: "
                "other work competed with it, so its figures may be low.")

    def to_dict(self) -> dict:
        return {"version": 1, "quiet": self.quiet, "waited_s": round(self.waited_s, 1), "bound_s": self.bound_s,
                "busy_percent": self.busy_percent, "steal_percent": self.steal_percent, "cpus": self.cpus,
                "window_s": self.window_s, "sentence": self.sentence}

    @classmethod
    def from_dict(cls, data) -> "HostCheck | None":
        """None where the run was not checked (runs from before the check, or the check off)."""
        if not isinstance(data, dict) or "quiet" not in data:
            return None
        number = (lambda v: float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None)
        return cls(quiet=bool(data["quiet"]), waited_s=number(data.get("waited_s")) or 0.0,
                   bound_s=number(data.get("bound_s")) or 0.0, busy_percent=number(data.get("busy_percent")),
                   steal_percent=number(data.get("steal_percent")),
                   cpus=int(data["cpus"]) if isinstance(data.get("cpus"), int) else None,
                   window_s=number(data.get("window_s")) or 0.0)


def busy_words(busy_percent: float | None, steal_percent: float | None, cpus: int | None) -> list[str]:
    """Why a host nothing of the run is using yet is not quiet ([] when it is)."""
    said = []
    if busy_percent is not None and busy_percent > THRESHOLDS["host_busy_before_run_percent"]:
        said.append(f"its {cpus or '?'} CPUs {busy_percent:.0f} % busy with other work")
    if steal_percent is not None and steal_percent > THRESHOLDS["host_cpu_steal_percent"]:
        said.append(f"{steal_percent:.0f} % CPU steal (taken by other virtual machines)")
    return said


def read_host(window_s: float, sleep: Callable[[float], None] = time.sleep,
              counters: Callable[[], list[int] | None] = host_cpu_times) -> dict:
    """The host's CPU busy and steal shares over `window_s` (client.host_load's keys)."""
    before = counters()
    sleep(window_s)
    return host_load(before, counters())


def wait_for_quiet(bound_s: float, window_s: float = 1.0, *, should_stop: Callable[[], bool] = lambda: False,
                   note: Callable[[str], None] = lambda text: None, sleep: Callable[[float], None] = time.sleep,
                   counters: Callable[[], list[int] | None] = host_cpu_times,
                   clock: Callable[[], float] = time.monotonic) -> HostCheck | None:
    """Read the host over `window_s` until it is quiet or `bound_s` has passed (each wait
    said through `note`). None when `should_stop` ends the wait (a cancel)."""
    start = clock()
    while True:
        load = read_host(window_s, sleep, counters)
        said = busy_words(load["host_cpu_busy_percent"], load["host_cpu_steal_percent"], load["host_cpus"])
        waited = clock() - start - window_s
        check = HostCheck(quiet=not said, waited_s=max(waited, 0.0), bound_s=bound_s,
                          busy_percent=load["host_cpu_busy_percent"], steal_percent=load["host_cpu_steal_percent"],
                          cpus=load["host_cpus"], window_s=window_s)
        if check.quiet or waited >= bound_s:
            return check
        if should_stop():
            return None
        note(f"waiting for a quiet host ({check.words}): up to {bound_s - waited:.0f} s more")
