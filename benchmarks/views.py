from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks import selectors, services
from benchmarks.decorators import permalink
from benchmarks.engine.metrics import METRIC_DEFINITIONS
from benchmarks.forms import RunForm
from benchmarks.models import Run


def _run_or_404(public_id: str) -> Run:
    try:
        return selectors.run_by_public_id(public_id)
    except Run.DoesNotExist:
        raise Http404("No run has this link.")


@login_required
def run_list(request):
    return render(request, "benchmarks/run_list.html", {"runs": selectors.run_list()})


@login_required
def run_new(request):
    # GET parameters pre-fill the form ("measure this next" links from the decision page).
    form = RunForm(request.POST or None, initial=_prefill(request.GET))
    if request.method == "POST" and form.is_valid():
        run = services.run_create(owner=request.user, **form.cleaned_data)
        messages.success(request, "Run queued. This page updates as it progresses.")
        return redirect(run)
    return render(request, "benchmarks/run_new.html",
                  {"form": form, "has_endpoints": form.fields["endpoints"].queryset.exists()})


def _prefill(params) -> dict:
    initial = {k: params[k] for k in ("title", "prompt_tokens", "output_tokens", "concurrency_levels",
                                      "request_rates", "load_mode", "requests_per_level") if params.get(k)}
    endpoints = [e for e in params.getlist("endpoints") if e.isdigit()]
    if endpoints:
        initial["endpoints"] = endpoints
    return initial


@permalink
def run_detail(request, public_id: str):
    run = _run_or_404(public_id)
    return render(request, "benchmarks/run_detail.html", {
        "run": run,
        "levels": selectors.run_levels(run),
        "failures": selectors.run_failures(run),
        "failure_count": selectors.run_failure_count(run),
        "preflight": selectors.run_preflight(run),
        "definitions": METRIC_DEFINITIONS,
    })


@permalink
def run_progress(request, public_id: str):
    run = _run_or_404(public_id)
    return JsonResponse({
        "status": run.status, "finished": run.is_finished, "done": run.progress_done,
        "total": run.progress_total, "percent": run.progress_percent, "note": run.progress_note,
        "levels": run.levels.count(),
    })


@login_required
@require_POST
def run_cancel(request, public_id: str):
    run = _run_or_404(public_id)
    if services.run_cancel(run=run):
        messages.info(request, "Run cancelled; requests in flight stop within seconds.")
    else:
        messages.error(request, f"This run is already {run.status}.")
    return redirect(run)
