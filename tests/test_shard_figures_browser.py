"""The run page with a level measured by four shards on two machines, in Chromium at 1366 px:
each shard's figures listed in the level's row, nothing pushing the page sideways."""
import pytest

from benchmarks import services
from benchmarks.engine.client import LevelOutcome
from benchmarks.engine.client_figures import ClientFigures, ShardFigures
from conftest import watched
from factories import endpoint
from test_fault_tolerance import create_run
from test_shard_figures import request

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_per_shard_figures_fit_a_1366_pixel_screen(browser, live_server):
    e = endpoint("http://127.0.0.1:9", name="sharded-endpoint")
    run = create_run([e], prompt_tokens=16, output_tokens=4, concurrency_levels=[8], requests_per_level=8,
                     warmup_requests=0, load_processes=4, load_workers=0)
    results = [request(i) for i in range(8)]
    shards = [ShardFigures(shard=k, host=f"load-generator-{k // 2}.example.internal", pid=100 + k, requests=2,
                           cpu_percent=40.0 + k, loop_lag_ms_p99=1.0 + k, send_lag_ms_p99=0.5,
                           clock_offset_ms=0.25 * k, clock_rtt_ms=0.4) for k in range(4)]
    figures = ClientFigures.merged(shards, results, {"host_cpus": 16}, processes=4, machines=2, why="4 set for the run")
    services.level_store(run=run, endpoint=e, outcome=LevelOutcome(8, results, 1.7e9, 0.04, client=figures.to_dict()))
    page = watched(browser.new_page(viewport={"width": 1366, "height": 900}))
    page.goto(live_server.url + run.get_absolute_url())
    page.wait_for_selector("#telemetry")
    assert page.locator("#telemetry ul.shards li").count() == 4
    assert "shard 4 (load-generator-1.example.internal)" in page.locator("#telemetry").inner_text()
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth})""")
    assert widths["page"] <= widths["screen"], widths
    assert page.js_errors == []
