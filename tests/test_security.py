"""Who may do what, what is never shown, and where a worker may be sent."""
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.models import Endpoint, Run, endpoint_url_problem
from factories import endpoint, measured_run, run_form, user

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url, ok", [
    ("http://127.0.0.1:8000", True),
    ("https://gpu1.lab:8443", True),
    ("http://10.0.0.5:8001/", True),
    ("http://[::1]:8000", True),
    ("ftp://gpu1:21", False),
    ("http://user:pw@gpu1:8000", False),
    ("http://gpu1:8000/v1", False),
    ("http://gpu1:8000/?x=1", False),
    ("http://169.254.169.254/latest/meta-data", False),
    ("http://metadata.google.internal/", False),
    ("http://[fe80::1]:8000", False),
    ("http://0.0.0.0:8000", False),
    ("http://gpu1:99999", False),
    ("http://", False),
    ("http://gpu1:8000", True),  # a LAN host name without a domain is fine
])
def test_endpoint_urls_are_checked(url, ok):
    assert (endpoint_url_problem(url) == "") == ok


def test_the_admin_refuses_a_metadata_address(client):
    from test_admin_inventory import endpoint_post
    e = endpoint()
    client.force_login(user("root", staff=True))
    r = client.post(reverse("admin:benchmarks_endpoint_change", args=[e.id]),
                    endpoint_post(e, base_url="http://169.254.169.254/"))
    assert r.status_code == 200 and "not an inference server" in r.content.decode()
    assert Endpoint.objects.get(id=e.id).base_url == "http://127.0.0.1:9"


def test_register_endpoint_refuses_a_bad_url():
    from django.core.management import CommandError, call_command
    with pytest.raises(CommandError, match="without /v1"):
        call_command("register_endpoint", name="x", backend="vllm", url="http://gpu1:8000/v1")


def test_a_run_can_only_name_registered_endpoints_so_workers_go_nowhere_else(client):
    client.force_login(user())
    r = client.post(reverse("run-new"), {**run_form([]), "endpoints": ["http://evil.example/"]})
    assert r.status_code == 200 and not Run.objects.exists()
    assert "is not a valid endpoint id" in r.content.decode()


def test_members_cannot_reach_the_inventory_and_anonymous_users_cannot_write(client):
    e = endpoint()
    run = measured_run([e], levels=(1,), requests=2)
    Run.objects.filter(id=run.id).update(status=Run.RUNNING)  # a run that could be cancelled
    assert client.post(reverse("run-new"), run_form([e])).status_code == 302  # to login
    assert client.post(reverse("run-cancel", args=[run.public_id])).status_code == 302
    assert Run.objects.get(id=run.id).status == Run.RUNNING
    assert client.post(reverse("import-new"), {}).status_code == 302
    assert client.post(reverse("comparison-new"), {}).status_code == 302
    assert Run.objects.count() == 1
    client.force_login(user())
    assert client.get(reverse("admin:benchmarks_endpoint_changelist")).status_code == 302


def test_an_api_key_is_never_rendered(client):
    e = endpoint(api_key="sk-do-not-show-9f8e")
    run = measured_run([e], levels=(1,), requests=2)
    client.force_login(user("root", staff=True))
    pages = [run.get_absolute_url(), reverse("run-new"), reverse("run-list"), reverse("run-export", args=[run.public_id]),
             reverse("admin:benchmarks_endpoint_change", args=[e.id]), reverse("admin:benchmarks_endpoint_changelist"),
             reverse("admin:benchmarks_run_change", args=[run.id])]
    for url in pages:
        assert "sk-do-not-show-9f8e" not in client.get(url).content.decode(), url


def test_one_user_cannot_queue_more_than_the_runs_in_flight_limit(client, settings, monkeypatch):
    from benchmarks import services
    monkeypatch.setattr(services, "run_enqueue", lambda **k: None)
    settings.MAX_RUNS_IN_FLIGHT = 2
    e = endpoint()
    client.force_login(user())
    for _ in range(2):
        assert client.post(reverse("run-new"), run_form([e])).status_code == 302
    r = client.post(reverse("run-new"), run_form([e]))
    assert r.status_code == 200 and "You already have 2 runs queued or running" in r.content.decode()
    assert Run.objects.count() == 2


def test_a_run_may_not_ask_for_too_many_requests(client, settings):
    settings.MAX_REQUESTS_PER_RUN = 100
    e = endpoint()
    client.force_login(user())
    r = client.post(reverse("run-new"), run_form([e], concurrency_levels="1,2,4", requests_per_level=50))
    assert "would send 150 requests" in r.content.decode() and not Run.objects.exists()


def test_deploy_checks_are_clean_with_production_settings():
    env = dict(os.environ, DEPLOYMENT="production", DEBUG="false", ALLOWED_HOSTS="v100site.example.org",
               SECRET_KEY="x" * 20 + "-a-long-random-production-key-0123456789")
    out = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
                         capture_output=True, text=True, env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no issues" in out.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "SECRET_KEY_FILE")}
    env["DEPLOYMENT"] = "production"
    out = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode != 0 and "SECRET_KEY" in out.stderr


@pytest.mark.parametrize("key", ["short-key", "a" * 60, "django-insecure-" + "k3y-0123456789" * 4])
def test_production_refuses_to_start_with_a_weak_secret_key(key):
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY_FILE"}
    env.update(DEPLOYMENT="production", SECRET_KEY=key, ALLOWED_HOSTS="v100site.example.org")
    out = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode != 0 and "SECRET_KEY is weak" in out.stderr


def test_the_local_key_and_its_folder_are_for_this_user_alone(tmp_path):
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "SECRET_KEY_FILE", "DEPLOYMENT")}
    env["V100SITE_VAR_DIR"] = str(var)
    out = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True, env=env,
                         cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
    assert stat.S_IMODE((var / "secret_key").stat().st_mode) == 0o600
    # and run.sh makes what its processes write (the database, the broker's files) the same
    script = (Path(__file__).parents[1] / "scripts" / "run.sh").read_text()
    assert script.index("umask 077") < script.index("manage.py migrate")


# --- secrets ---------------------------------------------------------------------------------

def viewer():
    """A staff member who may only view, everything."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    u = get_user_model().objects.create_user("viewer", password="pw-for-tests-1", is_staff=True)
    u.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    return u


def test_a_staff_member_who_may_only_view_sees_whether_a_key_is_stored_but_never_the_key(client):
    e = endpoint(api_key="sk-view-only-4d2c")
    bare = endpoint(name="no-key", url="http://127.0.0.1:10")
    client.force_login(viewer())
    r = client.get(reverse("admin:benchmarks_endpoint_change", args=[e.id]))
    page = r.content.decode()
    assert r.status_code == 200 and "Close" in page and 'name="_save"' not in page  # the read-only view
    assert "http://127.0.0.1:9" in page  # the other fields are shown, read-only
    assert "sk-view-only-4d2c" not in page
    assert "yes (write-only: never shown)" in page
    page = client.get(reverse("admin:benchmarks_endpoint_change", args=[bare.id])).content.decode()
    assert "Stored API key" in page and "write-only: never shown" not in page


def secret_lookup_paths(model, depth=3, prefix=""):
    """Every lookup path from `model` to Endpoint.api_key through at most `depth` relations."""
    paths = [prefix + "api_key"] if model is Endpoint else []
    if depth:
        for field in model._meta.get_fields():
            if field.is_relation and field.related_model is not None:
                paths += secret_lookup_paths(field.related_model, depth - 1, f"{prefix}{field.name}__")
    return paths


def test_no_admin_list_answers_a_lookup_on_the_api_key(client):
    from django.contrib import admin

    endpoint(api_key="sk-lookup-7a1b")
    client.force_login(viewer())
    tried = 0
    for model, model_admin in admin.site._registry.items():
        for attr in ("search_fields", "list_filter", "list_display", "ordering", "sortable_by"):
            assert not any("api_key" in str(f) for f in getattr(model_admin, attr) or ()), (model, attr)
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        for path in {"api_key", *secret_lookup_paths(model)}:
            for lookup in (f"{path}__startswith", path, f"{path}__regex"):
                r = client.get(url, {lookup: "sk-"})
                # 400 (DisallowedModelAdminLookup), or the "?e=1" redirect of a lookup that does not
                # exist on this model: never a page with a count.
                assert r.status_code in (400, 302), (url, lookup, r.status_code)
                assert r.status_code == 400 or path == "api_key" and model is not Endpoint, (url, lookup)
                tried += 1
    assert tried > 30
    # Other filters still work.
    r = client.get(reverse("admin:benchmarks_endpoint_changelist"), {"backend": "vllm"})
    assert r.status_code == 200 and "1 endpoint" in r.content.decode()
    r = client.get(reverse("admin:benchmarks_run_changelist"), {"endpoints__backend": "vllm"})
    assert r.status_code == 200


def test_a_changed_base_url_removes_the_stored_key_unless_a_new_one_is_given(client):
    from test_admin_inventory import endpoint_post

    e = endpoint(api_key="sk-bound-to-9")
    client.force_login(user("root", staff=True))
    url = reverse("admin:benchmarks_endpoint_change", args=[e.id])
    r = client.post(url, endpoint_post(e, base_url="http://127.0.0.1:10"), follow=True)
    e.refresh_from_db()
    assert (e.base_url, e.api_key) == ("http://127.0.0.1:10", "")
    assert "the stored API key was removed" in r.content.decode()
    # A key typed in the same change goes with the new URL, silently.
    r = client.post(url, endpoint_post(e, base_url="http://127.0.0.1:11", api_key="sk-for-11"), follow=True)
    e.refresh_from_db()
    assert (e.base_url, e.api_key) == ("http://127.0.0.1:11", "sk-for-11")
    assert "the stored API key was removed" not in r.content.decode()
    # Same URL (a trailing slash aside), no key typed: kept.
    client.post(url, endpoint_post(e, base_url="http://127.0.0.1:11/"))
    e.refresh_from_db()
    assert e.api_key == "sk-for-11"


def test_register_endpoint_removes_the_key_when_the_url_changes_and_says_so(monkeypatch):
    from io import StringIO

    from django.core.management import CommandError, call_command

    def register(url, **kw):
        out = StringIO()
        call_command("register_endpoint", name="gpu-a", backend="vllm", url=url, stdout=out, **kw)
        return out.getvalue(), Endpoint.objects.get(name="gpu-a").api_key

    monkeypatch.setenv("GPU_A_KEY", "sk-cmd-1")
    assert register("http://127.0.0.1:8000", api_key_env="GPU_A_KEY")[1] == "sk-cmd-1"
    out, key = register("http://127.0.0.1:8000")  # an update that gives no key keeps it
    assert key == "sk-cmd-1" and "removed" not in out
    out, key = register("http://127.0.0.1:8001")
    assert key == "" and "the stored API key was removed" in out
    with pytest.raises(CommandError, match="NOT_SET_ANYWHERE is not set"):
        register("http://127.0.0.1:8001", api_key_env="NOT_SET_ANYWHERE")


# --- who may cancel --------------------------------------------------------------------------

def test_only_the_owner_or_staff_can_cancel_a_run(client):
    from benchmarks.models import Run as R

    owner, other = user("owner"), user("other")
    e = endpoint()
    runs = [R.objects.create(owner=owner, prompt_tokens=8, output_tokens=8, temperature=0.7,
                             concurrency_levels=[1], requests_per_level=1, warmup_requests=0) for _ in range(3)]
    cancel = [reverse("run-cancel", args=[r.public_id]) for r in runs]
    for r in runs:
        r.endpoints.set([e])
    client.post(cancel[0])  # anonymous: to the login page
    assert R.objects.get(id=runs[0].id).status == R.QUEUED
    client.force_login(other)
    page = client.get(runs[0].get_absolute_url()).content.decode()
    assert "Cancel run" not in page
    r = client.post(cancel[0])
    assert r.status_code == 403 and "Only the member who queued this run" in r.content.decode()
    assert R.objects.get(id=runs[0].id).status == R.QUEUED
    R.objects.filter(id=runs[1].id).update(status=R.RUNNING)
    assert client.post(cancel[1]).status_code == 403
    assert R.objects.get(id=runs[1].id).status == R.RUNNING
    client.force_login(owner)
    assert "Cancel run" in client.get(runs[0].get_absolute_url()).content.decode()
    assert client.post(cancel[0]).status_code == 302
    assert R.objects.get(id=runs[0].id).status == R.CANCELLED
    client.force_login(user("root", staff=True))
    assert client.post(cancel[1]).status_code == 302
    assert R.objects.get(id=runs[1].id).status == R.CANCELLED


# --- the runs-in-flight limit under parallel submissions -------------------------------------

@pytest.mark.django_db(transaction=True)
def test_parallel_submissions_never_pass_the_runs_in_flight_limit(settings):
    """20 submissions of one member at once, each from its own thread and database connection,
    against a limit of 5: exactly 5 runs, and exactly 5 tasks on the broker."""
    import threading

    from django.db import connection
    from django.test import Client

    from v100site.celery import app

    settings.MAX_RUNS_IN_FLIGHT = 5
    queue = f"test-in-flight-{os.getpid()}"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue  # nothing consumes it: count what arrived
    e = endpoint()
    member = user()
    start = threading.Barrier(20)
    answers = []

    def submit():
        c = Client(raise_request_exception=False)
        c.force_login(member)
        try:
            start.wait(60)
            r = c.post(reverse("run-new"), run_form([e]))
            answers.append((r.status_code, r.content.decode()))
        except Exception as exc:  # reported below with the others
            answers.append((0, repr(exc)))
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    try:
        codes = sorted(code for code, _ in answers)
        assert codes == [200] * 15 + [302] * 5, [text[-300:] for code, text in answers if code not in (200, 302)]
        assert all("runs queued or running (the limit is 5)" in text for code, text in answers if code == 200)
        assert Run.objects.filter(owner=member).count() == 5
        with app.connection_for_write() as conn:
            assert conn.default_channel.queue_declare(queue, passive=True).message_count == 5
    finally:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_delete(queue)


# --- login throttling ------------------------------------------------------------------------

def login(client, username="alice", password="pw-for-tests-1", path=None, **extra):
    return client.post(path or reverse("login"), {"username": username, "password": password}, **extra)


def logged_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_wrong_passwords_lock_that_login_for_a_while_then_it_opens_again(client, settings):
    import time
    from datetime import timedelta

    settings.AXES_FAILURE_LIMIT = 3
    # Long enough that a loaded machine cannot outlast it between the steps below.
    settings.AXES_COOLOFF_TIME = timedelta(seconds=120)
    user(), user("bob")
    for _ in range(2):
        r = login(client, password="wrong")
        assert r.status_code == 200 and "Please enter a correct username and password" in r.content.decode()
    assert login(client, password="wrong").status_code == 429  # the third: locked
    r = login(client)  # the right password, refused
    assert r.status_code == 429 and not logged_in(client)
    page = r.content.decode()
    assert "3 wrong passwords in a row" in page and "refused, even with the right password" in page
    assert "alice" in page and "minutes" in page
    assert login(client, path=reverse("admin:login")).status_code == 429  # the admin's login too
    assert not logged_in(client)
    # The lockout is for this user name from this address: others still log in.
    assert login(client, "bob").status_code == 302 and logged_in(client)
    client.logout()
    assert login(client, REMOTE_ADDR="10.9.8.7").status_code == 302 and logged_in(client)
    client.logout()
    # A client-sent X-Forwarded-For does not make another address (no proxy is configured).
    assert login(client, HTTP_X_FORWARDED_FOR="10.1.1.1").status_code == 429
    settings.AXES_COOLOFF_TIME = timedelta(seconds=1)
    time.sleep(1.2)  # the lockout ends (the last refused try restarted it)
    assert login(client).status_code == 302 and logged_in(client)


def test_a_successful_login_clears_the_count(client, settings):
    settings.AXES_FAILURE_LIMIT = 3
    user()
    for _ in range(4):
        for _ in range(2):
            assert login(client, password="wrong").status_code == 200
        assert login(client).status_code == 302 and logged_in(client)
        client.logout()


def test_behind_a_configured_proxy_the_address_is_the_one_it_appended(settings):
    from django.test import RequestFactory

    from v100site.security import client_ip

    request = RequestFactory().get("/", REMOTE_ADDR="172.18.0.1", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.9")
    assert client_ip(request) == "172.18.0.1"
    settings.BEHIND_TLS_PROXY = True
    assert client_ip(request) == "203.0.113.9"
    assert client_ip(RequestFactory().get("/", REMOTE_ADDR="172.18.0.1")) == "172.18.0.1"


# --- what anonymous readers of permalinks see --------------------------------------------------

def measured_through_the_engine(simulator, owner):
    """A run measured by the real engine (services.run_execute, in this process) on two simulated
    servers on an H200 host: a vLLM whose /version fails (its server notes quote the URL) and a
    llama.cpp whose every third request fails; both need the API key."""
    from benchmarks import services
    from benchmarks.models import Gpu, Host

    host = Host.objects.create(name="h200-lab", hostname="gpu7.lab.internal")
    Gpu.objects.create(host=host, index=0, name="NVIDIA H200", memory_total_mib=143771, compute_capability="9.0")
    vllm = simulator(dialect="vllm", api_key="sk-anon-check-1", fail_paths="/version=500", decode_ms=2)
    llama = simulator(dialect="llamacpp", api_key="sk-anon-check-2", fault="http500", fault_every=3, decode_ms=2)
    endpoints = [
        endpoint(vllm.url, name="h200-vllm-fp8", backend="vllm", host=host.name, quantization="fp8_e4m3",
                 api_key="sk-anon-check-1"),
        endpoint(llama.url, name="h200-llama-q4", backend="llamacpp", host=host.name,
                 quantization="gguf_q4_k_m", api_key="sk-anon-check-2"),
    ]
    for e, sim in zip(endpoints, (vllm, llama)):
        e.launch_command = f"serve /srv/private-models/7b --port {sim.url.rsplit(':', 1)[1]} --secret-flag"
        e.launch_flags = {"model-dir": "/srv/private-models"}
        e.save()
    run = Run.objects.create(owner=owner, title="public check", prompt_tokens=16, output_tokens=6,
                             temperature=0.7, concurrency_levels=[1, 2], requests_per_level=6, warmup_requests=0,
                             progress_total=24)
    run.endpoints.set(endpoints)
    services.run_execute(run_id=run.id)
    run.refresh_from_db()
    assert run.status == Run.PARTIAL and run.levels.count() == 4, (run.status, run.error)
    return run, endpoints, host


def public_urls(run, comparison, decision):
    from benchmarks.views import CHARTS

    urls = [run.get_absolute_url(), reverse("run-progress", args=[run.public_id]),
            reverse("run-export", args=[run.public_id]), reverse("run-requests-csv", args=[run.public_id]),
            comparison.get_absolute_url(), reverse("comparison-chart", args=[comparison.public_id, "json"]),
            reverse("comparison-chart", args=[comparison.public_id, "csv"]), decision.get_absolute_url()]
    for name in CHARTS:
        for fmt in ("json", "csv"):
            urls.append(reverse("run-chart", args=[run.public_id, name, fmt]))
    for level in run.levels.all():
        urls.append(reverse("run-chart", args=[run.public_id, "timeline", "json"]) + f"?level={level.public_id}")
    from benchmarks.engine.catalogue import HISTORY_FIGURES

    for fingerprint in {lv.fingerprint for lv in run.levels.all()}:  # its workload's history
        urls.append(reverse("history", args=[fingerprint]))
        urls += [reverse("history-chart", args=[fingerprint, f.name, fmt]) for f in HISTORY_FIGURES
                 for fmt in ("json", "csv")]
    return urls


@pytest.mark.django_db(transaction=True)
def test_anonymous_readers_see_no_owner_address_launch_command_key_or_database_id(client, simulator, settings):
    import json
    from urllib.parse import urlsplit

    from benchmarks import services
    from factories import decide
    from test_decisions import h200_inputs

    owner = user("owner-zq7")
    run, endpoints, host = measured_through_the_engine(simulator, owner)
    comparison = services.comparison_create(owner=owner, runs=[run], reports=[], title="cmp")
    decision = decide(h200_inputs(host, users=4), owner=owner)
    levels = list(run.levels.all())
    secrets = ["owner-zq7", "sk-anon-check", "/srv/private-models", "--secret-flag", "gpu7.lab.internal"]
    for e in endpoints:
        secrets += [e.base_url, urlsplit(e.base_url).netloc]
    pages = {}
    for url in public_urls(run, comparison, decision):
        r = client.get(url)
        if r.status_code == 404:  # a chart this run has no data for (GPU, server)
            continue
        assert r.status_code == 200, url
        pages[url] = r.content.decode()
        for text in secrets:
            assert text not in pages[url], (url, text)
        for lv in levels:
            assert f'level-{lv.pk}"' not in pages[url] and f'value="{lv.pk}"' not in pages[url], url
            assert f"level={lv.pk}" not in pages[url], url
        for e in endpoints:
            assert f"endpoints%3D{e.pk}%26" not in pages[url] and f"endpoints={e.pk}&" not in pages[url], url
        assert f"runs={run.id}" not in pages[url]
    assert len(pages) >= 20
    page = pages[run.get_absolute_url()]
    # What the server notes and preflight said is there, its addresses blanked.
    assert "[address hidden]" in page and "HTTP 500" in page and "h200-llama-q4" in page
    for lv in levels:
        assert f'id="level-{lv.public_id}"' in page and f'value="{lv.public_id}"' in page
    export = json.loads(pages[reverse("run-export", args=[run.public_id])])
    assert export["version"] == 6 and set(export["endpoints"]) == {"h200-vllm-fp8", "h200-llama-q4"}
    assert {lv["endpoint"] for lv in export["levels"]} == set(export["endpoints"])
    assert {lv["id"] for lv in export["levels"]} == {lv.public_id for lv in levels}
    assert all(e["base_url"] is None and e["launch_command"] is None for e in export["endpoints"].values())
    assert any(r["error"] for lv in export["levels"] for r in lv["requests"])
    # The timeline is chosen by public id; a database id does not select a level.
    chart = reverse("run-chart", args=[run.public_id, "timeline", "json"])
    last = max(levels, key=lambda lv: (lv.endpoint.name, lv.level_index))
    title = lambda q: client.get(chart + q).json()["layout"]["title"]["text"]  # noqa: E731
    assert title(f"?level={last.public_id}") == f"Requests of {last.endpoint.name} at {last.load_label}"
    assert title(f"?level={last.pk}") != title(f"?level={last.public_id}")
    decision_page = pages[decision.get_absolute_url()]
    assert f"#level-{levels[0].public_id}" in decision_page or f"#level-{levels[1].public_id}" in decision_page
    assert "endpoints%3Dh200-" in decision_page  # "measure this next" links name endpoints

    # Members see it all.
    client.force_login(user())
    page = client.get(run.get_absolute_url()).content.decode()
    assert "owner-zq7" in page and "/srv/private-models" in page and urlsplit(endpoints[0].base_url).netloc in page
    export = client.get(reverse("run-export", args=[run.public_id])).json()
    assert export["endpoints"]["h200-vllm-fp8"]["base_url"] == endpoints[0].base_url
    # A site may show addresses to everyone, never who queued a run.
    client.logout()
    settings.PUBLIC_SHOW_ENDPOINT_ADDRESSES = True
    page = client.get(run.get_absolute_url()).content.decode()
    assert "/srv/private-models" in page and "owner-zq7" not in page
    assert "owner-zq7" not in client.get(decision.get_absolute_url()).content.decode()


# --- proxies and the Content-Security-Policy ---------------------------------------------------

PROBE = ("from django.test import Client; "
         "r = Client().get('/accounts/login/', HTTP_X_FORWARDED_PROTO='https', SERVER_NAME='v100.example.org'); "
         "print(r.status_code, r.get('Location', ''))")


def production_get(**env) -> str:
    env = {**{k: v for k, v in os.environ.items() if k != "BEHIND_TLS_PROXY"}, "DEPLOYMENT": "production",
           "ALLOWED_HOSTS": "v100.example.org", "SECRET_KEY": "x" * 20 + "-a-long-random-production-key-0123456789",
           **env}
    out = subprocess.run([sys.executable, "manage.py", "shell", "-c", PROBE], capture_output=True, text=True,
                         env=env, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_x_forwarded_proto_is_believed_only_behind_a_configured_proxy(rf):
    assert not rf.get("/", HTTP_X_FORWARDED_PROTO="https").is_secure()
    # Production redirects plain http to https; a client's X-Forwarded-Proto does not skip that...
    assert production_get() == "301 https://v100.example.org/accounts/login/"
    # ...unless a proxy that sets the header is configured.
    assert production_get(BEHIND_TLS_PROXY="true").startswith("200")


def test_every_page_has_a_content_security_policy(client):
    run = measured_run([endpoint()], levels=(1,), requests=2)
    for url in (run.get_absolute_url(), reverse("login"), reverse("admin:login"),
                reverse("run-chart", args=[run.public_id, "throughput", "json"])):
        policy = client.get(url)["Content-Security-Policy"]
        assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
        assert "'unsafe-eval'" not in policy and "object-src 'none'" in policy


def test_templates_have_no_inline_scripts():
    import re
    from pathlib import Path

    for path in (Path(__file__).parent.parent / "templates").rglob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path  # every script is a static file
        assert not re.search(r"\son[a-z]+\s*=", text), path  # no inline event handlers


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_the_pages_work_under_the_content_security_policy(browser, live_server):
    """The run page with every chart, the decision pages, the login page and the admin (its
    list, change form with the GPU picker, and delete page) in chromium: no policy violation
    reported, no console error, and the charts drawn."""
    from conftest import log_in, watched
    from test_results_browser import GPU

    from factories import decide

    e = endpoint(name="llama", backend="llamacpp", quantization="gguf_q4_k_m")
    run = measured_run([e], levels=(1, 8), requests=20, gpu=GPU, server=True)
    decision = decide(owner=user(), inputs={
        "host": None, "gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": 16.0,
        "gpu_count": 1, "interconnect": "pcie", "model": None, "users": 8, "prompt_tokens": 512,
        "output_tokens": 100, "context_tokens": 8192, "ttft_p90_ms": None, "tpot_ms": None,
        "min_user_tok_s": None, "priority": "single_user_speed"})
    context = browser.new_context()
    context.add_init_script("window.cspViolations = []; document.addEventListener('securitypolicyviolation',"
                            " e => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));")
    page = watched(context.new_page())
    failed = []
    page.on("response", lambda r: r.status >= 400 and failed.append(f"{r.status} {r.url}"))

    def check(path, ready="body"):
        page.goto(live_server.url + path)
        page.wait_for_selector(ready)
        assert page.evaluate("window.cspViolations") == [], path
        assert page.js_errors == [] and failed == [], (path, page.js_errors, failed)

    check(run.get_absolute_url(), "#chart-timeline")  # anonymous
    page.wait_for_function("() => [...document.querySelectorAll('.chart')].every(c => c.dataset.drawn === 'true')",
                           timeout=30000)
    assert page.locator(".chart .main-svg").count() >= 6  # Plotly drew every chart
    page.select_option("#chart-timeline select", index=1)
    page.wait_for_function("() => document.querySelector('#chart-timeline .gtitle').textContent.includes('8 concurrent')")
    check(decision.get_absolute_url(), "#recommendation")
    page.click("#copy-link")
    check(reverse("login"), "input[name=username]")
    staff = user("root", staff=True)
    log_in(page, live_server, reverse("decision-new"))
    check(reverse("decision-new"), "#decision-form")
    page.select_option("#id_host", index=0)
    check(run.get_absolute_url(), ".chart")  # as a member
    context.clear_cookies()
    page.goto(live_server.url + reverse("admin:login"))
    page.fill("input[name=username]", staff.username)
    page.fill("input[name=password]", "pw-for-tests-1")
    page.click("input[type=submit]")
    for path, ready in ((reverse("admin:index"), "#content"),
                        (reverse("admin:benchmarks_endpoint_changelist") + "?backend=llamacpp", "#result_list"),
                        (reverse("admin:benchmarks_endpoint_change", args=[e.id]), "#id_gpus_from"),
                        (reverse("admin:benchmarks_run_change", args=[run.id]), "#content"),
                        (reverse("admin:benchmarks_host_add"), "#id_name"),
                        (reverse("admin:benchmarks_endpoint_delete", args=[e.id]), "#content")):
        check(path, ready)
    context.close()


@pytest.mark.django_db(transaction=True)
def test_levels_stored_before_public_ids_get_random_ones_and_saved_decisions_link_to_them():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before, after = [("benchmarks", "0002_published_v100_reference")], [("benchmarks", "0003_levelresult_public_id")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = MigrationExecutor(connection).loader.project_state(before).apps
        host = old.get_model("benchmarks", "Host").objects.create(name="old-host", queue_name="host-old")
        e = old.get_model("benchmarks", "Endpoint").objects.create(name="old", host=host, backend="vllm",
                                                                   base_url="http://127.0.0.1:9")
        run = old.get_model("benchmarks", "Run").objects.create(
            public_id="old-run-public-id", prompt_tokens=8, output_tokens=8, temperature=0.7, requests_per_level=1,
            warmup_requests=0)
        levels = [old.get_model("benchmarks", "LevelResult").objects.create(
            run=run, endpoint=e, level_index=i, concurrency=1, started_at=timezone.now(), wall_s=1.0, completed=1,
            failed=0, summary={}) for i in range(3)]
        evidence = [{"id": f"level-{lv.pk}", "url": f"/r/old-run-public-id/#level-{lv.pk}"} for lv in levels]
        decision = old.get_model("benchmarks", "Decision").objects.create(
            public_id="old-decision", inputs={}, result={"ranked": [{"evidence": evidence}], "note": "#level-x"})
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        ids = dict(new.get_model("benchmarks", "LevelResult").objects.values_list("pk", "public_id"))
        assert len(set(ids.values())) == 3 and all(len(i) == 22 and not i.isdigit() for i in ids.values())
        result = new.get_model("benchmarks", "Decision").objects.get(pk=decision.pk).result
        assert [r["url"] for r in result["ranked"][0]["evidence"]] == [
            f"/r/old-run-public-id/#level-{ids[lv.pk]}" for lv in levels]
        assert result["note"] == "#level-x"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())


# --- recipe environment values are secrets ------------------------------------------------------

HF_SECRET = "hf_gatedSecret7q2x"


def recipe_with_a_token_and_an_old_launch():
    """A lab recipe that sets HF_TOKEN, and a run whose launch report and endpoint were stored
    before values were masked (the full command, the token in it)."""
    from benchmarks.models import Host, ServerLaunch, ServerRecipe

    host = Host.objects.create(name="env-host", hostname="env-host")
    recipe = ServerRecipe.objects.create(name="gated", host=host, backend="vllm", executable="/opt/vllm/bin/vllm",
                                         model_path="/models/gated", args=["serve", "{model}", "--port", "{port}"],
                                         env={"HF_TOKEN": HF_SECRET, "OMP_NUM_THREADS": "2"})
    command = (f"HF_TOKEN={HF_SECRET} OMP_NUM_THREADS=2 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 "
               "/opt/vllm/bin/vllm serve /models/gated --port 8123")
    e = endpoint(name="gated · lab", host="env-host")
    e.launch_command, e.enabled = command, False
    e.save()
    run = Run.objects.create(owner=user("env-owner"), title="env check", prompt_tokens=16, output_tokens=6, temperature=0.7,
                             concurrency_levels=[1], requests_per_level=1, warmup_requests=0, status=Run.SUCCEEDED)
    run.endpoints.set([e])
    ServerLaunch.objects.create(run=run, recipe=recipe, endpoint=e, status=ServerLaunch.STOPPED,
                                report={"status": "stopped", "command": command, "port": 8123, "version": 2})
    return recipe, run


def test_a_launch_command_shows_recipe_env_names_but_not_their_values_and_keeps_the_gpu_list():
    from benchmarks.engine.launcher import LaunchReport, ServerSpec, mask_env

    spec = ServerSpec(executable="/opt/vllm/bin/vllm", model_path="/models/gated", args=("serve", "{model}"),
                      env={"HF_TOKEN": HF_SECRET}, gpus=(0, 1))
    line = spec.command_line(8000)
    assert HF_SECRET not in line and "HF_TOKEN=…" in line and "CUDA_VISIBLE_DEVICES=0,1" in line
    assert line.endswith("/opt/vllm/bin/vllm serve /models/gated")
    old = f"HF_TOKEN='{HF_SECRET} x' CUDA_VISIBLE_DEVICES=0 /bin/serve --port 1"
    assert LaunchReport.from_dict({"command": old}).command == "HF_TOKEN=… CUDA_VISIBLE_DEVICES=0 /bin/serve --port 1"
    assert HF_SECRET not in mask_env(f"HF_TOKEN='{HF_SECRET} /bin/serve")  # unbalanced quotes: masked too


def test_members_see_no_recipe_env_value_on_the_run_page_export_or_api(client):
    from test_api import token_for

    _, run = recipe_with_a_token_and_an_old_launch()
    client.force_login(user())
    page = client.get(run.get_absolute_url()).content.decode()
    assert HF_SECRET not in page and "HF_TOKEN=…" in page and "CUDA_VISIBLE_DEVICES=0,1" in page
    export = client.get(reverse("run-export", args=[run.public_id]))
    assert HF_SECRET not in export.content.decode()
    assert export.json()["endpoints"]["gated · lab"]["launch_command"].startswith("HF_TOKEN=… OMP_NUM_THREADS=… CUDA")
    api, _ = token_for("api-member")
    results = api.get(reverse("api-run-results", args=[run.public_id]))
    assert results.status_code == 200 and HF_SECRET not in results.content.decode()


def test_view_only_staff_never_see_recipe_env_values_and_no_lookup_matches_them(client):
    recipe, _ = recipe_with_a_token_and_an_old_launch()
    client.force_login(viewer())
    page = client.get(reverse("admin:benchmarks_serverrecipe_change", args=[recipe.id])).content.decode()
    assert HF_SECRET not in page and "HF_TOKEN=…" in page
    listing = reverse("admin:benchmarks_serverrecipe_changelist")
    assert HF_SECRET not in client.get(listing).content.decode()
    for lookup in ("env__HF_TOKEN__startswith", "env__HF_TOKEN", "env__contains", "env__icontains"):
        assert client.get(listing, {lookup: "hf_"}).status_code == 400, lookup
    assert client.get(listing, {"q": "hf_gated"}).status_code == 200  # search: not over env
    assert "0 server recipes" in client.get(listing, {"q": "hf_gated"}).content.decode()


def test_staff_who_may_change_a_recipe_see_masked_values_and_keep_them_by_leaving_the_mask(client):
    import json

    from django.forms.models import model_to_dict

    recipe, _ = recipe_with_a_token_and_an_old_launch()
    client.force_login(user("root", staff=True))
    url = reverse("admin:benchmarks_serverrecipe_change", args=[recipe.id])
    page = client.get(url).content.decode()
    assert HF_SECRET not in page and "HF_TOKEN" in page
    data = {k: v for k, v in model_to_dict(recipe).items() if v is not None}
    data.update(args=json.dumps(recipe.args), sweep=json.dumps(recipe.sweep), notes="edited",
                env=json.dumps({"HF_TOKEN": "…", "OMP_NUM_THREADS": "4", "NEW_ONE": "…"}),
                created_0="2026-01-01", created_1="00:00:00")
    data["env"] = json.dumps({"HF_TOKEN": "…", "OMP_NUM_THREADS": "4"})
    r = client.post(url, data)
    assert r.status_code == 302, r.content.decode()[:3000]
    recipe.refresh_from_db()
    assert recipe.env == {"HF_TOKEN": HF_SECRET, "OMP_NUM_THREADS": "4"} and recipe.notes == "edited"
    data["env"] = json.dumps({"HF_TOKEN": "hf_new", "NEW_ONE": "…"})
    r = client.post(url, data)
    assert r.status_code == 200 and "NEW_ONE" in r.content.decode()
    recipe.refresh_from_db()
    assert recipe.env["HF_TOKEN"] == HF_SECRET


def test_anonymous_readers_of_a_permalink_never_see_the_model_path_of_a_recipe(client):
    """The lab's servers quote their model path in the launch command, the log, the refusal and
    what they report about themselves (a vLLM's served model id is the path)."""
    import json

    from benchmarks.models import ServerLaunch

    recipe, run = recipe_with_a_token_and_an_old_launch()
    path = "/srv/gated-models/llama-70b.gguf"
    recipe.model_path = path
    recipe.save()
    e = run.endpoints.get()
    e.recipe = recipe
    e.launch_command = f"/opt/vllm/bin/vllm serve {path} --port 8123"
    e.save()
    launch = run.launches.get()
    launch.report = {**launch.report, "command": e.launch_command,
                     "log_tail": f"INFO loading model from {path}\nINFO reading {path}/config.json"}
    launch.save()
    ServerLaunch.objects.create(run=run, recipe=recipe, setting_index=1, setting={"-c": 8192},
                                status=ServerLaunch.REFUSED,
                                report={"status": "refused", "refusal": f"the argument '{path}' names a path outside "
                                                                        "the folders this host allows"})
    run.server_config = {str(e.id): {"served_model": path, "declared": {"launch_flags": {}}}}
    run.save()
    urls = [run.get_absolute_url(), reverse("run-export", args=[run.public_id]),
            reverse("api-run-results", args=[run.public_id])]
    for url in urls:
        r = client.get(url)
        assert r.status_code == 200, url
        text = r.content.decode() if "json" not in r["Content-Type"] else json.dumps(r.json())
        assert "/srv/gated-models" not in text and "llama-70b" not in text, (url, text[text.find("gated-m") - 200:][:400])
    page = client.get(run.get_absolute_url()).content.decode()
    assert "[path hidden]" in page and "names a path outside" in page
    client.force_login(user())  # members see it
    assert path in client.get(run.get_absolute_url()).content.decode()


def test_the_anonymous_api_rate_limit_believes_x_forwarded_for_only_behind_the_configured_proxy(client, settings):
    from django.core.cache import cache

    _, run = recipe_with_a_token_and_an_old_launch()
    url = reverse("api-run-results", args=[run.public_id])
    settings.API_RATE_LIMIT = "3/min"
    settings.BEHIND_TLS_PROXY = False
    cache.clear()
    try:
        # A new made-up address per request is no new allowance: the socket's peer is counted.
        codes = [client.get(url, HTTP_X_FORWARDED_FOR=f"203.0.113.{i}").status_code for i in range(5)]
        assert codes == [200, 200, 200, 429, 429], codes
        # Behind the proxy, the address it appended (the last entry) is the client's, as for logins.
        cache.clear()
        settings.BEHIND_TLS_PROXY = True
        codes = [client.get(url, HTTP_X_FORWARDED_FOR=f"6.6.6.{i}, 198.51.100.7").status_code for i in range(4)]
        assert codes == [200, 200, 200, 429], codes
        assert client.get(url, HTTP_X_FORWARDED_FOR="6.6.6.6, 198.51.100.8").status_code == 200
    finally:
        cache.clear()


def test_the_migration_masks_env_values_in_stored_launch_commands():
    """Old rows are masked in the database too: the endpoint admin searches launch_command."""
    import importlib

    from django.apps import apps

    from benchmarks.models import Endpoint, ServerLaunch

    _, run = recipe_with_a_token_and_an_old_launch()
    importlib.import_module("benchmarks.migrations.0019_mask_stored_env_values").mask(apps, None)
    e = run.endpoints.get()
    assert Endpoint.objects.filter(launch_command__contains="hf_gated").count() == 0
    assert e.launch_command.startswith("HF_TOKEN=… OMP_NUM_THREADS=… CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE")
    assert HF_SECRET not in ServerLaunch.objects.get(run=run).report["command"]
