"""The decision page in a real browser: Playwright driving Debian's chromium."""
import os

import pytest

from benchmarks.models import Decision
from conftest import log_in, watched
from factories import quality_run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def decide_in_the_browser(page, live_server, *, gpu, cc, vram, users, priority):
    """Log in, state the GPU and a 512/100-token workload with an 8192-token context, recommend."""
    log_in(page, live_server, "/decide/")
    page.wait_for_selector("#decision-form")
    for name, value in (("gpu_name", gpu), ("compute_capability", cc), ("vram_gib", vram), ("users", users),
                        ("prompt_tokens", "512"), ("output_tokens", "100"), ("context_tokens", "8192")):
        page.fill(f"input[name={name}]", value)
    page.check(f"input[name=priority][value={priority}]")
    page.click("text=Recommend")
    page.wait_for_selector("#recommendation")


def test_a_member_states_a_workload_and_shares_the_recommendation(browser, live_server):
    page = watched(browser.new_page())
    decide_in_the_browser(page, live_server, gpu="Tesla V100-PCIE-16GB", cc="7.0", vram="16", users="4",
                          priority="throughput")
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


def test_a_member_ranks_by_least_quality_loss_and_the_page_fits_1366_pixels(browser, live_server):
    quality_run((("fp16", 0.05), ("fp8", 0.055), ("q4", 0.1)))
    page = watched(browser.new_page(viewport={"width": 1366, "height": 900}))
    decide_in_the_browser(page, live_server, gpu="NVIDIA H200", cc="9.0", vram="141", users="1",
                          priority="least_quality_loss")
    assert page.locator("#recommendation").inner_text() == "Run vLLM FP8"
    assert page.locator("#rank-vllm-fp8 td.quality").inner_text().startswith("Perplexity 3")
    assert page.locator("#rank-vllm-awq td.quality").inner_text() == "not measured"
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth,
        candidates: document.querySelector('#candidates').getBoundingClientRect().right})""")
    assert widths["page"] <= widths["screen"] and widths["candidates"] <= widths["screen"], widths
    if os.environ.get("DECISION_SCREENSHOTS"):
        page.screenshot(path=os.environ["DECISION_SCREENSHOTS"].replace(".png", "-quality.png"), full_page=True)
    assert page.js_errors == []


def test_the_verdict_reasons_and_command_come_first_and_the_page_fits_1366_pixels(browser, live_server):
    page = watched(browser.new_page(viewport={"width": 1366, "height": 768}))
    decide_in_the_browser(page, live_server, gpu="Tesla V100-PCIE-16GB", cc="7.0", vram="16", users="8",
                          priority="throughput")
    assert page.locator("#recommendation").inner_text() == "Run llama.cpp Q4_K_M"
    # the verdict, its three reasons and the command fit the first screen
    assert page.locator("#why li").count() == 3
    for selector in ("#recommendation", "#why", "#launch-command", "#copy-command"):
        box = page.locator(selector).bounding_box()
        assert box and box["y"] + box["height"] <= 768, (selector, box)
    assert "-c 65536 --parallel 8 -ngl 99 -fa on" in page.locator("#launch-command").inner_text()
    if os.environ.get("DECISION_SCREENSHOTS"):
        page.screenshot(path=os.environ["DECISION_SCREENSHOTS"].replace(".png", "-verdict.png"))
    page.click("#copy-command")
    page.wait_for_function("() => document.querySelector('#copy-command + .copy-status').textContent !== ''")
    # the breakdowns are folded until asked for
    fp8 = page.locator("#candidate-vllm-fp8")
    assert not fp8.locator("ul.reasons").is_visible()
    fp8.locator("summary").first.click()
    assert fp8.locator("ul.reasons").is_visible()
    # nothing wider than the screen: the page, the tables, the commands
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth,
        widest: Math.max(...[...document.querySelectorAll('table, pre')].map(e => e.getBoundingClientRect().right))})""")
    assert widths["page"] <= widths["screen"] and widths["widest"] <= widths["screen"], widths
    assert page.js_errors == []


def test_a_gpu_picked_from_the_table_gets_an_estimate_with_its_figures_and_the_page_fits_1366_pixels(
        browser, live_server):
    page = watched(browser.new_page(viewport={"width": 1366, "height": 768}))
    log_in(page, live_server, "/decide/")
    page.wait_for_selector("#decision-form")
    # the GPU from the datasheet list, its compute capability and memory left blank
    assert page.locator("#gpu-models option[value='H100 (SXM)']").count() == 1
    for name, value in (("gpu_name", "H100 (SXM)"), ("users", "64"), ("prompt_tokens", "512"),
                        ("output_tokens", "100"), ("context_tokens", "4096")):
        page.fill(f"input[name={name}]", value)
    page.check("input[name=priority][value=throughput]")
    page.click("text=Recommend")
    page.wait_for_selector("#recommendation")
    assert page.locator("#recommendation").inner_text().startswith("Run vLLM")
    assert "estimated" in page.locator("#confidence-why").inner_text()
    for selector in ("#recommendation", "#why", "#launch-command"):
        box = page.locator(selector).bounding_box()
        assert box and box["y"] + box["height"] <= 768, (selector, box)
    # the estimate's figures, folded in the recommended candidate's breakdown
    chosen = page.locator("section[id^=candidate-]").first  # ranked: the recommended one first
    chosen.locator("summary").first.click()
    sources = chosen.locator("details.estimate-sources")
    sources.locator("summary").click()
    assert "github.com/vllm-project/vllm/pull/23197" in sources.inner_text()
    if os.environ.get("DECISION_SCREENSHOTS"):
        page.screenshot(path=os.environ["DECISION_SCREENSHOTS"].replace(".png", "-estimate.png"), full_page=True)
    widths = page.evaluate("""() => ({page: document.documentElement.scrollWidth,
        screen: document.documentElement.clientWidth,
        widest: Math.max(...[...document.querySelectorAll('table, pre, ul')].map(e => e.getBoundingClientRect().right))})""")
    assert widths["page"] <= widths["screen"] and widths["widest"] <= widths["screen"], widths
    # nothing fits: the capacity answer, on the first screen
    page.goto(live_server.url + "/decide/")
    for name, value in (("gpu_name", "Tesla T4"), ("users", "1"), ("prompt_tokens", "512"), ("output_tokens", "100"),
                        ("context_tokens", "4096")):
        page.fill(f"input[name={name}]", value)
    page.select_option("select[name=builtin_model]", "DeepSeek-R1-Distill-Qwen-32B")
    page.click("text=Recommend")
    page.wait_for_selector("#capacity")
    assert page.locator("#recommendation").inner_text() == "No recommendation yet"
    assert "2 of these GPUs would fit it" in page.locator("#capacity").inner_text()
    box = page.locator("#capacity").bounding_box()
    assert box["y"] + box["height"] <= 768 and box["x"] + box["width"] <= 1366
    if os.environ.get("DECISION_SCREENSHOTS"):
        page.screenshot(path=os.environ["DECISION_SCREENSHOTS"].replace(".png", "-capacity.png"))
    assert page.js_errors == []
