"""The REST API, /api/v1/: flat function views over the same services, selectors and forms as
the pages. Every answer is JSON: errors as {"error": …, "errors": {field: [messages]}}."""
from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import JsonResponse, QueryDict
from django.views.decorators.csrf import csrf_exempt
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions
from django.urls import reverse
from rest_framework.decorators import api_view, parser_classes, permission_classes
from rest_framework.parsers import MultiPartParser
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from benchmarks import selectors, services
from benchmarks.api import schema
from benchmarks.api.conventions import Pages, invalid
from benchmarks.api.payloads import RunPayloadError, run_form_data, sent_value_errors
from benchmarks.decorators import hides_addresses
from benchmarks.compare import differences, ratio_sentences
from benchmarks import schedules as schedules_service
from benchmarks.forms import ComparisonForm, EvaluationTextForm, ImportForm, RunFilterForm, RunForm, ScheduleForm
from benchmarks.importers import ReportFormatError
from benchmarks.models import Host, Model, RequestRecord, Run


@csrf_exempt
def not_found(request, *args, **kwargs):
    """Any address under /api/v1/ that no route knows: JSON, like every other API answer."""
    return JsonResponse({"error": "no API route at this address; see /api/v1/schema/"}, status=404)


def permalink_read(view):
    """A GET of what a permalink shows (a run, a comparison): anonymous readers too, unless
    PERMALINKS_REQUIRE_LOGIN, like the pages."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if settings.PERMALINKS_REQUIRE_LOGIN and not request.user.is_authenticated:
            raise exceptions.NotAuthenticated("authentication required: send an API token")
        return view(request, *args, **kwargs)

    return api_view(["GET"])(permission_classes([AllowAny])(wrapper))


def _form_errors(form) -> dict:
    return {k: [str(m) for m in v] for k, v in form.errors.items()}


# --- runs -------------------------------------------------------------------------------------

@extend_schema(methods=["GET"], operation_id="runs_list", summary="Runs, newest first, filtered as on the runs list",
               responses={200: schema.RunPage, 400: schema.Error},
               description="The runs list's filters (archived runs are left out unless `archived` says otherwise), "
                           "a page at a time in a stable order (created, then id).",
               parameters=schema.run_filter_parameters() + [OpenApiParameter("page", int),
                                                            OpenApiParameter("page_size", int)])
@extend_schema(methods=["POST"], operation_id="runs_create", summary="Queue a run", request=schema.run_request(),
               description="Validated by the run form of the page, with its messages. Fields left out take the "
                           "form's defaults; `endpoints` are names (or ids); levels, rates and speed-ups may be lists; a "
                           'file (prompts, a trace, an evaluation text) is {"name": ..., "content": "its text"}; `quality_text` is the '
                           "public id of an uploaded evaluation text.",
               responses={201: schema.RunStatus, 400: schema.Error})
@api_view(["GET", "POST"])
def runs(request):
    if request.method == "POST":
        return _run_create(request)
    form = RunFilterForm(request.query_params)
    if not form.is_valid():
        raise exceptions.ValidationError(_form_errors(form))
    queryset = selectors.runs_filtered(form.cleaned_data, user=request.user).select_related("owner").defer(
        "preflight", "server_config", "dataset", "sweep")
    pages = Pages()
    page = pages.paginate_queryset(queryset, request)
    return pages.get_paginated_response([schema.run_status(run, request) for run in page])


def _run_create(request):
    try:
        data, files = run_form_data(request.data)
    except RunPayloadError as e:
        return invalid(e.errors)
    form = RunForm(data, files)
    valid = form.is_valid()
    errors = {**sent_value_errors(request.data, data), **(_form_errors(form) if not valid else {})}
    if errors:
        return invalid(errors)
    try:
        run = services.run_create(owner=request.user, **form.run_arguments())
    except ValidationError as exc:  # the runs-in-flight limit, checked as the run is inserted
        return Response({"error": " ".join(exc.messages), "errors": {"__all__": exc.messages}}, status=409)
    return Response(schema.run_status(run, request), status=201,
                    headers={"Location": request.build_absolute_uri(f"/api/v1/runs/{run.public_id}/")})


@extend_schema(methods=["GET"], summary="A run's status and progress",
               responses={200: schema.RunStatus, 404: schema.Error, 410: schema.Gone})
@extend_schema(methods=["DELETE"], summary="Delete a finished run and everything measured in it",
               description="Its owner or staff. Its permalink then answers 410 Gone; comparisons that held it "
                           "name it as deleted.",
               responses={204: None, 403: schema.Error, 404: schema.Error, 409: schema.Error, 410: schema.Gone})
@api_view(["GET", "DELETE"])
@permission_classes([AllowAny])
def run_detail(request, public_id: str):
    if request.method == "DELETE":
        if not request.user.is_authenticated:
            raise exceptions.NotAuthenticated("authentication required: send an API token")
        run = _managed_run(request, public_id)
        try:
            services.run_delete(run=run, by=request.user)
        except services.RunInFlight as exc:
            return Response({"error": " ".join(exc.messages)}, status=409)
        return Response(status=204)
    if settings.PERMALINKS_REQUIRE_LOGIN and not request.user.is_authenticated:
        raise exceptions.NotAuthenticated("authentication required: send an API token")
    return Response(schema.run_status(selectors.run_by_public_id(public_id), request))


def _managed_run(request, public_id: str) -> Run:
    run = selectors.run_by_public_id(public_id)
    if not selectors.run_manage_allowed(run, request.user):
        raise exceptions.PermissionDenied("Only the member who queued this run, or a staff member, can archive or "
                                          "delete it.")
    return run


@extend_schema(summary="Archive a run (hidden from the lists) or show it again", request=schema.ArchiveRequest,
               responses={200: schema.RunStatus, 400: schema.Error, 403: schema.Error, 404: schema.Error,
                          410: schema.Gone})
@api_view(["POST"])
def run_archive(request, public_id: str):
    run = _managed_run(request, public_id)
    body = request.data if isinstance(request.data, dict) else None
    archived = True if body is None or "archived" not in body else body["archived"]
    if body is None or not isinstance(archived, bool) or set(body) - {"archived"}:
        raise exceptions.ValidationError({"archived": ["Send {\"archived\": true} or {\"archived\": false}."]})
    services.run_archive(run=run, archived=archived)
    return Response(schema.run_status(run, request))


@extend_schema(summary="A run's results: its export without the requests (those are paginated)",
               responses=OpenApiTypes.OBJECT)
@permalink_read
def run_results(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    export = selectors.run_export(run, hide_addresses=hides_addresses(request), with_requests=False)
    return Response({**export, "headlines": selectors.run_headlines(run),
                     "across_trials": selectors.run_estimates(run)})


@extend_schema(summary="A run's request records, level by level", responses=schema.RequestPage,
               parameters=[OpenApiParameter("page", int), OpenApiParameter("page_size", int)])
@permalink_read
def run_requests(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    blank = selectors.address_hider(run.endpoints.all(), hides_addresses(request))
    queryset = (RequestRecord.objects.filter(level__run=run).order_by("level__endpoint__name", "level__level_index",
                                                                          "index")
                .values("level__public_id", "level__endpoint__name", *selectors.REQUEST_FIELDS))
    pages = Pages()
    rows = []
    for rec in pages.paginate_queryset(queryset, request):
        rec["level"], rec["endpoint"] = rec.pop("level__public_id"), rec.pop("level__endpoint__name")
        rows.append(selectors.request_row(rec, blank))
    return pages.get_paginated_response(rows)


@extend_schema(summary="Cancel a queued or running run", request=None,
               responses={200: schema.RunStatus, 403: schema.Error, 409: schema.Error})
@api_view(["POST"])
def run_cancel(request, public_id: str):
    run = selectors.run_by_public_id(public_id)
    if not selectors.run_cancel_allowed(run, request.user):
        raise exceptions.PermissionDenied("Only the member who queued this run, or a staff member, can cancel it.")
    if not services.run_cancel(run=run):
        return Response({"error": f"This run is already {run.status}."}, status=409)
    run.refresh_from_db()
    return Response(schema.run_status(run, request))


# --- inventory --------------------------------------------------------------------------------

@extend_schema(summary="Endpoints a run can measure", responses=schema.EndpointSerializer(many=True))
@api_view(["GET"])
def endpoints(request):
    rows = selectors.endpoints_for_runs().select_related("host", "variant__model")
    return Response(schema.EndpointSerializer(rows, many=True).data)


@extend_schema(summary="Hosts and their GPUs", responses=schema.HostSerializer(many=True))
@api_view(["GET"])
def hosts(request):
    return Response(schema.HostSerializer(Host.objects.prefetch_related("gpus"), many=True).data)


@extend_schema(summary="Models and their variants", responses=schema.ModelSerializer(many=True))
@api_view(["GET"])
def models(request):
    return Response(schema.ModelSerializer(Model.objects.prefetch_related("variants"), many=True).data)


# --- imported reports and comparisons -----------------------------------------------------------

@extend_schema(summary="Import a result file (vllm bench serve, GuideLLM, llama-bench)",
               request={"multipart/form-data": schema.import_request()},
               responses={201: schema.ReportSerializer, 400: schema.Error})
@api_view(["POST"])
@parser_classes([MultiPartParser])
def imports(request):
    form = ImportForm(request.POST, request.FILES, upload_refused=getattr(request._request, "upload_refused", ""))
    if not form.is_valid():
        return invalid(_form_errors(form))
    f = form.cleaned_data["file"]
    try:
        report = services.report_import(owner=request.user, data=f.read(), filename=f.name,
                                        title=form.cleaned_data["title"], backend=form.cleaned_data["backend"],
                                        quantization=form.cleaned_data["quantization"], gpu=form.cleaned_data["gpu"])
    except ReportFormatError as exc:  # the page's message, on the same field
        message = f"Could not import {f.name}: {exc}"
        return Response({"error": message, "errors": {"file": [message]}}, status=400)
    return Response(schema.report(report, request), status=201)


@extend_schema(summary="Save a comparison of runs and reports", request=schema.ComparisonRequest,
               description="Validated by the comparison form of the page, with its messages: runs and reports by "
                           "public id, finished runs only, at least one of either.",
               responses={201: schema.ComparisonSerializer, 400: schema.Error})
@api_view(["POST"])
def comparisons(request):
    body = request.data
    if not isinstance(body, dict) or set(body) - {"title", "runs", "reports"}:
        raise exceptions.ValidationError({"__all__": ["Send a JSON object with title, runs and reports (public ids)."]})
    data = QueryDict(mutable=True)
    for name in ("runs", "reports"):
        values = body.get(name, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise exceptions.ValidationError({name: ["Send a list of public ids."]})
        data.setlist(name, values)
    title = body.get("title", "")
    if not isinstance(title, str):
        raise exceptions.ValidationError({"title": ["Send text."]})
    data["title"] = title
    form = ComparisonForm(data)
    if not form.is_valid():
        return invalid(_form_errors(form))
    comparison = services.comparison_create(owner=request.user, **form.cleaned_data)
    return Response(_comparison(comparison, request), status=201,
                    headers={"Location": request.build_absolute_uri(f"/api/v1/comparisons/{comparison.public_id}/")})


@extend_schema(summary="Upload an evaluation text for the quality step",
               description="Stored once per content (its SHA-256): the same text again answers the row stored "
                           "first. A run uses it as `quality_text` (its public id).",
               request={"multipart/form-data": schema.evaluation_text_request()},
               responses={201: schema.EvaluationTextSerializer, 400: schema.Error})
@api_view(["POST"])
@parser_classes([MultiPartParser])
def evaluation_texts(request):
    form = EvaluationTextForm(request.POST, request.FILES,
                              upload_refused=getattr(request._request, "upload_refused", ""))
    if not form.is_valid():
        return invalid(_form_errors(form))
    upload = form.cleaned_data["file"]
    text = services.evaluation_text_store(owner=request.user, name=form.cleaned_data["name"].strip() or upload["name"],
                                          text=upload["text"])
    return Response(schema.evaluation_text(text), status=201)


@extend_schema(summary="A comparison: its members, the warnings on what differs, the ratios in words",
               responses=schema.ComparisonSerializer)
@permalink_read
def comparison_detail(request, public_id: str):
    return Response(_comparison(selectors.comparison_by_public_id(public_id), request))


def _comparison(comparison, request) -> dict:
    runs, reports = members = selectors.comparison_members(comparison)
    series = selectors.comparison_series(comparison, members)
    return {
        "public_id": comparison.public_id, "title": comparison.title,
        "permalink": request.build_absolute_uri(comparison.get_absolute_url()),
        "runs": [schema.run_status(run, request) for run in runs],
        "reports": [schema.report(report, request) for report in reports],
        "warnings": differences(series), "ratios": [r["text"] for r in ratio_sentences(series)],
        "throughput_chart": request.build_absolute_uri(
            reverse("comparison-chart", args=[comparison.public_id, "json"])),
        "deleted_runs": [{"public_id": d.public_id, "name": d.name, "deleted": d.deleted.isoformat(), "note": d.note}
                         for d in comparison.deleted_runs.all()],
    }


# --- schedules ----------------------------------------------------------------------------------

@extend_schema(methods=["GET"], operation_id="schedules_list", summary="Your schedules (staff: every one)",
               responses=schema.ScheduleSerializer(many=True))
@extend_schema(methods=["POST"], operation_id="schedules_create", summary="Repeat a run on a schedule",
               description="`run` is the public id of the run whose settings repeat; the timing and alert fields "
                           "are the run page's schedule form, with its messages.",
               request=schema.schedule_request(), responses={201: schema.ScheduleSerializer, 400: schema.Error})
@api_view(["GET", "POST"])
def schedules(request):
    if request.method == "GET":
        return Response([schema.schedule(s, request) for s in selectors.schedules_of(request.user)])
    body = request.data if isinstance(request.data, dict) else None
    if body is None:
        return invalid({"__all__": ["Send a JSON object."]})
    unknown = sorted(set(body) - set(ScheduleForm.base_fields) - {"run"})
    if unknown:
        return invalid({"__all__": [f"Unknown fields: {', '.join(unknown)[:300]}."]})
    run_id = body.get("run")
    run = Run.objects.filter(public_id=run_id).first() if isinstance(run_id, str) and run_id else None
    if run is None:
        return invalid({"run": ["Give the public id of a run to repeat."]})
    if not schedules_service.may_repeat(run, request.user):
        return invalid({"run": [schedules_service.NOT_YOURS]}, status=403, error=schedules_service.NOT_YOURS)
    data = {k: v for k, v in body.items() if k != "run" and v is not None}
    if any(isinstance(v, (dict, list)) for v in data.values()):
        return invalid({"__all__": ["Send single values, not lists or objects."]})
    form = ScheduleForm(data)
    if not form.is_valid():
        return invalid(_form_errors(form))
    created = schedules_service.schedule_create(
        owner=request.user, name=form.cleaned_data["name"] or str(run),
        template=schedules_service.template_from_run(run), **form.schedule_fields())
    return Response(schema.schedule(created, request), status=201,
                    headers={"Location": request.build_absolute_uri(f"/api/v1/schedules/{created.public_id}/")})


@extend_schema(methods=["GET"], operation_id="schedules_read", summary="A schedule", responses=schema.ScheduleSerializer)
@extend_schema(methods=["DELETE"], operation_id="schedules_delete", summary="Delete a schedule (its runs stay)",
               responses={204: None})
@api_view(["GET", "DELETE"])
def schedule_detail(request, public_id: str):
    found = selectors.schedule_for(request.user, public_id)
    if request.method == "DELETE":
        schedules_service.schedule_delete(schedule=found)
        return Response(status=204)
    return Response(schema.schedule(found, request))


@extend_schema(operation_id="schedules_pause_resume", summary="Pause or resume a schedule", request=None, responses=schema.ScheduleSerializer,
               parameters=[OpenApiParameter("action", str, OpenApiParameter.PATH, enum=["pause", "resume"])])
@api_view(["POST"])
def schedule_action(request, public_id: str, action: str):
    found = selectors.schedule_for(request.user, public_id)
    if action == "pause":
        schedules_service.schedule_pause(schedule=found, reason=f"Paused by {request.user.get_username()}.")
    else:
        schedules_service.schedule_resume(schedule=found)
    found.refresh_from_db()
    return Response(schema.schedule(found, request))
