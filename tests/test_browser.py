"""The pages in a real browser: Playwright driving Debian's chromium."""
import pytest

from conftest import log_in
from factories import endpoint

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_member_submits_a_run_watches_it_and_reads_the_results(page, live_server, simulator, celery_worker_process):
    sim = simulator(dialect="llamacpp", prefill_ms=30, decode_ms=40)
    endpoint(sim.url, name="llama-sim", backend="llamacpp", quantization="gguf_q4_k_m")
    # What the run page showed each time it left itself (its reloads), kept across them.
    page.add_init_script("""addEventListener('beforeunload', () => {
        const status = document.getElementById('run-status');
        if (!status) return;
        const shown = JSON.parse(sessionStorage.getItem('shown') || '[]');
        sessionStorage.setItem('shown', JSON.stringify(shown.concat([status.textContent])));
    })""")
    log_in(page, live_server)
    page.check("text=llama-sim")
    page.fill("input[name=prompt_tokens]", "64")
    page.fill("input[name=output_tokens]", "10")
    page.fill("input[name=concurrency_levels]", "1,2")
    page.fill("input[name=requests_per_level]", "6")
    page.click("text=Queue run")
    page.wait_for_selector("#progress")
    # The bar moves without a reload while the run is measured...
    page.wait_for_function("() => document.getElementById('run-status').textContent === 'running'", timeout=30000)
    assert page.locator("#queued-banner").count() == 0  # "Run queued" only while it is
    # ...and the results land when it finishes.
    page.wait_for_selector("#run-status.succeeded", timeout=60000)
    # ...on the page the server rendered: the script reloads rather than writing a final status,
    # so nothing is left to navigate once it reads "succeeded".
    assert page.locator("#progress").get_attribute("data-finished") == "true"
    shown_before_reload = page.evaluate("JSON.parse(sessionStorage.getItem('shown') || '[]')")
    assert shown_before_reload and "succeeded" not in shown_before_reload, shown_before_reload
    rows = page.locator("#results tbody tr")
    assert rows.count() == 2
    assert page.locator("#results tbody tr[data-concurrency='2'] td[data-metric='aggregate_tok_s']").inner_text() not in ("", "—")
    assert page.js_errors == []


def test_bad_values_come_back_as_field_messages(page, live_server):
    endpoint(name="sim")
    log_in(page, live_server)
    page.check("text=sim")
    page.fill("input[name=prompt_tokens]", "0")
    page.fill("input[name=concurrency_levels]", "1,9999")
    page.click("text=Queue run")
    assert "greater than or equal to 1" in page.locator("#field-prompt_tokens .error").inner_text()
    assert "above the limit" in page.locator("#field-concurrency_levels .error").inner_text()
    assert page.js_errors == []
