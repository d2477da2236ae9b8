"""GPU probe and telemetry: a fake NVML (the same functions and pynvml's own error classes)
stands in for a V100 and other GPUs; the no-driver path of this machine runs for real."""
import ctypes.util
import json
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml
import pytest

from benchmarks.engine import gpu
from benchmarks.engine.gpu import GpuSampler, decode_throttle, probe, summary

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


def nvml_error(code):
    return pynvml.NVMLError(code)  # pynvml maps the code to its subclass, as the real calls do


@dataclass
class FakeGpu:
    name: str = "Tesla V100-PCIE-16GB"
    uuid: str = "GPU-6f1c7c3e-0b8a-4a53-9a3c-1d2e3f4a5b6c"
    total_mib: int = 16384
    used_mib: float = 15200.0
    cc: tuple = (7, 0)
    pcie: tuple = (3, 3, 16, 16)  # current gen, max gen, current width, max width
    nvlinks: list | None = None  # None: NotSupported (a PCIe card); else one bool per link
    ecc_enabled: bool | None = True  # None: NotSupported
    # (error type, counter type) -> count; NVML_MEMORY_ERROR_TYPE_* x NVML_*_ECC
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (1, 0): 0, (0, 1): 3, (1, 1): 0})
    power_limit_mw: int = 250000
    util: tuple = (97, 61)
    temperature: int = 71
    power_mw: int = 243512
    sm_clock: int = 1380
    throttle: int = 0x004  # sw_power_cap
    processes: list = field(default_factory=lambda: [SimpleNamespace(pid=4242, usedGpuMemory=14900 * 2**20)])
    unsupported: set = field(default_factory=set)  # function names that answer NotSupported
    lost: bool = False
    bus_id: str = ""  # "" : one is made from the GPU's index
    nvlink_remote: list | None = None  # per link, the PCI bus id at its far end
    nvlink_version: int = 2


class FakeNVML:
    """The subset of pynvml that gpu.py calls, answering from FakeGpu rows."""

    def __init__(self, gpus, driver="535.183.01", cuda=12020, init_error=None,
                 has_event_reasons=True, sample_delay=0.0, ancestors=None, p2p=None):
        self.gpus, self.driver, self.cuda = gpus, driver, cuda
        # (a, b) -> NVML_TOPOLOGY_* level, a < b; a pair not listed answers NotSupported
        self.ancestors = ancestors or {}
        # (a, b, caps index) -> NVML_P2P_STATUS_*; not listed: OK where the pair shares a switch
        # or NVLink, else chipset not supported
        self.p2p = p2p or {}
        self.init_error, self.sample_delay = init_error, sample_delay
        self.inits = self.shutdowns = 0
        self.calls = 0
        self.lock = threading.Lock()
        if not has_event_reasons:  # an old driver: the new function name is missing
            self.nvmlDeviceGetCurrentClocksEventReasons = self._missing

    def _missing(self, h):
        raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _dev(self, h, fn):
        self.calls += 1
        g = self.gpus[h]
        if g.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in g.unsupported:
            raise nvml_error(NOT_SUPPORTED)
        return g

    # system
    def nvmlInit(self):
        if self.init_error:
            raise nvml_error(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlSystemGetNVMLVersion(self):
        return "12." + self.driver

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        if self.gpus[i].lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return i  # the handle is the index

    # device (probe)
    def nvmlDeviceGetName(self, h):
        return self._dev(h, "name").name

    def nvmlDeviceGetUUID(self, h):
        return self._dev(h, "uuid").uuid

    def nvmlDeviceGetMemoryInfo(self, h):
        g = self._dev(h, "memory")
        return SimpleNamespace(total=g.total_mib * 2**20, used=int(g.used_mib * 2**20),
                               free=(g.total_mib - g.used_mib) * 2**20)

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return self._dev(h, "cc").cc

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._dev(h, "pcie").pcie[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._dev(h, "pcie").pcie[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._dev(h, "pcie").pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._dev(h, "pcie").pcie[3]

    def nvmlDeviceGetNvLinkState(self, h, link):
        g = self._dev(h, "nvlink")
        if g.nvlinks is None:
            raise nvml_error(NOT_SUPPORTED)
        if link >= len(g.nvlinks):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(g.nvlinks[link])

    def bus_id(self, i):
        return self.gpus[i].bus_id or f"00000000:{0x18 + 0x20 * i:02X}:00.0"

    def nvmlDeviceGetPciInfo(self, h):
        self._dev(h, "pci")
        return SimpleNamespace(busId=self.bus_id(h).lower(), busIdLegacy=self.bus_id(h)[4:])

    def _link(self, h, link):
        g = self._dev(h, "nvlink")
        if g.nvlinks is None:
            raise nvml_error(NOT_SUPPORTED)
        if link >= len(g.nvlinks):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return self._link(h, link).nvlink_version

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        g = self._link(h, link)
        if not g.nvlink_remote:
            raise nvml_error(NOT_SUPPORTED)
        return SimpleNamespace(busId=g.nvlink_remote[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, h1, h2):
        self._dev(h1, "topology")
        level = self.ancestors.get((min(h1, h2), max(h1, h2)))
        if level is None:
            raise nvml_error(NOT_SUPPORTED)
        return level

    def nvmlDeviceGetP2PStatus(self, h1, h2, index):
        self._dev(h1, "p2p")
        key = (min(h1, h2), max(h1, h2), index)
        if key in self.p2p:
            return self.p2p[key]
        near = self.ancestors.get(key[:2], 99) <= pynvml.NVML_TOPOLOGY_MULTIPLE
        return pynvml.NVML_P2P_STATUS_OK if near else pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED

    def nvmlDeviceGetEccMode(self, h):
        g = self._dev(h, "ecc")
        if g.ecc_enabled is None:
            raise nvml_error(NOT_SUPPORTED)
        return [int(g.ecc_enabled), int(g.ecc_enabled)]

    def nvmlDeviceGetTotalEccErrors(self, h, error_type, counter_type):
        g = self._dev(h, "ecc")
        if g.ecc_enabled is None:
            raise nvml_error(NOT_SUPPORTED)
        with self.lock:
            return g.ecc[(error_type, counter_type)]

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return self._dev(h, "power_limit").power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return self._dev(h, "power_limit").power_limit_mw

    # device (sampler)
    def nvmlDeviceGetComputeRunningProcesses(self, h):
        if self.sample_delay:
            time.sleep(self.sample_delay)
        return self._dev(h, "processes").processes

    def nvmlDeviceGetUtilizationRates(self, h):
        g = self._dev(h, "util")
        return SimpleNamespace(gpu=g.util[0], memory=g.util[1])

    def nvmlDeviceGetTemperature(self, h, sensor):
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._dev(h, "temperature").temperature

    def nvmlDeviceGetPowerUsage(self, h):
        return self._dev(h, "power").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        # mJ since "the driver loaded": a constant draw of power_mw over the clock's seconds
        return int(1e9 + self._dev(h, "energy").power_mw * time.perf_counter())

    def nvmlDeviceGetClockInfo(self, h, clock):
        assert clock == pynvml.NVML_CLOCK_SM
        return self._dev(h, "clock").sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._dev(h, "throttle").throttle

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._dev(h, "throttle").throttle


def test_the_constants_written_out_in_gpu_py_match_pynvml():
    assert gpu._TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU and gpu._CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert (gpu._ECC_CORRECTED, gpu._ECC_UNCORRECTED) == (
        pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    assert (gpu._ECC_VOLATILE, gpu._ECC_AGGREGATE) == (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
    assert gpu._ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert gpu._NVLINK_MAX_LINKS == pynvml.NVML_NVLINK_MAX_LINKS
    for name, bit in [("sw_power_cap", pynvml.nvmlClocksEventReasonSwPowerCap),
                      ("hw_slowdown", pynvml.nvmlClocksEventReasonHwSlowdown),
                      ("sw_thermal", pynvml.nvmlClocksEventReasonSwThermalSlowdown),
                      ("hw_thermal", pynvml.nvmlClocksEventReasonHwThermalSlowdown),
                      ("hw_power_brake", pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown),
                      ("idle", pynvml.nvmlClocksEventReasonGpuIdle),
                      ("board_limit", pynvml.nvmlClocksThrottleReasonBoardLimit)]:
        assert gpu.THROTTLE_REASONS[bit] == name


# ------------------------------------------------------------------------------ probe
def test_a_v100_pcie_host():
    nv = FakeNVML([FakeGpu(), FakeGpu(uuid="GPU-2")])
    host = probe(nvml=nv)
    assert host.ok and host.driver_version == "535.183.01" and host.cuda_driver_version == "12.2"
    g = host.gpus[0]
    assert (g.index, g.name, g.memory_total_mib, g.compute_capability) == (0, "Tesla V100-PCIE-16GB", 16384, "7.0")
    assert (g.pcie_generation, g.pcie_generation_max, g.pcie_width, g.pcie_width_max) == (3, 3, 16, 16)
    assert g.nvlink == g.nvlink_text == "not supported" and host.interconnect == "pcie"
    assert g.ecc_mode == "enabled"
    assert g.ecc_corrected == {"volatile": 0, "aggregate": 3}
    assert g.ecc_uncorrected == {"volatile": 0, "aggregate": 0}
    assert g.power_limit_w == 250.0 and g.error is None
    assert [x.uuid for x in host.gpus] == [FakeGpu().uuid, "GPU-2"]
    json.dumps(host.to_dict())  # stored as JSON as it is
    assert nv.inits == nv.shutdowns == 1


def test_nvlink_links_are_listed_on_an_sxm2_card():
    host = probe(nvml=FakeNVML([FakeGpu(name="Tesla V100-SXM2-16GB", nvlinks=[True] * 5 + [False])]))
    assert host.gpus[0].nvlink == ["active"] * 5 + ["inactive"]
    assert host.gpus[0].nvlink_text == "5 of 6 links active" and host.interconnect == "nvlink"


def test_not_supported_fields_give_none_not_a_failed_probe():
    consumer = FakeGpu(name="NVIDIA GeForce RTX 3090", cc=(8, 6), ecc_enabled=None,
                       unsupported={"power_limit", "pcie", "uuid"})
    host = probe(nvml=FakeNVML([consumer]))
    g = host.gpus[0]
    assert host.ok and g.error is None and g.compute_capability == "8.6"
    assert g.ecc_mode == "not supported"
    assert g.ecc_corrected == g.ecc_uncorrected == {"volatile": None, "aggregate": None}
    assert g.power_limit_w is None and g.pcie_generation is None and g.pcie_width_max is None
    assert g.uuid == ""


def test_ecc_disabled_is_not_unsupported():
    nv = FakeNVML([FakeGpu(ecc_enabled=False)])
    assert probe(nvml=nv).gpus[0].ecc_mode == "disabled"


def test_a_lost_gpu_is_marked_and_the_others_are_still_probed():
    host = probe(nvml=FakeNVML([FakeGpu(lost=True), FakeGpu(uuid="GPU-ok")]))
    assert host.ok
    assert host.gpus[0].error == "NVML error: GPU is lost"
    assert host.gpus[1].uuid == "GPU-ok" and host.gpus[1].error is None


@pytest.mark.parametrize("code, status", [
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver: Driver Not Loaded"),
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver: NVML Shared Library Not Found"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "NVML error: Insufficient Permissions"),
])
def test_init_failures_become_a_status(code, status):
    host = probe(nvml=FakeNVML([FakeGpu()], init_error=code))
    assert host.status == status and host.gpus == [] and not host.ok
    sampler = GpuSampler([0], nvml=FakeNVML([FakeGpu()], init_error=code))
    sampler.start()
    assert sampler.status == status and sampler.stop() == []


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="this host has an NVIDIA driver")
def test_the_real_no_driver_path_on_this_machine():
    host = probe()  # the real pynvml
    assert host.status == "no NVIDIA driver: NVML Shared Library Not Found"
    assert host.to_dict()["gpus"] == []
    sampler = GpuSampler([0], interval_s=0.01)
    sampler.start()
    assert sampler.status == host.status
    assert sampler.stop() == [] and sampler.summary().gpus == [] and sampler.series() == gpu.GpuSeries()


# ------------------------------------------------------------------------------ throttle
def test_throttle_reasons_are_decoded_to_names():
    assert decode_throttle(0) == [] and decode_throttle(None) == []
    assert decode_throttle(0x001) == ["idle"]
    assert decode_throttle(0x004 | 0x040 | 0x008) == ["sw_power_cap", "hw_slowdown", "hw_thermal"]
    assert decode_throttle(0x020 | 0x080) == ["sw_thermal", "hw_power_brake"]
    assert decode_throttle(0x1000 | 0x004) == ["sw_power_cap", "unknown_0x1000"]


def test_an_old_driver_without_clock_event_reasons_falls_back():
    nv = FakeNVML([FakeGpu(throttle=0x040)], has_event_reasons=False)
    s = gpu.read_sample(nv, 0, 0, t=1.0)
    assert s.throttle == ["hw_thermal"]


# ------------------------------------------------------------------------------ sampler
def test_one_sample_reads_every_figure():
    nv = FakeNVML([FakeGpu(processes=[SimpleNamespace(pid=7, usedGpuMemory=None),
                                      SimpleNamespace(pid=8, usedGpuMemory=512 * 2**20)])])
    s = gpu.read_sample(nv, 0, 0, t=12.5)
    assert (s.t, s.index, s.memory_used_mib) == (12.5, 0, 15200.0)
    assert s.process_memory_mib == {7: None, 8: 512.0}  # None: no permission to see it
    assert (s.utilization_gpu, s.utilization_memory, s.temperature_c, s.sm_clock_mhz) == (97, 61, 71, 1380)
    assert s.power_w == pytest.approx(243.512) and s.throttle == ["sw_power_cap"]
    assert (s.ecc_corrected, s.ecc_uncorrected) == (0, 0)
    json.dumps(s.to_dict())


def test_a_field_not_supported_in_a_sample_is_none():
    nv = FakeNVML([FakeGpu(unsupported={"power", "processes", "throttle"}, ecc_enabled=None)])
    s = gpu.read_sample(nv, 0, 0, t=0.0)
    assert s.power_w is None and s.process_memory_mib == {} and s.throttle == []
    assert s.ecc_corrected is None and s.temperature_c == 71


def _off_grid(ts, interval):
    """How far each time is from start + k * interval, in intervals (0 .. 0.5)."""
    return [abs((t - ts[0]) / interval - round((t - ts[0]) / interval)) for t in ts]


def _median(v):
    return sorted(v)[len(v) // 2]


def _grid_misfit(ts, interval, apart):
    """How far from a whole number of intervals apart (in intervals) the closest pair of times
    at least `apart` samples apart is. A busy machine makes a sample late, never early: two it
    left on time (or made late alike) are whole intervals apart however busy it was, unless
    the sampler drifted between them."""
    return min(_off_grid([a, b], interval)[1] for i, a in enumerate(ts) for b in ts[i + apart:])


def test_sampler_keeps_its_interval_on_the_perf_counter_clock():
    nv = FakeNVML([FakeGpu(), FakeGpu()])
    interval = 0.05
    sampler = GpuSampler([0, 1], interval_s=interval, nvml=nv)
    t0 = time.perf_counter()
    sampler.start()
    time.sleep(1.0)
    stop_at = time.perf_counter()
    samples = sampler.stop()  # that it does not wait for the interval: test_stop_is_quick_with_a_long_interval
    t1 = time.perf_counter()
    assert sampler.status == "ok" and nv.inits == nv.shutdowns == 1
    assert all(t0 <= s.t <= t1 for s in samples)
    ts = sorted({s.t for s in samples})
    assert len(samples) == 2 * len(ts)  # both GPUs read at every tick
    assert len(sampler.read_seconds) == len(ts)
    # No drift: every tick of the grid is either sampled or counted as skipped (a busy
    # machine makes a tick late, never the ones after it), and ticks sit on one grid from the
    # first half to the second (a sampler that slept an interval after each round drifts by its
    # reads and wake-ups every tick: a millisecond or more over the 10 ticks between them).
    ticks = (stop_at - ts[0]) / interval
    assert ticks - 1 <= len(ts) + sampler.skipped_ticks <= ticks + 1.5, (len(ts), sampler.skipped_ticks, ticks)
    misfit = _grid_misfit(ts, interval, len(ts) // 2)
    assert misfit < 0.01, (f"no two samples {len(ts) // 2} or more apart are whole intervals apart (closest: "
                           f"{misfit:.4f} intervals off); each off the first's grid: "
                           f"{[round(x, 3) for x in _off_grid(ts, interval)]}")


def test_a_slow_sample_skips_ticks_instead_of_drifting():
    nv = FakeNVML([FakeGpu()], sample_delay=0.07)  # longer than the interval
    interval = 0.05
    sampler = GpuSampler([0], interval_s=interval, nvml=nv)
    sampler.start()
    time.sleep(0.8)
    samples = sampler.stop()
    ts = [s.t for s in samples]
    assert sampler.skipped_ticks >= 4
    # Samples start two intervals apart, on the grid; a sampler that slept one interval after
    # each sample would start them 1.4 intervals apart and drift off it.
    gaps = [(b - a) / interval for a, b in zip(ts, ts[1:])]
    assert abs(_median(gaps) - 2) < 0.3, gaps
    misfit = _grid_misfit(ts, interval, 1)
    assert misfit < 0.01, (f"no two samples are whole intervals apart (closest: {misfit:.4f} intervals off); "
                           f"each off the first's grid: {[round(x, 3) for x in _off_grid(ts, interval)]}")


def test_stop_is_quick_with_a_long_interval():
    sampler = GpuSampler([0], interval_s=30.0, nvml=FakeNVML([FakeGpu()]))
    sampler.start()
    time.sleep(0.05)
    t = time.perf_counter()
    samples = sampler.stop()
    # Not the 30 s to the next tick: a tenth of it leaves a busy machine (a stop takes
    # milliseconds) a wide margin, and a stop that waited for the tick none.
    took = time.perf_counter() - t
    assert took < 3.0 and len(samples) == 1, f"stop took {took:.2f} s with a 30 s interval; {len(samples)} samples"


def test_ecc_errors_that_rise_during_a_run_are_counted():
    card = FakeGpu()
    nv = FakeNVML([card])
    sampler = GpuSampler([0], interval_s=0.02, nvml=nv)
    sampler.start()
    time.sleep(0.1)
    with nv.lock:
        card.ecc[(0, 0)] += 2  # two corrected (single-bit) errors, volatile
        card.ecc[(0, 1)] += 2
    time.sleep(0.1)
    samples = sampler.stop()
    assert sampler.ecc_before[0]["corrected"] == {"volatile": 0, "aggregate": 3}
    assert sampler.ecc_after[0]["corrected"] == {"volatile": 2, "aggregate": 5}
    s = sampler.summary()
    assert (s.ecc_corrected_delta, s.ecc_uncorrected_delta) == (2, 0)
    assert samples[0].ecc_corrected == 0 and samples[-1].ecc_corrected == 2
    # From the samples alone (no before/after readings) the same rise shows.
    assert summary(samples).gpus[0].ecc_corrected_delta == 2


def test_summary_per_gpu_and_across_gpus():
    def s(t, index, mem, temp, power, util, throttle, ecc=0):
        return gpu.GpuSample(t=t, index=index, memory_used_mib=mem, temperature_c=temp, power_w=power,
                             utilization_gpu=util, utilization_memory=util // 2, sm_clock_mhz=1380 - temp,
                             throttle=throttle, ecc_corrected=ecc, ecc_uncorrected=0,
                             process_memory_mib={4242: mem - 250} if index == 0 else {})
    samples = [s(0.0, 0, 15000, 60, 200.0, 90, ["sw_power_cap"]),
               s(0.0, 1, 500, 40, 50.0, 10, ["idle"]),
               s(0.2, 0, 15200, 70, 250.0, 100, ["sw_power_cap", "sw_thermal"]),
               s(0.4, 0, 15100, 65, 240.0, 80, []),
               s(0.6, 0, 15100, 66, None, 90, ["idle"], ecc=1)]
    out = summary(samples)
    g0, g1 = out.gpus
    assert g0.samples == 4 and g0.peak_memory_used_mib == 15200
    assert g0.peak_process_memory_mib == {"4242": 14950.0}
    assert g0.max_temperature_c == 70 and g0.max_power_w == 250.0
    assert g0.mean_utilization_gpu == 90 and g0.min_sm_clock_mhz == 1310
    assert g0.throttle_reasons == {"idle": 0.25, "sw_power_cap": 0.5, "sw_thermal": 0.25}
    assert g0.throttled_share == 0.5  # idle is not throttling
    assert g0.ecc_corrected_delta == 1
    assert g1.throttled_share == 0 and g1.ecc_corrected_delta is None  # one sample: no delta
    # Across GPUs: the worst GPU, what validity.level_flags reads.
    assert out.max_temperature_c == 70 and out.peak_memory_used_mib == 15200
    assert out.throttle_reasons == {"idle": 1.0, "sw_power_cap": 0.5, "sw_thermal": 0.25}
    assert out.ecc_corrected_delta == 1 and out.mean_utilization_gpu == 50 and out.samples == 5
    json.dumps(out.to_dict())
    assert summary([]).gpus == []


def test_the_summary_feeds_the_validity_flags():
    from benchmarks.engine.validity import level_flags
    samples = [gpu.GpuSample(t=0.1 * k, index=0, temperature_c=80 + k, throttle=["sw_thermal"] if k else [],
                             ecc_corrected=0, ecc_uncorrected=0) for k in range(8)]
    codes = {f.code for f in level_flags({}, gpu=summary(samples))}
    assert codes == {"throttled", "hot"}


def test_series_are_columns_on_the_shared_clock():
    nv = FakeNVML([FakeGpu(), FakeGpu(temperature=50, throttle=0x001)])
    samples = [gpu.read_sample(nv, i, i, t) for t in (1.0, 1.2) for i in (0, 1)]
    out = gpu.series(samples)
    assert out.t == [1.0, 1.2] and set(out.gpus) == {"0", "1"}
    assert out.gpus["1"]["temperature_c"] == [50, 50]
    assert out.gpus["0"]["memory_used_mib"] == [15200.0, 15200.0]
    assert out.gpus["0"]["throttle"] == [["sw_power_cap"], ["sw_power_cap"]]
    assert out.gpus["1"]["throttle"] == [[], []]  # idle is not drawn
    json.dumps(out.to_dict())


def test_a_levels_energy_is_the_counters_difference_and_the_integrated_power_agrees():
    """Two GPUs drawing 243.5 W and 180 W: over the level each counter rose by its power times
    the time between its readings, the power samples integrate to the same over their span, the
    draw before the level is the idle power, and the level's figures are their sums."""
    nv = FakeNVML([FakeGpu(), FakeGpu(power_mw=180000)])
    sampler = GpuSampler([0, 1], interval_s=0.05, nvml=nv)
    sampler.start()
    time.sleep(0.5)
    sampler.stop()
    level = sampler.summary()
    for g, watts in zip(level.gpus, (243.512, 180.0)):
        # 1 %: the counter and the clock are read a moment apart, longer on a busy machine (a CI run:
        # 0.12 %); a wrong unit or span is off by far more.
        assert g.energy_j == pytest.approx(watts * g.energy_s, rel=0.01)
        assert g.energy_integrated_j == pytest.approx(watts * g.sampled_s, rel=1e-9)
        assert g.idle_power_w == watts and g.energy_s >= 0.5
    assert level.energy_j == pytest.approx(sum(g.energy_j for g in level.gpus))
    assert level.idle_power_w == pytest.approx(423.512)
    assert level.joules_per_token(1000) == pytest.approx(level.energy_j / 1000)
    assert level.idle_share == pytest.approx(1.0, rel=0.01)  # a constant draw: all of it was idle draw
    stored = gpu.GpuSummary.from_dict(level.to_dict())
    assert stored.energy_j == level.energy_j and stored.gpus[1].energy_integrated_j == level.gpus[1].energy_integrated_j


def test_without_the_energy_counter_the_integrated_power_stands_in_and_old_rows_read():
    nv = FakeNVML([FakeGpu(unsupported={"energy"})])  # a GPU before Volta has no counter
    sampler = GpuSampler([0], interval_s=0.05, nvml=nv)
    sampler.start()
    time.sleep(0.3)
    sampler.stop()
    level = sampler.summary()
    assert level.energy_j is None and level.idle_share is None
    assert level.joules_per_token(100) == pytest.approx(level.energy_integrated_j / 100)
    old = gpu.GpuSummary.from_dict({"version": 2, "status": "ok", "samples": 3, "gpus": [{"index": 0, "samples": 3}]})
    assert old.energy_j is None and old.joules_per_token(10) is None and old.gpus[0].energy_j is None
