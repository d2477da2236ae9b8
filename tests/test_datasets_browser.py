"""The requests section and the run page's length histograms in a real browser at 1366 px:
nothing wider than the screen, the histograms side by side and readable."""
import pytest

from factories import endpoint, measured_run
from conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WIDER_THAN_SCREEN = """() => [...document.querySelectorAll('main *')].filter(
    e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1
         && !e.closest('.scroll')).map(e => e.tagName + '#' + e.id + '.' + e.className)"""


def test_the_requests_fieldset_and_the_length_histograms_fit_1366_px(page, live_server):
    endpoint(name="vllm-a")
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, live_server)
    assert page.locator("#requests summary").inner_text().startswith("Requests")
    page.click("#requests summary")  # folded until opened (or filled in by a preset)
    assert page.locator("#field-dataset_file input[type=file]").count() == 1
    assert page.evaluate(WIDER_THAN_SCREEN) == []
    run = measured_run([endpoint(name="llama", backend="llamacpp"), endpoint(name="vllm", backend="vllm")],
                       levels=(1, 2), requests=6)
    page.goto(live_server.url + run.get_absolute_url())
    pairs = page.locator(".histogram-pair")
    assert pairs.count() == 2
    # Every measured request is counted once in each endpoint's prompt histogram.
    for i in range(2):
        counts = pairs.nth(i).locator("table[data-kind=prompt] td.count").all_inner_texts()
        assert sum(int(c) for c in counts) == 12
    assert page.evaluate(WIDER_THAN_SCREEN) == []
    assert page.js_errors == []
