"""Who may do what, what is never shown, and where a worker may be sent."""
import os
import subprocess
import sys

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
    from benchmarks import tasks
    monkeypatch.setattr(tasks.run_execute_task, "apply_async", lambda *a, **k: None)
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

