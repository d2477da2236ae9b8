"""How busy the load generator itself was during a level, per shard: the shape LevelResult.client
stores, with its one writer (`ClientFigures.to_dict`) and its one reader (`ClientFigures.from_dict`,
which also reads the rows stored before shards: one flat dict, one process).

Each shard (a process of this machine, or of a load-generator worker elsewhere) has its own event
loop: its loop lag, send lag and CPU say whether it timed its own chunks on time, and
`client_saturated` is judged shard by shard (validity.level_flags): one saturated shard is enough
to make a level's timings doubtful. The level-wide figures kept beside them (the worst shard's loop
lag, the busiest shard's CPU, the send lag over all the merged records) are what the earlier rows
held, so every reader of those keys reads both.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Sequence

from .metrics import RequestResult, percentile

VERSION = 2  # 2: "version", "processes", "machines", "why", "shards"; absent: one process, flat
HOST_KEYS = ("host_cpus", "host_load_1m", "host_cpu_busy_percent", "host_cpu_steal_percent")


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class ShardFigures:
    """One shard's own figures. `clock_offset_ms`: its clock minus the coordinator's, measured
    (across machines only; None on one machine, where every shard shares the clock)."""

    shard: int = 0
    host: str = ""
    pid: int | None = None
    requests: int | None = None
    cpu_percent: float | None = None
    loop_lag_ms_p99: float | None = None
    loop_lag_ms_max: float | None = None
    send_lag_ms_p99: float | None = None
    send_lag_ms_max: float | None = None
    first_send_ms: float | None = None  # its first request's send, ms after the level's t0
    parse_cpu_s: float | None = None  # CPU spent after the level reading what the chunks said
    clock_offset_ms: float | None = None
    clock_rtt_ms: float | None = None  # the round trip the offset was measured over

    @classmethod
    def read(cls, data) -> "ShardFigures":
        data = data if isinstance(data, dict) else {}
        out = {}
        for f in fields(cls):
            value = data.get(f.name)
            if f.name == "host":
                out[f.name] = str(value) if isinstance(value, str) else ""
            elif f.name in ("shard", "pid", "requests"):
                if isinstance(value, int) and not isinstance(value, bool):
                    out[f.name] = value
            else:
                out[f.name] = _number(value)
        return cls(**out)


@dataclass(frozen=True)
class ClientFigures:
    processes: int = 1
    machines: int = 1
    why: str = ""  # why this many processes (the expected chunk rate, or the run's setting)
    shards: tuple[ShardFigures, ...] = ()
    host: dict = field(default_factory=dict)  # the coordinator's host: HOST_KEYS
    send_lag_ms_p99: float | None = None  # over every request of the level
    send_lag_ms_max: float | None = None

    # ------------------------------------------------------------ level-wide
    @property
    def cpu_percent(self) -> float | None:
        """The busiest shard's CPU (percent of one core): what saturates is one process."""
        return max((s.cpu_percent for s in self.shards if s.cpu_percent is not None), default=None)

    @property
    def cpu_percent_total(self) -> float | None:
        values = [s.cpu_percent for s in self.shards if s.cpu_percent is not None]
        return sum(values) if values else None

    @property
    def loop_lag_ms_p99(self) -> float | None:
        return max((s.loop_lag_ms_p99 for s in self.shards if s.loop_lag_ms_p99 is not None), default=None)

    @property
    def loop_lag_ms_max(self) -> float | None:
        return max((s.loop_lag_ms_max for s in self.shards if s.loop_lag_ms_max is not None), default=None)

    def label(self, shard: ShardFigures) -> str:
        """How a reason names a shard: nothing for a level of one process."""
        if len(self.shards) <= 1:
            return ""
        where = f" on {shard.host}" if self.machines > 1 and shard.host else ""
        return f"shard {shard.shard + 1} of {len(self.shards)}{where}: "

    # ------------------------------------------------------------ building
    @classmethod
    def single(cls, monitor: dict, why: str = "") -> "ClientFigures":
        """One process's level: `monitor` is what Session.measure measured."""
        return cls(processes=1, machines=1, why=why, shards=(ShardFigures.read(monitor),),
                   host={k: monitor.get(k) for k in HOST_KEYS},
                   send_lag_ms_p99=_number(monitor.get("send_lag_ms_p99")),
                   send_lag_ms_max=_number(monitor.get("send_lag_ms_max")))

    @classmethod
    def merged(cls, shards: Sequence[ShardFigures], results: Sequence[RequestResult], host: dict, *,
               processes: int, machines: int = 1, why: str = "") -> "ClientFigures":
        lags = [r.send_lag * 1000 for r in results if r.send_lag is not None]
        return cls(processes=processes, machines=machines, why=why,
                   shards=tuple(sorted(shards, key=lambda s: s.shard)), host={k: host.get(k) for k in HOST_KEYS},
                   send_lag_ms_p99=percentile(lags, 99), send_lag_ms_max=max(lags) if lags else None)

    # ------------------------------------------------------------ the stored shape
    def to_dict(self) -> dict:
        return {"version": VERSION, "processes": self.processes, "machines": self.machines, "why": self.why,
                "cpu_percent": self.cpu_percent, "cpu_percent_total": self.cpu_percent_total,
                "loop_lag_ms_p99": self.loop_lag_ms_p99, "loop_lag_ms_max": self.loop_lag_ms_max,
                "send_lag_ms_p99": self.send_lag_ms_p99, "send_lag_ms_max": self.send_lag_ms_max,
                **{k: self.host.get(k) for k in HOST_KEYS},
                "shards": [{k: v for k, v in asdict(s).items()} for s in self.shards]}

    @classmethod
    def from_dict(cls, data) -> "ClientFigures":
        """Every version: a row without "version" is one process's flat figures (or nothing)."""
        data = data if isinstance(data, dict) else {}
        host = {k: data.get(k) for k in HOST_KEYS}
        if "version" not in data:
            if not data:
                return cls(host=host)
            return cls.single(data)
        shards = tuple(ShardFigures.read(s) for s in data.get("shards") or () if isinstance(s, dict))
        return cls(processes=int(_number(data.get("processes")) or len(shards) or 1),
                   machines=int(_number(data.get("machines")) or 1), why=str(data.get("why") or ""),
                   shards=shards, host=host, send_lag_ms_p99=_number(data.get("send_lag_ms_p99")),
                   send_lag_ms_max=_number(data.get("send_lag_ms_max")))

    @classmethod
    def read(cls, figures: "ClientFigures | dict | None") -> "ClientFigures":
        return figures if isinstance(figures, ClientFigures) else cls.from_dict(figures)
