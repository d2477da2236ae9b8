"""GPU probe and telemetry through NVML (pynvml, from the nvidia-ml-py package).

Every NVML function is looked up on one object, `nvml` (the `pynvml` module unless a caller
passes another), so tests can hand in a fake. Errors are pynvml's own `NVMLError` classes.

Nothing here raises because a host has no GPU or driver: `probe()` says so in `status`, and a
`GpuSampler` that cannot start records the reason and returns no samples. A field one GPU
does not support (NVLink state on a PCIe card, ECC on a consumer card) reads None or
"not supported" instead of failing the whole probe.

`summary()` and `series()` give what a LevelResult stores (gpu_summary, gpu_series): a
`GpuSummary` and a `GpuSeries`, each with its one writer (`to_dict`) and one reader
(`from_dict`, which reads every stored version) side by side. Cost measured on an H200 (driver 580): one
`read_sample` 0.04 ms median, one sampler round 0.3 ms, so 5 Hz costs nothing measurable.
"""
from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field, fields

try:
    import pynvml
except ImportError:  # pragma: no cover - nvidia-ml-py is in requirements.txt
    pynvml = None

MIB = 1024 * 1024

# Clock event ("throttle") reason bits, as in nvml.h (nvmlClocksEventReason* /
# nvmlClocksThrottleReason*). Written out so decoding does not depend on which names a given
# pynvml version exports.
THROTTLE_REASONS = {
    0x001: "idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal",
    0x040: "hw_thermal",
    0x080: "hw_power_brake",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}
# The reasons that mean the GPU ran slower than it could under load (a run validity flag).
# idle, applications_clocks_setting, sync_boost and display_clock_setting are normal states.
THROTTLING = frozenset({"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal",
                        "hw_power_brake", "board_limit", "reliability"})

# NVML constants (stable C API values; pynvml exports the same numbers).
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_ECC_CORRECTED, _ECC_UNCORRECTED = 0, 1
_ECC_VOLATILE, _ECC_AGGREGATE = 0, 1
_ERROR_INVALID_ARGUMENT = 2
_ERROR_NOT_SUPPORTED = 3
_ERROR_DRIVER_NOT_LOADED = 9
_ERROR_LIBRARY_NOT_FOUND = 12
_ERROR_FUNCTION_NOT_FOUND = 13
_NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in current nvml.h; older GPUs stop earlier


def decode_throttle(bits: int | None) -> list[str]:
    """Clock event reason bits -> names; unknown bits kept as hex so nothing is hidden."""
    if bits is None:
        return []
    names = [name for bit, name in THROTTLE_REASONS.items() if bits & bit]
    rest = bits & ~sum(THROTTLE_REASONS)
    if rest:
        names.append(f"unknown_{rest:#x}")
    return names


def _is_nvml_error(exc: BaseException) -> bool:
    return pynvml is not None and isinstance(exc, pynvml.NVMLError)


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def _opt(fn, *args, default=None):
    """One optional NVML query: NVML errors (NotSupported, NoPermission, ...) give `default`."""
    try:
        return fn(*args)
    except Exception as exc:
        if _is_nvml_error(exc):
            return default
        raise


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _start(nv) -> str:
    """nvmlInit; returns "ok" or why NVML is not usable here (never raises)."""
    if nv is None:
        return "no NVIDIA driver: nvidia-ml-py (pynvml) is not installed"
    try:
        nv.nvmlInit()
        return "ok"
    except Exception as exc:
        if isinstance(exc, OSError) or (
                _is_nvml_error(exc) and _code(exc) in (_ERROR_LIBRARY_NOT_FOUND, _ERROR_DRIVER_NOT_LOADED)):
            return f"no NVIDIA driver: {exc}"
        return f"NVML error: {exc}" if _is_nvml_error(exc) else f"NVML error: {type(exc).__name__}: {exc}"


def _shutdown(nv) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:
        pass


# ---------------------------------------------------------------------------------- probe
@dataclass
class GpuProbe:
    index: int
    name: str = ""
    uuid: str = ""
    memory_total_mib: int | None = None
    compute_capability: str | None = None  # "7.0" on a V100, "9.0" on an H100/H200
    pcie_generation: int | None = None  # current link (it drops at idle on some cards)
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    nvlink: list[str] | str = "not supported"  # per link "active"/"inactive", or "not supported"
    ecc_mode: str = "not supported"  # "enabled" / "disabled" / "not supported"
    ecc_corrected: dict = field(default_factory=dict)  # {"volatile": n, "aggregate": n}, None = n/a
    ecc_uncorrected: dict = field(default_factory=dict)
    power_limit_w: float | None = None  # the enforced limit
    power_limit_default_w: float | None = None
    pci_bus_id: str = ""  # "00000000:3B:00.0": what the other GPUs' NVLinks name as their far end
    error: str | None = None  # set when this GPU could not be read at all

    @property
    def nvlink_text(self) -> str:
        """One short line for the inventory, e.g. "6 of 6 links active"."""
        if isinstance(self.nvlink, str):
            return self.nvlink
        return f"{self.nvlink.count('active')} of {len(self.nvlink)} links active"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class HostProbe:
    status: str  # "ok" / "no NVIDIA driver: <reason>" / "NVML error: <reason>"
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the newest CUDA the driver supports, e.g. "12.4"
    nvml_version: str | None = None
    gpus: list[GpuProbe] = field(default_factory=list)
    topology: "Topology" = field(default_factory=lambda: Topology())

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def interconnect(self) -> str:
        """ "nvlink" when any GPU has an active link, "pcie" otherwise, "" with no GPUs."""
        if not self.gpus:
            return ""
        linked = any(isinstance(g.nvlink, list) and "active" in g.nvlink for g in self.gpus)
        return "nvlink" if linked else "pcie"

    def to_dict(self) -> dict:
        return {**asdict(self), "gpus": [g.to_dict() for g in self.gpus], "topology": self.topology.to_dict()}


def _cuda_version(v: int | None) -> str | None:
    return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"


def _ecc_counts(nv, h) -> tuple[dict, dict]:
    """(corrected, uncorrected), each {"volatile": n, "aggregate": n}; None where unsupported."""
    get = nv.nvmlDeviceGetTotalEccErrors
    return tuple({"volatile": _opt(get, h, kind, _ECC_VOLATILE),
                  "aggregate": _opt(get, h, kind, _ECC_AGGREGATE)}
                 for kind in (_ECC_CORRECTED, _ECC_UNCORRECTED))


def _nvlink(nv, h) -> list[str] | str:
    links = []
    for link in range(_NVLINK_MAX_LINKS):
        try:
            links.append("active" if nv.nvmlDeviceGetNvLinkState(h, link) else "inactive")
        except Exception as exc:
            if not _is_nvml_error(exc):
                raise
            # Past the last link NVML answers InvalidArgument (or NotSupported on some GPUs).
            if links and _code(exc) in (_ERROR_INVALID_ARGUMENT, _ERROR_NOT_SUPPORTED):
                break
            return "not supported" if _code(exc) == _ERROR_NOT_SUPPORTED else f"error: {exc}"
    return links or "not supported"


def _probe_gpu(nv, index: int) -> GpuProbe:
    g = GpuProbe(index=index)
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        g.name = _text(nv.nvmlDeviceGetName(h))
    except Exception as exc:
        if not _is_nvml_error(exc):
            raise
        g.error = f"NVML error: {exc}"
        return g
    g.uuid = _text(_opt(nv.nvmlDeviceGetUUID, h, default=""))
    mem = _opt(nv.nvmlDeviceGetMemoryInfo, h)
    g.memory_total_mib = None if mem is None else int(mem.total // MIB)
    cc = _opt(nv.nvmlDeviceGetCudaComputeCapability, h)
    g.compute_capability = None if cc is None else f"{cc[0]}.{cc[1]}"
    g.pcie_generation = _opt(nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
    g.pcie_generation_max = _opt(nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
    g.pcie_width = _opt(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
    g.pcie_width_max = _opt(nv.nvmlDeviceGetMaxPcieLinkWidth, h)
    g.nvlink = _nvlink(nv, h)
    mode = _opt(nv.nvmlDeviceGetEccMode, h)  # [current, pending]
    g.ecc_mode = "not supported" if mode is None else ("enabled" if mode[0] else "disabled")
    g.ecc_corrected, g.ecc_uncorrected = _ecc_counts(nv, h)
    limit = _opt(nv.nvmlDeviceGetEnforcedPowerLimit, h)
    g.power_limit_w = None if limit is None else limit / 1000.0
    default = _opt(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)
    g.power_limit_default_w = None if default is None else default / 1000.0
    pci = _opt(nv.nvmlDeviceGetPciInfo, h)
    g.pci_bus_id = _bus_id(pci)
    return g


def _bus_id(pci) -> str:
    """A PCI address as NVML writes it, upper case ("00000000:3B:00.0"); "" when not read."""
    if pci is None:
        return ""
    return _text(getattr(pci, "busId", "") or getattr(pci, "busIdLegacy", "")).upper()


def probe(nvml=None) -> HostProbe:
    """Everything the inventory stores about this host's GPUs. Never raises for a missing
    GPU, driver or library; `status` says what happened."""
    nv = nvml if nvml is not None else pynvml
    status = _start(nv)
    if status != "ok":
        return HostProbe(status=status)
    try:
        host = HostProbe(status="ok")
        host.driver_version = _text(_opt(nv.nvmlSystemGetDriverVersion, default="")) or None
        host.cuda_driver_version = _cuda_version(_opt(nv.nvmlSystemGetCudaDriverVersion))
        nvml_version = _opt(nv.nvmlSystemGetNVMLVersion)
        host.nvml_version = None if nvml_version is None else _text(nvml_version)
        host.gpus = [_probe_gpu(nv, i) for i in range(nv.nvmlDeviceGetCount())]
        host.topology = probe_topology(nv, host.gpus)
        return host
    except Exception as exc:
        if not _is_nvml_error(exc):
            raise
        return HostProbe(status=f"NVML error: {exc}")
    finally:
        _shutdown(nv)


# ---------------------------------------------------------------------------------- topology
# NVML's nvmlGpuTopologyLevel_t -> (stored name, nvidia-smi topo -m's code, what it means). NVML
# has a level nvidia-smi's legend does not (two GPUs on one board): nvidia-smi shows it as PIX.
TOPOLOGY_LEVELS = {
    0: ("internal", "PIX", "on the same board"),
    10: ("single", "PIX", "through at most a single PCIe bridge (one PCIe switch)"),
    20: ("multiple", "PXB", "through multiple PCIe bridges, not the host bridge"),
    30: ("hostbridge", "PHB", "through a PCIe host bridge (typically the CPU)"),
    40: ("node", "NODE", "across PCIe host bridges within one NUMA node (one CPU socket)"),
    50: ("system", "SYS", "across NUMA nodes: the link between CPU sockets (QPI/UPI)"),
}
LEVEL_BY_NAME = {name: (code, words) for name, code, words in TOPOLOGY_LEVELS.values()}
# Nearest first, as the advisor ranks paths between GPUs.
LEVEL_ORDER = ("internal", "single", "multiple", "hostbridge", "node", "system")
# nvidia-smi topo -m's legend, in its order.
TOPOLOGY_LEGEND = (
    ("X", "self"),
    ("SYS", "PCIe and the link between NUMA nodes (CPU sockets, e.g. QPI/UPI)"),
    ("NODE", "PCIe and the link between PCIe host bridges within one NUMA node"),
    ("PHB", "PCIe and a PCIe host bridge (typically the CPU)"),
    ("PXB", "multiple PCIe bridges, without the PCIe host bridge"),
    ("PIX", "at most a single PCIe bridge"),
    ("NV#", "a bonded set of # NVLinks"),
)
# nvmlDeviceGetP2PStatus: the capability asked (nvmlGpuP2PCapsIndex_t) and what it answers
# (nvmlGpuP2PStatus_t). Written out: pynvml exports NVML_P2P_CAPS_INDEX_READ as a tuple.
_P2P_READ, _P2P_WRITE = 0, 1
P2P_STATUS = {0: "ok", 1: "chipset not supported", 2: "GPU not supported", 3: "IOH topology not supported",
              4: "disabled by registry key", 5: "not supported", 6: "unknown"}
TOPOLOGY_VERSION = 1


@dataclass(frozen=True)
class NvLink:
    """One active NVLink of a GPU: its version as NVML numbers it and what is at its far end."""

    link: int
    version: int | None = None
    remote_bus_id: str = ""
    remote_gpu: int | None = None  # the GPU index there; None: an NVSwitch or a device not probed


@dataclass(frozen=True)
class GpuPair:
    """How two GPUs of one host reach each other."""

    a: int
    b: int
    level: str = ""  # a TOPOLOGY_LEVELS name; "" when NVML did not say
    p2p_read: str = ""  # a P2P_STATUS word; "" when NVML did not say
    p2p_write: str = ""
    nvlinks: int = 0  # active links between them (through NVSwitches: the fewer either has)
    via_switch: bool = False

    @property
    def code(self) -> str:
        """nvidia-smi topo -m's code: NV# when NVLinks join them, else the PCIe level's."""
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        return LEVEL_BY_NAME.get(self.level, ("?", ""))[0]

    @property
    def kind(self) -> str:
        """The advisor's word: "nvlink", or the PCIe level's name."""
        return "nvlink" if self.nvlinks else self.level

    @property
    def words(self) -> str:
        if self.nvlinks:
            how = " through NVSwitches" if self.via_switch else ""
            return f"{self.nvlinks} NVLinks{how}"
        return f"PCIe {LEVEL_BY_NAME[self.level][1]}" if self.level in LEVEL_BY_NAME else "path not reported"


@dataclass(frozen=True)
class Topology:
    """How a host's GPUs reach each other, per pair: the nearest common PCIe ancestor, P2P read and
    write, NVLinks (from each GPU's active links and the PCI address at their far end). Stored
    with the host's probe: `to_dict` its one writer, `from_dict` its one reader (a probe stored
    before topology was probed reads as an empty one)."""

    gpus: tuple = ()  # the GPU indices probed
    pairs: tuple = ()  # GpuPair, a < b
    links: dict = field(default_factory=dict)  # GPU index -> [NvLink] (active links only)
    status: str = ""  # "ok" / "one GPU: no pair" / "" (not probed)

    def pair(self, a: int, b: int) -> GpuPair | None:
        a, b = min(a, b), max(a, b)
        return next((p for p in self.pairs if p.a == a and p.b == b), None)

    def between(self, indices) -> list[GpuPair]:
        wanted = sorted(set(indices))
        return [p for p in (self.pair(a, b) for i, a in enumerate(wanted) for b in wanted[i + 1:]) if p]

    def slowest(self, indices=None) -> GpuPair | None:
        """Of the pairs among these GPUs (all by default), the one with the farthest path: NVLink
        is the nearest, then PCIe from one board out to across CPU sockets."""
        pairs = self.between(self.gpus if indices is None else indices)
        rank = {name: i for i, name in enumerate(("nvlink",) + LEVEL_ORDER)}
        known = [p for p in pairs if p.kind in rank]
        return max(known, key=lambda p: rank[p.kind]) if known else None

    def matrix(self) -> dict:
        """As `nvidia-smi topo -m` lays it out: a header of GPUs, one row per GPU, and the legend;
        P2P read/write beside, per pair."""
        names = [f"GPU{i}" for i in self.gpus]
        rows = []
        for a in self.gpus:
            cells = []
            for b in self.gpus:
                p = self.pair(a, b) if a != b else None
                cells.append({"code": "X" if a == b else (p.code if p else "?"),
                              "title": "self" if a == b else (p.words if p else "not reported")})
            rows.append({"gpu": f"GPU{a}", "cells": cells})
        p2p = [{"pair": f"GPU{p.a}–GPU{p.b}", "read": p.p2p_read or "not reported",
                "write": p.p2p_write or "not reported", "path": p.words} for p in self.pairs]
        return {"header": names, "rows": rows, "legend": TOPOLOGY_LEGEND, "p2p": p2p}

    def to_dict(self) -> dict:
        """{"version", "status", "gpus", "pairs": [...], "links": {"0": [...]}}; not probed: {}."""
        if not self.status:
            return {}
        return {"version": TOPOLOGY_VERSION, "status": self.status, "gpus": list(self.gpus),
                "pairs": [asdict(p) for p in self.pairs],
                "links": {str(i): [asdict(link) for link in links] for i, links in self.links.items()}}

    @classmethod
    def from_dict(cls, data) -> "Topology":
        data = data if isinstance(data, dict) else {}
        pair_fields = {f.name for f in fields(GpuPair)}
        link_fields = {f.name for f in fields(NvLink)}
        pairs = tuple(GpuPair(**{k: v for k, v in p.items() if k in pair_fields})
                      for p in data.get("pairs") or [] if isinstance(p, dict) and {"a", "b"} <= set(p))
        links = {int(i): [NvLink(**{k: v for k, v in link.items() if k in link_fields})
                          for link in rows if isinstance(link, dict) and "link" in link]
                 for i, rows in (data.get("links") or {}).items() if str(i).isdigit() and isinstance(rows, list)}
        gpus = tuple(int(i) for i in data.get("gpus") or [] if isinstance(i, int))
        return cls(gpus, pairs, links, str(data.get("status") or ""))


def _active_links(nv, h, states: list[str], gpu_at: dict[str, int]) -> list[NvLink]:
    links = []
    for link, state in enumerate(states):
        if state != "active":
            continue
        version = _opt(nv.nvmlDeviceGetNvLinkVersion, h, link)
        remote = _bus_id(_opt(nv.nvmlDeviceGetNvLinkRemotePciInfo, h, link))
        links.append(NvLink(link, version, remote, gpu_at.get(remote)))
    return links


def _p2p(nv, ha, hb, index: int) -> str:
    status = _opt(nv.nvmlDeviceGetP2PStatus, ha, hb, index)
    return "" if status is None else P2P_STATUS.get(int(status), f"status {status}")


def probe_topology(nv, gpus: list[GpuProbe]) -> Topology:
    """Every pair of the probed GPUs (those NVML could read): common ancestor, P2P, NVLinks. A
    field NVML does not support is left blank, never failing the rest."""
    readable = [g for g in gpus if g.error is None]
    if len(readable) < 2:
        return Topology(tuple(g.index for g in readable), status="one GPU: no pair" if readable else "no GPU")
    handles = {g.index: nv.nvmlDeviceGetHandleByIndex(g.index) for g in readable}
    gpu_at = {g.pci_bus_id: g.index for g in readable if g.pci_bus_id}
    links = {g.index: _active_links(nv, handles[g.index], g.nvlink, gpu_at)
             for g in readable if isinstance(g.nvlink, list)}
    links = {i: rows for i, rows in links.items() if rows}
    pairs = []
    for n, ga in enumerate(readable):
        for gb in readable[n + 1:]:
            a, b = ga.index, gb.index
            level = _opt(nv.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])
            direct = sum(1 for link in links.get(a, []) if link.remote_gpu == b)
            switched = min(sum(1 for link in links.get(i, []) if link.remote_gpu is None and link.remote_bus_id)
                           for i in (a, b))
            pairs.append(GpuPair(a, b, TOPOLOGY_LEVELS.get(level, ("",))[0] if level is not None else "",
                                 _p2p(nv, handles[a], handles[b], _P2P_READ),
                                 _p2p(nv, handles[a], handles[b], _P2P_WRITE),
                                 direct or switched, via_switch=not direct and bool(switched)))
    return Topology(tuple(g.index for g in readable), tuple(pairs), links, "ok")


# ---------------------------------------------------------------------------------- sampler
@dataclass
class GpuSample:
    t: float  # the sampler's clock (time.perf_counter, the client's clock), when read began
    index: int
    memory_used_mib: float | None = None  # whole device
    process_memory_mib: dict[int, float | None] = field(default_factory=dict)  # pid -> MiB
    utilization_gpu: int | None = None  # percent of the last sample period a kernel ran
    utilization_memory: int | None = None  # percent of time device memory was read or written
    temperature_c: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    throttle: list[str] = field(default_factory=list)
    ecc_corrected: int | None = None  # volatile (since the driver loaded)
    ecc_uncorrected: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _throttle_bits(nv, h) -> int | None:
    # nvmlDeviceGetCurrentClocksEventReasons is the current name (driver >= 535); older drivers
    # (common on V100 hosts) only have the deprecated ...ClocksThrottleReasons.
    try:
        return nv.nvmlDeviceGetCurrentClocksEventReasons(h)
    except Exception as exc:
        if not (_is_nvml_error(exc) or isinstance(exc, AttributeError)):
            raise
        if _is_nvml_error(exc) and _code(exc) != _ERROR_FUNCTION_NOT_FOUND:
            return None
    return _opt(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)


def read_sample(nv, h, index: int, t: float, processes: bool = True) -> GpuSample:
    s = GpuSample(t=t, index=index)
    mem = _opt(nv.nvmlDeviceGetMemoryInfo, h)
    s.memory_used_mib = None if mem is None else mem.used / MIB
    if processes:
        for p in _opt(nv.nvmlDeviceGetComputeRunningProcesses, h, default=[]) or []:
            used = getattr(p, "usedGpuMemory", None)  # None without permission (containers)
            s.process_memory_mib[int(p.pid)] = None if used is None else used / MIB
    util = _opt(nv.nvmlDeviceGetUtilizationRates, h)
    if util is not None:
        s.utilization_gpu, s.utilization_memory = util.gpu, util.memory
    s.temperature_c = _opt(nv.nvmlDeviceGetTemperature, h, _TEMPERATURE_GPU)
    power = _opt(nv.nvmlDeviceGetPowerUsage, h)
    s.power_w = None if power is None else power / 1000.0
    s.sm_clock_mhz = _opt(nv.nvmlDeviceGetClockInfo, h, _CLOCK_SM)
    s.throttle = decode_throttle(_throttle_bits(nv, h))
    get = nv.nvmlDeviceGetTotalEccErrors
    s.ecc_corrected = _opt(get, h, _ECC_CORRECTED, _ECC_VOLATILE)
    s.ecc_uncorrected = _opt(get, h, _ECC_UNCORRECTED, _ECC_VOLATILE)
    return s


class GpuSampler:
    """Samples the given GPUs every `interval_s` in a background thread, so an asyncio event
    loop measuring requests is never blocked by NVML calls. Ticks sit on an absolute grid
    (start + k * interval); a tick that is already past when the previous sample ends is
    skipped rather than shifting every later sample.

        sampler = GpuSampler([0]); sampler.start(); ...; samples = sampler.stop()
    """

    def __init__(self, indices, interval_s: float = 0.2, clock=time.perf_counter, nvml=None,
                 processes: bool = True):
        self.indices = list(indices)
        self.interval_s = interval_s
        self.clock = clock
        self.nv = nvml if nvml is not None else pynvml
        self.processes = processes  # per-process memory is the slowest query; allow it off
        self.status = "not started"
        self.samples: list[GpuSample] = []
        self.ecc_before: dict[int, dict] = {}  # index -> {"corrected": {...}, "uncorrected": {...}}
        self.ecc_after: dict[int, dict] = {}
        # NVML's total-energy counter (mJ since the driver loaded; Volta and newer) at start and
        # stop with the clock's time, and each GPU's power just before the level (its idle draw).
        self.energy_before: dict[int, tuple[float | None, float]] = {}
        self.energy_after: dict[int, tuple[float | None, float]] = {}
        self.idle_power_w: dict[int, float | None] = {}
        self.read_seconds: list[float] = []  # how long each round of reads took (its cost)
        self.skipped_ticks = 0
        self.error: str | None = None
        self._handles: list[tuple[int, object]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _ecc(self) -> dict[int, dict]:
        out = {}
        for index, h in self._handles:
            corrected, uncorrected = _ecc_counts(self.nv, h)
            out[index] = {"corrected": corrected, "uncorrected": uncorrected}
        return out

    def _energy(self) -> dict[int, tuple[float | None, float]]:
        out = {}
        for index, h in self._handles:
            mj = _opt(self.nv.nvmlDeviceGetTotalEnergyConsumption, h) if hasattr(
                self.nv, "nvmlDeviceGetTotalEnergyConsumption") else None
            out[index] = (None if mj is None else float(mj), self.clock())
        return out

    def start(self) -> None:
        self.status = _start(self.nv)
        if self.status != "ok":
            return
        try:
            self._handles = [(i, self.nv.nvmlDeviceGetHandleByIndex(i)) for i in self.indices]
        except Exception as exc:
            if not _is_nvml_error(exc):
                raise
            self.status = f"NVML error: {exc}"
            _shutdown(self.nv)
            return
        self.ecc_before = self._ecc()
        for index, h in self._handles:
            power = _opt(self.nv.nvmlDeviceGetPowerUsage, h)
            self.idle_power_w[index] = None if power is None else power / 1000.0
        self.energy_before = self._energy()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def _round(self) -> None:
        t = self.clock()
        for index, h in self._handles:
            try:
                self.samples.append(read_sample(self.nv, h, index, t, self.processes))
            except Exception as exc:  # keep sampling the other GPUs and later ticks
                self.error = f"{type(exc).__name__}: {exc}"
        self.read_seconds.append(self.clock() - t)

    def _run(self) -> None:
        start = self.clock()
        k = 0
        while True:
            self._round()
            k += 1
            now = self.clock()
            late = int((now - start) / self.interval_s) + 1  # the next tick still ahead
            if late > k:
                self.skipped_ticks += late - k
                k = late
            if self._stop.wait(start + k * self.interval_s - now):
                return

    def stop(self) -> list[GpuSample]:
        """Stops the thread (at most one round of reads away) and returns all samples."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.energy_after = self._energy()
            self.ecc_after = self._ecc()
            _shutdown(self.nv)
        return self.samples

    def summary(self) -> "GpuSummary":
        energy = {i: Energy.between(self.energy_before.get(i), self.energy_after.get(i), self.idle_power_w.get(i))
                  for i in self.energy_before}
        return summary(self.samples, self.ecc_before, self.ecc_after, status=self.status, energy=energy)

    def series(self) -> "GpuSeries":
        return series(self.samples)


SERIES_FIELDS = ("memory_used_mib", "utilization_gpu", "utilization_memory", "temperature_c",
                 "power_w", "sm_clock_mhz")
STORED_VERSION = 3  # of gpu_summary and gpu_series (3: energy); see each reader for the older shapes


@dataclass(frozen=True)
class Energy:
    """One GPU's energy over a level by NVML's total-energy counter (the difference of its two
    readings, J, over `seconds`), and the draw it had before the level (`idle_power_w`)."""

    joules: float | None = None
    seconds: float | None = None
    idle_power_w: float | None = None

    @classmethod
    def between(cls, before, after, idle_power_w=None) -> "Energy":
        if not before or not after or before[0] is None or after[0] is None or after[0] < before[0]:
            return cls(idle_power_w=idle_power_w)  # no counter (before Volta), or it was reset
        return cls((after[0] - before[0]) / 1000.0, after[1] - before[1], idle_power_w)


def integrated_energy_j(rows: list["GpuSample"]) -> float | None:
    """The power samples integrated over their span (trapezoids, J): the counter's cross-check,
    and its stand-in where a GPU has no counter."""
    points = [(s.t, s.power_w) for s in rows if s.power_w is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


@dataclass(frozen=True)
class GpuSeries:
    """Samples as columns for storage and charts, on the shared clock: `t`, and per GPU (keys
    are strings, as in JSON) a column per SERIES_FIELDS plus "throttle" (the throttling reasons
    seen at each tick)."""

    t: list = field(default_factory=list)
    gpus: dict = field(default_factory=dict)  # "0" -> {field: [...]}

    def column(self, gpu: str, name: str) -> list:
        return (self.gpus.get(gpu) or {}).get(name) or []

    def shifted(self, t0: float) -> "GpuSeries":
        """Times made relative to `t0` (a level's start)."""
        return GpuSeries([round(t - t0, 4) for t in self.t], self.gpus)

    def to_dict(self) -> dict:
        """{"version", "t": [...], "gpus": {"0": {field: [...]}}}; no samples: {} (nothing stored)."""
        if not self.t:
            return {}
        return {"version": STORED_VERSION, "t": list(self.t), "gpus": self.gpus}

    @classmethod
    def from_dict(cls, data) -> "GpuSeries":
        """Every version has the same columns; rows without "version" are the first ones."""
        data = data if isinstance(data, dict) else {}
        gpus = data.get("gpus") if isinstance(data.get("gpus"), dict) else {}
        return cls(list(data.get("t") or []), {str(k): v for k, v in gpus.items() if isinstance(v, dict)})


def series(samples: list[GpuSample]) -> GpuSeries:
    """GPUs are read together at each tick, so they share "t"."""
    ts = sorted({s.t for s in samples})
    at = {t: i for i, t in enumerate(ts)}
    gpus: dict[str, dict] = {}
    for s in samples:
        cols = gpus.setdefault(str(s.index), {f: [None] * len(ts) for f in (*SERIES_FIELDS, "throttle")})
        for f in SERIES_FIELDS:
            cols[f][at[s.t]] = getattr(s, f)
        cols["throttle"][at[s.t]] = [r for r in s.throttle if r in THROTTLING]
    return GpuSeries(ts, gpus)


def _ecc_delta(before: dict | None, after: dict | None) -> dict:
    """Rise in ECC errors between two readings: volatile counts, else aggregate."""
    out = {}
    for kind in ("corrected", "uncorrected"):
        out[kind] = None
        for counter in ("volatile", "aggregate"):
            a = (before or {}).get(kind, {}).get(counter)
            b = (after or {}).get(kind, {}).get(counter)
            if a is not None and b is not None:
                out[kind] = b - a
                break
    return out


def _mean(values) -> float | None:
    v = [x for x in values if x is not None]
    return sum(v) / len(v) if v else None


@dataclass(frozen=True)
class GpuStats:
    """One GPU over one level."""

    index: int
    samples: int = 0
    peak_memory_used_mib: float | None = None
    peak_process_memory_mib: dict = field(default_factory=dict)  # pid (a string, as in JSON) -> MiB
    max_temperature_c: float | None = None
    max_power_w: float | None = None
    mean_utilization_gpu: float | None = None
    mean_utilization_memory: float | None = None
    min_sm_clock_mhz: float | None = None
    throttle_reasons: dict = field(default_factory=dict)  # reason -> share of samples
    throttled_share: float | None = None
    ecc_corrected_delta: int | None = None
    ecc_uncorrected_delta: int | None = None
    energy_j: float | None = None  # NVML's energy counter over the level
    energy_s: float | None = None  # the time between its two readings
    energy_integrated_j: float | None = None  # the power samples integrated over their span
    sampled_s: float | None = None  # that span
    idle_power_w: float | None = None  # the draw just before the level

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "GpuStats":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known and (v is not None or k == "index")})


@dataclass(frozen=True)
class GpuSummary:
    """One level's GPU figures: per GPU in `gpus`, and across them (the worst GPU for peaks and
    shares, the sum of ECC rises) for the validity flags. `status` says whether and why not the
    GPUs were sampled ("ok", "not sampled: ...", "no NVIDIA driver: ...")."""

    status: str = ""
    samples: int = 0
    peak_memory_used_mib: float | None = None
    max_temperature_c: float | None = None
    max_power_w: float | None = None
    mean_utilization_gpu: float | None = None
    min_sm_clock_mhz: float | None = None
    throttle_reasons: dict = field(default_factory=dict)
    throttled_share: float | None = None
    ecc_corrected_delta: int | None = None
    ecc_uncorrected_delta: int | None = None
    # Summed over the GPUs (None unless every GPU sampled gave it): engine.gpu.Energy.
    energy_j: float | None = None
    energy_integrated_j: float | None = None
    idle_power_w: float | None = None
    energy_s: float | None = None
    gpus: list[GpuStats] = field(default_factory=list)

    @property
    def joules(self) -> float | None:
        """The level's GPU energy: the counter's; else the integrated power's."""
        return self.energy_j if self.energy_j is not None else self.energy_integrated_j

    def joules_per_token(self, output_tokens: int) -> float | None:
        """The level's GPU energy per output token."""
        joules = self.joules
        return joules / output_tokens if joules is not None and output_tokens else None

    @property
    def idle_share(self) -> float | None:
        """The share of the level's energy its GPUs would have drawn idle (their draw before it,
        over the counter's span)."""
        if not self.energy_j or self.idle_power_w is None or self.energy_s is None:
            return None
        return min(1.0, self.idle_power_w * self.energy_s / self.energy_j)

    def peak_memory_gib(self, indices=None) -> float | None:
        """Peak memory of these GPUs (indices), or of the only GPU sampled when none are named;
        None when it cannot tell (several GPUs sampled, none named) or nothing was read."""
        rows = self.gpus
        if indices:
            rows = [g for g in rows if g.index in set(indices)]
        elif len(rows) != 1:
            return None
        peaks = [g.peak_memory_used_mib for g in rows if g.peak_memory_used_mib is not None]
        return max(peaks) / 1024 if peaks else None

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "gpus"},
                "version": STORED_VERSION, "gpus": [g.to_dict() for g in self.gpus]}

    @classmethod
    def from_dict(cls, data) -> "GpuSummary":
        """Reads every version: 2 and 1 (no "version") are this shape; the first engine stored a
        list of per-GPU rows, read here with the across-GPU figures worked out from them."""
        if isinstance(data, list):
            return _across([GpuStats.from_dict(g) for g in data if isinstance(g, dict) and "index" in g])
        data = data if isinstance(data, dict) else {}
        gpus = [GpuStats.from_dict(g) for g in data.get("gpus") or [] if isinstance(g, dict) and "index" in g]
        known = {f.name for f in fields(cls)} - {"gpus"}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None}, gpus=gpus)

    @classmethod
    def read(cls, summary: "GpuSummary | dict | list | None") -> "GpuSummary":
        return summary if isinstance(summary, GpuSummary) else cls.from_dict(summary)


def _gpu_summary(index: int, rows: list[GpuSample], ecc: dict, energy: "Energy | None" = None) -> GpuStats:
    def values(name):
        return [v for v in (getattr(s, name) for s in rows) if v is not None]

    def mean(name):
        return _mean(values(name))

    n = len(rows)
    per_process: dict[str, float] = {}  # pid -> peak MiB (str keys, as stored in JSON)
    for s in rows:
        for pid, mib in s.process_memory_mib.items():
            if mib is not None:
                per_process[str(pid)] = max(per_process.get(str(pid), 0.0), mib)
    seen: dict[str, int] = {}
    for s in rows:
        for reason in s.throttle:
            seen[reason] = seen.get(reason, 0) + 1
    return GpuStats(
        index=index, samples=n,
        peak_memory_used_mib=max(values("memory_used_mib"), default=None),
        peak_process_memory_mib=per_process,
        max_temperature_c=max(values("temperature_c"), default=None),
        max_power_w=max(values("power_w"), default=None),
        mean_utilization_gpu=mean("utilization_gpu"),
        mean_utilization_memory=mean("utilization_memory"),
        min_sm_clock_mhz=min(values("sm_clock_mhz"), default=None),
        throttle_reasons={r: c / n for r, c in sorted(seen.items())},
        throttled_share=sum(1 for s in rows if THROTTLING & set(s.throttle)) / n if n else None,
        ecc_corrected_delta=ecc["corrected"], ecc_uncorrected_delta=ecc["uncorrected"],
        energy_j=energy.joules if energy else None, energy_s=energy.seconds if energy else None,
        energy_integrated_j=integrated_energy_j(rows), sampled_s=(rows[-1].t - rows[0].t) if n >= 2 else None,
        idle_power_w=energy.idle_power_w if energy else None)


def _across(gpus: list[GpuStats], status: str = "") -> GpuSummary:
    def worst(key, pick=max):
        v = [getattr(g, key) for g in gpus if getattr(g, key) is not None]
        return pick(v) if v else None

    def total(key):
        v = [getattr(g, key) for g in gpus if getattr(g, key) is not None]
        return sum(v) if v else None

    def every(key):  # a sum only where every GPU gave its part
        v = [getattr(g, key) for g in gpus]
        return sum(v) if v and all(x is not None for x in v) else None

    reasons: dict[str, float] = {}
    for g in gpus:
        for r, share in g.throttle_reasons.items():
            reasons[r] = max(reasons.get(r, 0.0), share)
    return GpuSummary(
        status=status, samples=sum(g.samples for g in gpus),
        peak_memory_used_mib=worst("peak_memory_used_mib"), max_temperature_c=worst("max_temperature_c"),
        max_power_w=worst("max_power_w"), mean_utilization_gpu=_mean([g.mean_utilization_gpu for g in gpus]),
        min_sm_clock_mhz=worst("min_sm_clock_mhz", min), throttle_reasons=dict(sorted(reasons.items())),
        throttled_share=worst("throttled_share"), ecc_corrected_delta=total("ecc_corrected_delta"),
        ecc_uncorrected_delta=total("ecc_uncorrected_delta"), energy_j=every("energy_j"),
        energy_integrated_j=every("energy_integrated_j"), idle_power_w=every("idle_power_w"),
        energy_s=worst("energy_s"), gpus=gpus)


def summary(samples: list[GpuSample], ecc_before: dict | None = None,
            ecc_after: dict | None = None, status: str = "ok", energy: dict | None = None) -> GpuSummary:
    """One level's GPU figures. ECC rises come from the before/after readings when given, else
    from the first and last sample."""
    by_gpu: dict[int, list[GpuSample]] = {}
    for s in samples:
        by_gpu.setdefault(s.index, []).append(s)
    gpus = []
    for index in sorted(set(by_gpu) | set(ecc_before or {})):
        rows = by_gpu.get(index, [])
        if ecc_before and ecc_after and index in ecc_before and index in ecc_after:
            ecc = _ecc_delta(ecc_before[index], ecc_after[index])
        elif len(rows) >= 2:
            ecc = _ecc_delta(*({"corrected": {"volatile": r.ecc_corrected},
                                "uncorrected": {"volatile": r.ecc_uncorrected}} for r in (rows[0], rows[-1])))
        else:
            ecc = {"corrected": None, "uncorrected": None}
        gpus.append(_gpu_summary(index, rows, ecc, (energy or {}).get(index)))
    return _across(gpus, status)


def not_sampled(why: str) -> GpuSummary:
    """The summary of a level whose GPUs were not sampled, saying why."""
    return GpuSummary(status=why)


# ---------------------------------------------------------------------------------- one reading
@dataclass(frozen=True)
class MemoryNow:
    """GPU memory at one moment: each GPU's used MiB, and what NVML attributes to the given
    processes (pid -> MiB, summed over GPUs; None where NVML does not say, as in containers
    that hide host pids). `status` is "ok" or why nothing could be read."""

    status: str
    used_mib: dict[int, float] = field(default_factory=dict)
    process_mib: dict[int, float | None] = field(default_factory=dict)


def memory_now(pids=(), indices=None, nvml=None) -> MemoryNow:
    """One reading of the GPUs (all of them, or `indices`) for a server's processes `pids`.
    Never raises for a missing GPU or driver."""
    nv = nvml if nvml is not None else pynvml
    status = _start(nv)
    if status != "ok":
        return MemoryNow(status=status)
    wanted = {int(p) for p in pids}
    used: dict[int, float] = {}
    per_pid: dict[int, float | None] = {}
    try:
        for index in (range(nv.nvmlDeviceGetCount()) if indices is None else indices):
            sample = read_sample(nv, nv.nvmlDeviceGetHandleByIndex(index), index, time.perf_counter())
            if sample.memory_used_mib is not None:
                used[index] = sample.memory_used_mib
            for pid, mib in sample.process_memory_mib.items():
                if pid in wanted:  # a process on several GPUs: its MiB summed
                    per_pid[pid] = mib if per_pid.get(pid) is None else per_pid[pid] + (mib or 0.0)
        return MemoryNow(status="ok", used_mib=used, process_mib=per_pid)
    except Exception as exc:
        if not _is_nvml_error(exc):
            raise
        return MemoryNow(status=f"NVML error: {exc}")
    finally:
        _shutdown(nv)
