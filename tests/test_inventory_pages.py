"""Members read the inventory on a page of the product's own (hosts and GPUs, models and variants,
endpoints, recipes) with what a run needs; the admin, for staff edits, without the scheduler's
tables or the login throttle's logs, and the endpoint form opening on what a run needs."""
import re

import pytest
from django.test import Client
from django.urls import reverse

from benchmarks import services
from benchmarks.engine.launcher import Allowlist
from benchmarks.models import Gpu, ServerRecipe
from factories import endpoint, user


def stocked():
    e = endpoint(name="vllm-fp8", url="http://10.0.0.5:8000", host="v100-box")
    host = services.host_register(name="v100-box", allows=Allowlist(executables=("/opt/llama.cpp/bin/llama-server",),
                                                                    model_dirs=("/models",)))
    Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16384,
                       compute_capability="7.0")
    ServerRecipe.objects.create(name="llama-q4", host=host, backend="llamacpp",
                                executable="/opt/llama.cpp/bin/llama-server", model_path="/models/q4.gguf",
                                args=["-m", "{model}", "--port", "{port}"], sweep={"--parallel": [1, 4]},
                                variant=e.variant)
    return e, host


def row(page: str, table: str, key: str) -> str:
    body = page[page.index(f'id="inventory-{table}"'):]
    body = body[body.index(f'"{key}"'):]
    return body[:body.index("</tr>")]


@pytest.mark.django_db
def test_a_member_reads_the_inventory_with_what_a_run_needs(client):
    e, host = stocked()
    assert client.get(reverse("inventory")).status_code == 302  # members only
    client.force_login(user())
    page = client.get(reverse("inventory")).content.decode()
    assert "0: Tesla V100-PCIE-16GB · 16384 MiB · CC 7.0" in row(page, "hosts", "v100-box")
    assert "/opt/llama.cpp/bin/llama-server" in row(page, "hosts", "v100-box")
    assert "none stated" in row(page, "hosts", "v100-box")
    host.price_ownership, host.price_per_hour, host.price_per_kwh = "owned", 0.2, 0.3
    host.save()
    priced = row(client.get(reverse("inventory")).content.decode(), "hosts", "v100-box")
    assert "owned: 0.20 USD/h amortisation, 0.30 USD/kWh" in priced
    assert f'{reverse("decision-new")}?host={host.pk}' in priced
    assert "fp8_e4m3" in row(page, "models", e.variant.model.name) or e.variant.name in row(
        page, "models", e.variant.model.name)
    endpoint_row = row(page, "endpoints", "vllm-fp8")
    assert "http://10.0.0.5:8000" in endpoint_row and "v100-box" in endpoint_row
    assert f'{reverse("run-new")}?endpoints=vllm-fp8' in endpoint_row
    recipe_row = row(page, "recipes", "llama-q4")
    assert "--parallel</code> 1, 4" in recipe_row and "?recipes=llama-q4" in recipe_row
    assert "edit</a>" not in page and reverse("admin:index") not in page
    # The endpoint's "new run" link ticks it in the run form.
    form = client.get(f'{reverse("run-new")}?endpoints=vllm-fp8').context["form"]
    assert [str(v) for v in form["endpoints"].value()] == [str(e.pk)]
    staff = Client()
    staff.force_login(user("inventory-staff", staff=True))
    page = staff.get(reverse("inventory")).content.decode()
    assert reverse("admin:benchmarks_endpoint_change", args=[e.pk]) in page
    assert reverse("admin:benchmarks_host_change", args=[host.pk]) in page


@pytest.mark.django_db
def test_the_admin_holds_the_inventory_and_the_endpoint_form_opens_on_what_a_run_needs(client):
    client.force_login(user("inventory-staff", staff=True))
    index = client.get(reverse("admin:index")).content.decode()
    assert "Periodic tasks" not in index and "Crontabs" not in index and "Access logs" not in index
    assert "Access attempts" in index  # to let a locked-out member back in
    for name in ("Hosts", "Endpoints", "Server recipes", "Models", "Variants"):
        assert name in index
    form = client.get(reverse("admin:benchmarks_endpoint_add")).content.decode()
    fields = re.findall(r'name="([a-z_]+)"', form[form.index("<fieldset"):])
    assert fields[:4] == ["name", "host", "backend", "base_url"], fields[:8]
    assert fields.index("alert_emails") > fields.index("enabled"), fields


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("width,height", [(1366, 768), (1920, 1080)])
def test_the_inventory_page_fits_both_screens(page, live_server, width, height):
    from conftest import log_in
    from test_pages_at_a_glance import OVERFLOW

    stocked()
    page.set_viewport_size({"width": width, "height": height})
    log_in(page, live_server, "/inventory/")
    page.wait_for_selector("#inventory-recipes")
    assert page.evaluate(OVERFLOW) == []
    assert page.js_errors == []
