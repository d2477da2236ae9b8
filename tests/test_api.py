"""The REST API (/api/v1/) and its tokens: every route for every reader (anonymous, member,
another member, staff, a revoked token), the run form's messages as JSON, rate limits, the
OpenAPI schema, and POST /api/decide with a token."""
import json

import pytest
import yaml
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from benchmarks import services
from benchmarks.api.tokens import key_sha256
from benchmarks.models import ApiToken, Endpoint, Run
from factories import endpoint, measured_run, user

pytestmark = pytest.mark.django_db
API = "/api/v1/"


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    cache.clear()
    yield
    cache.clear()


def bearer(key: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}", enforce_csrf_checks=True)


def token_for(username="alice", staff=False) -> tuple[Client, str]:
    _, key = services.api_token_create(owner=user(username, staff=staff), name="ci")
    return bearer(key), key


def submit(client, body, **extra):
    return client.post(API + "runs/", data=json.dumps(body) if not isinstance(body, (str, bytes)) else body,
                       content_type="application/json", **extra)


def minimal_run(e, **fields):
    return {"endpoints": [e.name], "prompt_tokens": 32, "output_tokens": 4, "concurrency_levels": [1, 2],
            "requests_per_level": 2, "warmup_requests": 0, **fields}


# --- tokens: made, shown once, stored hashed, revoked ----------------------------------------

def test_a_member_makes_a_token_sees_it_once_and_only_its_hash_is_stored(client):
    client.force_login(user())
    r = client.post(reverse("api-tokens"), {"name": "CI on staging"})
    assert r.status_code == 200
    key = r.context["new_key"]
    assert key.startswith("v100_") and len(key) > 40 and key in r.content.decode()
    token = ApiToken.objects.get()
    assert token.key_sha256 == key_sha256(key) and key not in json.dumps(list(ApiToken.objects.values()), default=str)
    page = client.get(reverse("api-tokens")).content.decode()
    assert "CI on staging" in page and token.prefix in page and key not in page
    assert token.last_used is None
    assert bearer(key).get(API + "endpoints/").status_code == 200
    token.refresh_from_db()
    assert token.last_used is not None and "never" not in client.get(reverse("api-tokens")).content.decode()


def test_the_token_page_needs_login_and_a_name(client):
    r = client.get(reverse("api-tokens"))
    assert r.status_code == 302 and reverse("login") in r.url
    client.force_login(user())
    r = client.post(reverse("api-tokens"), {"name": ""})
    assert "This field is required" in r.content.decode() and not ApiToken.objects.exists()


def test_a_revoked_token_is_refused_with_the_reason(client):
    api, key = token_for()
    assert api.get(API + "runs/").status_code == 200
    client.force_login(user())
    token = ApiToken.objects.get()
    r = client.post(reverse("api-token-revoke", args=[token.public_id]))
    assert r.status_code == 302
    r = api.get(API + "runs/")
    assert r.status_code == 401 and "revoked" in r.json()["error"]
    assert r["WWW-Authenticate"].startswith("Bearer")
    assert "revoked" in client.get(reverse("api-tokens")).content.decode()


def test_a_member_cannot_revoke_another_member_s_token(client):
    token_for("alice")
    client.force_login(user("mallory"))
    r = client.post(reverse("api-token-revoke", args=[ApiToken.objects.get().public_id]))
    assert r.status_code == 404 and ApiToken.objects.get().revoked is None


@pytest.mark.parametrize("header", ["Bearer v100_not-a-token", "Bearer ", "Token abc", "Bearer " + "v100_" + "x" * 5000,
                                    "Basic YWxpY2U6cHc="])
def test_a_wrong_token_is_a_json_401(header):
    r = Client(HTTP_AUTHORIZATION=header).get(API + "runs/")
    assert r.status_code == 401 and r["Content-Type"] == "application/json" and r.json()["error"]


def test_a_disabled_account_s_token_is_refused():
    api, _ = token_for("bob")
    user("bob").__class__.objects.filter(username="bob").update(is_active=False)
    r = api.get(API + "runs/")
    assert r.status_code == 401 and "disabled" in r.json()["error"]


# --- permissions, route by route ----------------------------------------------------------------

def test_anonymous_readers_get_json_401_on_member_routes(client):
    for path in ("runs/", "endpoints/", "hosts/", "models/"):
        r = client.get(API + path)
        assert r.status_code in (401, 403) and "error" in r.json(), path
    r = submit(client, {})
    assert r.status_code in (401, 403) and not Run.objects.exists()


def test_anonymous_readers_read_a_run_by_its_permalink_without_addresses(client, settings):
    run = measured_run([endpoint()], requests=5, owner=user("alice"))
    e = run.endpoints.get()
    r = client.get(API + f"runs/{run.public_id}/results/")
    assert r.status_code == 200
    body = r.json()
    assert body["endpoints"][e.name]["base_url"] is None and e.base_url not in r.content.decode()
    assert client.get(API + f"runs/{run.public_id}/").json()["owner"] is None
    settings.PERMALINKS_REQUIRE_LOGIN = True
    assert client.get(API + f"runs/{run.public_id}/").status_code == 401


def test_a_member_reads_status_results_and_paginated_requests():
    run = measured_run([endpoint()], requests=5, owner=user("alice"))
    api, _ = token_for("alice")
    status = api.get(API + f"runs/{run.public_id}/").json()
    assert status["status"] == run.status and status["progress"]["total"] == run.progress_total
    results = api.get(API + f"runs/{run.public_id}/results/").json()
    levels = list(run.levels.order_by("endpoint__name", "level_index"))
    assert [h["level"] for h in results["headlines"]] == [lv.public_id for lv in levels]
    first = results["headlines"][0]["figures"]
    assert first["aggregate_tok_s"]["value"] == levels[0].stats.stat("aggregate_tok_s")
    assert first["ttft_ms_p50"]["better"] == "lower" and "requests" not in results["levels"][0]
    total = sum(lv.requests.count() for lv in levels)
    seen, url = [], API + f"runs/{run.public_id}/requests/?page_size=3"
    while url:
        page = api.get(url).json()
        assert page["count"] == total
        seen += page["results"]
        url = page["next"]
    assert len(seen) == total and {r["level"] for r in seen} == {lv.public_id for lv in levels}
    assert api.get(API + f"runs/{run.public_id}/requests/?page=999").status_code == 404


def test_an_unknown_run_and_an_unknown_route_answer_json_404():
    api, _ = token_for()
    r = api.get(API + "runs/nosuchrun/")
    assert r.status_code == 404 and r.json()["error"] == "No run has this link."
    r = api.get(API + "nothing/here")
    assert r.status_code == 404 and "schema" in r.json()["error"]
    r = Client(enforce_csrf_checks=True).post(API + "runs/%E6%00/cancel/")  # no route, no CSRF cookie
    assert r.status_code == 404 and r.json()["error"]


def test_only_the_owner_or_staff_cancels_a_run():
    e = endpoint()
    alice, _ = token_for("alice")
    run = Run.objects.get(public_id=submit(alice, minimal_run(e)).json()["public_id"])
    other, _ = token_for("mallory")
    r = other.post(API + f"runs/{run.public_id}/cancel/")
    assert r.status_code == 403 and "Only the member who queued" in r.json()["error"]
    staff, _ = token_for("root", staff=True)
    r = staff.post(API + f"runs/{run.public_id}/cancel/")
    assert r.status_code == 200 and r.json()["status"] == Run.CANCELLED
    r = alice.post(API + f"runs/{run.public_id}/cancel/")
    assert r.status_code == 409 and "already cancelled" in r.json()["error"]
    assert Client().post(API + f"runs/{run.public_id}/cancel/").status_code in (401, 403)


def test_the_runs_list_filters_by_status_and_owner():
    e = endpoint()
    alice, _ = token_for("alice")
    bob, _ = token_for("bob")
    mine = submit(alice, minimal_run(e)).json()["public_id"]
    submit(bob, minimal_run(e))
    assert {r["public_id"] for r in alice.get(API + "runs/?mine=1").json()["results"]} == {mine}
    assert alice.get(API + "runs/").json()["count"] == 2
    assert alice.get(API + "runs/?status=succeeded").json()["count"] == 0
    r = alice.get(API + "runs/?status=bogus")
    assert r.status_code == 400 and "status" in r.json()["errors"]


def test_inventory_lists_never_carry_api_keys():
    endpoint(api_key="sk-secret-key-1234")
    api, _ = token_for()
    r = api.get(API + "endpoints/")
    assert r.status_code == 200 and r.json()[0]["has_api_key"] is True and "sk-secret" not in r.content.decode()
    assert api.get(API + "hosts/").json()[0]["name"] == "lab-1"
    models = api.get(API + "models/").json()
    assert models[0]["variants"][0]["quantization"] == "fp8_e4m3"


# --- creating a run: the run form's validation, as JSON -----------------------------------------

def test_a_run_is_created_from_names_and_lists_with_the_form_s_defaults():
    e = endpoint()
    api, _ = token_for()
    r = submit(api, {"endpoints": [e.name], "concurrency_levels": [4, 1], "title": "nightly"})
    assert r.status_code == 201, r.content
    run = Run.objects.get(public_id=r.json()["public_id"])
    assert r["Location"].endswith(f"/api/v1/runs/{run.public_id}/")
    assert run.owner.username == "alice" and run.title == "nightly" and list(run.endpoints.all()) == [e]
    assert run.concurrency_levels == [1, 4]
    # the form's initial: enough requests for the p99 the run page shows
    assert (run.prompt_tokens, run.output_tokens, run.requests_per_level) == (512, 100, 100)


@pytest.mark.parametrize("field, value, message", [
    ("prompt_tokens", 0, "greater than or equal to 1"),
    ("prompt_tokens", "many", "Enter a whole number"),
    ("prompt_tokens", 1.5, "Enter a whole number"),
    ("prompt_tokens", True, "not true or false"),
    ("temperature", 3, "less than or equal to 2"),
    ("concurrency_levels", "1,x", "'x' is not a whole number"),
    ("concurrency_levels", [1, "x"], "Send numbers"),
    ("concurrency_levels", [100000], "above the limit"),
    ("endpoints", ["nope"], "is not a registered, enabled endpoint"),
    ("endpoints", "sim", "Send a list"),
    ("endpoints", [], "Choose at least one endpoint"),
    ("api", "grpc", "Select a valid choice"),
    ("quality", "yes", "Send true or false"),
    ("title", {"a": 1}, "not a list or an object"),
    ("title", "\ud800", "lone surrogate"),
    ("load_processes", -1, "greater than or equal to 0"),
    ("load_processes", 65, "less than or equal to 64"),
    ("load_processes", "four", "Enter a whole number"),
    ("load_workers", 2, "no load-generator workers (LOADGEN_QUEUE is not set)"),
])
def test_field_errors_are_the_form_s_messages_as_json(field, value, message):
    e = endpoint()
    api, _ = token_for()
    r = submit(api, minimal_run(e, **{field: value}))
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    assert message in " ".join(r.json()["errors"][field]), r.json()
    assert not Run.objects.exists()


def test_the_same_message_as_the_page_for_a_run_over_the_limits(client, settings):
    settings.MAX_REQUESTS_PER_RUN = 10
    e = endpoint()
    api, _ = token_for()
    r = submit(api, minimal_run(e, requests_per_level=8))
    assert r.status_code == 400 and "would send 16 requests" in r.json()["errors"]["__all__"][0]
    client.force_login(user())
    from factories import run_form
    page = client.post(reverse("run-new"), run_form([e], requests_per_level=8))
    assert r.json()["errors"]["__all__"][0] in page.content.decode().replace("&#x27;", "'").replace("&times;", "×")


@pytest.mark.parametrize("body, message", [
    ("{", "JSON parse error"), ("[1]", "JSON object"), ('"x"', "JSON object"), ("NaN", "JSON parse error"),
    (json.dumps({"tpot": 5}), "Unknown fields: tpot"),
])
def test_a_malformed_body_is_a_json_400(body, message):
    api, _ = token_for()
    r = submit(api, body)
    assert r.status_code == 400 and message in json.dumps(r.json()), r.json()


def test_the_runs_in_flight_limit_is_a_409(settings):
    settings.MAX_RUNS_IN_FLIGHT = 1
    e = endpoint()
    api, _ = token_for()
    assert submit(api, minimal_run(e)).status_code == 201
    r = submit(api, minimal_run(e))
    assert r.status_code == 409 and "the limit is 1" in r.json()["error"]


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=8)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.dictionaries(st.sampled_from(["endpoints", "prompt_tokens", "output_tokens", "temperature", "api",
                                               "load_mode", "concurrency_levels", "request_rates", "seed",
                                               "duration_s", "quality", "quality_reference", "title", "bogus"]),
                              _json, max_size=6))
def test_fuzzed_run_bodies_are_answered_with_json_never_a_500(fields):
    # One database for all examples (no rollback between them): the endpoint is made once.
    Endpoint.objects.filter(name="sim").exists() or endpoint()
    api, _ = token_for()
    r = submit(api, {"endpoints": ["sim"], **fields})
    assert r.status_code in (201, 400, 409), r.content
    assert r["Content-Type"] == "application/json"
    Run.objects.all().delete()


# --- a browser session: CSRF as JSON ----------------------------------------------------------

def test_a_session_post_without_the_csrf_token_is_a_json_403():
    e = endpoint()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user())
    r = submit(strict, minimal_run(e))
    assert r.status_code == 403 and "CSRF" in r.json()["error"] and not Run.objects.exists()
    strict.get(reverse("run-new"))
    r = submit(strict, minimal_run(e), HTTP_X_CSRFTOKEN=strict.cookies["csrftoken"].value)
    assert r.status_code == 201


# --- rate limits per token ----------------------------------------------------------------------

def test_each_token_has_its_own_rate_limit(settings):
    settings.API_RATE_LIMIT = "3/min"
    first, _ = token_for("alice")
    second, _ = token_for("alice")
    assert [first.get(API + "hosts/").status_code for _ in range(3)] == [200] * 3
    r = first.get(API + "hosts/")
    assert r.status_code == 429 and "rate limit" in r.json()["error"] and int(r["Retry-After"]) >= 1
    assert second.get(API + "hosts/").status_code == 200  # another token of the same member


# --- POST /api/decide with a token ---------------------------------------------------------------

V100 = {"gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": 16, "users": 4,
        "prompt_tokens": 512, "output_tokens": 100}


@pytest.mark.parametrize("path", ["/api/decide", API + "decide/"])
def test_decide_takes_a_token_without_csrf_and_answers_json_errors(path):
    api, _ = token_for()
    r = api.post(path, data=json.dumps(V100), content_type="application/json")
    assert r.status_code == 200, r.content
    assert r.json()["recommendation"]["recommended"]
    r = api.post(path, data=json.dumps({**V100, "users": 0}), content_type="application/json")
    assert r.status_code == 400 and "users" in r.json()["errors"]
    r = bearer("v100_wrong").post(path, data=json.dumps(V100), content_type="application/json")
    assert r.status_code == 401 and r["Content-Type"] == "application/json"


def test_decide_from_a_session_without_csrf_is_json_not_an_html_page():
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user())
    r = strict.post("/api/decide", data=json.dumps(V100), content_type="application/json")
    assert r.status_code == 403 and "CSRF" in r.json()["error"]


# --- the OpenAPI schema -------------------------------------------------------------------------

def test_the_schema_is_served_valid_and_describes_the_run_form(client):
    from drf_spectacular.validation import validate_schema

    r = client.get(API + "schema/")
    assert r.status_code == 200
    schema = yaml.safe_load(r.content)
    validate_schema(schema)
    paths = set(schema["paths"])
    assert {"/api/v1/runs/", "/api/v1/runs/{public_id}/", "/api/v1/runs/{public_id}/results/",
            "/api/v1/runs/{public_id}/requests/", "/api/v1/runs/{public_id}/cancel/", "/api/v1/endpoints/",
            "/api/v1/hosts/", "/api/v1/models/", "/api/v1/imports/", "/api/v1/comparisons/{public_id}/"} <= paths
    assert "multipart/form-data" in schema["paths"]["/api/v1/imports/"]["post"]["requestBody"]["content"]
    run_request = schema["components"]["schemas"]["RunRequest"]["properties"]
    from benchmarks.api.payloads import api_fields
    assert set(run_request) == set(api_fields())
    assert run_request["temperature"]["type"] == "number" and run_request["temperature"]["maximum"] == 2.0
    assert schema["components"]["securitySchemes"]["token"]["scheme"] == "bearer"


# --- imports and comparisons ---------------------------------------------------------------------

IMPORTS = __import__("pathlib").Path(__file__).parent / "data" / "imports"


def test_a_result_file_is_imported_with_a_token_and_labelled():
    from benchmarks.models import ImportedReport

    api, _ = token_for()
    with open(IMPORTS / "vllm_bench_serve_c8_detailed.json", "rb") as f:
        r = api.post(API + "imports/", {"file": f, "gpu": "Tesla V100-PCIE-16GB"})
    assert r.status_code == 201, r.content
    report = ImportedReport.objects.get(uploaded_by__username="alice")
    assert r.json()["public_id"] == report.public_id and report.filename == "vllm_bench_serve_c8_detailed.json"
    assert "not measured here" in r.json()["label"] and report.uploaded_by.username == "alice"
    assert r.json()["levels"] == len(report.data.levels) and report.gpu == "Tesla V100-PCIE-16GB"


def test_a_bad_result_file_gets_the_import_page_s_message_as_json(client):
    api, _ = token_for()
    with open(IMPORTS / "bad_truncated_vllm.json", "rb") as f:
        r = api.post(API + "imports/", {"file": f})
    assert r.status_code == 400 and r.json()["errors"]["file"][0].startswith("Could not import bad_truncated_vllm.json")
    r = api.post(API + "imports/", {"title": "no file"})
    assert r.status_code == 400 and "This field is required." in r.json()["errors"]["file"]
    r = api.post(API + "imports/", data="{}", content_type="application/json")
    assert r.status_code == 415 and r.json()["error"]
    assert client.post(API + "imports/", {}).status_code in (401, 403)


def test_a_comparison_is_read_with_its_members_warnings_and_ratios():
    a = measured_run([endpoint(name="fp8")], requests=5, owner=user("alice"))
    b = measured_run([endpoint(name="q4", backend="llamacpp", quantization="gguf_q4_k_m")], requests=5,
                     owner=user("alice"), prompt_tokens=256)
    comparison = services.comparison_create(owner=user("alice"), runs=[a, b], reports=[], title="fp8 vs q4")
    r = Client().get(API + f"comparisons/{comparison.public_id}/")
    assert r.status_code == 200, r.content
    body = r.json()
    assert [run["public_id"] for run in body["runs"]] == [a.public_id, b.public_id]
    assert any("prompt" in w.lower() for w in body["warnings"])  # 512 vs 256 prompt tokens
    assert body["ratios"] and body["throughput_chart"].endswith(f"/c/{comparison.public_id}/throughput.json")
    assert Client().get(API + "comparisons/nosuch/").json()["error"] == "No comparison has this link."


def test_client_processes_and_machines_are_kept_with_the_run(settings):
    settings.LOADGEN_QUEUE = "loadgen"
    e = endpoint()
    api, _ = token_for()
    r = submit(api, minimal_run(e, load_processes=4, load_workers=2))
    assert r.status_code == 201, r.content
    run = Run.objects.get()
    assert (run.load_processes, run.load_workers) == (4, 2)
    r = submit(api, minimal_run(e))
    assert r.status_code == 201
    assert Run.objects.exclude(id=run.id).get().load_processes == 0  # chosen per level
