from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks import selectors, services
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
    form = RunForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        run = services.run_create(owner=request.user, **form.cleaned_data)
        messages.success(request, "Run queued. This page updates as it progresses.")
        return redirect(run)
    return render(request, "benchmarks/run_new.html",
                  {"form": form, "has_endpoints": form.fields["endpoints"].queryset.exists()})


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
