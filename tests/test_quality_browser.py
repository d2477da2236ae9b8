"""The run page's Quality section in a real browser at 1366 px: it fits, its definitions are the
catalogue's and only for runs with a quality step, and the sha256 copies."""
import asyncio
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from benchmarks.engine import quality
from benchmarks.services import quality_store
from factories import endpoint, measured_run
from test_quality import TEXT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def engine_results(reference, tested):
    """What the engine measures: the reference scored once, each tested simulator against it;
    an exception is kept as what the quality step would store (its message)."""
    async def go():
        async with httpx.AsyncClient(timeout=30) as client:
            scores = await quality.measure_reference(client, reference.url, "llamacpp", TEXT, name="gemma-fp16",
                                                     n_ctx=32, chunks=3)
            out = {}
            for name, (sim, backend) in tested.items():
                try:
                    out[name] = await quality.measure(client, sim.url, backend, TEXT, n_ctx=32, chunks=3,
                                                      reference=scores)
                except quality.QualityError as exc:
                    out[name] = str(exc)
            return scores.result, out
    with ThreadPoolExecutor(1) as pool:  # the browser's event loop runs in this thread
        return pool.submit(asyncio.run, go()).result()


def test_the_quality_section_fits_at_1366_px_and_defines_its_figures(page, live_server, simulator):
    names = {"gemma-fp16": "fp16", "gemma-q4-k-m-long-variant-name": "gguf_q4_k_m",
             "gemma-other-tokenizer": "gguf_q8_0", "openai-compatible-server": "other"}
    endpoints = {n: endpoint(name=n, backend="openai" if n.startswith("openai") else "llamacpp", quantization=q)
                 for n, q in names.items()}
    sims = {"gemma-q4-k-m-long-variant-name": (simulator(dialect="llamacpp", sharpness=1.6), "llamacpp"),
            "gemma-other-tokenizer": (simulator(dialect="llamacpp", token_offset=3), "llamacpp"),
            "openai-compatible-server": (simulator(dialect="openai"), "openai")}
    own, results = engine_results(simulator(dialect="llamacpp", sharpness=1.0), sims)
    run = measured_run(list(endpoints.values()), levels=(1,), requests=4, quality=True,
                       quality_reference=endpoints["gemma-fp16"], quality_ctx=32, quality_chunks=3)
    quality_store(run=run, endpoint=endpoints["gemma-fp16"], result=own)
    for name, result in results.items():
        if isinstance(result, str):
            quality_store(run=run, endpoint=endpoints[name], error=result)
        else:
            quality_store(run=run, endpoint=endpoints[name], result=result)
    plain = measured_run([endpoint(name="plain")], levels=(1,), requests=4)

    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(live_server.url + run.get_absolute_url())
    table = page.locator("#quality-table")
    assert table.locator("tbody tr").count() == 4
    q4 = page.locator("#quality-gemma-q4-k-m-long-variant-name")
    assert q4.locator("td[data-metric=kl_mean]").inner_text() == f"{results['gemma-q4-k-m-long-variant-name'].value('kl_mean'):.4f}"
    assert "returns no log-probabilities" in page.locator("#quality-openai-compatible-server").inner_text()
    assert "tokenize differently" in page.locator("#quality-notes").inner_text()
    # Nothing wider than the window, and the quality table needs no scrolling of its own.
    assert page.evaluate("document.documentElement.scrollWidth") <= 1366
    assert page.evaluate("(() => { const t = document.querySelector('#quality-table'); "
                         "return t.parentElement.scrollWidth <= t.parentElement.clientWidth; })()")
    # The definitions are the catalogue's, the quality ones included for this run.
    page.click("#definitions summary")
    assert page.locator("#metric-kl_mean").is_visible() and page.locator("#metric-perplexity").is_visible()
    assert "(nats)" in page.locator("#metric-kl_mean").inner_text()
    assert page.locator("#metric-perplexity").inner_text().startswith("Perplexity perplexity")  # no "()"
    sha = page.locator("#quality-sha256-1")
    assert sha.input_value() == TEXT.sha256 and sha.get_attribute("title") == TEXT.sha256
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("[data-copy=quality-sha256-1]")
    page.wait_for_function("document.querySelector('[data-copy=quality-sha256-1]').textContent === 'Copied'",
                           timeout=5000)
    assert page.evaluate("navigator.clipboard.readText()") == TEXT.sha256
    assert page.js_errors == []

    page.goto(live_server.url + plain.get_absolute_url())
    assert page.locator("#quality").count() == 0
    assert page.locator("#metric-ttft_ms").count() == 1 and page.locator("#metric-perplexity").count() == 0
