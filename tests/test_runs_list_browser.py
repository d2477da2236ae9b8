"""The runs list in Chromium at 1366 px: filters, a page of runs and the picked runs fit without
overflow; a run ticked on page 1 and one on page 2 become one comparison."""
import pytest
from django.contrib.auth import get_user_model

from benchmarks.models import Comparison, Run
from benchmarks.selectors import RUNS_PER_PAGE
from conftest import log_in, watched
from factories import bulk_runs, endpoint
from test_pages_at_a_glance import OVERFLOW, SCREENS, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_runs_picked_on_two_pages_compare_and_the_list_fits_1366_pixels(browser, live_server):
    page = watched(browser.new_page(viewport=SCREENS["1366"]))
    log_in(page, live_server, path="/")
    alice = get_user_model().objects.get(username="alice")
    endpoints = [endpoint(name=f"h200-vllm-fp8-{i}-with-a-long-endpoint-name", host=f"lab-{i}") for i in range(3)]
    runs = bulk_runs(RUNS_PER_PAGE + 20, endpoints, [alice], status=Run.SUCCEEDED,
                     title="release check of a long run title that wraps onto a second line {i}")
    newest, oldest = runs[-1], runs[0]
    page.goto(live_server.url + "/?backend=vllm")
    assert page.locator("#runs tbody tr").count() == RUNS_PER_PAGE
    assert page.evaluate(OVERFLOW) == []
    screenshot(page, "runs-list-1366")
    page.check(f"#run-{newest.public_id} input[name=runs]")
    page.click("#page-next")
    assert "page=2" in page.url and f"runs={newest.public_id}" in page.url and "backend=vllm" in page.url
    assert page.locator(f"#picked-elsewhere input[value='{newest.public_id}']").is_checked()
    page.check(f"#run-{oldest.public_id} input[name=runs]")
    assert page.evaluate(OVERFLOW) == []
    page.click("#compare-picked")
    page.fill("input[name=title]", "picked on two pages")
    page.click("button:has-text('Compare')")
    page.wait_for_selector("#series")
    comparison = Comparison.objects.get(title="picked on two pages")
    assert set(comparison.runs.values_list("public_id", flat=True)) == {newest.public_id, oldest.public_id}
    assert page.js_errors == []


def test_an_owner_archives_then_deletes_a_run_from_its_page(browser, live_server):
    page = browser.new_page(viewport=SCREENS["1366"])
    log_in(page, live_server, path="/")
    alice = get_user_model().objects.get(username="alice")
    run = bulk_runs(1, [endpoint(name="sim-one")], [alice], status=Run.SUCCEEDED, title="to be deleted")[0]
    page.goto(live_server.url + run.get_absolute_url())
    page.click("#manage button:has-text('Archive')")
    assert "Archived on" in page.locator("#archived-banner").inner_text()
    assert page.evaluate(OVERFLOW) == []
    page.goto(live_server.url + "/")
    assert page.locator(f"#run-{run.public_id}").count() == 0  # hidden from the list
    page.goto(live_server.url + "/?archived=only")
    assert page.locator(f"#run-{run.public_id}").count() == 1
    page.goto(live_server.url + run.get_absolute_url())
    page.click("#delete-link")
    page.click("#confirm-delete")
    assert "was deleted on" in page.locator(".message").first.inner_text()
    response = page.goto(live_server.url + run.get_absolute_url())
    assert response.status == 410 and "Run “to be deleted” was deleted on" in page.locator("#gone").inner_text()
