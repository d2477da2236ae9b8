"""The runs list at scale: filters (page and API), pages in a stable order, runs picked across
pages into a comparison; archive and delete with their permissions; what is left of a deleted
run (410 Gone, and the note on the comparisons and decisions that used it); bounded queries."""
import html
from datetime import datetime, timedelta, timezone as dt_timezone

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks import services
from benchmarks.forms import MAX_COMPARED_RUNS
from benchmarks.models import Comparison, DeletedRun, LevelResult, RequestRecord, Run, Variant
from benchmarks.selectors import RUNS_PER_PAGE
from factories import bulk_runs, decide, endpoint, measured_run, user

pytestmark = pytest.mark.django_db


def day(month, d, hour=12):
    return datetime(2026, month, d, hour, tzinfo=dt_timezone.utc)


@pytest.fixture
def lab():
    """Five runs whose every attribute is set here, so each filter's answer is known by construction."""
    alice, bob = user("alice"), user("bob")
    vllm_a = endpoint(name="vllm-a", backend="vllm", host="lab-1", model="Model-A", quantization="fp8_e4m3")
    llama_b = endpoint(name="llama-b", backend="llamacpp", host="lab-2", model="Model-B", quantization="gguf_q4_k_m")
    vllm_c = endpoint(name="vllm-c", backend="vllm", host="lab-2", model="Model-A", quantization="awq")
    hot = [{"code": "hot", "reason": "The GPU reached 88 °C (over 85 °C)."}]
    few = [{"code": "few_samples", "reason": "Only 12 completed requests: p99 needs at least 100 to mean much."}]
    spec = [("alpha", [vllm_a], alice, Run.SUCCEEDED, day(3, 1), [], None),
            ("beta", [llama_b], bob, Run.FAILED, day(3, 10), few, None),
            ("gamma", [vllm_a, llama_b], alice, Run.PARTIAL, day(4, 1), hot, None),
            ("delta", [vllm_c], bob, Run.SUCCEEDED, day(4, 15), [], day(4, 20)),
            ("Epsilon nightly", [vllm_c], alice, Run.QUEUED, day(5, 1), [], None)]
    for title, endpoints, owner, status, created, flags, archived in spec:
        run = Run.objects.create(title=title, owner=owner, status=status, created=created, flags=flags,
                                 archived=archived, prompt_tokens=512, output_tokens=128, temperature=0.7,
                                 concurrency_levels=[1, 8], requests_per_level=10, warmup_requests=1)
        run.endpoints.set(endpoints)
    return {"alice": alice, "awq": Variant.objects.get(name="awq")}


FILTERS = [
    ({}, {"alpha", "beta", "gamma", "Epsilon nightly"}),  # archived runs hidden by default
    ({"archived": "include"}, {"alpha", "beta", "gamma", "delta", "Epsilon nightly"}),
    ({"archived": "only"}, {"delta"}),
    ({"q": "NIGHT"}, {"Epsilon nightly"}),
    ({"endpoint": "llama-b"}, {"beta", "gamma"}),
    ({"model": "Model-A"}, {"alpha", "gamma", "Epsilon nightly"}),
    ({"model": "Model-A", "archived": "include"}, {"alpha", "gamma", "delta", "Epsilon nightly"}),
    ({"variant": "awq"}, {"Epsilon nightly"}),
    ({"host": "lab-2"}, {"beta", "gamma", "Epsilon nightly"}),
    ({"backend": "llamacpp"}, {"beta", "gamma"}),
    ({"status": "failed"}, {"beta"}),
    ({"owner": "bob"}, {"beta"}),
    ({"mine": "1"}, {"alpha", "gamma", "Epsilon nightly"}),
    ({"created_after": "2026-04-01"}, {"gamma", "Epsilon nightly"}),
    ({"created_before": "2026-03-10"}, {"alpha", "beta"}),  # the last day counts whole
    ({"created_after": "2026-03-02", "created_before": "2026-04-01"}, {"beta", "gamma"}),
    ({"flags": "none"}, {"alpha", "Epsilon nightly"}),
    ({"flags": "any"}, {"beta", "gamma"}),
    ({"flags": "hot"}, {"gamma"}),
    ({"backend": "vllm", "owner": "alice", "status": "succeeded"}, {"alpha"}),
]


def _params(lab, params):
    return {k: (lab["awq"].pk if k == "variant" else v) for k, v in params.items()}


@pytest.mark.parametrize("params, titles", FILTERS, ids=[str(p) for p, _ in FILTERS])
def test_each_filter_narrows_the_page_and_the_api_alike(client, lab, params, titles):
    client.force_login(lab["alice"])
    page = client.get(reverse("run-list"), _params(lab, params))
    assert page.status_code == 200
    assert {r.title for r in page.context["page"]} == titles
    assert page.context["page"].paginator.count == len(titles)
    api = client.get("/api/v1/runs/", _params(lab, params))
    assert api.status_code == 200 and {r["title"] for r in api.json()["results"]} == titles


def test_a_wrong_filter_value_is_a_field_error_not_a_500(client, lab):
    client.force_login(lab["alice"])
    page = client.get(reverse("run-list"), {"status": "exploded", "backend": "llamacpp", "endpoint": "nope\x00"})
    assert page.status_code == 200 and "status" in page.context["form"].errors
    assert {r.title for r in page.context["page"]} == {"beta", "gamma"}  # the valid filter still applies
    api = client.get("/api/v1/runs/", {"status": "exploded", "created_after": "2026-05-02",
                                       "created_before": "2026-05-01"})
    assert api.status_code == 400
    errors = api.json()["errors"]
    assert set(errors) == {"status", "created_before"} and "before the first" in errors["created_before"][0]


def test_the_filters_stay_in_the_address_of_every_page_button(client):
    owner = user("alice")
    bulk_runs(3 * RUNS_PER_PAGE, [endpoint(name="e1")], [owner])
    client.force_login(owner)
    html = client.get(reverse("run-list"), {"backend": "vllm", "flags": "none", "page": 2}).content.decode()
    # One GET form holds filters and page buttons: pressing a page button sends the filters.
    start = html.index('id="runs-form"')
    form = html[start:html.index("</form>", start)]
    assert '<option value="vllm" selected>' in form and '<option value="none" selected>' in form
    assert 'name="page" value="1"' in form and 'name="page" value="3"' in form


def test_pages_hold_every_run_once_in_a_stable_order_even_with_equal_times(client):
    owner = user("alice")
    e = endpoint(name="e1")
    same = datetime(2026, 6, 1, tzinfo=dt_timezone.utc)
    runs = bulk_runs(2 * RUNS_PER_PAGE + 10, [e], [owner], minutes_apart=0, start=same)  # all in one instant
    shown = [r for r in runs if r.archived is None]
    client.force_login(owner)
    seen = []
    for number in (1, 2, 3):
        page = client.get(reverse("run-list"), {"page": number}).context["page"]
        seen += [r.public_id for r in page]
    assert len(seen) == len(shown) == len(set(seen))
    # Newest first; runs of one instant by id, newest id first, so a page never shifts.
    assert seen == [r.public_id for r in sorted(shown, key=lambda r: r.id, reverse=True)]
    assert client.get(reverse("run-list"), {"page": 99}).context["page"].number == 3  # past the end: the last


def test_runs_picked_on_two_pages_become_one_comparison(client):
    owner = user("alice")
    runs = bulk_runs(RUNS_PER_PAGE + 10, [endpoint(name="e1")], [owner], status=Run.SUCCEEDED, title="r")
    newest, oldest = runs[-1], runs[0]
    client.force_login(owner)
    # Ticked on page 1, then page 2 pressed: the tick travels in the address and shows on page 2.
    page2 = client.get(reverse("run-list"), {"runs": [newest.public_id], "page": 2})
    assert [r.public_id for r in page2.context["picked_elsewhere"]] == [newest.public_id]
    assert f'name="runs" value="{newest.public_id}" checked' in page2.content.decode()
    # Compare selected sends both to the comparison form, which offers only those two.
    form = client.get(reverse("comparison-new"), {"runs": [newest.public_id, oldest.public_id]})
    assert sorted(v for v, _ in form.context["form"].fields["runs"].widget.choices) == sorted(
        [newest.public_id, oldest.public_id])
    r = client.post(reverse("comparison-new"), {"runs": [newest.public_id, oldest.public_id], "title": "two pages"})
    comparison = Comparison.objects.get(title="two pages")
    assert r.url == comparison.get_absolute_url()
    assert set(comparison.runs.values_list("public_id", flat=True)) == {newest.public_id, oldest.public_id}


def test_a_selection_is_bounded(client):
    owner = user("alice")
    runs = bulk_runs(MAX_COMPARED_RUNS + 3, [endpoint(name="e1")], [owner], status=Run.SUCCEEDED)
    ids = [r.public_id for r in runs]
    client.force_login(owner)
    page = client.get(reverse("run-list"), {"runs": ids})
    assert [r.public_id for r in page.context["picked"]] == ids[:MAX_COMPARED_RUNS]
    assert f"at most {MAX_COMPARED_RUNS} runs" in page.content.decode()
    r = client.post(reverse("comparison-new"), {"runs": ids})
    assert f"At most {MAX_COMPARED_RUNS} runs in one comparison; you picked {len(ids)}." in r.context["form"].errors["runs"]
    assert not Comparison.objects.exists()


def test_the_list_and_the_picker_take_a_bounded_number_of_queries(client):
    owners = [user("alice"), user("bob"), user("carol")]
    endpoints = [endpoint(name=f"e{i}", host=f"lab-{i % 3}") for i in range(6)]
    runs = bulk_runs(300, endpoints, owners)
    client.force_login(owners[0])
    picked = [r.public_id for r in runs if r.status in Run.FINISHED][:MAX_COMPARED_RUNS]
    for params in ({}, {"backend": "vllm", "host": "lab-1", "flags": "any", "q": "nightly"},
                   {"page": 3, "runs": picked}, {"archived": "include", "owner": "bob", "page": 2}):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("run-list"), params).status_code == 200
        # session, user, count, page, endpoints of the page, picked runs and their endpoints, the
        # filters' choices (endpoints, models, variants, hosts, owners), the reports table, messages
        assert len(queries) <= 16, "\n".join(q["sql"][:200] for q in queries)
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("run-list"))
    bulk_runs(300, endpoints, owners, seed=2)
    with CaptureQueriesContext(connection) as more:
        client.get(reverse("run-list"))
    assert len(more) == len(few)  # twice the runs, not one query more
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("comparison-new"), {"runs": picked}).status_code == 200
    assert len(queries) <= 8
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/api/v1/runs/", {"page_size": 100, "backend": "vllm"}).status_code == 200
    assert len(queries) <= 8


# --- archive and delete ------------------------------------------------------------------------

@pytest.fixture
def owned():
    owner = user("alice")
    return measured_run([endpoint(name="sim-a")], levels=(1,), requests=3, owner=owner, title="alice's run")


@pytest.mark.parametrize("who, allowed", [("alice", True), ("bob", False), ("staff", True)])
def test_owners_and_staff_archive_and_others_are_refused(client, owned, who, allowed):
    client.force_login(user(who, staff=who == "staff"))
    r = client.post(reverse("run-archive", args=[owned.public_id]))
    owned.refresh_from_db()
    assert (r.status_code, owned.archived is not None) == ((302, True) if allowed else (403, False))
    if allowed:
        assert owned.title not in {x.title for x in client.get(reverse("run-list")).context["page"]}
        assert owned.title in {x.title for x in client.get(reverse("run-list"), {"archived": "only"}).context["page"]}
        client.post(reverse("run-archive", args=[owned.public_id]), {"archived": "0"})
        owned.refresh_from_db()
        assert owned.archived is None


def test_anonymous_readers_can_neither_archive_nor_delete(client, owned):
    for name in ("run-archive", "run-delete"):
        r = client.post(reverse(name, args=[owned.public_id]))
        assert r.status_code == 302 and r.url.startswith("/accounts/login/")
    owned.refresh_from_db()
    assert owned.archived is None
    assert client.delete(f"/api/v1/runs/{owned.public_id}/").status_code == 401
    assert Run.objects.filter(pk=owned.pk).exists()


def test_a_post_without_the_csrf_token_deletes_nothing(owned):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user("alice"))
    assert client.post(reverse("run-delete", args=[owned.public_id])).status_code == 403
    assert Run.objects.filter(pk=owned.pk).exists()


@pytest.mark.parametrize("who", ["alice", "staff"])
def test_delete_confirms_then_removes_the_run_and_all_it_measured(client, owned, who):
    client.force_login(user(who, staff=who == "staff"))
    confirm = client.get(reverse("run-delete", args=[owned.public_id]))
    assert confirm.status_code == 200 and "1 measured level" in confirm.content.decode()
    assert Run.objects.filter(pk=owned.pk).exists()  # a GET deletes nothing
    r = client.post(reverse("run-delete", args=[owned.public_id]))
    assert r.status_code == 302 and r.url == reverse("run-list")
    assert not Run.objects.filter(pk=owned.pk).exists()
    assert not LevelResult.objects.filter(run_id=owned.pk).exists()
    assert not RequestRecord.objects.filter(level__run_id=owned.pk).exists()
    gone = DeletedRun.objects.get(public_id=owned.public_id)
    assert gone.name == "alice's run" and gone.deleted_by.username == who


def test_another_member_may_not_delete(client, owned):
    client.force_login(user("bob"))
    assert client.get(reverse("run-delete", args=[owned.public_id])).status_code == 403
    assert client.post(reverse("run-delete", args=[owned.public_id])).status_code == 403
    assert Run.objects.filter(pk=owned.pk).exists()


def test_a_run_in_flight_is_not_deleted(client):
    run = Run.objects.create(owner=user("alice"), status=Run.RUNNING, prompt_tokens=8, output_tokens=8,
                             temperature=0, requests_per_level=1, warmup_requests=0)
    client.force_login(user("alice"))
    r = client.post(reverse("run-delete", args=[run.public_id]))
    assert r.status_code == 409 and "cancel it first" in r.content.decode()
    assert Run.objects.filter(pk=run.pk).exists()


def test_a_deleted_runs_permalinks_answer_410_gone(client, owned):
    services.run_delete(run=owned, by=user("alice"))
    page = client.get(owned.get_absolute_url())
    assert page.status_code == 410
    assert "Run “alice's run” was deleted on" in html.unescape(page.content.decode())
    for url in (reverse("run-export", args=[owned.public_id]), reverse("run-progress", args=[owned.public_id]),
                f"/api/v1/runs/{owned.public_id}/", f"/api/v1/runs/{owned.public_id}/results/"):
        r = client.get(url)
        assert r.status_code == 410 and r["Content-Type"] == "application/json", url
        assert r.json()["public_id"] == owned.public_id and "was deleted on" in r.json()["error"]
    assert client.get(reverse("run-requests-csv", args=[owned.public_id])).status_code == 410
    assert client.get("/r/NeverMadeThisId/").status_code == 404  # unknown stays not found


def test_a_comparison_that_held_a_deleted_run_says_so(client):
    kept = measured_run([endpoint(name="kept-ep")], levels=(1,), requests=3, title="kept")
    doomed = measured_run([endpoint(name="doomed-ep")], levels=(1,), requests=3, title="doomed")
    comparison = services.comparison_create(owner=None, runs=[kept, doomed], reports=[], title="both")
    services.run_delete(run=doomed, by=None)
    page = client.get(comparison.get_absolute_url())
    html = page.content.decode()
    assert page.status_code == 200
    assert "Run “doomed” was deleted on" in html and "kept-ep" in html and "doomed-ep" not in html
    api = client.get(f"/api/v1/comparisons/{comparison.public_id}/").json()
    assert [d["name"] for d in api["deleted_runs"]] == ["doomed"] and [r["title"] for r in api["runs"]] == ["kept"]
    services.run_delete(run=kept, by=None)
    html = client.get(comparison.get_absolute_url()).content.decode()
    assert "Nothing of this comparison is left to show." in html and "directly comparable" not in html


def test_a_decision_made_with_a_deleted_runs_measurements_says_so(client):
    from test_decisions import h200_inputs, h200_setup

    host, run, fp8, q4 = h200_setup(900.0, 349.0)
    decision = decide(h200_inputs(host))
    assert run.public_id in str(decision.result)  # its evidence links the run
    services.run_delete(run=run, by=None)
    page = client.get(decision.get_absolute_url())
    assert page.status_code == 200
    assert "Run “H200 sweep” was deleted on" in page.content.decode()


# --- the API ---------------------------------------------------------------------------------

def _token(name, staff=False):
    return {"HTTP_AUTHORIZATION": f"Bearer {services.api_token_create(owner=user(name, staff=staff), name='t')[1]}"}


def test_the_api_archives_and_deletes_with_the_pages_permissions(client, owned):
    alice, bob, staff = _token("alice"), _token("bob"), _token("root", staff=True)
    url = f"/api/v1/runs/{owned.public_id}/"
    assert client.post(url + "archive/", {}, content_type="application/json", **bob).status_code == 403
    r = client.post(url + "archive/", {"archived": True}, content_type="application/json", **alice)
    assert r.status_code == 200 and r.json()["archived"]
    r = client.post(url + "archive/", {"archived": "yes"}, content_type="application/json", **alice)
    assert r.status_code == 400 and "archived" in r.json()["errors"]
    assert client.delete(url, **bob).status_code == 403
    r = client.delete(url, **staff)
    assert r.status_code == 204
    r = client.delete(url, **alice)
    assert r.status_code == 410 and "was deleted" in r.json()["error"]


def test_the_api_saves_a_comparison_with_the_forms_validation(client):
    run = measured_run([endpoint(name="ep")], levels=(1,), requests=3, title="measured")
    queued = Run.objects.create(status=Run.QUEUED, prompt_tokens=8, output_tokens=8, temperature=0,
                                requests_per_level=1, warmup_requests=0)
    token = _token("alice")
    assert client.post("/api/v1/comparisons/", {"runs": [run.public_id]}, content_type="application/json"
                       ).status_code == 401
    r = client.post("/api/v1/comparisons/", {"runs": [run.public_id], "title": "via the API"},
                    content_type="application/json", **token)
    assert r.status_code == 201
    body = r.json()
    assert [x["public_id"] for x in body["runs"]] == [run.public_id] and body["title"] == "via the API"
    assert Comparison.objects.get(public_id=body["public_id"]).owner.username == "alice"
    for sent, field in (({"runs": [queued.public_id]}, "runs"), ({"runs": ["nope\x00"]}, "runs"),
                        ({}, "__all__"), ({"runs": "x"}, "runs"), ({"reports": ["unknown"]}, "reports")):
        r = client.post("/api/v1/comparisons/", sent, content_type="application/json", **token)
        assert r.status_code == 400 and field in r.json()["errors"], (sent, r.json())


def test_the_api_uploads_an_evaluation_text_a_run_then_uses(client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    token = _token("alice")
    text = "The quick brown fox jumps over the lazy dog. " * 50
    r = client.post("/api/v1/evaluation-texts/", {"file": SimpleUploadedFile("fox.txt", text.encode())}, **token)
    assert r.status_code == 201
    body = r.json()
    import hashlib

    assert body["sha256"] == hashlib.sha256(text.encode()).hexdigest() and body["characters"] == len(text)
    again = client.post("/api/v1/evaluation-texts/", {"file": SimpleUploadedFile("other.txt", text.encode()),
                                                      "name": "renamed"}, **token).json()
    assert again["public_id"] == body["public_id"] and again["name"] == "fox.txt"  # stored once
    r = client.post("/api/v1/evaluation-texts/", {"file": SimpleUploadedFile("bin.txt", b"\xff\xfe")}, **token)
    assert r.status_code == 400 and "not UTF-8" in r.json()["errors"]["file"][0]
    e = endpoint(name="quality-ep")
    r = client.post("/api/v1/runs/", {"endpoints": [e.name], "quality": True, "quality_text": body["public_id"]},
                    content_type="application/json", **token)
    assert r.status_code == 201, r.json()
    assert Run.objects.get(public_id=r.json()["public_id"]).quality_text.public_id == body["public_id"]


def test_an_api_address_with_a_newline_is_a_json_404(client):
    r = client.delete("/api/v1/runs/a%0Ab/", **_token("alice"))
    assert r.status_code == 404 and r.json()["error"].startswith("no API route")


@pytest.mark.parametrize("who", ["anonymous", "revoked"])
def test_the_new_api_routes_refuse_anonymous_and_revoked_tokens_with_json(client, owned, who):
    headers = {}
    if who == "revoked":
        token, key = services.api_token_create(owner=user("alice"), name="old")
        services.api_token_revoke(token=token)
        headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    url = f"/api/v1/runs/{owned.public_id}/"
    for method, path, body in (("post", url + "archive/", {"archived": True}), ("delete", url, None),
                               ("post", "/api/v1/comparisons/", {"runs": [owned.public_id]}),
                               ("post", "/api/v1/evaluation-texts/", {"name": "x"})):
        r = getattr(client, method)(path, body, content_type="application/json", **headers)
        assert r.status_code == 401 and r["Content-Type"] == "application/json" and r.json()["error"], (path, r)
    owned.refresh_from_db()
    assert owned.archived is None and not Comparison.objects.exists()


def test_odd_filter_values_are_field_errors_on_the_page_and_the_api(client, lab):
    client.force_login(lab["alice"])
    for params in ({"variant": "9" * 30}, {"variant": "x"}, {"created_after": "9999-12-31"},
                   {"owner": "nobody"}, {"q": "a\x00b"}, {"page": "-3", "archived": "sometimes"}):
        page = client.get(reverse("run-list"), params)
        assert page.status_code == 200 and page.context["form"].errors, params
        assert client.get("/api/v1/runs/", params).status_code in (400, 404), params
