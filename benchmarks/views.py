from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks import selectors, services
from benchmarks.decorators import hides_addresses, permalink
from benchmarks.engine.metrics import METRIC_DEFINITIONS
from benchmarks.forms import ComparisonForm, ImportForm, RunForm
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
        try:
            run = services.run_create(owner=request.user, **form.cleaned_data)
        except ValidationError as exc:  # the runs-in-flight limit, checked as the run is inserted
            form.add_error(None, exc)
        else:
            messages.success(request, "Run queued. This page updates as it progresses.")
            return redirect(run)
    return render(request, "benchmarks/run_new.html",
                  {"form": form, "has_endpoints": form.fields["endpoints"].queryset.exists()})


def _prefill(params) -> dict:
    initial = {k: params[k] for k in ("title", "prompt_tokens", "output_tokens", "concurrency_levels",
                                      "request_rates", "load_mode", "requests_per_level") if params.get(k)}
    # Endpoints by name: these links are shown on public pages, which carry no database ids.
    endpoints = selectors.endpoint_ids_by_name(params.getlist("endpoints"))
    if endpoints:
        initial["endpoints"] = endpoints
    return initial


@permalink
def run_detail(request, public_id: str):
    run = _run_or_404(public_id)
    hide = hides_addresses(request)
    return render(request, "benchmarks/run_detail.html", {
        "run": run,
        "levels": selectors.run_levels(run),
        "failures": selectors.run_failures(run, hide_addresses=hide),
        "failure_count": selectors.run_failure_count(run),
        "preflight": selectors.run_preflight(run, hide_addresses=hide),
        "server_config": selectors.run_server_config(run, hide_addresses=hide),
        "run_error": selectors.run_error(run, hide_addresses=hide),
        "hide_addresses": hide,
        "can_cancel": selectors.run_cancel_allowed(run, request.user),
        "definitions": METRIC_DEFINITIONS,
        "chart_list": _chart_list(run),
    })


def _chart_list(run: Run) -> list[tuple[str, str]]:
    names = [("throughput", "Throughput"), ("ttft", "TTFT"), ("tpot", "TPOT"), ("timeline", "Timeline")]
    if selectors.run_has_telemetry(run, "gpu_series"):
        names.append(("gpu", "GPU"))
    if selectors.run_has_telemetry(run, "server_series"):
        names.append(("server", "Server"))
    return names


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
    if not selectors.run_cancel_allowed(run, request.user):
        return HttpResponseForbidden("Only the member who queued this run, or a staff member, can cancel it.",
                                     content_type="text/plain; charset=utf-8")
    if services.run_cancel(run=run):
        messages.info(request, "Run cancelled; requests in flight stop within seconds.")
    else:
        messages.error(request, f"This run is already {run.status}.")
    return redirect(run)


CHARTS = ("throughput", "ttft", "tpot", "e2e", "timeline", "gpu", "server")


def _chart(run: Run, name: str, params) -> dict | None:
    from benchmarks import charts

    if name == "throughput":
        return charts.throughput_figure(selectors.run_series(run))
    if name in ("ttft", "tpot", "e2e"):
        title = {"ttft": "Time to first token", "tpot": "Time per output token", "e2e": "End-to-end latency"}[name]
        groups = []
        results = selectors.run_results_by_level(run)
        for level in selectors.run_levels_with_endpoint(run):
            values = [getattr(r, name) * 1000 for r in results.get(level.id, [])
                      if r.ok and getattr(r, name) is not None]
            groups.append({"name": f"{level.endpoint.name} {level.load_label}", "values": values,
                           "stats": level.summary.get(f"{name}_ms") or {}})
        return charts.distribution_figure(f"{title} per level", "ms", groups)
    if name == "timeline":
        levels = selectors.run_levels_with_endpoint(run)
        level = next((lv for lv in levels if lv.public_id == params.get("level")), levels[0] if levels else None)
        if level is None:
            return None
        requests = [{"index": r.index, "sent": r.sent, "ttft": r.ttft, "e2e": r.e2e,
                     "prompt_ms": (r.timings or {}).get("prompt_ms")} for r in selectors.level_results(level)]
        return charts.timeline_figure(f"Requests of {level.endpoint.name} at {level.load_label}", requests)
    if name == "gpu":
        return charts.gpu_figure(selectors.telemetry_levels(run, "gpu_series"))
    if name == "server":
        return charts.server_figure(selectors.telemetry_levels(run, "server_series"))
    return None


@permalink
def run_chart(request, public_id: str, name: str, fmt: str):
    from benchmarks.charts import to_csv

    run = _run_or_404(public_id)
    fig = _chart(run, name, request.GET) if name in CHARTS else None
    if fig is None:
        raise Http404("No such chart for this run.")
    if fmt == "csv":
        return _csv_response(to_csv(fig), f"{run.public_id}-{name}.csv")
    return JsonResponse(fig)


def _csv_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@permalink
def run_export(request, public_id: str):
    run = _run_or_404(public_id)
    response = JsonResponse(selectors.run_export(run, hide_addresses=hides_addresses(request)),
                            json_dumps_params={"indent": 1})
    response["Content-Disposition"] = f'attachment; filename="run-{run.public_id}.json"'
    return response


@permalink
def run_requests_csv(request, public_id: str):
    run = _run_or_404(public_id)
    return _csv_response(selectors.run_requests_csv(run, hide_addresses=hides_addresses(request)),
                         f"run-{run.public_id}-requests.csv")


# ---------------------------------------------------------------- imported reports
@login_required
def import_new(request):
    from benchmarks.importers import ReportFormatError

    form = ImportForm()
    if request.method == "POST":  # reading POST runs the upload handlers, which may refuse the file
        form = ImportForm(request.POST, request.FILES, upload_refused=getattr(request, "upload_refused", ""))
    if form.is_bound and form.is_valid():
        f = form.cleaned_data["file"]
        try:
            report = services.report_import(owner=request.user, data=f.read(), filename=f.name,
                                            title=form.cleaned_data["title"], backend=form.cleaned_data["backend"],
                                            quantization=form.cleaned_data["quantization"], gpu=form.cleaned_data["gpu"])
        except ReportFormatError as exc:
            form.add_error("file", f"Could not import {f.name}: {exc}")
        else:
            messages.success(request, "Imported. These numbers are labelled as imported, not measured here.")
            return redirect(report)
    return render(request, "benchmarks/import_new.html", {"form": form, "reports": selectors.report_list()})


@permalink
def import_detail(request, public_id: str):
    report = selectors.report_by_public_id(public_id)
    return render(request, "benchmarks/import_detail.html", {
        "report": report, "rows": selectors.report_rows(report), "data": report.report})


# ---------------------------------------------------------------- comparisons
@login_required
def comparison_new(request):
    initial = {"runs": [r for r in request.GET.getlist("runs") if r.isdigit()],
               "reports": [r for r in request.GET.getlist("reports") if r.isdigit()]}
    form = ComparisonForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        comparison = services.comparison_create(owner=request.user, **form.cleaned_data)
        return redirect(comparison)
    return render(request, "benchmarks/comparison_new.html", {"form": form})


@permalink
def comparison_detail(request, public_id: str):
    from benchmarks.compare import differences, ratio_sentences

    comparison = selectors.comparison_by_public_id(public_id)
    series = selectors.comparison_series(comparison)
    return render(request, "benchmarks/comparison_detail.html", {
        "comparison": comparison, "series": series, "warnings": differences(series),
        "ratios": ratio_sentences(series)})


@permalink
def comparison_chart(request, public_id: str, fmt: str):
    from benchmarks.charts import throughput_figure, to_csv

    comparison = selectors.comparison_by_public_id(public_id)
    fig = throughput_figure(selectors.comparison_series(comparison))
    if fmt == "csv":
        return _csv_response(to_csv(fig), f"comparison-{comparison.public_id}.csv")
    return JsonResponse(fig)


@permalink
def import_chart(request, public_id: str, fmt: str):
    from benchmarks.charts import throughput_figure, to_csv

    report = selectors.report_by_public_id(public_id)
    fig = throughput_figure([selectors.report_series(report)])
    if fmt == "csv":
        return _csv_response(to_csv(fig), f"report-{report.public_id}.csv")
    return JsonResponse(fig)
