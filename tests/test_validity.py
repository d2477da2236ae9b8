import pytest

from benchmarks.engine.validity import level_flags, merge


def codes(flags):
    return {f.code for f in flags}


def base(**kw):
    s = {"requests": 200, "failed": 0, "completed": 200, "stopped_short": 0, "prompt_drift": 0}
    s.update(kw)
    return s


def test_a_clean_level_has_no_flags():
    assert level_flags(base(), client={"loop_lag_ms_p99": 0.5, "cpu_percent": 30}, gpu={},
                       server_idle_at_start=True) == []


@pytest.mark.parametrize("summary, kwargs, code", [
    (base(failed=20, completed=180), {}, "error_rate"),
    (base(stopped_short=3), {}, "stopped_short"),
    (base(prompt_drift=2), {}, "prompt_drift"),
    (base(requests=10, completed=10), {}, "few_samples"),
    (base(), {"client": {"loop_lag_ms_p99": 12.0}}, "client_saturated"),
    (base(), {"client": {"send_lag_ms_p99": 40.0}}, "client_saturated"),
    (base(), {"client": {"cpu_percent": 97.0}}, "client_saturated"),
    (base(), {"server_idle_at_start": False}, "server_busy"),
    (base(), {"gpu": {"ecc_corrected_delta": 4}}, "ecc"),
    (base(), {"gpu": {"throttle_reasons": {"hw_thermal": 0.3}}}, "throttled"),
    (base(), {"gpu": {"max_temperature_c": 91}}, "hot"),
])
def test_each_check_raises_its_flag_with_a_reason(summary, kwargs, code):
    flags = level_flags(summary, **kwargs)
    assert code in codes(flags)
    assert all(f.reason for f in flags)


def test_idle_and_boost_clocks_are_not_throttling():
    assert level_flags(base(), gpu={"throttle_reasons": {"idle": 1.0, "sync_boost": 0.5}}) == []


def test_send_lag_is_expected_when_a_cap_holds_requests_back():
    assert level_flags(base(), client={"send_lag_ms_p99": 400.0}, capped=True) == []


def test_run_flags_keep_each_code_once():
    a = level_flags(base(stopped_short=1))
    b = level_flags(base(stopped_short=5, prompt_drift=1))
    merged = merge([a, b])
    assert [f["code"] for f in merged] == ["stopped_short", "prompt_drift"]
