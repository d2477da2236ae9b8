"""A load mode written in this file alone (as test_backends' toy backend is): registered, it is
offered by the run form and the API with its own field, judged with its own messages, run by a
real worker process that registers it from LOAD_MODES_EXTRA, shown on the run page and exported.
Nothing outside engine/load_modes had to learn its name."""
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.urls import reverse

from benchmarks.engine import load_modes
from benchmarks.engine.client import Load
from benchmarks.engine.load_modes.base import EMPTY_COLUMNS
from benchmarks.forms import RunForm
from benchmarks.models import Host, LevelResult, Run
from conftest import spawn_worker, stop_worker, worker_env
from factories import endpoint, run_form, user
from test_api import submit, token_for
from test_worker import wait_finished

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Doubling(load_modes.LoadMode):
    """1, 2, 4, … concurrent users up to a ceiling the member gives."""

    name = "doubling"
    label = "doubling users up to a ceiling (closed loop)"
    fields = ("doubling_to",)
    inputs = ("doubling_to",)
    own_fields = {"doubling_to": load_modes.FieldSpec("int", "Double the users up to", min_value=1,
                                                      help_text="Levels 1, 2, 4, … up to this many users.")}

    levels: tuple[int, ...] = ()

    @classmethod
    def from_arguments(cls, arguments):
        return cls(levels=arguments.concurrency_levels)

    @classmethod
    def clean(cls, data, inputs, problems, limits):
        super().clean(data, inputs, problems, limits)
        top = inputs.get("doubling_to")
        if top is None and not problems.has("doubling_to"):
            problems.add("doubling_to", "Say how far to double, e.g. 8.")
        elif top is not None and top > limits.max_concurrency:
            problems.add("doubling_to", f"{top} users is past the limit of {limits.max_concurrency}.")
        data["concurrency_levels"] = [2 ** k for k in range(20) if 2 ** k <= (top or 0)]

    def columns(self):
        return {**EMPTY_COLUMNS, "concurrency_levels": list(self.levels)}

    def loads(self, requests, duration_s):
        return [Load(concurrency=c, requests=requests, duration_s=duration_s) for c in self.levels]

    def level_count(self):
        return len(self.levels)

    def describe(self):
        return f"doubling 1..{self.levels[-1] if self.levels else 0} users"


@pytest.fixture
def doubling():
    load_modes.register(Doubling)
    yield Doubling
    load_modes.unregister("doubling")


@pytest.mark.django_db
def test_a_load_mode_in_one_class_gets_its_choice_and_its_own_field_in_the_run_form(client, doubling):
    form = RunForm()
    assert ("doubling", Doubling.label) in form.fields["load_mode"].choices
    field = form.fields["doubling_to"]
    assert field.load_mode == "doubling" and field.min_value == 1 and not field.required
    client.force_login(user())
    page = client.get(reverse("run-new")).content.decode()
    assert 'value="doubling"' in page and 'id="field-doubling_to" data-load-mode="doubling" hidden' in page

def test_a_site_s_load_mode_named_in_its_settings_is_in_the_api_schema():
    """The schema documents the modes registered when the site starts (LOAD_MODES_EXTRA)."""
    env = worker_env(LOAD_MODES_EXTRA="test_load_mode_toy:Doubling", PYTHONPATH=ROOT / "tests")
    done = subprocess.run([sys.executable, "manage.py", "spectacular", "--validate"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "doubling_to:" in done.stdout and "Levels 1, 2, 4" in done.stdout, done.stdout[-3000:]


@pytest.mark.django_db
@pytest.mark.parametrize("value, message", [("", "Say how far to double, e.g. 8."),
                                            ("100000", "100000 users is past the limit of 512."),
                                            ("0", "greater than or equal to 1")])
def test_its_field_is_judged_with_its_own_messages_in_the_form_and_the_api(client, doubling, value, message):
    e = endpoint()
    form = RunForm(run_form([e], load_mode="doubling", doubling_to=value))
    assert not form.is_valid() and message in " ".join(form.errors["doubling_to"]), form.errors
    api, _ = token_for()
    r = submit(api, {"endpoints": [e.name], "prompt_tokens": 32, "output_tokens": 4, "requests_per_level": 2,
                     "warmup_requests": 0, "load_mode": "doubling", "doubling_to": int(value) if value else None})
    assert r.status_code == 400 and r["Content-Type"] == "application/json", r.content[:300]
    assert message in " ".join(r.json()["errors"]["doubling_to"]), r.json()


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_runs_it_and_the_run_page_and_the_export_show_it(client, doubling, simulator, settings):
    settings.HOST_QUEUES = True  # the run goes to its host's queue, where the worker below knows the mode
    sim = simulator(dialect="vllm", prefill_ms=5, decode_ms=2)
    e = endpoint(sim.url, host="toy-host")
    queue = Host.objects.get(name="toy-host").queue_name
    worker = spawn_worker(worker_env(LOAD_MODES_EXTRA="test_load_mode_toy:Doubling", PYTHONPATH=ROOT / "tests",
                                     HOST_QUEUES="true"), name="toy-mode", queue=queue)
    try:
        api, _ = token_for()
        r = submit(api, {"endpoints": [e.name], "prompt_tokens": 16, "output_tokens": 4, "requests_per_level": 4,
                         "warmup_requests": 0, "load_mode": "doubling", "doubling_to": 5})
        assert r.status_code == 201, r.content[:500]
        run = wait_finished(Run.objects.get(public_id=r.json()["public_id"]))
    finally:
        stop_worker(worker)
    assert run.status == Run.SUCCEEDED, (run.error, worker.log_path.read_text()[-2000:])
    levels = LevelResult.objects.filter(run=run).order_by("level_index")
    assert [(lv.concurrency, lv.completed) for lv in levels] == [(1, 4), (2, 4), (4, 4)]
    assert run.progress_done == run.progress_total == 12
    page = client.get(run.get_absolute_url()).content.decode()
    assert "doubling 1..4 users" in page
    export = client.get(reverse("run-export", args=[run.public_id])).json()
    assert export["workload"]["load_mode"] == "doubling" and export["workload"]["concurrency_levels"] == [1, 2, 4]
    assert [lv["concurrency"] for lv in export["levels"]] == [1, 2, 4]


def test_a_worker_refuses_to_start_with_a_load_mode_it_cannot_import():
    """A misspelt LOAD_MODES_EXTRA stops the process at start, naming the path, rather than leaving
    runs of that mode to fail one by one."""
    env = worker_env(LOAD_MODES_EXTRA="test_load_mode_toy:Halving", PYTHONPATH=ROOT / "tests")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and "Halving" in done.stderr, done.stderr[-1000:]
