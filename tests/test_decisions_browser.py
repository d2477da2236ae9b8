"""The decision page in a real browser: Playwright driving Debian's chromium."""
import os

import pytest

from benchmarks.models import Decision
from conftest import log_in, watched

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_states_a_workload_and_shares_the_recommendation(browser, live_server):
    page = watched(browser.new_page())
    log_in(page, live_server, "/decide/")
    page.wait_for_selector("#decision-form")

    page.fill("input[name=gpu_name]", "Tesla V100-PCIE-16GB")
    page.fill("input[name=compute_capability]", "7.0")
    page.fill("input[name=vram_gib]", "16")
    page.fill("input[name=users]", "4")
    page.fill("input[name=prompt_tokens]", "512")
    page.fill("input[name=output_tokens]", "100")
    page.fill("input[name=context_tokens]", "8192")
    page.check("input[name=priority][value=throughput]")
    page.click("text=Recommend")

    page.wait_for_selector("#recommendation")
    assert page.locator("#recommendation").inner_text() == "Run llama.cpp Q4_K_M"
    assert page.locator("#rank-vllm-fp8 .eligibility").inner_text().startswith("refused")
    assert page.locator("#confidence").inner_text() == "confidence: low"
    assert page.locator("#copy-link").is_visible()
    page.click("#copy-link")
    page.wait_for_function("() => document.getElementById('copy-status').textContent !== ''")
    permalink = page.input_value("#permalink")
    assert permalink == live_server.url + Decision.objects.get().get_absolute_url()
    if os.environ.get("DECISION_SCREENSHOTS"):
        page.screenshot(path=os.environ["DECISION_SCREENSHOTS"], full_page=True)
    assert page.js_errors == []

    # Shared: a colleague who is not logged in opens the link.
    other = browser.new_context()
    colleague = watched(other.new_page())
    colleague.goto(permalink)
    assert colleague.locator("#recommendation").inner_text() == "Run llama.cpp Q4_K_M"
    assert colleague.locator("input[name=password]").count() == 0
    assert colleague.js_errors == []
    other.close()


def test_bad_values_come_back_as_field_messages(browser, live_server):
    page = watched(browser.new_page())
    log_in(page, live_server, "/decide/")
    page.wait_for_selector("#decision-form")
    page.fill("input[name=gpu_name]", "Tesla V100-PCIE-16GB")
    page.fill("input[name=compute_capability]", "seven")
    page.fill("input[name=vram_gib]", "16")
    page.fill("input[name=users]", "0")
    page.click("text=Recommend")
    assert "such as 7.0" in page.locator("#field-compute_capability .error").inner_text()
    assert "greater than or equal to 1" in page.locator("#field-users .error").inner_text()
    assert not Decision.objects.exists()
    assert page.js_errors == []
