"""Results in a real browser: charts draw without JavaScript errors, CSV downloads, permalinks
open logged out, an imported vLLM JSON shows up in a comparison."""
import os
from pathlib import Path

import pytest

from benchmarks.models import ImportedReport
from benchmarks.services import comparison_create, published_reports_load
from factories import endpoint, gpu_samples, measured_run, quality_run
from conftest import log_in, watched

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
DATA = Path(__file__).parent / "data" / "imports"
GPU = gpu_samples(peak_mib=6000.0)


def test_a_logged_out_colleague_opens_a_run_and_every_chart_draws(page, live_server):
    run = measured_run([endpoint(name="llama", backend="llamacpp"), endpoint(name="vllm", backend="vllm")],
                       levels=(1, 8), requests=30, gpu=GPU, server=True)
    page.goto(live_server.url + run.get_absolute_url())
    assert "Log in" in page.locator("header").inner_text()  # not logged in
    charts = page.locator(".chart")
    assert charts.count() == 8  # throughput, energy (the GPU's power was sampled), TTFT, TPOT, end-to-end, timeline, GPU, server
    page.wait_for_function("() => [...document.querySelectorAll('.chart')].every(c => c.dataset.drawn === 'true')",
                           timeout=30000)
    assert page.locator("#chart-throughput .main-svg").count() >= 1
    assert page.locator("#chart-timeline .table-holder tr").count() > 1
    # Another level in the timeline redraws it.
    page.select_option("#chart-timeline select", index=1)
    page.wait_for_function("() => document.querySelector('#chart-timeline .gtitle').textContent.includes('8 concurrent')")
    with page.expect_download() as download:
        page.click("#chart-throughput a.csv")
    text = Path(download.value.path()).read_text()
    assert text.startswith("series,kind,concurrent requests") and "llama" in text
    assert page.js_errors == []


def test_an_imported_vllm_result_shows_up_in_a_comparison(page, live_server):
    published_reports_load()
    run = measured_run([endpoint(name="v100-llama", backend="llamacpp", quantization="gguf_q4_k_m")],
                       levels=(1, 8), requests=10, tokens=100)
    log_in(page, live_server)
    page.goto(live_server.url + "/imports/")
    page.set_input_files("input[name=file]", str(DATA / "vllm_bench_serve_c8_detailed.json"))
    page.select_option("select[name=backend]", "vllm")
    page.fill("input[name=title]", "vLLM FP8 from bench serve")
    page.click("button:has-text('Import')")
    assert "not measured here" in page.locator("#provenance").inner_text()
    page.goto(live_server.url + f"/compare/?runs={run.public_id}")  # as the runs list's Compare selected sends it
    page.check(f"input[name=runs][value='{run.public_id}']")
    page.check("text=vLLM FP8 from bench serve")
    page.click("button:has-text('Compare')")
    page.wait_for_selector("#series")
    assert "vLLM FP8 from bench serve" in page.locator("#series").inner_text()
    page.wait_for_function("() => document.querySelector('.chart').dataset.drawn === 'true'")
    permalink = page.url
    assert page.js_errors == []
    # The comparison's permalink opens for a logged-out colleague.
    other = page.context.browser.new_context().new_page()
    other.goto(permalink)
    assert "vLLM FP8 from bench serve" in other.locator("#series").inner_text()


def test_a_comparison_with_its_quality_table_fits_a_1366_pixel_screen(browser, live_server):
    published_reports_load()
    run, _ = quality_run((("fp16", 0.05), ("fp8", 0.055), ("q4", 0.1), ("awq", 0.07)))
    reports = ImportedReport.objects.filter(kind="published")
    comparison = comparison_create(owner=None, runs=[run], reports=list(reports), title="Quality at 1366 px")
    page = watched(browser.new_page(viewport={"width": 1366, "height": 900}))
    page.goto(live_server.url + comparison.get_absolute_url())
    page.wait_for_selector("#quality")
    assert page.locator("#quality tbody tr").count() == 4 + 2  # four endpoints, two published perplexities
    assert page.locator("#quality-ratios li.not-compared").count() >= 1
    page.wait_for_function("() => document.querySelector('.chart').dataset.drawn === 'true'")
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth,
        table: document.querySelector('#quality').getBoundingClientRect().right,
        box: document.querySelector('#quality').parentElement.getBoundingClientRect().right,
        scrolls: document.querySelector('#quality').parentElement.scrollWidth >
                 document.querySelector('#quality').parentElement.clientWidth})""")
    assert widths["page"] <= widths["screen"], widths  # no sideways scrolling of the page
    assert widths["table"] <= widths["box"] and not widths["scrolls"], widths  # the whole table in view
    if os.environ.get("COMPARISON_SCREENSHOT"):  # e.g. /tmp/comparison.png; the quality table beside it
        page.screenshot(path=os.environ["COMPARISON_SCREENSHOT"], full_page=True)
        page.locator("#quality").screenshot(path=os.environ["COMPARISON_SCREENSHOT"].replace(".png", "-quality.png"))
    assert page.js_errors == []
