"""A run page and its permalink open on the answer: per endpoint and load its throughput and
latency (catalogue.HEADLINE) and the throughput chart, on the first screen at 1366×768 and
1920×1080; a run with too little history says so in one line, not a table."""
import pytest

from benchmarks import history
from benchmarks.engine.catalogue import HEADLINE
from conftest import ROOT, watched
from factories import endpoint, measured_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SCREENS = {"1366": {"width": 1366, "height": 768}, "1920": {"width": 1920, "height": 1080}}

BOXES = """() => {
  const box = s => { const e = document.querySelector(s); if (!e) return null;
                     const r = e.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, height: r.height}; };
  const line = parseFloat(getComputedStyle(document.querySelector('#regression-verdict')).lineHeight);
  return {table: box('#headline-table'), chart: box('#chart-throughput .main-svg'),
          plot: box('#chart-throughput .nsewdrag'), verdict: box('#regression-verdict'), line: line,
          results: box('#results'), scrolled: window.scrollY};
}"""


@pytest.mark.parametrize("screen", SCREENS)
def test_the_run_page_opens_on_its_headline_and_throughput_chart(browser, live_server, screen):
    run = measured_run([endpoint(name="llama-q4", backend="llamacpp"), endpoint(name="vllm-fp8", backend="vllm")],
                       levels=(1, 4, 8), requests=12)
    run.regression = history.regression_report(run).to_dict()  # as the run's finish stores it
    run.save(update_fields=["regression"])
    page = watched(browser.new_page(viewport=SCREENS[screen]))
    page.goto(live_server.url + run.get_absolute_url())
    page.wait_for_function("() => document.querySelector('#chart-throughput .chart').dataset.drawn === 'true'",
                           timeout=30000)
    screens = ROOT / "test-results" / "screens"
    screens.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screens / f"run-first-screen-{screen}.png"))
    shown = page.evaluate(BOXES)
    height = SCREENS[screen]["height"]
    rows = page.locator("#headline-table tbody tr")
    assert rows.count() == 2 * 3, "one headline row per endpoint and load"
    heads = page.locator("#headline-table thead th").all_inner_texts()
    assert heads == ["Endpoint", "Load"] + [f.title for f in HEADLINE]
    first = rows.nth(0).locator("td").all_inner_texts()
    assert first[:2] == ["llama-q4", "1 concurrent"] and all(c not in ("", "—") for c in first[2:]), first
    # The whole headline table and the chart's plot area are on the first screen.
    assert shown["scrolled"] == 0 and shown["table"]["bottom"] <= height, shown
    assert shown["plot"] is not None and shown["plot"]["bottom"] <= height, shown
    assert shown["results"]["top"] > shown["table"]["bottom"]  # the full table comes after
    # Too little history: one line with the history link, no table.
    assert page.locator("table#regression").count() == 0
    assert shown["verdict"]["height"] < 2.5 * shown["line"], shown
    assert "not tested" in page.inner_text("#regression-verdict")
    assert page.locator("#regression-verdict a[href^='/history/']").count() == 1
    # The throughput chart is drawn once, in the headline.
    assert page.locator("#chart-throughput").count() == 1
    assert page.js_errors == []
