"""Every bad value sent to the API is refused with its field named, never silently replaced: a
percentile that is not one of the choices, a negative cap in a mode that does not use it, digits
that are not ASCII (int() takes "５１２")."""
import json

import pytest

from benchmarks.models import Run
from factories import endpoint
from test_api import API, token_for

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("extra, field, message", [
    ({"slo_percentile": 42}, "slo_percentile", "Select a valid choice"),
    ({"load_mode": "concurrency", "max_concurrency": -1}, "max_concurrency", "greater than or equal to 0"),
    ({"prompt_tokens": "５１２"}, "prompt_tokens", "Use ASCII digits"),
    ({"output_tokens": "١٠٠"}, "output_tokens", "Use ASCII digits"),
])
def test_a_bad_value_is_refused_even_where_the_mode_ignores_it(extra, field, message):
    api, _ = token_for("alice")
    body = {"endpoints": [endpoint().pk], "concurrency_levels": "1", "prompt_tokens": 32, "output_tokens": 8,
            "requests_per_level": 2, **extra}
    r = api.post(API + "runs/", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 400 and r["Content-Type"] == "application/json", r.content
    assert any(message in m for m in r.json()["errors"][field]), r.json()
    assert not Run.objects.exists()


def test_good_values_still_pass():
    api, _ = token_for("alice")
    body = {"endpoints": [endpoint().pk], "concurrency_levels": "1", "prompt_tokens": "32", "output_tokens": 8,
            "requests_per_level": 2, "slo_percentile": 90}
    r = api.post(API + "runs/", data=json.dumps(body), content_type="application/json")
    assert r.status_code == 201, r.content
