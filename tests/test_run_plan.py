"""The typed run plan (engine/plan.py): what every door builds, run_create takes and judges, a
run stores column by column and a schedule keeps in its template."""
import json

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks import schedules, services
from benchmarks.engine.plan import RunPlan
from benchmarks.forms import RunForm
from benchmarks.models import Run
from factories import endpoint, queue_run, run_form, user
from test_load_modes_pinned import CASES

# Beside each load mode: a synthetic dataset, the quality step, trials and SLOs, client machines.
MORE = {
    "dataset and slos": (dict(dataset_source="synthetic", length_distribution="uniform", length_spread="0.5",
                              prefix_tokens="16", prefix_share="50", trials="2", slo_ttft_ms="300",
                              slo_percentile="90"), {}),
    "quality": (dict(quality="on", quality_ctx="64", quality_chunks="2", seed="7", api="chat"), {}),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", [*CASES, *MORE])
def test_the_plan_a_form_builds_is_the_one_its_run_and_a_template_give_back(case, settings):
    settings.LOADGEN_QUEUE = "loadgen"
    fields, files = {**CASES, **MORE}[case]
    form = RunForm(run_form([endpoint()], **fields),
                   {k: SimpleUploadedFile("trace.jsonl", v.encode()) for k, v in files.items()})
    assert form.is_valid(), form.errors
    arguments = form.run_arguments()
    plan = arguments["plan"]
    run = services.run_create(owner=user(), **arguments)
    stored_run = Run.objects.get(id=run.id)
    assert stored_run.plan == plan  # the columns' one reader gives back what was written
    # history compares by the plan's shape: the stored typed settings as they were written
    shape = stored_run.plan.comparable_shape()
    assert (shape["dataset"], shape["arrival_pattern"], shape["conversation"]) == (
        stored_run.dataset, stored_run.arrival_pattern, stored_run.conversation)
    stored = json.loads(json.dumps(plan.to_dict()))  # as a JSON column keeps it
    assert RunPlan.from_dict(stored) == plan
    again = schedules.template_kwargs(json.loads(json.dumps(schedules.template_from_run(run))))
    assert again["plan"] == plan and again["endpoints"] == list(run.endpoints.all())


# A schedule's template as the code before the plan wrote it (recorded at commit b4db80c for a
# gamma-rate run with a synthetic dataset, trials, an SLO and two load-generator workers, which
# that template did not keep).
TEMPLATE_BEFORE_THE_PLAN = {
    "api": "chat", "arrival_pattern": {"burstiness": 0.5, "kind": "gamma"}, "arrivals": "gamma",
    "concurrency_levels": [], "conversation": None,
    "dataset": {"name": "", "output_lengths": {"distribution": "fixed", "mean": 8, "spread": 0.0}, "outputs": "forced",
                "prefix_share": 0.5, "prefix_tokens": 16,
                "prompt_lengths": {"distribution": "uniform", "mean": 48, "spread": 0.5}, "source": "synthetic"},
    "duration_s": 30.0, "endpoints": [], "load_mode": "rate", "max_concurrency": 4, "output_tokens": 8,
    "prompt_tokens": 48, "quality": False, "quality_chunks": 16, "quality_ctx": 512, "quality_reference": None,
    "quality_text": None, "recipes": [], "request_rates": [1.0, 2.5], "requests_per_level": 6,
    "search_max_concurrency": None, "search_rates": [], "seed": 7, "slo_e2e_ms": None, "slo_percentile": 90,
    "slo_tpot_ms": None, "slo_ttft_ms": 300.0, "sweep": {}, "temperature": 0.0, "title": "nightly", "trials": 2,
    "version": 1, "warmup_requests": 1}


@pytest.mark.django_db
def test_a_template_saved_before_the_plan_queues_the_run_it_queued_then():
    e = endpoint()
    run = services.run_create(owner=user(), **schedules.template_kwargs({**TEMPLATE_BEFORE_THE_PLAN,
                                                                          "endpoints": [e.id]}))
    run = Run.objects.get(id=run.id)
    # the columns that run had, as that code stored them
    assert (run.title, run.api, run.load_mode, run.request_rates, run.arrivals, run.max_concurrency) == (
        "nightly", "chat", "rate", [1.0, 2.5], "gamma", 4)
    assert run.arrival_pattern == {"kind": "gamma", "burstiness": 0.5}
    assert run.dataset == {"source": "synthetic", "prompt_lengths": {"distribution": "uniform", "mean": 48, "spread": 0.5},
                           "output_lengths": {"distribution": "fixed", "mean": 8, "spread": 0.0}, "outputs": "forced",
                           "name": "", "prefix_tokens": 16, "prefix_share": 0.5}
    assert (run.trials, run.slo_percentile, run.slo_ttft_ms, run.seed, run.duration_s) == (2, 90, 300.0, 7, 30.0)
    assert (run.load_processes, run.load_workers) == (0, 0)  # not kept then: one client, the default


@pytest.mark.django_db
def test_a_schedule_repeats_the_runs_client_machines(settings):
    settings.LOADGEN_QUEUE = "loadgen"
    source = queue_run(owner=user(), endpoints=[endpoint()], prompt_tokens=16, output_tokens=4, temperature=0.7,
                       concurrency_levels=[4], requests_per_level=4, warmup_requests=0, load_processes=2,
                       load_workers=2)
    again = services.run_create(owner=source.owner, **schedules.template_kwargs(schedules.template_from_run(source)))
    assert (again.load_processes, again.load_workers) == (2, 2)


@pytest.mark.django_db
@pytest.mark.parametrize("setting, value, why", [
    ("MAX_REQUESTS_PER_LEVEL", 3, "4 requests per level; the limit is 3."),
    ("MAX_REQUESTS_PER_RUN", 7, "This run would send 8 requests; the limit is 7."),
    ("RUN_TIME_LIMIT_S", 1, "above the run time limit"),
])
def test_run_create_holds_any_plan_to_the_sites_limits(settings, setting, value, why):
    """Whatever door a plan comes by (a form, the API, a schedule, a script), run_create judges it."""
    setattr(settings, setting, value)
    plan = RunPlan.from_arguments(prompt_tokens=16, output_tokens=4, temperature=0.7, requests_per_level=4,
                                  warmup_requests=0, load_mode="rate", request_rates=[0.5, 1], duration_s=None)
    with pytest.raises(ValidationError) as refused:
        services.run_create(owner=user(), endpoints=[endpoint()], plan=plan)
    assert any(why in m for m in refused.value.messages), refused.value.messages
    assert not Run.objects.exists()
