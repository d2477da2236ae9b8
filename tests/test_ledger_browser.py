"""/accuracy/ in Chromium at 1366 and 1920 px: the table and the scatter of predicted against
measured from runs on two hosts of a known bias, nothing wider than the screen, no chart label
over another, and a click on a point opens the run that measured it."""
import random

import pytest

from conftest import log_in
from factories import endpoint
from test_ledger import biased_runs, h200
from test_pages_at_a_glance import check, pages

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_accuracy_page_draws_each_pair_and_a_point_opens_its_run(browser, live_server):
    rng = random.Random(3)
    fast, slow = h200("h200-fast"), h200("h200-slow")
    biased_runs(fast, endpoint(name="fast-fp8", host=fast.name, quantization="fp8_e4m3"), 1.5, 2, rng)
    biased_runs(slow, endpoint(name="slow-fp8", host=slow.name, quantization="fp8_e4m3"), 0.7, 2, rng)
    for size, page in pages(browser):
        log_in(page, live_server, "/accuracy/?engine=vllm")
        page.wait_for_selector("#accuracy-table")
        check(page, f"accuracy-{size}")
        assert page.locator("#accuracy-table tbody tr").count() == 5  # one GPU, one engine, five figures
    page.goto(live_server.url + "/accuracy/?metric=aggregate_tok_s")
    page.wait_for_function("() => document.querySelector('.chart').dataset.drawn === 'true'")
    with page.expect_navigation():
        page.locator(".scatterlayer .trace:first-child .points path").first.click(force=True)
    assert "/r/" in page.url and "#level-" in page.url
