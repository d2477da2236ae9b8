import pytest

from benchmarks.engine import gpu as gpu_telemetry
from benchmarks.engine.gpu import GpuSample
from benchmarks.engine.metrics import RequestResult, level_wall_time, summarize_level
from benchmarks.engine.validity import FLAG_NAMES, level_flags, merge


def codes(flags):
    return {f.code for f in flags}


def base(requests=200, failed=0, stopped_short=0, prompt_drift=0):
    """The engine's summary of a level of `requests` requests, of which `failed` failed,
    `stopped_short` stopped before the 10 tokens asked and `prompt_drift` had 511 prompt tokens
    for the 512 asked."""
    results = []
    for i in range(requests):
        tokens = 7 if i < stopped_short else 10
        chunks = [0.1 + 0.01 * k for k in range(tokens)]
        results.append(RequestResult(
            index=i, sent=0.0, prompt_tokens_asked=512, output_tokens_asked=10, first_content=0.1,
            chunk_times=chunks, chunk_tokens=[1] * tokens, prompt_tokens=511 if i < prompt_drift else 512,
            output_tokens=tokens, client_output_tokens=tokens) if i < requests - failed else RequestResult(
            index=i, sent=0.0, prompt_tokens_asked=512, output_tokens_asked=10, error="HTTP 500"))
    return summarize_level(results, level_wall_time(results))


def gpu(temperatures=(60,), throttle=(), ecc=(0,)):
    """The engine's GPU summary of samples with these temperatures, throttle reasons (one list a
    sample) and volatile corrected ECC counts."""
    n = max(len(temperatures), len(throttle), len(ecc))
    samples = [GpuSample(t=0.2 * k, index=0, temperature_c=temperatures[min(k, len(temperatures) - 1)],
                         throttle=list(throttle[k]) if k < len(throttle) else [],
                         ecc_corrected=ecc[min(k, len(ecc) - 1)], ecc_uncorrected=0) for k in range(n)]
    return gpu_telemetry.summary(samples)


def test_a_clean_level_has_no_flags():
    assert level_flags(base(), client={"loop_lag_ms_p99": 0.5, "cpu_percent": 30}, gpu=gpu(),
                       server_idle_at_start=True) == []


@pytest.mark.parametrize("summary, kwargs, code", [
    (base(failed=20), {}, "error_rate"),
    (base(stopped_short=3), {}, "stopped_short"),
    (base(prompt_drift=2), {}, "prompt_drift"),
    (base(requests=10), {}, "few_samples"),
    (base(), {"client": {"loop_lag_ms_p99": 12.0}}, "client_saturated"),
    (base(), {"client": {"send_lag_ms_p99": 40.0}}, "client_saturated"),
    (base(), {"client": {"cpu_percent": 97.0}}, "client_saturated"),
    (base(), {"server_idle_at_start": False}, "server_busy"),
    (base(), {"gpu": gpu(ecc=(0, 4))}, "ecc"),
    (base(), {"gpu": gpu(throttle=([], ["hw_thermal"], []))}, "throttled"),
    (base(), {"gpu": gpu(temperatures=(70, 91))}, "hot"),
])
def test_each_check_raises_its_flag_with_a_reason(summary, kwargs, code):
    flags = level_flags(summary, **kwargs)
    assert code in codes(flags)
    assert all(f.reason for f in flags)
    assert codes(flags) <= set(FLAG_NAMES)  # the runs list can filter by every code raised


def test_idle_and_boost_clocks_are_not_throttling():
    assert level_flags(base(), gpu=gpu(throttle=(["idle"], ["idle", "sync_boost"]))) == []


def test_send_lag_is_expected_when_a_cap_holds_requests_back():
    assert level_flags(base(), client={"send_lag_ms_p99": 400.0}, capped=True) == []


def test_run_flags_keep_each_code_once():
    a = level_flags(base(stopped_short=1))
    b = level_flags(base(stopped_short=5, prompt_drift=1))
    merged = merge([a, b])
    assert [f["code"] for f in merged] == ["stopped_short", "prompt_drift"]


def test_stored_summaries_are_read_through_their_readers():
    """What a LevelResult stored (any version) gives the same flags as the engine's own output."""
    summary, hot = base(stopped_short=2), gpu(temperatures=(70, 91))
    stored_v1 = {k: v for k, v in summary.to_dict().items() if k != "version"}
    assert codes(level_flags(stored_v1, gpu=hot.to_dict())) == codes(level_flags(summary, gpu=hot)) == {
        "stopped_short", "hot"}


def test_host_contention_is_flagged_beside_a_client_that_kept_time():
    # The client's own loop kept time; the host was saturated by other work.
    client = {"loop_lag_ms_p99": 0.4, "cpu_percent": 12, "host_cpus": 2, "host_load_1m": 6.1,
              "host_cpu_busy_percent": 99.0, "host_cpu_steal_percent": 7.0}
    flags = level_flags(base(), client=client)
    assert codes(flags) == {"host_busy"}
    (reason,) = [f.reason for f in flags]
    assert "load average 6.1 on 2 CPUs" in reason and "its CPUs 99 % busy" in reason
    assert "7 % CPU steal" in reason and "the client itself used 12 % of one CPU" in reason
    quiet = dict(client, host_load_1m=0.3, host_cpu_busy_percent=20.0, host_cpu_steal_percent=0.0)
    assert level_flags(base(), client=quiet) == []


def test_host_load_reads_busy_and_steal_shares_from_cpu_counters():
    from benchmarks.engine.client import host_load

    # user nice system idle iowait irq softirq steal guest guest_nice, before and after
    before = [100, 0, 50, 800, 50, 0, 0, 0, 0, 0]
    after = [400, 0, 150, 900, 50, 0, 0, 100, 0, 0]  # +300 user +100 system +100 idle +100 steal
    load = host_load(before, after)
    assert load["host_cpu_busy_percent"] == pytest.approx(500 / 600 * 100)
    assert load["host_cpu_steal_percent"] == pytest.approx(100 / 600 * 100)
    assert load["host_cpus"] >= 1 and load["host_load_1m"] >= 0


def test_the_client_monitor_reports_the_hosts_load_of_a_level():
    import asyncio

    from benchmarks.engine.client import ClientMonitor

    async def level():
        monitor = ClientMonitor()
        monitor.start()
        end = asyncio.get_running_loop().time() + 0.3
        while asyncio.get_running_loop().time() < end:
            sum(range(20000))  # the client busy: the host's CPUs are not idle
            await asyncio.sleep(0)
        return monitor.stop()

    client = asyncio.run(level())
    assert 0 < client["host_cpu_busy_percent"] <= 100 and client["host_cpu_steal_percent"] >= 0
    assert client["host_load_1m"] is not None and client["host_cpus"] >= 1
