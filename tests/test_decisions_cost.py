"""The decision page ranks on cost per million output tokens and energy per output token, and puts
the team's own GPU beside a rented one in one answer (issue 29): the form's prices (a registered
host's stated price filled in), the answer on the page, and bad input as field errors (form and
API). The arithmetic itself is worked by hand in test_advisor_economics.py."""
import json
import re
from html import unescape

import pytest
from django.urls import reverse

from benchmarks.models import Decision, Gpu, Host
from factories import endpoint, user
from test_decisions import V100, measured_run

pytestmark = pytest.mark.django_db
API = "/api/decide"

OWNED_V100 = {**V100, "priority": "lowest_cost", "price_ownership": "owned", "price_per_hour": "0.20",
              "price_per_kwh": "0.30", "price_currency": "USD"}


@pytest.fixture
def member(client):
    client.force_login(user())
    return client


def h100_fp8_at_8_users(aggregate=3000.0):
    """vLLM FP8 measured on an H100 host at 1 and 8 users, 512/100 tokens: `aggregate` tok/s at 8."""
    host = Host.objects.create(name="h100-1", interconnect="pcie")
    Gpu.objects.create(host=host, index=0, name="NVIDIA H100 80GB HBM3", memory_total_mib=81559,
                       compute_capability="9.0")
    fp8 = endpoint(name="h100-vllm-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3")
    return measured_run({fp8: {1: (30.0, 40.0, 4.0, 250.0), 8: (60.0, 80.0, 8000 / aggregate, aggregate)}},
                        title="H100 sweep")


def answer_of(page: str) -> str:
    text = re.search(r'<p id="price-answer">(.*?)</p>', page, re.S).group(1)
    return unescape(text)


def test_the_page_answers_your_v100_owned_against_an_h100_rented_with_stated_prices(member):
    h100_fp8_at_8_users()
    r = member.post(reverse("decision-new"), {**OWNED_V100, "rent_gpu": "H100 (SXM)", "rent_per_hour": "2.50",
                                              "rent_gpu_count": "1"})
    assert r.status_code == 302, r.content.decode()[:3000]
    decision = Decision.objects.get()
    page = member.get(r.url).content.decode()
    answer = answer_of(page)
    # Your V100: the write-up's 235 tok/s (published) for llama.cpp Q4_K_M, its 250 W board at 40 % to
    # 100 %: (0.20 + 0.30 x 0.1) / 0.846 = 0.27 to (0.20 + 0.30 x 0.25) / 0.846 = 0.33 USD per million.
    # The H100 rented: vLLM FP8 measured at 3000 tok/s = 10.8 M tokens an hour: 2.50 / 10.8 = 0.23.
    assert answer.startswith("8 users of DeepSeek-R1-Distill-Qwen-7B: on your Tesla V100-PCIE-16GB: llama.cpp "
                             "Q4_K_M, 0.27 to 0.33 USD per million output tokens, estimated, not measured: at 235 "
                             "tok/s (published), drawing 100 to 250 W (estimated")
    assert "owned: 0.20 USD/h amortisation, 0.30 USD/kWh" in answer
    assert ("Against a rented H100 (SXM): vLLM FP8, 0.23 USD per million output tokens (measured): at 3000 tok/s "
            "(measured); rented at 2.50 USD/h.") in answer
    assert answer.endswith("Cheaper on the rented H100 (SXM): 0.23 against 0.27 to 0.33 USD per million output "
                           "tokens (their bands do not overlap).")
    assert 'data-cheaper="rented"' in page
    assert 'data-role="yours" data-candidate="llamacpp-q4_k_m"' in page
    assert 'data-role="rented" data-candidate="vllm-fp8"' in page
    # The V100's own answer ranks on cost at the stated price, and says so
    assert decision.recommended == "llamacpp-q4_k_m"
    assert "owned: 0.20 USD/h amortisation, 0.30 USD/kWh (as stated)" in page
    assert 'data-figure="cost_per_mtok" data-how="estimated">0.27 to 0.33 USD/M tok, estimated' in page


def test_the_same_question_within_each_others_band_names_no_winner(member):
    h100_fp8_at_8_users()
    r = member.post(reverse("decision-new"), {**OWNED_V100, "rent_gpu": "H100 (SXM)", "rent_per_hour": "3.00"},
                    follow=True)
    # 3.00 / 10.8 = 0.28, inside the V100's 0.27 to 0.33
    answer = answer_of(r.content.decode())
    assert "0.28 USD per million output tokens (measured)" in answer
    assert answer.endswith("Neither is cheaper: 0.27 to 0.33 and 0.28 USD per million output tokens are within "
                           "each other's band; measure the estimated one before choosing.")


def test_a_hosts_stated_price_fills_the_form_and_is_used_when_left_blank(member):
    host = Host.objects.create(name="v100-1", price_ownership="owned", price_per_hour=0.4, price_per_kwh=0.25,
                               price_currency="EUR")
    Gpu.objects.create(host=host, index=0, name="Tesla V100-PCIE-16GB", memory_total_mib=16144,
                       compute_capability="7.0")
    page = member.get(reverse("decision-new") + f"?host={host.pk}").content.decode()
    assert re.search(r'name="price_per_hour"[^>]*value="0.4"', page)
    assert re.search(r'name="price_per_kwh"[^>]*value="0.25"', page)
    assert re.search(r'<option value="owned" selected>', page) and 'value="EUR"' in page
    r = member.post(reverse("decision-new"), {**V100, "host": host.pk, "priority": "lowest_cost"}, follow=True)
    page = r.content.decode()
    assert "owned: 0.40 EUR/h amortisation, 0.25 EUR/kWh (the host&#x27;s stated price)" in page
    assert Decision.objects.get().recommended == "llamacpp-q4_k_m"


def test_ranking_on_energy_needs_no_price(member):
    r = member.post(reverse("decision-new"), {**V100, "priority": "lowest_energy"}, follow=True)
    page = r.content.decode()
    assert "lowest energy per output token" in page
    # 100 / 235 = 0.426 to 250 / 235 = 1.06 J/token, estimated from the V100's board power
    assert 'data-figure="energy_per_token_j" data-how="estimated">0.426 to 1.06 J/token, estimated' in page
    assert Decision.objects.get().result["version"] >= 8  # energy and cost are read from version 8 on


@pytest.mark.parametrize("overrides, field, message", [
    ({"priority": "lowest_cost"}, "price_per_hour", "needs a price"),
    ({"price_ownership": "owned"}, "price_per_hour", "Give the price per hour"),
    ({"price_per_hour": 0.5}, "price_ownership", "owned or rented"),
    ({"price_ownership": "rented", "price_per_hour": 2, "price_per_kwh": 0.3}, "price_per_kwh", "includes it"),
    ({"price_ownership": "owned", "price_per_hour": -1}, "price_per_hour", "greater than or equal to 0"),
    ({"price_ownership": "owned", "price_per_hour": "NaN"}, "price_per_hour", "Enter a number"),
    ({"price_ownership": "owned", "price_per_hour": 1, "price_currency": "usd"}, "price_currency", "three-letter"),
    ({"price_ownership": "lent", "price_per_hour": 1}, "price_ownership", "Select a valid choice"),
    ({"price_ownership": "owned", "price_per_hour": 1, "rent_gpu": "H100 (SXM)"}, "rent_per_hour", "rate per hour"),
    ({"price_ownership": "owned", "price_per_hour": 1, "rent_per_hour": 2}, "rent_gpu", "Pick the rented GPU"),
    ({"price_ownership": "owned", "price_per_hour": 1, "rent_gpu": "H900", "rent_per_hour": 2}, "rent_gpu",
     "Select a valid choice"),
    ({"rent_gpu": "H100 (SXM)", "rent_per_hour": 2}, "price_per_hour", "state your own GPUs' price"),
    ({"price_ownership": "owned", "price_per_hour": 1, "rent_gpu": "L4", "rent_per_hour": 1, "rent_gpu_count": 0},
     "rent_gpu_count", "greater than or equal to 1"),
])
def test_bad_prices_are_field_errors_in_the_api_and_on_the_page(member, overrides, field, message):
    body = {"gpu_name": "Tesla V100-PCIE-16GB", "users": 8, "prompt_tokens": 512, "output_tokens": 100,
            **overrides}
    r = member.post(API, data=json.dumps(body), content_type="application/json")
    assert r.status_code == 400, r.content
    errors = r.json()["errors"]
    assert list(errors) == [field] and message in errors[field][0], errors
    page = member.post(reverse("decision-new"), {**V100, **{k: str(v) for k, v in overrides.items()}})
    assert page.status_code == 200 and message in unescape(page.content.decode())
    assert not Decision.objects.exists()


def test_the_api_answers_the_comparison_as_json(member):
    h100_fp8_at_8_users()
    body = {"gpu_name": "Tesla V100-PCIE-16GB", "users": 8, "prompt_tokens": 512, "output_tokens": 100,
            "price_ownership": "owned", "price_per_hour": 0.2, "price_per_kwh": 0.3, "rent_gpu": "H100 (SXM)",
            "rent_per_hour": 2.5}
    r = member.post(API, data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.content
    cmp = r.json()["recommendation"]["price_comparison"]
    assert cmp["cheaper"] == "rented" and [s["candidate"] for s in cmp["sides"]] == ["llamacpp-q4_k_m", "vllm-fp8"]
    assert cmp["sides"][1]["cost"]["value"] == pytest.approx(2.5 / 10.8)  # 2.50 USD/h over 10.8 M tokens an hour


def test_on_a_host_that_measured_its_energy_the_cost_is_measured_at_the_hosts_price(member):
    h100_fp8_at_8_users()  # each level stores the GPU samples' 50 J (200 W then 300 W, 0.2 s apart)
    host = Host.objects.get(name="h100-1")
    host.price_ownership, host.price_per_hour, host.price_per_kwh = "owned", 1.00, 0.20
    host.save()
    r = member.post(reverse("decision-new"), {**V100, "host": host.pk, "priority": "lowest_cost"}, follow=True)
    decision = Decision.objects.get()
    fp8 = next(c for c in decision.result["ranked"] if c["key"] == "vllm-fp8")
    # Energy: 50 J over the level's 101 requests x 100 output tokens = 0.00495050 J/token, measured.
    assert fp8["energy"]["how"] == "measured" and fp8["energy"]["value"] == pytest.approx(50 / 10100)
    # Cost: 3000 tok/s is 10.8 M tokens an hour, so 1.00 USD/h is 0.0925926 USD per million; a
    # million tokens take 4950.5 J = 0.00137514 kWh, 0.000275028 USD at 0.20 USD/kWh: 0.0928676.
    assert fp8["cost"]["how"] == "measured" and fp8["cost"]["band"] is None
    assert fp8["cost"]["value"] == pytest.approx(0.0928676, rel=1e-5)
    assert decision.recommended == "vllm-fp8"
    page = unescape(r.content.decode())
    assert "0.0929 USD per million output tokens (measured): at 3000 tok/s (measured), drawing 14.9 W " \
           "(measured: 0.00495 J/token × 3000 tok/s)" in page  # 0.0049505 J/token x 3000 tok/s = 14.85 W
    assert "owned: 1.00 USD/h amortisation, 0.20 USD/kWh (the host's stated price)" in page
