"""Rate runs with bursty arrivals (their from-schedule columns) and conversation runs (TTFT by turn)
in Chromium at 1366 and 1920 px, measured by the engine on the simulator: nothing overflows; and
the run form shows only the chosen mode's and arrivals' fields."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from benchmarks.engine.arrivals import ArrivalPattern
from benchmarks.engine.client import Load, Timeouts
from benchmarks.engine.conversations import Conversation
from benchmarks.engine.simulator import SimConfig, SimulatorProcess
from benchmarks.models import Run
from benchmarks.services import level_store
from conftest import log_in, watched
from factories import endpoint
from test_arrivals import run_levels
from test_pages_at_a_glance import OVERFLOW, SCREENS, check, pages, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def stored_run(loads, dialect="vllm", names=("vllm-fp8-tp1", "vllm-awq-int4-tp1"), **fields):
    """A finished run whose levels the engine measured on the simulator, stored by the service."""
    workload = dict(prompt_tokens=48, output_tokens=12, warmup_requests=1, seed=3, api=fields.get("api", "completions"))
    with SimulatorProcess(SimConfig(dialect=dialect, decode_ms=2, prefill_ms=5, prefill_ms_per_token=0.2)) as sim:
        with ThreadPoolExecutor(1) as pool:  # the browser's event loop runs in this thread
            outcomes = pool.submit(run_levels, sim.url, loads, dialect, Timeouts(connect=5, first_byte=30, total=60),
                                   **workload).result()
    run = Run.objects.create(prompt_tokens=48, output_tokens=12, temperature=0.7, requests_per_level=loads[0].requests,
                             warmup_requests=1, status=Run.SUCCEEDED, **fields)
    ends = [endpoint(name=n, url=f"http://127.0.0.1:{9 + i}") for i, n in enumerate(names)]
    run.endpoints.set(ends)
    for e in ends:
        for index, outcome in enumerate(outcomes):
            level_store(run=run, endpoint=e, outcome=outcome, level_index=index)
    run.refresh_from_db()
    return run


def test_a_bursty_capped_rate_run_reads_well_at_both_sizes(browser, live_server):
    pattern = ArrivalPattern("gamma", burstiness=0.5)
    loads = [Load(concurrency=2, rate=r, arrivals="gamma", burstiness=0.5, requests=20) for r in (10.0, 40.0)]
    run = stored_run(loads, load_mode="rate", request_rates=[10.0, 40.0], arrivals="gamma", max_concurrency=2,
                     arrival_pattern=pattern.to_dict())
    assert "coordinated_omission" in [f["code"] for f in run.flags]  # 40 req/s through 2 slots of ~30 ms
    for size, page in pages(browser):
        page.goto(live_server.url + run.get_absolute_url())
        check(page, f"run-gamma-{size}")
        heads = page.locator("#results thead").inner_text()
        assert "TTFT from schedule p99 (ms)" in heads and "E2E from schedule p99 (ms)" in heads
        assert "gamma (burstiness 0.5)" in page.locator("p.meta").first.inner_text()


def test_a_conversation_run_shows_ttft_by_turn_at_both_sizes(browser, live_server):
    conversation = Conversation(turns=4, think_s=0.01)
    loads = [Load(concurrency=c, requests=16, conversation=conversation) for c in (1, 4)]
    run = stored_run(loads, load_mode="conversation", api="chat", concurrency_levels=[1, 4],
                     conversation=conversation.to_dict())
    for size, page in pages(browser):
        page.goto(live_server.url + run.get_absolute_url())
        check(page, f"run-conversation-{size}")
        rows = page.locator("#ttft-by-turn tbody tr")
        assert rows.count() == 2 * 2 * 4  # endpoints × levels × turns
        assert "TTFT from schedule" not in page.locator("#results thead").inner_text()  # a closed loop has no schedule
        assert "4-turn conversations" in page.locator("p.meta").first.inner_text()


def test_the_run_form_shows_only_the_chosen_arrivals_fields(browser, live_server):
    endpoint()
    page = watched(browser.new_page(viewport=SCREENS["1366"]))
    log_in(page, live_server)
    visible = lambda name: page.locator(f"#field-{name}").is_visible()  # noqa: E731
    assert visible("concurrency_levels") and not visible("arrivals") and not visible("conversation_turns")
    page.check("input[name=load_mode][value=rate]")
    page.wait_for_selector("#field-request_rates", state="visible", timeout=10000)  # a loaded machine's script
    assert visible("request_rates") and visible("arrivals") and not visible("burstiness") and not visible("trace_file")
    page.select_option("select[name=arrivals]", "gamma")
    assert visible("burstiness") and not visible("ramp_to")
    page.select_option("select[name=arrivals]", "ramp")
    assert visible("burstiness") and visible("ramp_to") and visible("request_rates")
    page.select_option("select[name=arrivals]", "trace")
    assert visible("trace_file") and visible("trace_speedups") and not visible("request_rates")
    assert not visible("burstiness") and visible("max_concurrency")
    assert page.evaluate(OVERFLOW) == []
    screenshot(page, "run-form-trace-1366")
    page.check("input[name=load_mode][value=conversation]")
    assert visible("concurrency_levels") and visible("conversation_turns") and visible("think_time_s")
    assert not visible("arrivals") and not visible("trace_file")
    assert page.evaluate(OVERFLOW) == []
    # A malformed trace comes back as a field error naming its line, the trace fields still shown.
    page.check("input[name=load_mode][value=rate]")
    page.select_option("select[name=arrivals]", "trace")
    page.check("input[name=endpoints]")
    page.set_input_files("input[name=trace_file]", files=[{
        "name": "bad.jsonl", "mimeType": "application/jsonl",
        "buffer": b'{"timestamp": 0, "input_length": 8, "output_length": 2}\n{"timestamp": "soon"}\n'}])
    page.click("button[type=submit]")
    page.wait_for_load_state()
    error = page.locator("#field-trace_file .error").inner_text()
    assert "bad.jsonl: line 2" in error and visible("trace_file") and not visible("request_rates")
    assert page.js_errors == []
