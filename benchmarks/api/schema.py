"""What the API answers, as serializers: one writer per shape (run_status and the inventory
serializers), and the OpenAPI schema drf-spectacular makes from them. The run request's schema
is made from the run form's own fields, so the two cannot drift apart."""
from __future__ import annotations

from django import forms
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from django.urls import reverse
from rest_framework import serializers

from benchmarks import selectors
from benchmarks.decorators import hides_addresses
from benchmarks.models import Endpoint, Gpu, Host, ImportedReport, Model, Run, Schedule, Variant


def run_status(run: Run, request) -> dict:
    """A run as the API shows it: its status, progress, headline figures once measured, and the
    addresses of what to read next."""
    hide = hides_addresses(request)
    base = request.build_absolute_uri(f"/api/v1/runs/{run.public_id}/")
    return {
        "public_id": run.public_id, "title": run.title, "status": run.status, "finished": run.is_finished,
        "owner": None if hide or run.owner is None else run.owner.get_username(),
        "created": run.created.isoformat(), "started": run.started.isoformat() if run.started else None,
        "ended": run.finished.isoformat() if run.finished else None,
        "progress": {"done": run.progress_done, "total": run.progress_total, "percent": run.progress_percent,
                     "note": run.progress_note, "eta_s": run.eta_s},
        "error": selectors.run_error(run, hide_addresses=hide), "flags": run.flags,
        "archived": run.archived.isoformat() if run.archived else None,
        "regression": regression(run, request),
        "load_mode": run.load_mode, "trials": run.trials, "host_check": host_check(run),
        "permalink": request.build_absolute_uri(run.get_absolute_url()),
        "links": {"self": base, "results": base + "results/", "requests": base + "requests/",
                  "cancel": base + "cancel/"},
    }


def host_check(run: Run) -> dict | None:
    """Whether the measuring host was quiet before the run (None: not checked)."""
    check = run.host_checked
    if check is None:
        return None
    return {"quiet": check.quiet, "waited_s": round(check.waited_s, 1), "bound_s": check.bound_s,
            "busy_percent": check.busy_percent, "steal_percent": check.steal_percent, "cpus": check.cpus,
            "sentence": check.sentence}


def regression(run: Run, request) -> dict | None:
    """The run's regression test against its comparable runs (None before it finished, or when
    it measured nothing): every regressed figure with its evidence and history page."""
    report = run.regression_report
    if report is None:
        return None
    return {"regressed": report.regressed, "tested": report.tested,
            "regressions": [{"endpoint": lv.endpoint, "load": lv.load, "figure": f.figure, "value": f.value,
                             "mean": f.mean, "change_pct": f.change_pct, "z": f.z, "z_from_noise_floor": f.floored,
                             "compared_runs": len(f.history), "better": f.better}
                            for lv, f in report.regressions()],
            "history": sorted({request.build_absolute_uri(reverse("history", args=[lv.fingerprint]))
                               for lv in report.levels})}


def schedule(schedule: Schedule, request) -> dict:
    """A schedule as the API shows it; never its webhook secret."""
    from benchmarks.schedules import template_endpoints

    return {"public_id": schedule.public_id, "name": schedule.name, "owner": schedule.owner.get_username(),
            "every": schedule.every, "when": schedule.when, "at": schedule.at.strftime("%H:%M") if schedule.at else None,
            "weekday": schedule.weekday, "cron": schedule.cron, "interval_s": schedule.interval_s,
            "active": schedule.active, "paused_reason": schedule.paused_reason,
            "consecutive_failures": schedule.consecutive_failures,
            "last_fired": schedule.last_fired.isoformat() if schedule.last_fired else None,
            "endpoints": template_endpoints(schedule.template),
            "alert_emails": schedule.alert_emails, "webhook_url": schedule.webhook_url,
            "has_webhook_secret": schedule.has_webhook_secret,
            "runs": [request.build_absolute_uri(f"/api/v1/runs/{r.public_id}/") for r in schedule.runs.order_by("-created")[:20]],
            "page": request.build_absolute_uri(schedule.get_absolute_url())}


def report(report: ImportedReport, request) -> dict:
    """An imported or published report: always labelled as not measured here."""
    return {"public_id": report.public_id, "title": report.title, "kind": report.kind, "label": report.label,
            "gpu": report.gpu, "backend": report.backend, "quantization": report.quantization,
            "levels": len(report.data.levels), "created": report.created.isoformat(),
            "permalink": request.build_absolute_uri(report.get_absolute_url())}


class Error(serializers.Serializer):
    error = serializers.CharField()
    errors = serializers.DictField(child=serializers.ListField(child=serializers.CharField()), required=False)


class RegressedFigure(serializers.Serializer):
    endpoint = serializers.CharField()
    load = serializers.CharField()
    figure = serializers.CharField(help_text="a catalogue figure name, e.g. ttft_ms_p50")
    value = serializers.FloatField()
    mean = serializers.FloatField(help_text="of the comparable runs")
    change_pct = serializers.FloatField(help_text="percent worse than the mean")
    z = serializers.FloatField(help_text="standard deviations worse than the mean (noise floors where "
                                         "z_from_noise_floor)")
    z_from_noise_floor = serializers.BooleanField(
        help_text="the comparable runs varied by less than REGRESSION_NOISE_FLOOR_PCT of their mean, so z counts "
                  "that floor, not a measured spread")
    compared_runs = serializers.IntegerField()
    better = serializers.ChoiceField(choices=["higher", "lower"])


class Regression(serializers.Serializer):
    regressed = serializers.BooleanField()
    tested = serializers.BooleanField(help_text="false: too few comparable runs to test any figure")
    regressions = RegressedFigure(many=True)
    history = serializers.ListField(child=serializers.URLField(), help_text="the workloads' history pages")


class Progress(serializers.Serializer):
    done = serializers.IntegerField()
    total = serializers.IntegerField()
    percent = serializers.IntegerField()
    note = serializers.CharField()
    eta_s = serializers.FloatField(allow_null=True, help_text="Seconds left at the pace so far (null before the "
                                                              "first request is done, and once finished)")


class HostCheck(serializers.Serializer):
    quiet = serializers.BooleanField(help_text="Whether other work left the host's CPUs quiet before the run")
    waited_s = serializers.FloatField(help_text="How long the run waited for the host to quiet")
    bound_s = serializers.FloatField(help_text="The most it would wait (RUN_HOST_QUIET_WAIT_S)")
    busy_percent = serializers.FloatField(allow_null=True, help_text="The host's CPUs busy, all of them, "
                                                                     "over the last window read (%)")
    steal_percent = serializers.FloatField(allow_null=True, help_text="CPU steal over that window (%)")
    cpus = serializers.IntegerField(allow_null=True)
    sentence = serializers.CharField(help_text="What the run page says")


class RunStatus(serializers.Serializer):
    public_id = serializers.CharField()
    title = serializers.CharField()
    status = serializers.ChoiceField(choices=Run.STATUSES)
    finished = serializers.BooleanField()
    owner = serializers.CharField(allow_null=True)
    created = serializers.DateTimeField()
    started = serializers.DateTimeField(allow_null=True)
    ended = serializers.DateTimeField(allow_null=True)
    progress = Progress()
    error = serializers.CharField()
    flags = serializers.ListField(child=serializers.DictField())
    archived = serializers.DateTimeField(allow_null=True, help_text="When it was archived (hidden from lists)")
    regression = Regression(allow_null=True)
    load_mode = serializers.ChoiceField(choices=Run.LOAD_MODES)
    trials = serializers.IntegerField()
    host_check = HostCheck(allow_null=True, help_text="Before the run: was the measuring host quiet "
                                                      "(null: not checked)")
    permalink = serializers.URLField()
    links = serializers.DictField(child=serializers.URLField())


class ScheduleSerializer(serializers.Serializer):
    public_id = serializers.CharField()
    name = serializers.CharField()
    owner = serializers.CharField()
    every = serializers.ChoiceField(choices=Schedule.EVERY)
    when = serializers.CharField()
    at = serializers.CharField(allow_null=True)
    weekday = serializers.IntegerField(allow_null=True)
    cron = serializers.CharField()
    interval_s = serializers.IntegerField(allow_null=True)
    active = serializers.BooleanField()
    paused_reason = serializers.CharField()
    consecutive_failures = serializers.IntegerField()
    last_fired = serializers.DateTimeField(allow_null=True)
    endpoints = serializers.ListField(child=serializers.CharField())
    alert_emails = serializers.CharField()
    webhook_url = serializers.CharField()
    has_webhook_secret = serializers.BooleanField()
    runs = serializers.ListField(child=serializers.URLField())
    page = serializers.URLField()


def schedule_request() -> type[serializers.Serializer]:
    """The schedule form's fields and the run to repeat (documentation only: the form validates)."""
    from benchmarks.forms import ScheduleForm

    attrs = {name: _schema_field(name, f) for name, f in ScheduleForm.base_fields.items()}
    attrs["run"] = serializers.CharField(help_text="The public id of the run to repeat.")
    attrs["at"] = serializers.CharField(required=False, allow_null=True, help_text="HH:MM, UTC")
    return type("ScheduleRequest", (serializers.Serializer,), attrs)


class _Page(serializers.Serializer):
    count = serializers.IntegerField()
    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)


class RunPage(_Page):
    results = RunStatus(many=True)


class RequestRow(serializers.Serializer):
    level = serializers.CharField(help_text="The level's public id")
    endpoint = serializers.CharField()
    index = serializers.IntegerField()
    sent = serializers.FloatField(help_text="s from the level's start")
    scheduled = serializers.FloatField(allow_null=True, help_text="s from the level's start, when the schedule "
                                                                  "meant it to leave (rate mode)")
    conversation = serializers.IntegerField(allow_null=True, help_text="its conversation (conversation mode)")
    turn = serializers.IntegerField(allow_null=True, help_text="its turn in the conversation, 1 = the first")
    first_content = serializers.FloatField(allow_null=True, help_text="s from the level's start")
    first_answer = serializers.FloatField(allow_null=True, help_text="s from the level's start")
    end = serializers.FloatField(allow_null=True, help_text="s from the level's start")
    prompt_tokens = serializers.IntegerField(allow_null=True)
    output_tokens = serializers.IntegerField(allow_null=True)
    client_output_tokens = serializers.IntegerField()
    finish_reason = serializers.CharField()
    status_code = serializers.IntegerField(allow_null=True)
    error = serializers.CharField()
    error_kind = serializers.CharField()


class RequestPage(_Page):
    results = RequestRow(many=True)


class GpuSerializer(serializers.ModelSerializer):
    class Meta:
        model = Gpu
        fields = ["index", "name", "memory_total_mib", "compute_capability", "pcie_generation", "pcie_width", "nvlink"]


class HostSerializer(serializers.ModelSerializer):
    gpus = GpuSerializer(many=True)
    topology = serializers.SerializerMethodField()

    class Meta:
        model = Host
        fields = ["name", "hostname", "cpu", "ram_gb", "os", "driver_version", "cuda_version", "interconnect",
                  "probe_status", "probed_at", "gpus", "topology"]

    def get_topology(self, host: Host) -> dict:
        """The probe's GPU topology in its current stored version ({} when not probed)."""
        return host.topology_figures.to_dict()


class VariantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Variant
        fields = ["name", "quantization", "format", "size_bytes"]


class ModelSerializer(serializers.ModelSerializer):
    variants = VariantSerializer(many=True)

    class Meta:
        model = Model
        fields = ["name", "params_b", "architecture", "context_length", "layers", "kv_heads", "head_dim",
                  "attention_heads", "intermediate_size", "embedding_params_b", "variants"]


class EndpointSerializer(serializers.ModelSerializer):
    """Never the API key (write-only everywhere)."""
    host = serializers.CharField(source="host.name")
    model = serializers.SerializerMethodField()
    variant = serializers.CharField(source="variant.name", allow_null=True, default=None)
    quantization = serializers.CharField(source="variant.quantization", allow_null=True, default=None)

    class Meta:
        model = Endpoint
        fields = ["name", "backend", "host", "base_url", "model_name", "model", "variant", "quantization",
                  "engine_version", "launch_flags", "tensor_parallel_size", "has_api_key"]

    def get_model(self, endpoint: Endpoint) -> str | None:
        return endpoint.variant.model.name if endpoint.variant_id else None


def _schema_field(name: str, field: forms.Field) -> serializers.Field:
    """The OpenAPI description of one run-form field (documentation only: the form validates)."""
    common = {"required": False, "help_text": str(field.help_text or field.label or "") or None}
    if isinstance(field, forms.FileField):
        common["help_text"] = (common["help_text"] or "") + ' Sent as {"name": "its file name", "content": "its text"}.'
        return serializers.DictField(child=serializers.CharField(), **common)
    if isinstance(field, forms.ModelMultipleChoiceField):
        return serializers.ListField(child=serializers.CharField(), **common)
    if isinstance(field, forms.ModelChoiceField):
        return serializers.CharField(allow_null=True, **common)
    if isinstance(field, forms.BooleanField):
        return serializers.BooleanField(**common)
    bounds = {k: v for k, v in (("min_value", getattr(field, "min_value", None)),
                                 ("max_value", getattr(field, "max_value", None))) if v is not None}
    if isinstance(field, forms.FloatField):  # before IntegerField: a FloatField is one
        return serializers.FloatField(allow_null=not field.required, **bounds, **common)
    if isinstance(field, forms.IntegerField):
        return serializers.IntegerField(allow_null=not field.required, **bounds, **common)
    if isinstance(field, forms.ChoiceField):
        return serializers.ChoiceField(choices=list(field.choices), **common)
    if name in ("concurrency_levels", "request_rates", "trace_speedups"):
        return serializers.JSONField(**common)  # a list of numbers, or comma-separated text
    return serializers.CharField(allow_blank=True, **common)


def run_request() -> type[serializers.Serializer]:
    from benchmarks.api.payloads import api_fields

    attrs = {name: _schema_field(name, f) for name, f in api_fields().items()}
    return type("RunRequest", (serializers.Serializer,), attrs)


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "benchmarks.api.tokens.BearerTokenAuthentication"
    name = "token"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API token from the API tokens page."}


class SessionScheme(OpenApiAuthenticationExtension):
    target_class = "benchmarks.api.tokens.SessionAuthentication"
    name = "session"

    def get_security_definition(self, auto_schema):
        return {"type": "apiKey", "in": "cookie", "name": "sessionid",
                "description": "A logged-in browser; a POST also needs the X-CSRFToken header."}


class ReportSerializer(serializers.Serializer):
    public_id = serializers.CharField()
    title = serializers.CharField()
    kind = serializers.ChoiceField(choices=ImportedReport.KINDS)
    label = serializers.CharField()
    gpu = serializers.CharField()
    backend = serializers.CharField()
    quantization = serializers.CharField()
    levels = serializers.IntegerField()
    created = serializers.DateTimeField()
    permalink = serializers.URLField()


class DeletedRunSerializer(serializers.Serializer):
    public_id = serializers.CharField()
    name = serializers.CharField()
    deleted = serializers.DateTimeField()
    note = serializers.CharField()


class Gone(serializers.Serializer):
    """A deleted run's permalink (410)."""
    error = serializers.CharField()
    public_id = serializers.CharField()
    deleted = serializers.DateTimeField()


class ArchiveRequest(serializers.Serializer):
    archived = serializers.BooleanField(required=False, default=True, help_text="false: show it in the lists again")


class ComparisonRequest(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    runs = serializers.ListField(child=serializers.CharField(), required=False, help_text="Finished runs' public ids")
    reports = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="Imported or published reports' public ids")


class EvaluationTextSerializer(serializers.Serializer):
    public_id = serializers.CharField()
    name = serializers.CharField()
    sha256 = serializers.CharField()
    characters = serializers.IntegerField()
    created = serializers.DateTimeField()


def evaluation_text(text) -> dict:
    return {"public_id": text.public_id, "name": text.name, "sha256": text.sha256, "characters": len(text.text),
            "created": text.created.isoformat()}


def evaluation_text_request() -> type[serializers.Serializer]:
    from benchmarks.forms import EvaluationTextForm

    fields = EvaluationTextForm.base_fields
    return type("EvaluationTextRequest", (serializers.Serializer,), {
        "file": serializers.FileField(help_text=str(fields["file"].help_text)),
        "name": serializers.CharField(required=False, allow_blank=True, max_length=200,
                                      help_text=str(fields["name"].help_text))})


def run_filter_parameters() -> list:
    """The runs list's filters as OpenAPI query parameters (RunFilterForm validates them)."""
    from drf_spectacular.utils import OpenApiParameter

    from benchmarks.engine import backends
    from benchmarks.engine.validity import FLAG_NAMES
    from benchmarks.forms import RunFilterForm

    enums = {"status": [s for s, _ in Run.STATUSES], "backend": [b for b, _ in backends.choices()],
             "flags": [v for v, _ in RunFilterForm.FLAGS if v] + list(FLAG_NAMES),
             "archived": [v for v, _ in RunFilterForm.ARCHIVED if v]}
    out = []
    for name, field in RunFilterForm.base_fields.items():
        kind = bool if isinstance(field, forms.BooleanField) else str
        extra = {"enum": enums[name]} if name in enums else {}
        if isinstance(field, forms.DateField):
            extra = {"type": {"type": "string", "format": "date"}}
        out.append(OpenApiParameter(name, extra.pop("type", kind), description=str(field.help_text or field.label or
                                                                               name), **extra))
    return out


class ComparisonSerializer(serializers.Serializer):
    public_id = serializers.CharField()
    title = serializers.CharField()
    permalink = serializers.URLField()
    runs = RunStatus(many=True)
    reports = ReportSerializer(many=True)
    warnings = serializers.ListField(child=serializers.CharField())
    ratios = serializers.ListField(child=serializers.CharField())
    throughput_chart = serializers.URLField()
    deleted_runs = DeletedRunSerializer(many=True, help_text="Runs it held that were deleted since")


def import_request() -> type[serializers.Serializer]:
    """The import form's fields (documentation only: the form validates)."""
    from benchmarks.forms import ImportForm

    attrs = {name: serializers.FileField(help_text=str(f.help_text)) if isinstance(f, forms.FileField)
             else serializers.CharField(required=False, allow_blank=True, help_text=str(f.help_text or ""))
             for name, f in ImportForm.base_fields.items()}
    return type("ImportRequest", (serializers.Serializer,), attrs)
