"""The server's own view: /metrics pages of vLLM (old and new names) and llama.cpp become one
set of figures; the sampler scrapes the simulator on the client's clock and says plainly when a
server has no /metrics; server_identity never raises."""
import asyncio
import time

import httpx
import pytest

from benchmarks.engine.server_metrics import (
    MetricsSampler, parse_samples, scrape, server_identity, server_was_idle, trim)

# vLLM V1 (0.10.x) as prometheus_client writes it: labels model_name + engine, counters with
# _total and _created, both KV-cache names and both per-token latency names (the old ones
# were kept, deprecated), plus lines we do not chart (process metrics, info gauges).
VLLM_V1 = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 12891.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0421875
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0421875
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 51200.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 1.7600277131e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25600.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="DeepSeek-R1-Distill-Qwen-7B"} 100.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.005",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="DeepSeek-R1-Distill-Qwen-7B"} 12.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.06",model_name="DeepSeek-R1-Distill-Qwen-7B"} 71.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.08",model_name="DeepSeek-R1-Distill-Qwen-7B"} 96.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="DeepSeek-R1-Distill-Qwen-7B"} 100.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="DeepSeek-R1-Distill-Qwen-7B"} 100.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 100.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 5.312
# HELP vllm:time_to_first_token_seconds_created Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds_created gauge
vllm:time_to_first_token_seconds_created{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 1.7600277131e+09
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.025",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 357.0
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="DeepSeek-R1-Distill-Qwen-7B"} 0.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 25500.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 357.0
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.92",num_gpu_blocks="27648",prefix_caching_hash_algo="builtin"} 1.0
"""

# Pre-V1 vLLM (0.6.x): no engine label, only the old names.
VLLM_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="/models/qwen-7b"} 0.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="/models/qwen-7b"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="/models/qwen-7b"} 0.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="/models/qwen-7b"} 0.25
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="/models/qwen-7b"} 1.2288e+04
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="/models/qwen-7b"} 4096.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_sum{model_name="/models/qwen-7b"} 40.96
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="/models/qwen-7b"} 0.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="/models/qwen-7b"} 4064.0
vllm:time_per_output_token_seconds_count{model_name="/models/qwen-7b"} 4064.0
"""

# Newer vLLM: the deprecated names are gone, per-request TPOT is added; two data-parallel
# engines, so every figure is summed over engine="0" and engine="1".
VLLM_DP2 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2.0
vllm:num_requests_running{engine="1",model_name="m"} 5.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 0.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.1
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.3
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="m"} 100.0
vllm:generation_tokens_total{engine="1",model_name="m"} 50.0
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 4.0
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="m"} 4.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="m"} 0.08
vllm:request_time_per_output_token_seconds_bucket{engine="1",le="+Inf",model_name="m"} 1.0
vllm:request_time_per_output_token_seconds_count{engine="1",model_name="m"} 1.0
vllm:request_time_per_output_token_seconds_sum{engine="1",model_name="m"} 0.02
"""

# llama-server --metrics, as its to_metrics() writes it (C++ stream formatting, no labels).
# Older builds also export kv_cache_usage_ratio / kv_cache_tokens.
LLAMACPP_OLD = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 2.90363
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 35.4427
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 3470
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode counter
llamacpp:n_busy_slots_per_decode 1
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 2371.51
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 97.8763
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.0563965
# HELP llamacpp:kv_cache_tokens KV-cache tokens.
# TYPE llamacpp:kv_cache_tokens gauge
llamacpp:kv_cache_tokens 462
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 0
"""

# A current build: no KV gauges, a counter without _total (n_tokens_max), large values in
# C++'s default float format.
LLAMACPP_NEW = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1.23457e+06
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens reused from the cache
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 0
# HELP llamacpp:prompt_seconds_total Total time spent processing prompts
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 812.5
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 409600
# HELP llamacpp:tokens_predicted_seconds_total Total time spent generating tokens
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 4096
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max 2304
# HELP llamacpp:requests_processing Number of requests processing
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 8
# HELP llamacpp:requests_deferred Number of requests deferred
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 4
"""


# ------------------------------------------------------------------------------ scrape()
def test_vllm_v1_page_with_both_kv_names_and_histograms():
    m = scrape(VLLM_V1)
    assert m["dialect"] == "vllm"
    assert m["running"] == 3 and m["waiting"] == 1
    assert m["kv_cache_usage"] == pytest.approx(0.0421875)  # not the sum of both names
    assert m["prompt_tokens_total"] == 51200 and m["generation_tokens_total"] == 25600
    assert m["ttft_seconds_sum"] == pytest.approx(5.312) and m["ttft_seconds_count"] == 100
    assert m["itl_seconds_sum"] == pytest.approx(357.0) and m["itl_seconds_count"] == 25500
    assert "request_tpot_seconds_count" not in m and "prompt_seconds_total" not in m


def test_vllm_v0_page_uses_the_old_names():
    m = scrape(VLLM_V0)
    assert m["kv_cache_usage"] == 0.25
    assert m["prompt_tokens_total"] == 12288
    assert m["itl_seconds_count"] == 4064 and m["itl_seconds_sum"] == pytest.approx(40.96)
    assert server_was_idle(m) is True


def test_label_sets_are_summed():
    m = scrape(VLLM_DP2)
    assert m["running"] == 7 and m["generation_tokens_total"] == 150
    assert m["request_tpot_seconds_count"] == 5 and m["request_tpot_seconds_sum"] == pytest.approx(0.1)
    assert m["kv_cache_usage"] == pytest.approx(0.4)


def test_llamacpp_pages_old_and_new():
    old = scrape(LLAMACPP_OLD)
    assert old["dialect"] == "llamacpp"
    assert old["running"] == 1 and old["waiting"] == 0
    assert old["kv_cache_usage"] == pytest.approx(0.0563965)
    assert old["prompt_tokens_total"] == 6886 and old["generation_tokens_total"] == 3469
    assert old["prompt_seconds_total"] == pytest.approx(2.90363)
    assert old["generation_seconds_total"] == pytest.approx(35.4427)
    new = scrape(LLAMACPP_NEW)
    assert "kv_cache_usage" not in new
    assert new["prompt_tokens_total"] == 1234570 and new["generation_tokens_total"] == 409600
    assert server_was_idle(new) is False


def test_only_charted_lines_are_parsed_and_they_match_a_full_parse():
    from prometheus_client.parser import text_string_to_metric_families
    full = {s.name: s.value for f in text_string_to_metric_families(VLLM_V1) for s in f.samples}
    ours = parse_samples(VLLM_V1)
    assert "vllm:cache_config_info" not in ours and "python_gc_objects_collected_total" not in ours
    assert ours and all(full[name] == value for name, value in ours.items())


def test_scraping_a_large_page_stays_cheap():
    # A realistic full vLLM page is ~600 lines; scraping runs on the event loop that times
    # requests, so it must cost far less than parsing everything.
    from prometheus_client.parser import text_string_to_metric_families
    filler = "".join(
        f'vllm:h{i}_seconds_bucket{{engine="0",le="{0.001 * 2 ** k}",model_name="m"}} {k}.0\n'
        for i in range(16) for k in range(30))
    page = VLLM_V1 + filler

    def cost(fn):
        t = time.perf_counter()
        for _ in range(5):
            fn(page)
        return (time.perf_counter() - t) / 5
    full = cost(lambda p: list(text_string_to_metric_families(p)))
    ours = cost(scrape)
    assert ours < full / 3, (ours, full)


def test_summary_of_a_span_uses_counter_and_histogram_deltas():
    from benchmarks.engine.server_metrics import MetricsSample, summary
    first = MetricsSample(10.0, 0.001, scrape(VLLM_V1.replace("} 3.0", "} 0.0").replace("} 1.0\n", "} 0.0\n", 1)))
    later = scrape(VLLM_V1.replace("} 5.312", "} 7.312").replace(
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 100.0',
        'vllm:time_to_first_token_seconds_count{engine="0",model_name="DeepSeek-R1-Distill-Qwen-7B"} 120.0'
    ).replace("} 25600.0", "} 27600.0"))
    out = summary([first, MetricsSample(10.5, 0.001, error="ReadTimeout: "),
                   MetricsSample(11.0, 0.001, later)], "ok")
    assert out.idle_at_start is True and out.samples == 2 and out.errors == 1
    assert out.span_s == 1.0 and out.deltas["generation_tokens"] == 2000
    assert out.means["ttft"] == pytest.approx(0.1)  # (7.312 - 5.312) / 20 requests
    assert "itl" not in out.means  # no new observations in the span
    assert out.max_running == 3 and out.dialect == "vllm"
    assert out.to_dict()["ttft_mean_s"] == out.means["ttft"]  # stored flat, as it always was


def test_nan_values_are_left_out():
    assert "kv_cache_usage" not in scrape('vllm:kv_cache_usage_perc{engine="0",model_name="m"} NaN\n')


def test_server_was_idle_unknown_without_the_figures():
    assert server_was_idle(None) is None
    assert server_was_idle({"kv_cache_usage": 0.0}) is None
    assert server_was_idle({"running": 0.0, "waiting": 0.0}) is True


# ------------------------------------------------------------------------------ sampler
async def _load(client: httpx.AsyncClient, url: str, n: int, max_tokens: int) -> None:
    async def one():
        async with client.stream("POST", url + "/v1/completions", json={
                "model": "sim-model", "prompt": "one two three four", "max_tokens": max_tokens,
                "stream": True}) as r:
            async for _ in r.aiter_raw():
                pass
    await asyncio.gather(*(one() for _ in range(n)))


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_sampler_follows_the_simulator_on_the_perf_counter_clock(simulator, dialect):
    sim = simulator(dialect=dialect, decode_ms=5, slots=4)
    interval = 0.05

    async def go():
        async with httpx.AsyncClient(timeout=10) as client:
            sampler = MetricsSampler(sim.url, interval_s=interval, client=client)
            t0 = time.perf_counter()
            sampler.start()
            await asyncio.sleep(interval / 2)  # the first scrape sees the idle server
            await _load(client, sim.url, n=8, max_tokens=40)  # 2 waves of 4 slots x 200 ms
            await asyncio.sleep(interval * 2)
            samples = await sampler.stop()
            return sampler, samples, t0, time.perf_counter()
    sampler, samples, t0, t1 = asyncio.run(go())
    assert sampler.status == "ok"
    assert all(s.error is None for s in samples)
    assert all(t0 <= s.t <= s.t + s.rtt_s <= t1 for s in samples)
    ts = [s.t for s in samples]
    assert ts == sorted(ts) and len(samples) >= 4
    # Ticks sit on an absolute grid: a scrape the busy loop started late does not shift the
    # later ones (the final scrape at stop() is off-grid).
    off = sorted(abs((t - ts[0]) / interval - round((t - ts[0]) / interval)) for t in ts[:-1])
    assert off[len(off) // 2] < 0.25, off
    assert server_was_idle(samples[0]) is True
    assert max(s.values["running"] for s in samples) == 4  # the slot limit
    assert max(s.values["waiting"] for s in samples) >= 1
    last = samples[-1].values  # the final scrape covers everything that was measured
    assert last["generation_tokens_total"] == 8 * 40
    assert last["prompt_tokens_total"] == 8 * (4 + (1 if dialect == "llamacpp" else 0))
    assert last["dialect"] == dialect
    assert ("kv_cache_usage" in last) == (dialect == "vllm")
    summ, cols = sampler.summary(), sampler.series()
    assert summ.idle_at_start is True and summ.max_running == 4 and summ.status == "ok"
    assert summ.deltas["generation_tokens"] == 320 and summ.samples == len(samples)
    assert cols.t == ts and max(cols.column("running")) == 4 and len(cols.column("waiting")) == len(ts)


class _Server:
    """A local HTTP server answering every request with one fixed response."""

    def __init__(self, status: int, body: bytes):
        self.status, self.body, self.hits = status, body, 0

    async def __aenter__(self):
        async def handle(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            self.hits += 1
            writer.write(f"HTTP/1.1 {self.status} X\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(self.body)}\r\n\r\n".encode() + self.body)
            await writer.drain()
            writer.close()
        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        self.url = "http://127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()


def test_a_port_without_metrics_is_reported_not_raised():
    async def go():
        async with _Server(404, b'{"detail":"Not Found"}') as srv:
            sampler = MetricsSampler(srv.url, interval_s=0.02)
            sampler.start()
            await asyncio.sleep(0.2)
            return sampler, await sampler.stop(), srv.hits
    sampler, samples, hits = asyncio.run(go())
    assert sampler.status.startswith("not available: HTTP 404")
    assert samples == [] and hits == 1  # it stopped asking after the first answer


def test_llama_server_without_the_metrics_flag():
    # What llama-server answers on /metrics when started without --metrics.
    body = (b'{"error":{"code":501,"message":"This server does not support metrics endpoint. '
            b'Start it with `--metrics`","type":"not_supported_error"}}')

    async def go():
        async with _Server(501, body) as srv:
            sampler = MetricsSampler(srv.url, interval_s=0.02)
            sampler.start()
            await asyncio.sleep(0.1)
            return sampler, await sampler.stop()
    sampler, samples = asyncio.run(go())
    assert sampler.status.startswith("not available: HTTP 501")
    assert "--metrics" in sampler.status and samples == []


def test_a_server_that_is_down_gives_error_samples_and_a_failed_status():
    from conftest import free_port
    url = f"http://127.0.0.1:{free_port()}"

    async def go():
        sampler = MetricsSampler(url, interval_s=0.02)
        sampler.start()
        await asyncio.sleep(0.1)
        return sampler, await sampler.stop()
    sampler, samples = asyncio.run(go())
    assert samples and all(s.error and "ConnectError" in s.error for s in samples)
    assert sampler.status.startswith("failed: ConnectError")


def test_a_server_error_is_a_sample_and_sampling_goes_on():
    calls = []

    def handler(request):
        calls.append(request.url.path)
        return httpx.Response(500 if len(calls) == 2 else 200, text=LLAMACPP_OLD)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            sampler = MetricsSampler("http://gpu1:8001/", interval_s=0.03, client=client)
            sampler.start()
            await asyncio.sleep(0.15)
            return sampler, await sampler.stop()
    sampler, samples = asyncio.run(go())
    assert sampler.status == "ok" and samples[1].error.startswith("HTTP 500 (# HELP llamacpp:")
    assert samples[0].values["running"] == 1 and samples[2].values["kv_cache_usage"] > 0
    assert set(calls) == {"/metrics"}


def test_stop_cancels_a_scrape_in_flight():
    async def handler(request):
        await asyncio.sleep(30)  # a server that hangs
        return httpx.Response(200, text="")

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            sampler = MetricsSampler("http://gpu1:8001", interval_s=10, client=client, timeout_s=60)
            sampler.start()
            await asyncio.sleep(0.05)
            t = time.perf_counter()
            samples = await sampler.stop(final_scrape=False)
            return sampler, samples, time.perf_counter() - t
    sampler, samples, stopped_in = asyncio.run(go())
    assert stopped_in < 0.2 and samples == []
    assert sampler.status == "failed: no samples"


# ------------------------------------------------------------------------------ identity
@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_identity_from_the_simulator(simulator, dialect):
    sim = simulator(dialect=dialect, slots=3)

    async def go():
        async with httpx.AsyncClient(timeout=10) as client:
            return await server_identity(client, sim.url, dialect)
    ident = asyncio.run(go())
    assert ident["notes"] == []
    if dialect == "vllm":
        assert ident["version"] == "0.0.0-simulator"
    else:
        assert ident["n_ctx"] == 4096 and ident["total_slots"] == 3
        assert ident["build_info"] == "simulator" and ident["model_path"] == "/models/sim-model.gguf"
        assert ident["slots"] == {"count": 3, "n_ctx": 4096}


def test_identity_never_raises_and_notes_what_is_missing():
    async def go():
        async with _Server(404, b"{}") as srv, httpx.AsyncClient() as client:
            llama = await server_identity(client, srv.url, "llamacpp")
            vllm = await server_identity(client, srv.url, "vllm")
            sglang = await server_identity(client, srv.url, "sglang")
            other = await server_identity(client, srv.url, "tgi")
        from conftest import free_port
        async with httpx.AsyncClient() as client:
            down = await server_identity(client, f"http://127.0.0.1:{free_port()}", "vllm")
        return llama, vllm, sglang, other, down
    llama, vllm, sglang, other, down = asyncio.run(go())
    assert [n.split(": ", 1)[1] for n in llama["notes"]] == ["HTTP 404 ({})", "HTTP 404 ({})"]
    # /version and /v1/models (its max_model_len), each noted
    assert "version" not in vllm and [n.split(": ", 1)[0].rsplit("/", 1)[1] for n in vllm["notes"]] == [
        "version", "models"]
    # Each identity answer is tried under its older and newer name; the last failure is noted.
    assert [n.split(": ", 1)[0].rsplit("/", 1)[1] for n in sglang["notes"]] == ["model_info", "server_info"]
    assert "version" not in sglang and all("HTTP 404" in n for n in sglang["notes"])
    assert other["notes"] == ["unknown backend 'tgi' (known: llamacpp, openai, sglang, vllm)"]
    assert "ConnectError" in down["notes"][0]


def test_large_props_are_trimmed():
    template = "{%- for message in messages %}" * 2000  # a real chat template is several KB
    props = {"default_generation_settings": {"n_ctx": 8192, "params": {"samplers": ["top_k"] * 100}},
             "total_slots": 8, "model_path": "/m/DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf",
             "chat_template": template, "build_info": "b6139-6c7e9a54"}
    slots = [{"id": i, "n_ctx": 1024, "is_processing": False, "prompt": "x" * 5000} for i in range(8)]

    def handler(request):
        return httpx.Response(200, json=props if request.url.path == "/props" else slots)

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await server_identity(client, "http://gpu1:8001/", "llamacpp")
    ident = asyncio.run(go())
    assert ident["n_ctx"] == 8192 and ident["total_slots"] == 8 and ident["build_info"] == "b6139-6c7e9a54"
    assert ident["slots"] == {"count": 8, "n_ctx": 1024}  # per slot: n_ctx / parallel
    assert len(ident["props"]["chat_template"]) < 400
    assert len(ident["props"]["default_generation_settings"]["params"]["samplers"]) == 33
    import json
    assert len(json.dumps(ident)) < 2000


def test_trim_keeps_small_things_as_they_are():
    small = {"a": [1, 2, {"b": "c"}], "d": None}
    assert trim(small) == small
