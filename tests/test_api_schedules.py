"""The API's schedules and regressions for every reader: anonymous, a member, another member,
staff and a revoked token; the schedule form's messages as JSON; a run's regression test in its
detail, with its history page."""
import json

import pytest
from django.core.cache import cache
from django_celery_beat.models import PeriodicTask

from benchmarks import services
from benchmarks.engine.regression import LevelTest, RegressionReport, Thresholds, compare_figure
from benchmarks.models import Run, Schedule
from factories import endpoint, measured_run, user
from test_api import API, token_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    cache.clear()
    yield
    cache.clear()


def post(client, path, body=None):
    return client.post(API + path, data=json.dumps(body or {}), content_type="application/json")


def a_run(owner):
    return measured_run([endpoint()], levels=(1,), requests=3, tokens=8, prompt_tokens=32, owner=owner)


def test_a_member_schedules_a_run_reads_pauses_resumes_and_deletes_it():
    api, _ = token_for("alice")
    run = a_run(user("alice"))
    r = post(api, "schedules/", {"run": run.public_id, "every": "weekly", "at": "02:15", "weekday": 5,
                                 "webhook_url": "https://hooks.example.org/v100", "webhook_secret": "never-shown"})
    assert r.status_code == 201, r.content
    body = r.json()
    assert body["when"] == "every Friday at 02:15 UTC" and body["endpoints"] == ["sim"] and body["active"]
    assert body["has_webhook_secret"] and "never-shown" not in r.content.decode()
    assert r["Location"].endswith(f"/api/v1/schedules/{body['public_id']}/")
    schedule = Schedule.objects.get()
    assert PeriodicTask.objects.get(id=schedule.periodic_task_id).crontab.day_of_week == "5"
    assert [s["public_id"] for s in api.get(API + "schedules/").json()] == [schedule.public_id]
    paused = post(api, f"schedules/{schedule.public_id}/pause/").json()
    assert not paused["active"] and paused["paused_reason"] == "Paused by alice."
    assert post(api, f"schedules/{schedule.public_id}/resume/").json()["active"]
    assert api.delete(API + f"schedules/{schedule.public_id}/").status_code == 204
    assert not Schedule.objects.exists() and Run.objects.filter(id=run.id).exists()


@pytest.mark.parametrize("body,field,message", [
    ({"every": "daily"}, "run", "Give the public id of a run to repeat."),
    ({"run": "RUN", "every": "daily"}, "at", "Give the time of day"),
    ({"run": "RUN", "every": "cron", "cron": "* * *"}, "cron", "Five fields"),
    ({"run": "RUN", "every": "interval", "interval_s": 5}, "interval_s", "At least 900 s"),
    # a cron expression is held to the interval's minimum: every minute, or 4 minutes apart across the hour
    ({"run": "RUN", "every": "cron", "cron": "* * * * *"}, "cron", "At least 900 s between runs: this expression "
                                                                  "fires 1 minute apart"),
    ({"run": "RUN", "every": "cron", "cron": "*/14 * * * *"}, "cron", "fires 4 minutes apart"),
    ({"run": "RUN", "every": "daily", "at": "03:00", "webhook_url": "https://user:pw@hooks.example.org/v100"},
     "webhook_url", "must not carry a user name or password"),
    ({"run": "RUN", "every": "daily", "at": "03:00", "webhook_url": "https://token@hooks.example.org/v100"},
     "webhook_url", "must not carry a user name or password"),
    ({"run": "RUN", "every": "hourly"}, "every", "Select a valid choice"),
    ({"run": "RUN", "every": "daily", "at": "03:00", "alert_emails": "not-an-address"}, "alert_emails", "not an e-mail"),
    ({"run": "RUN", "every": "daily", "at": "03:00", "webhook_url": "http://169.254.169.254/"}, "webhook_url",
     "link-local"),
    ({"run": "RUN", "every": "daily", "at": ["03:00"]}, "__all__", "single values"),
    ({"run": "RUN", "every": "daily", "at": "03:00", "colour": "red"}, "__all__", "Unknown fields: colour"),
])
def test_bad_schedules_get_the_forms_messages_as_json(body, field, message):
    api, _ = token_for("alice")
    run = a_run(user("alice"))
    body = {k: (run.public_id if v == "RUN" else v) for k, v in body.items()}
    r = post(api, "schedules/", body)
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    assert any(message in m for m in r.json()["errors"][field]), r.json()
    assert not Schedule.objects.exists()


def test_each_reader_sees_and_acts_on_what_they_may():
    alice_api, _ = token_for("alice")
    bob_api, _ = token_for("bob")
    staff_api, _ = token_for("root", staff=True)
    revoked_api, _ = token_for("carol")
    from benchmarks.models import ApiToken

    services.api_token_revoke(token=ApiToken.objects.get(owner__username="carol"))
    run = a_run(user("alice"))
    schedule_id = post(alice_api, "schedules/", {"run": run.public_id, "every": "daily", "at": "01:00"}).json()["public_id"]
    path = f"schedules/{schedule_id}/"
    from django.test import Client

    for client in (Client(), revoked_api):
        assert client.get(API + "schedules/").status_code == 401
        assert client.get(API + path).status_code == 401
        assert post(client, path + "pause/").status_code == 401
    assert "revoked" in revoked_api.get(API + path).json()["error"]
    # Another member: not theirs, not found; their list is empty.
    assert bob_api.get(API + "schedules/").json() == []
    assert bob_api.get(API + path).status_code == 404 and bob_api.delete(API + path).status_code == 404
    assert post(bob_api, path + "pause/").status_code == 404
    # Staff: every schedule.
    assert [s["public_id"] for s in staff_api.get(API + "schedules/").json()] == [schedule_id]
    assert post(staff_api, path + "pause/").json()["paused_reason"] == "Paused by root."
    assert staff_api.delete(API + path).status_code == 204


def test_a_runs_detail_carries_its_regression_test_and_history_page(client):
    api, _ = token_for("alice")
    run = a_run(user("alice"))
    assert api.get(API + f"runs/{run.public_id}/").json()["regression"] is None
    level = run.levels.get()
    from benchmarks.engine.catalogue import figure

    value = level.stats.figure(figure("ttft_ms_p50"))
    test = compare_figure("ttft_ms_p50", value, [value / 1.5] * 4, Thresholds())
    report = RegressionReport(Thresholds(), [LevelTest("sim", 0, level.load_label, level.fingerprint, [test])])
    Run.objects.filter(id=run.id).update(regression=report.to_dict())
    for reader in (api, client):  # a member's token, and an anonymous reader of the permalink
        body = reader.get(API + f"runs/{run.public_id}/").json()["regression"]
        assert body["regressed"] and body["tested"]
        [found] = body["regressions"]
        assert found["figure"] == "ttft_ms_p50" and found["better"] == "lower"
        assert found["change_pct"] == pytest.approx(50.0) and found["compared_runs"] == 4
        assert body["history"] == [f"http://testserver/history/{level.fingerprint}/"]
    page = client.get(f"/history/{level.fingerprint}/")
    assert page.status_code == 200 and run.public_id in page.content.decode()
    assert client.get("/history/0123456789abcdef/").status_code == 404


def test_a_member_cannot_schedule_another_member_s_run_staff_can():
    """A schedule reuses the run's uploaded prompts and evaluation text: only its owner's or staff's."""
    run = a_run(user("alice"))
    bob, _ = token_for("bob")
    r = post(bob, "schedules/", {"run": run.public_id, "every": "daily", "at": "02:00"})
    assert r.status_code == 403
    assert r.json()["errors"] == {"run": ["Only the member who queued this run, or a staff member, can repeat it "
                                          "on a schedule."]}
    assert not Schedule.objects.exists()
    staff, _ = token_for("root", staff=True)
    r = post(staff, "schedules/", {"run": run.public_id, "every": "daily", "at": "02:00"})
    assert r.status_code == 201 and Schedule.objects.get().owner.username == "root"
