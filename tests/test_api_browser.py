"""The API tokens page in a real browser at 1366 px: make a token, see its key once, use it,
revoke it; nothing wider than the screen."""
import httpx
import pytest

from benchmarks.models import ApiToken
from conftest import log_in

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_makes_uses_and_revokes_a_token_in_the_browser(browser, live_server):
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    log_in(page, live_server, "/account/tokens/")
    page.fill("input[name=name]", "CI on staging, the nightly benchmark of every vLLM upgrade")
    page.click("text=Make a token")
    key = page.inner_text("#new-token-key").strip()
    assert key.startswith("v100_") and page.is_visible("text=it will not be shown again")
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1] == 1366
    api = httpx.Client(base_url=live_server.url + "/api/v1/", headers={"Authorization": f"Bearer {key}"})
    assert api.get("hosts/").status_code == 200
    page.goto(live_server.url + "/account/tokens/")
    assert key not in page.content() and page.is_visible(f"text={ApiToken.objects.get().prefix}…")
    page.click("#tokens button:has-text('Revoke')")
    assert page.is_visible("text=revoked") and page.is_visible("text=are refused from now on")
    r = api.get("hosts/")
    assert r.status_code == 401 and "revoked" in r.json()["error"]
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 1366
