import json

from django import forms
from django.contrib import admin, messages
from django.db.models.constants import LOOKUP_SEP
from django.template.loader import render_to_string
from axes import models as axes_models
from django_celery_beat import models as beat_models

from benchmarks import services
from benchmarks.engine.launcher import ENV_MASK
from benchmarks.importers.model_config import shape_from_config
from benchmarks.models import AlertSettings, Endpoint, Gpu, Host, LevelResult, Model, Run, ServerRecipe, Variant

# Never a filter, search or ordering on these, in any list (a "1 endpoint" or "0" answer to
# ?api_key__startswith=... gives the key away one character at a time).
SECRET_FIELDS = {"api_key", "webhook_secret", "env"}


class InventoryAdmin(admin.ModelAdmin):
    def lookup_allowed(self, lookup, value, request=None):
        if SECRET_FIELDS & set(lookup.split(LOOKUP_SEP)):
            return False
        return super().lookup_allowed(lookup, value, request)


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ("index", "name", "uuid", "memory_total_mib", "compute_capability", "pcie_generation",
              "pcie_width", "nvlink", "ecc_mode", "ecc_corrected", "ecc_uncorrected")


@admin.register(Host)
class HostAdmin(InventoryAdmin):
    list_display = ("name", "hostname", "queue_name", "gpu_summary", "driver_version", "cuda_version",
                    "interconnect", "price", "probe_status", "probed_at")
    list_filter = ("interconnect", "driver_version")
    search_fields = ("name", "hostname", "gpus__name", "notes")
    readonly_fields = ("probe_status", "probed_at", "topology_matrix")
    inlines = [GpuInline]
    actions = ["probe_now"]

    @admin.action(description="Probe GPUs now (on the host's own worker)")
    def probe_now(self, request, queryset):
        asked = services.host_probe_request(hosts=queryset)
        self.message_user(request, f"Asked the workers of {asked} host(s) to probe their GPUs; "
                                   "the results appear here with the time they were probed.")

    @admin.display(description="GPU topology")
    def topology_matrix(self, host):
        """The probe's topology as `nvidia-smi topo -m` lays it out, with its legend."""
        return render_to_string("admin/benchmarks/topology.html", {"topology": host.topology_figures})

    @admin.display(description="Price")
    def price(self, host):
        return host.hourly_price.said() if host.hourly_price else "—"

    @admin.display(description="GPUs")
    def gpu_summary(self, host):
        gpus = list(host.gpus.all())
        if not gpus:
            return "—"
        names = {}
        for g in gpus:
            names[g.name] = names.get(g.name, 0) + 1
        return ", ".join(f"{n}× {name}" for name, n in names.items())

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("gpus")


class VariantInline(admin.TabularInline):
    model = Variant
    extra = 0


class ModelAdminForm(forms.ModelForm):
    """Paste the checkpoint's config.json and the shape fields left blank are filled from it."""

    config_json = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 6}), label="config.json",
                                  help_text="Optional: the checkpoint's config.json. Its shape fills in every "
                                            "field below left blank (parameters counted from it); a value you "
                                            "type wins.")

    class Meta:
        model = Model
        fields = "__all__"

    FROM_SHAPE = ("params_b", "architecture", "context_length", "layers", "kv_heads", "head_dim", "attention_heads",
                  "intermediate_size", "embedding_params_b")

    def clean(self):
        data = super().clean()
        text = (data.get("config_json") or "").strip()
        if not text:
            return data
        try:
            shape = shape_from_config(text)
        except ValueError as e:
            self.add_error("config_json", str(e))
            return data
        for name in self.FROM_SHAPE:
            value = getattr(shape, name)
            if data.get(name) in (None, "") and value:
                data[name] = round(value, 3) if isinstance(value, float) else value
                setattr(self.instance, name, data[name])
        return data


@admin.register(Model)
class ModelAdmin(InventoryAdmin):
    form = ModelAdminForm
    list_display = ("name", "params_b", "architecture", "context_length", "layers", "kv_heads", "head_dim")
    search_fields = ("name", "architecture")
    inlines = [VariantInline]


@admin.register(Variant)
class VariantAdmin(InventoryAdmin):
    list_display = ("name", "model", "quantization", "format", "size_bytes")
    list_filter = ("quantization", "format", "model")
    search_fields = ("name", "model__name")


class EndpointAdminForm(forms.ModelForm):
    """The API key is write-only: the form never renders it; leaving it blank keeps it, unless
    the base URL changes (services.endpoint_api_key)."""

    api_key = forms.CharField(required=False, widget=forms.PasswordInput(render_value=False),
                              help_text="Write-only. Leave blank to keep the stored key; a changed base URL "
                                        "removes it unless you type it again here.")
    clear_api_key = forms.BooleanField(required=False, label="Remove the stored API key")
    webhook_secret = forms.CharField(required=False, max_length=200, widget=forms.PasswordInput(render_value=False),
                                     help_text="Write-only: signs the alert webhook's bodies (HMAC-SHA256). "
                                               "Leave blank to keep the stored one.")
    clear_webhook_secret = forms.BooleanField(required=False, label="Remove the stored webhook secret")

    class Meta:
        model = Endpoint
        # Set in save() from the rules below, never from the posted data alone.
        exclude = ["api_key", "webhook_secret"]

    def clean(self):
        data = super().clean()
        stored = self.instance.api_key if self.instance.pk else ""
        old_url = self.instance.base_url if self.instance.pk else ""
        data["api_key"], self.api_key_note = services.endpoint_api_key(
            stored=stored, typed=data.get("api_key", ""), clear=bool(data.get("clear_api_key")),
            old_url=old_url, new_url=data.get("base_url") or old_url)
        return data

    def save(self, commit=True):
        self.instance.api_key = self.cleaned_data.get("api_key", "")
        if self.cleaned_data.get("clear_webhook_secret"):
            self.instance.webhook_secret = ""
        elif self.cleaned_data.get("webhook_secret"):
            self.instance.webhook_secret = self.cleaned_data["webhook_secret"]
        return super().save(commit)


@admin.register(Endpoint)
class EndpointAdmin(InventoryAdmin):
    form = EndpointAdminForm
    list_display = ("name", "backend", "host", "base_url", "model_name", "variant", "engine_version",
                    "tensor_parallel_size", "has_key", "enabled")
    list_filter = ("backend", "enabled", "host", "variant__quantization")
    search_fields = ("name", "base_url", "model_name", "launch_command")
    filter_horizontal = ("gpus",)
    readonly_fields = ("api_key_status",)

    @admin.display(boolean=True, description="API key")
    def has_key(self, endpoint):
        return endpoint.has_api_key

    @admin.display(description="Stored API key")
    def api_key_status(self, endpoint):
        return "yes (write-only: never shown)" if endpoint.has_api_key else "no"

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            # View only: the admin would show every field read-only, the key in clear among them.
            fields = [f for f in fields if f not in ("api_key", "clear_api_key", "webhook_secret",
                                                     "clear_webhook_secret")]
        # What a run needs first (name, host, backend, URL, variant); the alert settings after.
        alerts = {f.name for f in AlertSettings._meta.fields} | {"webhook_secret", "clear_webhook_secret"}
        return [f for f in fields if f not in alerts] + [f for f in fields if f in alerts]

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if form.api_key_note:
            self.message_user(request, form.api_key_note, messages.WARNING)


class ServerRecipeAdminForm(forms.ModelForm):
    """The environment's values are write-only (an HF_TOKEN for a gated model): the form shows
    each as "…", and a name left at "…" keeps its stored value."""

    class Meta:
        model = ServerRecipe
        fields = "__all__"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "env" in self.fields and self.instance.pk and isinstance(self.instance.env, dict):
            self.initial["env"] = masked_env(self.instance.env)

    def clean_env(self):
        env = self.cleaned_data.get("env")
        stored = self.instance.env if self.instance.pk and isinstance(self.instance.env, dict) else {}
        if isinstance(env, dict):
            env = {k: stored[k] if v == ENV_MASK and k in stored else v for k, v in env.items()}
            kept = [k for k, v in env.items() if v == ENV_MASK]
            if kept:
                raise forms.ValidationError(f"give a value for {', '.join(kept)}: it has none stored")
        return env


def masked_env(env) -> dict:
    return {str(k): ENV_MASK for k in env} if isinstance(env, dict) else {}


@admin.register(ServerRecipe)
class ServerRecipeAdmin(InventoryAdmin):
    """Staff define recipes; whether a host starts one is its worker's own decision (LAB_*)."""

    form = ServerRecipeAdminForm
    list_display = ("name", "host", "backend", "variant", "executable", "model_path", "sweep_label", "enabled")
    list_filter = ("backend", "host", "enabled")
    search_fields = ("name", "executable", "model_path", "notes")
    readonly_fields = ("created", "env_names")

    @admin.display(description="environment variables")
    def env_names(self, recipe):
        """The names only, each NAME=… (the values may be secrets)."""
        return " ".join(f"{k}={ENV_MASK}" for k in (recipe.env or {})) or "—"

    def get_fields(self, request, obj=None):
        fields = super().get_fields(request, obj)
        if obj is not None and not self.has_change_permission(request, obj):
            # View only: the admin would show every field read-only, the values in clear.
            fields = [f for f in fields if f != "env"]
        return fields

    def get_changeform_initial_data(self, request):
        """GET pre-fills the add form (the decision page's "add a recipe from this command"); the
        JSON fields arrive as JSON text, which the form would show quoted as one string."""
        initial = super().get_changeform_initial_data(request)
        for name in ("args", "sweep", "env"):
            if isinstance(initial.get(name), str):
                try:
                    initial[name] = json.loads(initial[name])
                except ValueError:
                    initial.pop(name)
        return initial

    @admin.display(description="sweep")
    def sweep_label(self, recipe):
        return "; ".join(f"{flag} {', '.join(map(str, values))}" for flag, values in (recipe.sweep or {}).items()) or "—"


class LevelInline(admin.TabularInline):
    model = LevelResult
    extra = 0
    can_delete = False
    fields = ("endpoint", "concurrency", "completed", "failed", "wall_s")
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(InventoryAdmin):
    list_display = ("__str__", "status", "owner", "created", "prompt_tokens", "output_tokens",
                    "concurrency_levels", "progress_done", "progress_total")
    list_filter = ("status", "api", "endpoints__backend")
    search_fields = ("title", "public_id", "owner__username")
    readonly_fields = ("public_id", "status", "created", "started", "finished", "progress_done",
                       "progress_total", "progress_note", "error", "preflight", "queue_name")
    inlines = [LevelInline]

    # Runs are queued from the run form, whose bounds (rates, durations, requests, the run time
    # limit) the admin must not get around: here a run's workload and endpoints are read-only.
    def has_add_permission(self, request):
        return False

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in (*Run._meta.fields, *Run._meta.many_to_many) if f.name not in ("id", "title")]


# Out of staff's way: the scheduler's own tables (the product's schedules write them) and the
# login throttle's logs. Its lockouts (AccessAttempt) stay, to let a locked-out member back in.
def _unregister(*models) -> None:
    for model in models:
        if admin.site.is_registered(model):
            admin.site.unregister(model)


_unregister(*(getattr(beat_models, name) for name in ("PeriodicTask", "IntervalSchedule", "CrontabSchedule",
                                                     "SolarSchedule", "ClockedSchedule")),
            axes_models.AccessLog, axes_models.AccessFailureLog)
