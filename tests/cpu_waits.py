"""How long processes waited for a CPU, as the kernel counts it: what a timing test on a shared
2-core machine may forgive (a busy machine's doing) without forgiving a process's own sleeping
or work."""
import os
import threading
import time
from pathlib import Path


def waited_ms(pid: int) -> float | None:
    """Time the process's main thread has spent on a run queue, not running, in ms
    (/proc/<pid>/schedstat, second field, ns); None once it is gone."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return None


def children(pid: int) -> set[int]:
    """The process's direct children, over all its threads (a child belongs to the thread that
    started it)."""
    found = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            found.update(int(p) for p in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except OSError:
            continue
    return found


class CpuWaits:
    """Every 2 ms, until the block ends: each watched process's CPU wait so far. Watches the
    given pids, or (with none) every child this process has at that moment, so processes started
    inside the block are covered from their first reading."""

    def __init__(self, pids=None):
        self.pids = set(pids) if pids is not None else None
        self.readings: list[tuple[float, dict[int, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        me = os.getpid()
        while not self._stop.is_set():
            pids = self.pids if self.pids is not None else children(me)
            reading = {p: w for p in pids if (w := waited_ms(p)) is not None}
            self.readings.append((time.perf_counter(), reading))
            time.sleep(0.002)

    def __enter__(self) -> "CpuWaits":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, pid: int, start: float, end: float) -> float:
        """How long `pid` waited for a CPU between perf_counter times `start` and `end`: from the
        last reading at or before `start` (its first reading, for a process started later) to the
        first at or after `end`."""
        before = [r[pid] for t, r in self.readings if t <= start and pid in r]
        after = [r[pid] for t, r in self.readings if t >= end and pid in r]
        first = before[-1] if before else next(r[pid] for t, r in self.readings if pid in r)
        last = after[0] if after else [r[pid] for t, r in self.readings if pid in r][-1]
        return last - first
