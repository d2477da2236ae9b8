"""The run form shows the common case on one screen (endpoints, a preset, the levels) with the rest
folded; a folded group opens where a preset or a link set one of its fields, or where one has an error."""
import re

import pytest
from django.urls import reverse

from conftest import log_in
from factories import endpoint, run_form, user


def opened(page: str) -> dict:
    """Each folded group's id -> whether it is open."""
    return {m.group(1): bool(m.group(2)) for m in re.finditer(r'<details class="fold" id="([a-z-]+)"( open)?>', page)}


@pytest.mark.django_db
def test_the_folds_open_only_for_what_a_preset_set_or_an_error_names(client):
    endpoint(name="sim")
    client.force_login(user())
    plain = client.get(reverse("run-new")).content.decode()
    assert opened(plain) == {"more-options": False, "requests": False, "quality-step": False, "repeat": False}
    # The RAG preset sets a shared prefix (Requests) and the completions API, the default: More options
    # stay folded. The chat preset sets the chat API (More options) and log-normal lengths (Requests).
    rag = client.get(reverse("run-new") + "?preset=rag").content.decode()
    assert opened(rag) == {"more-options": False, "requests": True, "quality-step": False, "repeat": False}
    chat = client.get(reverse("run-new") + "?preset=chat").content.decode()
    assert opened(chat) == {"more-options": True, "requests": True, "quality-step": False, "repeat": False}
    # A field error inside a fold opens it, and only it.
    e = endpoint(name="sim-2", url="http://127.0.0.1:10")
    bad = client.post(reverse("run-new"), run_form([e], trials=0)).content.decode()
    assert 'id="field-trials"' in bad and opened(bad)["more-options"] and not opened(bad)["requests"]


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_common_case_fits_one_screen_at_1366(page, live_server):
    for name in ("llama-q4", "vllm-fp8", "vllm-awq"):
        endpoint(name=name, url=f"http://127.0.0.1:{9000 + len(name)}")
    page.set_viewport_size({"width": 1366, "height": 768})
    log_in(page, live_server)
    bottoms = page.evaluate("""() => Object.fromEntries(['#presets', '#field-endpoints', '#field-load_mode',
        '#field-concurrency_levels', '#field-requests_per_level', 'form button[type=submit]'].map(
        s => [s, document.querySelector(s).getBoundingClientRect().bottom]))""")
    # The common case (a preset, the endpoints, the load mode and its levels) is on the first screen,
    # the folds and the button just under it (the form was 4,600 px tall, everything open).
    assert all(bottoms[s] <= 768 for s in list(bottoms)[:-1]), bottoms
    assert bottoms["form button[type=submit]"] <= 768 + 300, bottoms
    assert not page.is_visible("input[name=warmup_requests]")
    page.click("#more-options summary")
    assert page.is_visible("input[name=warmup_requests]")
    assert page.js_errors == []
