from dataclasses import dataclass
from typing import Callable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse, HttpResponseForbidden, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks import charts, schedules, selectors, services
from benchmarks.compare import (differences, quality_csv, quality_sentences, quality_table, ratio_sentences,
                                startup_table)
from benchmarks.decorators import hides_addresses, permalink
from benchmarks.engine import catalogue
from benchmarks.engine.metrics import request_value
from benchmarks.forms import (MAX_COMPARED_RUNS, PRESETS, ApiTokenForm, ComparisonForm, ImportForm, RepeatForm,
                              RunFilterForm, RunForm, ScheduleForm)
from benchmarks.importers import ReportFormatError
from benchmarks.lab import selectors as lab_selectors
from benchmarks.ledger import selectors as ledger_selectors
from benchmarks.models import ApiToken, Run


def not_found(request, exception):
    """Every 404 (handler404): the message a view raised Http404 with (selectors.NOT_FOUND says
    which link kind has no row), or a plain one for an address no route knows."""
    message = exception.args[0] if exception and exception.args and isinstance(exception.args[0], str) else ""
    return render(request, "404.html", {"message": message or "There is nothing at this address."}, status=404)


@login_required
def run_list(request):
    """Every run, a page at a time, filtered by the query string (a filtered list is a link to
    share); ticked runs travel in it too (`runs`), page to page, to the comparison form."""
    form = RunFilterForm(request.GET)
    form.is_valid()  # a filter with a wrong value says so beside it; the others still apply
    page = selectors.run_list_page(selectors.runs_filtered(form.cleaned_data, user=request.user),
                                   request.GET.get("page"))
    asked = request.GET.getlist("runs")
    picked = selectors.runs_picked(asked, limit=MAX_COMPARED_RUNS)
    if len(set(asked)) > MAX_COMPARED_RUNS:
        messages.warning(request, f"A comparison holds at most {MAX_COMPARED_RUNS} runs: the first "
                                  f"{MAX_COMPARED_RUNS} picked are kept.")
    on_page = {run.public_id for run in page}
    return render(request, "benchmarks/run_list.html", {
        "form": form, "page": page, "picked": picked, "picked_ids": {r.public_id for r in picked},
        "picked_elsewhere": [r for r in picked if r.public_id not in on_page], "max_picked": MAX_COMPARED_RUNS,
        "filtered": any(form.cleaned_data.get(name) for name in form.fields),
        "reports": selectors.report_list()})


@login_required
def run_new(request):
    # GET parameters pre-fill the form ("measure this next" links from the decision page).
    form = RunForm(initial=_prefill(request.GET))
    repeat = RepeatForm()
    if request.method == "POST":  # reading POST runs the upload handlers, which may refuse the file
        form = RunForm(request.POST, request.FILES, upload_refused=getattr(request, "upload_refused", ""))
        repeat = RepeatForm(request.POST)
    # The schedule's fields are judged only when it is asked for; then both must be valid.
    if form.is_bound and form.is_valid() and (not repeat.wanted or repeat.is_valid()):
        try:
            run = services.run_create(owner=request.user, **form.run_arguments())
        except ValidationError as exc:  # the runs-in-flight limit, checked as the run is inserted
            form.add_error(None, exc)
        else:
            if repeat.wanted:
                schedule = schedules.schedule_create(
                    owner=request.user, name=repeat.cleaned_data["name"] or str(run),
                    template=schedules.template_from_run(run), **repeat.schedule_fields())
                messages.success(request, f"Queued, and scheduled {schedule.when}: "
                                          f"{request.build_absolute_uri(schedule.get_absolute_url())}")
            return redirect(run)
    return render(request, "benchmarks/run_new.html",
                  {"form": form, "schedule_form": repeat, "has_endpoints": form.fields["endpoints"].queryset.exists()
                   or form.fields["recipes"].queryset.exists(), "presets": PRESETS,
                   "preset_key": request.GET.get("preset", ""), "preset": PRESETS.get(request.GET.get("preset", ""))})


PREFILLED = ("title", "prompt_tokens", "output_tokens", "concurrency_levels", "request_rates", "load_mode",
             "requests_per_level", "quality", "trials", "api", "slo_ttft_ms", "slo_tpot_ms", "slo_e2e_ms",
             "slo_percentile", "search_max_concurrency", "search_min_rate", "search_max_rate", "search_rate_step",
             "arrivals", "burstiness", "max_concurrency", "dataset_source", "output_lengths", "length_distribution",
             "length_spread", "prefix_tokens", "prefix_share")


def _prefill(params) -> dict:
    """The form's initial values from a link: a preset's (`preset`, forms.PRESETS), then any field
    the link names itself. Only initial values: the form judges what is submitted."""
    preset = PRESETS.get(params.get("preset") or "")
    initial = dict(preset["fields"]) if preset else {}
    initial.update({k: params[k] for k in PREFILLED if params.get(k)})
    # Endpoints by name: these links are shown on public pages, which carry no database ids.
    endpoints = selectors.endpoint_ids_by_name(params.getlist("endpoints"))
    if endpoints:
        initial["endpoints"] = endpoints
    recipes = selectors.recipe_ids_by_name(params.getlist("recipes"))
    if recipes:
        initial["recipes"] = recipes
    return initial


@login_required
def inventory(request):
    """Hosts and GPUs, models and variants, endpoints and recipes, with what a run needs of each;
    staff edit them in the admin."""
    return render(request, "benchmarks/inventory.html", selectors.inventory())


@permalink
def run_detail(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    hide = hides_addresses(request)
    levels = selectors.run_levels(run)
    return render(request, "benchmarks/run_detail.html", {
        "run": run,
        "levels": levels,
        "results": selectors.results_table(run, levels),
        "contention": selectors.run_contention(levels),
        "slo_answers": selectors.slo_answers(run),
        "failures": selectors.run_failures(run, hide_addresses=hide),
        "failure_count": selectors.run_failure_count(run),
        "length_histograms": selectors.run_length_histograms(run),
        "ttft_by_turn": selectors.run_ttft_by_turn(run),
        "preflight": selectors.run_preflight(run, hide_addresses=hide),
        "server_config": selectors.run_server_config(run, hide_addresses=hide),
        "run_error": selectors.run_error(run, hide_addresses=hide),
        "lab": lab_selectors.run_lab(run, blank=selectors.address_hider(run.endpoints.all(), hide),
                                     hide_addresses=hide),
        "hide_addresses": hide,
        "gpus_side_by_side": selectors.gpus_side_by_side(levels),
        "regression": selectors.run_regression(run),
        "predicted": ledger_selectors.run_pairs_said(run),
        "alerts": run.alerts.select_related("run") if request.user.is_authenticated else [],
        "schedule_form": ScheduleForm(initial={"name": str(run)}) if request.user.is_authenticated else None,
        "can_cancel": selectors.run_cancel_allowed(run, request.user),
        "can_manage": selectors.run_manage_allowed(run, request.user),
        "quality": selectors.quality_section(run, hide_addresses=hide),
        "definitions": selectors.run_definitions(run),
        "energy_metric": catalogue.METRICS["energy_per_token_j"], "cost_metric": catalogue.METRICS["cost_per_mtok"],
        "chart_list": [(name, chart.title) for name, chart in CHARTS.items()
                       if (not chart.telemetry or selectors.run_has_telemetry(run, chart.telemetry))
                       and (chart.offered is None or chart.offered(run))],
    })


@permalink
def run_progress(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    return JsonResponse({
        "status": run.status, "finished": run.is_finished, "done": run.progress_done,
        "total": run.progress_total, "percent": run.progress_percent, "note": run.progress_note,
        "eta_s": run.eta_s, "eta": run.eta_words, "levels": run.levels.count(),
    })


def _managed_run(request, public_id: str) -> Run:
    """The run an archive or delete acts on; 403 for anyone but its owner and staff."""
    run = selectors.run_by_public_id(public_id)
    if not selectors.run_manage_allowed(run, request.user):
        raise PermissionDenied("Only the member who queued this run, or a staff member, can archive or delete it.")
    return run


@login_required
@require_POST
def run_archive(request, public_id: str):
    run = _managed_run(request, public_id)
    archive = request.POST.get("archived", "1") != "0"
    services.run_archive(run=run, archived=archive)
    messages.info(request, "Run archived: the runs list hides it unless “show archived” is chosen." if archive
                  else "Run shown in the runs list again.")
    return redirect(run)


@login_required
def run_delete(request, public_id: str):
    """A confirm page (GET), then the deletion (POST)."""
    run = _managed_run(request, public_id)
    error = ""
    if request.method == "POST":
        try:
            deleted = services.run_delete(run=run, by=request.user)
        except services.RunInFlight as exc:
            error = " ".join(exc.messages)
        else:
            messages.info(request, f"{deleted.note} Its permalink now answers that it was deleted.")
            return redirect("run-list")
    return render(request, "benchmarks/run_delete.html", {
        "run": run, "error": error, "comparisons": run.comparisons.count(), "levels": run.levels.count()},
        status=409 if error else 200)


@login_required
@require_POST
def run_cancel(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    if not selectors.run_cancel_allowed(run, request.user):
        return HttpResponseForbidden("Only the member who queued this run, or a staff member, can cancel it.",
                                     content_type="text/plain; charset=utf-8")
    if services.run_cancel(run=run):
        messages.info(request, "Run cancelled; requests in flight stop within seconds.")
    else:
        messages.error(request, f"This run is already {run.status}.")
    return redirect(run)


# ---------------------------------------------------------------- charts
@dataclass(frozen=True)
class Chart:
    """One chart of the run page: its title, what draws it (the run and the request's GET
    parameters → a figure, or None when there is nothing to draw), and the telemetry field a
    run must have for the page to offer it."""

    title: str
    build: Callable[[Run, dict], dict | None]
    telemetry: str = ""
    offered: Callable[[Run], bool] | None = None  # whether the page offers it, when not by telemetry


def _distribution(name: str) -> Chart:
    """Per level, the distribution of one per-request metric of the catalogue (DISTRIBUTION_CHARTS)."""
    metric = catalogue.metric(catalogue.DISTRIBUTION_CHARTS[name])

    def build(run: Run, params) -> dict:
        groups = []
        results = selectors.run_results_by_level(run)
        for level in selectors.run_levels_with_endpoint(run):
            values = [v for r in results.get(level.id, []) if (v := request_value(metric.key, r)) is not None]
            groups.append({"name": f"{level.endpoint.name} · {level.trial_label}", "values": values,
                           "stats": level.stats.value(metric.key)})
        return charts.distribution_figure(metric, groups)
    return Chart(metric.name, build)


def _timeline(run: Run, params) -> dict | None:
    levels = selectors.run_levels_with_endpoint(run)
    level = next((lv for lv in levels if lv.public_id == params.get("level")), levels[0] if levels else None)
    if level is None:
        return None
    requests = [{"index": r.index, "sent": r.sent, "ttft": r.ttft, "e2e": r.e2e,
                 "prompt_ms": (r.timings or {}).get("prompt_ms")} for r in selectors.level_results(level)]
    return charts.timeline_figure(f"Requests of {level.endpoint.name} at {level.trial_label}", requests)


def _gpus(run: Run) -> dict | None:
    side = selectors.gpus_side_by_side(selectors.run_levels_with_endpoint(run))
    return charts.gpus_figure(side) if side else None


def _sweep(run: Run, params) -> dict | None:
    drawn = lab_selectors.sweep_series(run)
    return charts.sweep_figure(*drawn) if drawn else None


# The run's charts, in page order: the page's chart boxes and the chart endpoint both read this.
CHARTS = {
    "throughput": Chart("Throughput", lambda run, params: charts.throughput_figure(selectors.run_series(run))),
    "energy": Chart("Energy", lambda run, params: charts.energy_figure(selectors.run_series(run)),
                    offered=lambda run: selectors.run_has_energy(run)),
    **{name: _distribution(name) for name in catalogue.DISTRIBUTION_CHARTS},
    "timeline": Chart("Timeline", _timeline),
    "gpu": Chart("GPU", lambda run, params: charts.gpu_figure(selectors.telemetry_levels(run, "gpu_series")),
                 telemetry="gpu_series"),
    "gpus": Chart("GPUs side by side", lambda run, params: _gpus(run), telemetry="gpu_series",
                  offered=lambda run: selectors.gpus_side_by_side(selectors.run_levels(run)) is not None),
    "server": Chart("Server", lambda run, params: charts.server_figure(selectors.telemetry_levels(run, "server_series")),
                    telemetry="server_series"),
    "sweep": Chart("Sweep", _sweep, offered=lambda run: run.launches.filter(endpoint__isnull=False).exists()),
}
FIGURE_FORMATS = ("json", "csv")


def _check_format(fmt: str) -> None:
    if fmt not in FIGURE_FORMATS:
        raise Http404("Charts come as .json or .csv.")


def _figure_response(fig: dict, fmt: str, stem: str) -> HttpResponse:
    if fmt == "csv":
        return _csv_response(charts.to_csv(fig), f"{stem}.csv")
    return JsonResponse(fig)


@permalink
def run_chart(request, public_id: str, name: str, fmt: str):
    _check_format(fmt)
    run = selectors.run_by_public_id(public_id)
    chart = CHARTS.get(name)
    fig = chart.build(run, request.GET) if chart else None
    if fig is None:
        raise Http404("No such chart for this run.")
    return _figure_response(fig, fmt, f"{run.public_id}-{name}")


def _csv_response(text: str, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@permalink
def run_export(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    response = JsonResponse(selectors.run_export(run, hide_addresses=hides_addresses(request)),
                            json_dumps_params={"indent": 1})
    response["Content-Disposition"] = f'attachment; filename="run-{run.public_id}.json"'
    return response


@permalink
def run_requests_csv(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    return _csv_response(selectors.run_requests_csv(run, hide_addresses=hides_addresses(request)),
                         f"run-{run.public_id}-requests.csv")


@permalink
def run_quality_csv(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    if not run.quality:
        raise Http404("This run has no quality step.")
    return _csv_response(selectors.quality_csv(run, hide_addresses=hides_addresses(request)),
                         f"run-{run.public_id}-quality.csv")


# ---------------------------------------------------------------- imported reports
@login_required
def import_new(request):
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
        "report": report, "rows": selectors.report_rows(report), "data": report.data,
        "quality": quality_table(selectors.report_quality_entries(report)),
        "quality_figures": catalogue.COMPARISON_QUALITY})


# ---------------------------------------------------------------- comparisons
@login_required
def comparison_new(request):
    """The runs picked on the runs list (?runs=public ids) and reports to add beside them."""
    picked = request.GET.getlist("runs")[:MAX_COMPARED_RUNS * 2]
    initial = {"runs": picked, "reports": request.GET.getlist("reports")[:100]}
    form = ComparisonForm(request.POST or None, initial=initial, picked=picked)
    if request.method == "POST" and form.is_valid():
        comparison = services.comparison_create(owner=request.user, **form.cleaned_data)
        return redirect(comparison)
    return render(request, "benchmarks/comparison_new.html", {"form": form})


@permalink
def comparison_detail(request, public_id: str):
    comparison = selectors.comparison_by_public_id(public_id)
    members = selectors.comparison_members(comparison)
    series = selectors.comparison_series(comparison, members)
    quality = selectors.comparison_quality(comparison, members, hide_addresses=hides_addresses(request))
    return render(request, "benchmarks/comparison_detail.html", {
        "comparison": comparison, "series": series, "deleted_runs": comparison.deleted_runs.all(), "warnings": differences(series),
        "ratios": ratio_sentences(series), "figures": catalogue.COMPARISON_TABLE,
        "quality": quality_table(quality), "quality_sentences": quality_sentences(quality),
        "quality_figures": catalogue.COMPARISON_QUALITY, "startup": startup_table(series),
        "startup_figures": catalogue.LAUNCH_FIGURES})


@permalink
def comparison_chart(request, public_id: str, fmt: str):
    _check_format(fmt)
    comparison = selectors.comparison_by_public_id(public_id)
    fig = charts.throughput_figure(selectors.comparison_series(comparison))
    return _figure_response(fig, fmt, f"comparison-{comparison.public_id}")


@permalink
def comparison_quality_csv(request, public_id: str):
    comparison = selectors.comparison_by_public_id(public_id)
    quality = selectors.comparison_quality(comparison, hide_addresses=hides_addresses(request))
    if not quality:
        raise Http404("Nothing in this comparison measured or states quality.")
    return _csv_response(quality_csv(quality), f"comparison-{comparison.public_id}-quality.csv")


@permalink
def import_chart(request, public_id: str, fmt: str):
    _check_format(fmt)
    report = selectors.report_by_public_id(public_id)
    fig = charts.throughput_figure([selectors.report_series(report)])
    return _figure_response(fig, fmt, f"report-{report.public_id}")


# ---------------------------------------------------------------- API tokens
@login_required
def api_tokens(request):
    """The member's API tokens; a new one's key is shown on this answer only (it is stored hashed)."""
    form = ApiTokenForm(request.POST or None)
    new_key = ""
    if request.method == "POST" and form.is_valid():
        _, new_key = services.api_token_create(owner=request.user, name=form.cleaned_data["name"])
        form = ApiTokenForm()
    return render(request, "benchmarks/api_tokens.html", {
        "form": form, "new_key": new_key, "tokens": selectors.api_tokens_of(request.user),
        "api_root": request.build_absolute_uri("/api/v1/")})


@login_required
@require_POST
def api_token_revoke(request, public_id: str):
    token = selectors.by_public_id(ApiToken.objects.filter(owner=request.user), public_id)
    if services.api_token_revoke(token=token):
        messages.info(request, f"Token “{token.name}” revoked: requests that send it are refused from now on.")
    return redirect("api-tokens")
