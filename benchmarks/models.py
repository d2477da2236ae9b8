import os
import secrets
from datetime import timedelta
from functools import cached_property

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from benchmarks.engine import backends, load_modes, multi_gpu
from benchmarks.fields import EncryptedTextField
from benchmarks.engine.addresses import AddressPolicy
from benchmarks.engine.client import Finding, Load, Target, Workload
from benchmarks.engine.arrivals import ArrivalPattern
from benchmarks.engine.client_figures import ClientFigures
from benchmarks.engine.cost import OWNED, OWNERSHIP, HourlyPrice
from benchmarks.engine.datasets import Dataset
from benchmarks.engine.gpu import GpuSummary, Topology
from benchmarks.engine.host_check import HostCheck
from benchmarks.engine.load_modes.base import span
from benchmarks.engine.launcher import (GPU_ENV, GPUS_KEY, PLACEHOLDERS, LaunchReport, ServerSpec, env_name_problem,
                                        mask_env, parse_gpus, setting_label)
from benchmarks.engine.metrics import LevelSummary
from benchmarks.engine.plan import RunPlan
from benchmarks.engine.quality import DEFAULT_CHUNKS, DEFAULT_CTX, EvalText, builtin_text, scored_positions
from benchmarks.engine.quality import QualityResult as QualityFigures
from benchmarks.engine.regression import RegressionReport
from benchmarks.engine import webhooks
from benchmarks.engine.server_metrics import ServerSummary, StoredIdentity
from benchmarks.engine.slo_search import SloSearch, SloTarget
from benchmarks.importers import ImportedReport as ParsedReport


def endpoint_addresses():
    """Where workers may send requests: never to link-local, cloud metadata and other blocked
    addresses (engine/addresses.py), and only within ENDPOINT_ALLOWED_NETWORKS when it is set."""
    return AddressPolicy.from_setting(settings.ENDPOINT_ALLOWED_NETWORKS)


def endpoint_url_problem(url: str) -> str:
    """Why `url` cannot be an endpoint's base URL, or "" when it can. Host names are checked
    again, resolved, whenever a worker connects."""
    return endpoint_addresses().url_problem(url)


def validate_endpoint_url(url: str) -> None:
    problem = endpoint_url_problem(url)
    if problem:
        raise ValidationError(problem)


def webhook_addresses():
    """Where alert webhooks may go: never to link-local, cloud metadata and other blocked
    addresses (the endpoints' rule), and to loopback, private and other non-public addresses
    only inside the networks WEBHOOK_ALLOWED_NETWORKS names (else a member's hook could probe
    the site's own network, port by port)."""
    return AddressPolicy.public_unless(settings.WEBHOOK_ALLOWED_NETWORKS, "WEBHOOK_ALLOWED_NETWORKS")


def validate_webhook_url(url: str) -> None:
    problem = webhooks.url_problem(url, webhook_addresses())
    if problem:
        raise ValidationError(problem)


def validate_emails(text: str) -> None:
    from django.core.validators import validate_email

    for address in email_list(text):
        try:
            validate_email(address)
        except ValidationError:
            raise ValidationError(f"{address} is not an e-mail address.") from None


def email_list(text: str) -> list[str]:
    """Comma- or space-separated e-mail addresses."""
    return [a for a in (text or "").replace(",", " ").split() if a]


class AlertSettings(models.Model):
    """Where a regression is told (a schedule's or an endpoint's): e-mail addresses and a webhook,
    whose secret signs its bodies and is never rendered back."""

    alert_emails = models.CharField("alert e-mails", max_length=500, blank=True, validators=[validate_emails],
                                    help_text="Comma-separated addresses told of a regression.")
    webhook_url = models.CharField("webhook URL", max_length=500, blank=True, validators=[validate_webhook_url],
                                   help_text="POSTed a JSON body on a regression.")
    webhook_secret = EncryptedTextField(max_length=200, blank=True)  # write-only: never rendered back

    class Meta:
        abstract = True

    @property
    def has_webhook_secret(self) -> bool:
        return bool(self.webhook_secret)

    @property
    def alerts_on(self) -> bool:
        return bool(self.alert_emails or self.webhook_url)


def new_public_id() -> str:
    """128 random bits, URL-safe: permalinks nobody can guess or enumerate."""
    return secrets.token_urlsafe(16)


class Host(models.Model):
    name = models.CharField(max_length=100, unique=True)
    hostname = models.CharField(max_length=255, blank=True)
    queue_name = models.SlugField(max_length=100, unique=True, blank=True,
                                  help_text="Celery queue that this host's worker consumes. "
                                            "Default: host- followed by the host's name (host-v100a for v100a).")
    cpu = models.CharField("CPU", max_length=200, blank=True)
    ram_gb = models.FloatField("RAM (GB)", null=True, blank=True)
    os = models.CharField("OS", max_length=200, blank=True)
    driver_version = models.CharField(max_length=50, blank=True)
    cuda_version = models.CharField("CUDA driver version", max_length=50, blank=True)
    interconnect = models.CharField(max_length=20, blank=True, choices=[
        ("pcie", "PCIe only"), ("nvlink", "NVLink"), ("", "unknown")])
    notes = models.TextField(blank=True)
    probe_status = models.CharField(max_length=300, blank=True)
    probed_at = models.DateTimeField(null=True, blank=True)
    # engine.gpu.Topology.to_dict(), written by the probe; read it as `topology_figures`.
    topology = models.JSONField(default=dict, blank=True, editable=False)
    # What its worker's LAB_EXECUTABLES and LAB_MODEL_DIRS allowed when it last started: shown, and
    # used to pre-fill recipes. The worker's own settings decide what it starts, never these.
    lab_executables = models.JSONField(default=list, blank=True, editable=False)
    lab_model_dirs = models.JSONField(default=list, blank=True, editable=False)
    # What an hour of this host costs (engine/cost.py): read as `hourly_price`.
    price_ownership = models.CharField("ownership", max_length=10, blank=True, choices=[("", "no price"), *OWNERSHIP],
                                       help_text="Owned: amortisation per hour plus electricity for the energy "
                                                 "measured. Rented: the provider's hourly rate, all included.")
    price_per_hour = models.FloatField("price per hour", null=True, blank=True, validators=[MinValueValidator(0)],
                                       help_text="Owned: the cards' amortisation per hour (purchase over the hours "
                                                 "you expect to run them). Rented: the provider's rate for this host.")
    price_per_kwh = models.FloatField("electricity per kWh", null=True, blank=True,
                                      validators=[MinValueValidator(0)], help_text="Owned hosts only.")
    price_currency = models.CharField("currency", max_length=3, default="USD",
                                      validators=[RegexValidator(r"^[A-Z]{3}$", "a three-letter code such as USD")])
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def clean(self):
        errors = {}
        if self.price_ownership and self.price_per_hour is None:
            errors["price_per_hour"] = "give the price per hour (0 for none) or choose no price"
        if self.price_per_kwh is not None and self.price_ownership != OWNED:
            errors["price_per_kwh"] = "electricity is priced for owned hosts; a rented host's rate includes it"
        if errors:
            raise ValidationError(errors)

    @property
    def hourly_price(self) -> HourlyPrice | None:
        if not self.price_ownership or self.price_per_hour is None:
            return None
        return HourlyPrice(self.price_ownership, self.price_per_hour, self.price_currency, self.price_per_kwh)

    def __str__(self):
        return self.name

    def allowed_executable(self, name: str) -> str:
        """The executable its worker allows whose file name is `name` (the command's first word,
        e.g. llama-server), "" when none is."""
        base = os.path.basename(name)
        return next((e for e in self.lab_executables if os.path.basename(e) == base), "")

    @cached_property
    def topology_figures(self) -> Topology:
        return Topology.from_dict(self.topology)

    def save(self, *args, **kwargs):
        if not self.queue_name:
            self.queue_name = "host-" + slugify(self.name)
        super().save(*args, **kwargs)


class Gpu(models.Model):
    host = models.ForeignKey(Host, models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=100)
    uuid = models.CharField("UUID", max_length=100, blank=True)
    memory_total_mib = models.PositiveIntegerField("VRAM (MiB)", null=True, blank=True)
    compute_capability = models.CharField(max_length=10, blank=True, help_text="e.g. 7.0")
    pcie_generation = models.PositiveSmallIntegerField(null=True, blank=True)
    pcie_width = models.PositiveSmallIntegerField(null=True, blank=True)
    nvlink = models.CharField("NVLink", max_length=100, blank=True)
    ecc_mode = models.CharField("ECC mode", max_length=30, blank=True)
    ecc_corrected = models.BigIntegerField(null=True, blank=True)
    ecc_uncorrected = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["host", "index"]
        constraints = [models.UniqueConstraint(fields=["host", "index"], name="gpu_host_index")]

    def __str__(self):
        return f"{self.host} GPU{self.index} {self.name}"


class Model(models.Model):
    name = models.CharField(max_length=200, unique=True, help_text="e.g. DeepSeek-R1-Distill-Qwen-7B")
    params_b = models.FloatField("parameters (billions)", null=True, blank=True)
    architecture = models.CharField(max_length=100, blank=True)
    context_length = models.PositiveIntegerField(null=True, blank=True)
    layers = models.PositiveIntegerField(null=True, blank=True)
    kv_heads = models.PositiveIntegerField("KV heads", null=True, blank=True)
    head_dim = models.PositiveIntegerField("head size", null=True, blank=True)
    # What tensor parallel must divide, and what quantized checkpoints keep 16-bit (the advisor's).
    attention_heads = models.PositiveIntegerField(null=True, blank=True)
    intermediate_size = models.PositiveIntegerField("MLP intermediate size", null=True, blank=True)
    embedding_params_b = models.FloatField("embedding + lm_head parameters (billions)", null=True, blank=True,
                                           help_text="The input embedding, plus lm_head unless tied to it.")
    notes = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class Variant(models.Model):
    QUANTIZATIONS = [
        ("fp8_e4m3", "FP8 E4M3"), ("gguf_q4_k_m", "GGUF Q4_K_M"), ("awq", "AWQ 4-bit"),
        ("gptq", "GPTQ 4-bit"), ("fp16", "FP16"), ("bf16", "BF16"), ("gguf_q8_0", "GGUF Q8_0"),
        ("gguf_other", "GGUF (other)"), ("other", "other"),
    ]
    model = models.ForeignKey(Model, models.CASCADE, related_name="variants")
    name = models.CharField(max_length=200)
    quantization = models.CharField(max_length=20, choices=QUANTIZATIONS)
    format = models.CharField(max_length=50, blank=True, help_text="e.g. safetensors, GGUF")
    size_bytes = models.BigIntegerField("file size (bytes)", null=True, blank=True)
    # No quality figure here: a variant's quality is measured through an endpoint serving it
    # (QualityMeasurement, with its text and windows) or published with its report.

    class Meta:
        ordering = ["model", "name"]
        constraints = [models.UniqueConstraint(fields=["model", "name"], name="variant_model_name")]

    def __str__(self):
        return f"{self.model} · {self.name}"


class Endpoint(AlertSettings):
    name = models.CharField(max_length=100, unique=True)
    host = models.ForeignKey(Host, models.PROTECT, related_name="endpoints")
    backend = models.CharField(max_length=20, choices=backends.choices)  # the registry's, read when used
    base_url = models.CharField("base URL", max_length=300, validators=[validate_endpoint_url],
                                help_text="Server root, without /v1, e.g. http://gpu1:8000")
    model_name = models.CharField("served model id", max_length=200, blank=True,
                                  help_text="The id in /v1/models; blank = the only one served.")
    variant = models.ForeignKey(Variant, models.SET_NULL, null=True, blank=True, related_name="endpoints")
    api_key = EncryptedTextField(max_length=300, blank=True)  # write-only: never rendered back; encrypted at rest
    engine_version = models.CharField(max_length=100, blank=True)
    launch_command = models.TextField(blank=True, help_text="The raw command line that started it.")
    launch_flags = models.JSONField(default=dict, blank=True, help_text="Structured flags, e.g. "
                                    '{"quantization": "fp8", "max-model-len": 8192}')
    tensor_parallel_size = models.PositiveSmallIntegerField(default=1)
    gpus = models.ManyToManyField(Gpu, blank=True, related_name="endpoints")
    enabled = models.BooleanField(default=True)
    # Set on the endpoints a worker made for the servers it starts from a recipe (one per recipe
    # and setting); their base URL is the port of the latest start.
    recipe = models.ForeignKey("ServerRecipe", models.PROTECT, null=True, blank=True, related_name="endpoints",
                               editable=False)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key)

    def serving_gpus(self) -> list["Gpu"]:
        """The GPUs it serves from: its own (registered, or given by the lab), else its host's
        (the one definition: history's GPU label, the comparisons and the decision page read it).
        Prefetch gpus and host__gpus when reading many."""
        return list(self.gpus.all()) or list(self.host.gpus.all())

    @property
    def launch_command_shown(self) -> str:
        """The launch command as people see it: environment values masked (NAME=…), in commands
        stored before the lab masked them too."""
        return mask_env(self.launch_command)



    def target(self) -> Target:
        return Target(base_url=self.base_url, backend=self.backend, model=self.model_name,
                      api_key=self.api_key)


MAX_SWEEP_VALUES = 16  # values of one sweep parameter
MAX_SWEEP_SETTINGS = 64  # parameter sets of one recipe (the product of its parameters' values)
_PLACEHOLDER_TEXT = ", ".join("{%s}" % p for p in PLACEHOLDERS)


def _sweep_problem(sweep) -> str:
    if not isinstance(sweep, dict):
        return 'the sweep is an object of flags and their allowed values, e.g. {"--parallel": [4, 8, 16]}'
    settings_count = 1
    for flag, values in sweep.items():
        if flag == GPUS_KEY:  # not a flag: which GPUs the server gets, each value a list such as "0,1"
            if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
                return f'{GPUS_KEY}: the GPU lists are a non-empty list of strings, e.g. ["0", "0,1"]'
        elif not flag.startswith("-") or len(flag) < 2 or any(c.isspace() for c in flag):
            return f"{flag!r} is not a flag (it starts with - and has no spaces), or \"{GPUS_KEY}\""
        if not isinstance(values, list) or not values:
            return f"{flag}: the allowed values are a non-empty list, e.g. [4, 8, 16]"
        if len(values) > MAX_SWEEP_VALUES:
            return f"{flag}: at most {MAX_SWEEP_VALUES} values"
        if any(isinstance(v, (dict, list)) or v is None or (isinstance(v, str) and not v.strip()) for v in values):
            return f"{flag}: each value is a number, a word or true/false"
        if len({json_key(v) for v in values}) != len(values):
            return f"{flag}: a value is listed twice"
        settings_count *= len(values)
    if settings_count > MAX_SWEEP_SETTINGS:
        return f"the sweep makes {settings_count} settings; at most {MAX_SWEEP_SETTINGS}"
    return ""


def json_key(value) -> str:
    """A sweep value as it compares: 4 and 4.0 are one, "4" another, true not 1."""
    return f"{type(value).__name__ if isinstance(value, (bool, str)) else 'n'}:{value!r}"


def sweep_settings(sweep: dict) -> list[dict]:
    """Every combination of the sweep's values, in order: {"--parallel": [1, 2]} ->
    [{"--parallel": 1}, {"--parallel": 2}]; no sweep: one empty setting."""
    out = [{}]
    for flag, values in sweep.items():
        out = [{**s, flag: v} for s in out for v in values]
    return out


class ServerRecipe(models.Model):
    """How a host's worker starts a server itself: the executable, the model on the host and the
    arguments as a list (no shell), with the placeholders {port}, {model} and {host}; sweep
    parameters with the values a run may pick; environment variables. Whether the host lets it
    start is decided on the host (the worker's LAB_* settings), when it is started."""

    name = models.CharField(max_length=100, unique=True)
    host = models.ForeignKey(Host, models.PROTECT, related_name="recipes",
                             help_text="The host whose worker starts it.")
    backend = models.CharField(max_length=20, choices=backends.choices)  # the registry's, read when used
    executable = models.CharField(max_length=500, help_text="Absolute path on the host, one of its worker's "
                                                            "LAB_EXECUTABLES, e.g. /opt/llama.cpp/bin/llama-server")
    model_path = models.CharField("model path", max_length=500,
                                  help_text="The model file or directory on the host, under one of its worker's "
                                            "LAB_MODEL_DIRS; {model} in the arguments.")
    variant = models.ForeignKey(Variant, models.SET_NULL, null=True, blank=True, related_name="recipes")
    served_model_name = models.CharField("served model id", max_length=200, blank=True,
                                         help_text="The id in /v1/models; blank = the only one served.")
    args = models.JSONField("arguments", default=list, help_text=(
        f'A list of strings, no shell; {_PLACEHOLDER_TEXT} are filled in, e.g. ["-m", "{{model}}", "--host", '
        '"{host}", "--port", "{port}", "-ngl", "99", "--metrics"]. {port} is required: the worker picks it.'))
    sweep = models.JSONField("sweep parameters", default=dict, blank=True, help_text=(
        'Flags and the values a run may sweep, e.g. {"--parallel": [4, 8, 16], "-c": [8192, 32768]}; each '
        "setting sets the flag (replacing it in the arguments, or added). true: the flag alone, false: left out."))
    env = models.JSONField("environment variables", default=dict, blank=True,
                           help_text='e.g. {"VLLM_CPU_KVCACHE_SPACE": "4"}. LD_*, PYTHON* and PATH are refused.')
    gpus = models.CharField("GPUs", max_length=100, blank=True, help_text=(
        "The host's GPUs the server gets, by index as its probe lists them, e.g. 0 or 0,1 (set as "
        "CUDA_VISIBLE_DEVICES, in PCI bus order). Blank: whatever the worker's environment gives. A sweep may "
        'pick them too: {"gpus": ["0", "0,1"]}.'))
    listen_address = models.GenericIPAddressField(default="127.0.0.1", help_text=(
        "{host}: loopback unless the recipe says otherwise (and the host's LAB_LISTEN_ADDRESSES allows it)."))
    notes = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def clean(self):
        errors = {}
        if not isinstance(self.args, list) or not all(isinstance(a, str) for a in self.args):
            errors["args"] = 'the arguments are a list of strings, e.g. ["--port", "{port}"]'
        elif any("\x00" in a for a in self.args):
            errors["args"] = "an argument holds a NUL character"
        elif not any("{port}" in a for a in self.args):
            errors["args"] = "the arguments must contain {port}: the worker picks the port from its own range"
        problem = _sweep_problem(self.sweep)
        if problem:
            errors["sweep"] = problem
        if not isinstance(self.env, dict) or not all(
                isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in self.env.values()):
            errors["env"] = 'the environment is an object of names and values, e.g. {"OMP_NUM_THREADS": "2"}'
        else:
            # What no host allows; the rest is the host's allowlist's, judged by its worker.
            bad = [p for p in (env_name_problem(k, self.backend) for k in self.env) if p]
            if bad:
                errors["env"] = "; ".join(bad)
            elif GPU_ENV & set(self.env):
                errors["env"] = ('which GPUs the server gets is the GPUs field (or a sweep of "gpus"), '
                                 "not the environment")
        problem = self._gpus_problem([self.gpus] if self.gpus else [])
        if problem:
            errors["gpus"] = problem
        elif isinstance(self.sweep, dict) and isinstance(self.sweep.get(GPUS_KEY), list) and "sweep" not in errors:
            problem = self._gpus_problem(self.sweep[GPUS_KEY])
            if problem:
                errors["sweep"] = f"{GPUS_KEY}: {problem}"
        if not errors:
            lists = [parse_gpus(v) for v in (self.sweep or {}).get(GPUS_KEY) or []] or [self.gpu_indices()]
            backend = backends.get(self.backend)
            problem = multi_gpu.problem(backend, self.args, self.sweep, lists)
            if problem:
                swept = set(self.sweep or {}) & set(backend.spread_flags)
                errors["sweep" if swept else "args"] = problem
        for name in ("executable", "model_path"):
            value = getattr(self, name) or ""
            if value and not value.startswith("/"):
                errors[name] = "an absolute path on the host"
        if not errors:
            problem, swept = self._flags_problem()
            if problem:
                errors["sweep" if swept else "args"] = problem
        if errors:
            raise ValidationError(errors)

    def _flags_problem(self) -> tuple[str, bool]:
        """The worker's flag-by-flag judgement (backends/flags.py) of every setting's final command,
        what no host allows whatever its folders and ports: (why, whether a swept flag is it)."""
        backend = backends.get(self.backend)
        for setting in self.settings():
            reading = backend.read_flags(self.spec(setting).argv(18100))  # any port: it is judged by the worker
            if reading is not None and reading.problem:
                return reading.problem, any(str(flag) in reading.problem for flag in setting)
        return "", False

    def _gpus_problem(self, gpu_lists) -> str:
        """Why these GPU lists cannot be given to a server on this recipe's host, or "": each an
        index list the host's probe knows (its GPU count)."""
        if not gpu_lists:
            return ""
        if self.host_id is None:
            return "choose the host first: the GPUs are the host's"
        count = self.host.gpus.count()
        for text in gpu_lists:
            try:
                indices = parse_gpus(text)
            except ValueError as exc:
                return str(exc)
            if not count:
                return (f"{self.host} has no GPU in the inventory: probe it (Hosts → Probe GPUs now) before "
                        f"giving a server GPUs")
            beyond = [i for i in indices if i >= count]
            if beyond:
                said = "GPU 0" if count == 1 else f"GPUs 0-{count - 1}"
                return (f"GPU {', '.join(map(str, beyond))} is beyond {self.host}'s {count} probed "
                        f"GPU{'s' if count != 1 else ''} ({said})")
        return ""

    def settings(self, chosen: dict | None = None) -> list[dict]:
        """The parameter sets a run measures: the sweep's values, or the ones a run chose
        (`chosen`: flag -> values, a subset of the allowed ones)."""
        sweep = dict(self.sweep or {})
        for flag, values in (chosen or {}).items():
            if flag in sweep:
                keys = {json_key(v) for v in values}
                sweep[flag] = [v for v in sweep[flag] if json_key(v) in keys]
        return sweep_settings(sweep)

    def gpu_indices(self, setting: dict | None = None) -> tuple[int, ...] | None:
        """The GPUs a server at this setting gets (the setting's "gpus", else the recipe's); None:
        as the worker's environment gives."""
        text = (setting or {}).get(GPUS_KEY, self.gpus)
        return parse_gpus(text) if text not in (None, "") else None

    def spec(self, setting: dict) -> ServerSpec:
        return ServerSpec(executable=self.executable, model_path=self.model_path, args=tuple(self.args),
                          setting=dict(setting), env={k: str(v) for k, v in (self.env or {}).items()},
                          gpus=self.gpu_indices(setting),
                          listen_host=self.listen_address, backend=self.backend,
                          served_model=self.served_model_name, label=self.setting_name(setting))

    def setting_name(self, setting: dict) -> str:
        label = setting_label(setting)
        return f"{self.name} · {label}" if label else self.name


class ServerLaunch(models.Model):
    """One recipe at one setting in a run: the server the host's worker started (or refused, or
    that did not start), its start-up and memory (`report`: the engine's LaunchReport, one
    writer and one reader), and the endpoint its levels and quality are stored under."""

    PENDING, REFUSED, DID_NOT_START, RUNNING, STOPPED = "pending", "refused", "did_not_start", "running", "stopped"
    STATUSES = [(PENDING, "pending"), (REFUSED, "refused by the host"), (DID_NOT_START, "did not start"),
                (RUNNING, "running"), (STOPPED, "measured and stopped")]
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    run = models.ForeignKey("Run", models.CASCADE, related_name="launches")
    recipe = models.ForeignKey(ServerRecipe, models.PROTECT, related_name="launches")
    setting_index = models.PositiveSmallIntegerField(default=0)
    setting = models.JSONField(default=dict, blank=True)  # flag -> value
    endpoint = models.ForeignKey(Endpoint, models.PROTECT, null=True, blank=True, related_name="launches")
    status = models.CharField(max_length=20, choices=STATUSES, default=PENDING)
    report = models.JSONField(default=dict, blank=True)  # LaunchReport.to_dict(); read it as `figures`
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "recipe__name", "setting_index"]
        constraints = [models.UniqueConstraint(fields=["run", "recipe", "setting_index"],
                                               name="launch_run_recipe_setting")]

    def __str__(self):
        return self.recipe.setting_name(self.setting)

    @cached_property
    def figures(self) -> LaunchReport:
        return LaunchReport.from_dict(self.report)

    @property
    def label(self) -> str:
        return setting_label(self.setting)


class EvaluationText(models.Model):
    """A text that quality is measured on, uploaded by a member (the built-in one, Python's own
    documentation, needs no row). Figures are only compared on the same sha256."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    name = models.CharField(max_length=200)
    sha256 = models.CharField("SHA-256", max_length=64, unique=True, editable=False)
    text = models.TextField()
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.sha256[:12]}, {len(self.text):,} characters)"


MAX_TRIALS = 10  # repetitions of each level (confidence intervals across them)


class Run(models.Model):
    QUEUED, RUNNING, SUCCEEDED, PARTIAL, FAILED, CANCELLED = (
        "queued", "running", "succeeded", "partial", "failed", "cancelled")
    STATUSES = [(s, s) for s in (QUEUED, RUNNING, SUCCEEDED, PARTIAL, FAILED, CANCELLED)]
    FINISHED = (SUCCEEDED, PARTIAL, FAILED, CANCELLED)
    APIS = [("completions", "/v1/completions"), ("chat", "/v1/chat/completions")]

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    title = models.CharField(max_length=200, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, related_name="runs")
    endpoints = models.ManyToManyField(Endpoint, related_name="runs")
    # Servers the host's worker starts itself, each at every setting of its sweep (`sweep`:
    # recipe id -> flag -> the values chosen; a recipe not in it sweeps all its values).
    recipes = models.ManyToManyField(ServerRecipe, blank=True, related_name="runs")
    sweep = models.JSONField(default=dict, blank=True)
    queue_name = models.CharField(max_length=100, blank=True)
    # The workload, as submitted.
    prompt_tokens = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    output_tokens = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    temperature = models.FloatField(validators=[MinValueValidator(0.0), MaxValueValidator(2.0)])
    api = models.CharField(max_length=20, choices=APIS, default="completions")
    LOAD_MODES = load_modes.choices()
    ARRIVALS = [("poisson", "Poisson"), ("constant", "constant"), ("gamma", "gamma (bursty)"),
                ("ramp", "linear ramp"), ("trace", "trace replay")]
    load_mode = models.CharField(max_length=20, choices=LOAD_MODES, default=load_modes.DEFAULT)
    concurrency_levels = models.JSONField(default=list, blank=True)
    request_rates = models.JSONField(default=list, blank=True)  # requests/s, rate mode
    arrivals = models.CharField(max_length=20, choices=ARRIVALS, default="poisson")
    # The arrivals' parameters (engine.arrivals.ArrivalPattern, its to_dict; read as
    # `arrival_settings`): burstiness, a ramp's end rate, a trace and its speed-ups. {} for
    # Poisson and constant arrivals (and every run stored before).
    arrival_pattern = models.JSONField(default=dict, blank=True)
    # Conversation mode: engine.conversations.Conversation's to_dict (turns, think time).
    conversation = models.JSONField(default=dict, blank=True)
    max_concurrency = models.PositiveIntegerField(default=0, help_text="Rate mode: cap on requests "
                                                  "in flight; 0 = none. SLO search: the highest concurrency tried.")
    # SLO search by rate (load mode "slo_rate"): the rates it may probe, lowest first
    # (engine.slo_search.rate_grid), fixed when the run is queued.
    search_rates = models.JSONField(default=list, blank=True)
    requests_per_level = models.PositiveIntegerField()
    duration_s = models.FloatField(null=True, blank=True, help_text="Optional time bound per level.")
    warmup_requests = models.PositiveIntegerField()
    # How many load-generator processes measure each level (engine/shards.py): 0 = chosen per
    # level from its expected chunk rate and the worker's cores; and over how many
    # load-generator workers (the LOADGEN_QUEUE) they are spread: 0 or 1 = the run's worker alone.
    load_processes = models.PositiveSmallIntegerField(default=0)
    load_workers = models.PositiveSmallIntegerField(default=0)
    seed = models.BigIntegerField(null=True, blank=True)
    # What the requests ask for: engine.datasets.Dataset, written by its to_dict and read by its
    # from_dict (`requests_dataset`); {} (runs stored before) is fixed lengths, as measured then.
    dataset = models.JSONField(default=dict, blank=True)
    slo_ttft_ms = models.FloatField("SLO: TTFT (ms)", null=True, blank=True)
    slo_tpot_ms = models.FloatField("SLO: TPOT (ms)", null=True, blank=True)
    slo_e2e_ms = models.FloatField("SLO: E2E (ms)", null=True, blank=True)
    # Each level measured this many times (a fresh server per trial where the lab starts it);
    # the run page shows each figure's mean and its 95 % interval across them.
    trials = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1),
                                                                     MaxValueValidator(MAX_TRIALS)])
    # SLO search (load modes "slo", "slo_rate"): the SLOs above at this percentile; per endpoint id its search
    # (engine.slo_search.SloSearch, written by its to_dict, read by its from_dict: `searches`).
    slo_percentile = models.PositiveSmallIntegerField(default=99, choices=[(50, "p50"), (90, "p90"), (99, "p99")])
    slo_search = models.JSONField(default=dict, blank=True)
    # The quality step (engine/quality.py), after the load levels: perplexity of every endpoint
    # on one text, and against the reference endpoint KL divergence and agreement.
    quality = models.BooleanField("measure quality", default=False)
    quality_text = models.ForeignKey(EvaluationText, models.PROTECT, null=True, blank=True, related_name="runs",
                                     help_text="Empty: the built-in text (Python's documentation).")
    quality_reference = models.ForeignKey(Endpoint, models.PROTECT, null=True, blank=True, related_name="+",
                                          help_text="One of the run's endpoints: the same base model at "
                                                    "higher precision.")
    quality_reference_recipe = models.ForeignKey(
        ServerRecipe, models.PROTECT, null=True, blank=True, related_name="+",
        help_text="Or one of the run's recipes: its GGUF file scored by the host's llama-perplexity, each server "
                  "the lab starts from a GGUF compared with it over the full vocabulary.")
    quality_ctx = models.PositiveIntegerField("quality window (tokens)", default=DEFAULT_CTX,
                                              validators=[MinValueValidator(8)])
    quality_chunks = models.PositiveIntegerField("quality windows", default=DEFAULT_CHUNKS,
                                                 validators=[MinValueValidator(1)])
    # Life cycle.
    status = models.CharField(max_length=20, choices=STATUSES, default=QUEUED, db_index=True)
    created = models.DateTimeField(default=timezone.now)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    progress_note = models.CharField(max_length=300, blank=True)
    # Fault tolerance: a worker measuring a run beats every few seconds; a run whose beat
    # stopped (worker killed) can be claimed again and resumes after its finished levels.
    heartbeat = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    preflight = models.JSONField(default=dict, blank=True)  # endpoint id -> findings
    server_config = models.JSONField(default=dict, blank=True)  # endpoint id -> identity/config
    host_check = models.JSONField(default=dict, blank=True)  # before the run: engine.host_check.HostCheck
    flags = models.JSONField(default=list, blank=True)  # validity flags of all levels
    worker = models.CharField(max_length=200, blank=True)  # which worker measured it
    # Hidden from the runs list (its "show archived" filter shows it); the permalink still opens.
    archived = models.DateTimeField(null=True, blank=True)
    schedule = models.ForeignKey("Schedule", models.SET_NULL, null=True, blank=True, related_name="runs")
    # Its levels against their comparable runs: engine.regression.RegressionReport, written by its
    # to_dict (services._finish, from history.regression_report) and read by its from_dict
    # (`regression_report`).
    regression = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created", "-id"]  # stable: two runs queued in one instant keep their order
        indexes = [
            # The runs list: newest first, a page at a time, archived ones usually left out.
            models.Index(fields=["-created", "-id"], name="run_newest"),
            models.Index(fields=["-created", "-id"], name="run_newest_unarchived", condition=Q(archived__isnull=True)),
        ]

    def __str__(self):
        return self.title or self.untitled_name

    @cached_property
    def regression_report(self) -> RegressionReport | None:
        return RegressionReport.from_dict(self.regression)

    @property
    def untitled_name(self) -> str:
        """What an untitled run is called: what it measured, at which load, when it was queued,
        e.g. "llama-q4, vllm-fp8 at c=1,8 · 2026-03-02 14:05"."""
        names = [e.name for e in self.endpoints.all()] if self.pk else []
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return f"{shown or 'Run'} at {self.levels_label} · {self._queued_at}"

    @property
    def name_beside_endpoint(self) -> str:
        """Its name where an endpoint is named beside it: the title, else load and date (no query
        for the endpoints' names, so a list of many rows stays one query)."""
        return self.title or f"run at {self.levels_label} · {self._queued_at}"

    @property
    def _queued_at(self) -> str:
        return f"{timezone.localtime(self.created):%Y-%m-%d %H:%M}"

    def get_absolute_url(self):
        return reverse("run-detail", args=[self.public_id])

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def progress_percent(self) -> int:
        if not self.progress_total:
            return 100 if self.is_finished else 0
        return min(100, round(100 * self.progress_done / self.progress_total))

    @property
    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (the time since it started over the requests and
        positions done); None before the first is done, or once it has finished."""
        if self.is_finished or not self.started or not self.progress_done or not self.progress_total:
            return None
        elapsed = (timezone.now() - self.started).total_seconds()
        left = max(self.progress_total - self.progress_done, 0)
        return elapsed * left / self.progress_done

    @property
    def eta_words(self) -> str:
        """ "about 3.5 min left at the pace so far" ("" when there is no estimate)."""
        eta = self.eta_s
        return "" if eta is None else f"about {span(eta)} left at the pace so far"

    def workload(self) -> Workload:
        """What every level of the run shares; the levels themselves are its `loads()`."""
        return Workload(prompt_tokens=self.prompt_tokens, output_tokens=self.output_tokens,
                        temperature=self.temperature, warmup_requests=self.warmup_requests,
                        api=self.api, seed=self.seed, dataset=self.requests_dataset,
                        token_limit=settings.MAX_TOKENS)

    @property
    def requests_dataset(self) -> Dataset:
        """What the run's requests ask for (the one reader of `dataset`)."""
        return Dataset.from_dict(self.dataset, self.prompt_tokens, self.output_tokens)

    @property
    def arrival_settings(self) -> ArrivalPattern:
        """How its levels are sent, in a mode that sends at rates (else Poisson, unused)."""
        return self.load.arguments()["arrival_pattern"] or ArrivalPattern()

    def preflight_findings(self, endpoint_id) -> list[Finding] | None:
        """What the preflight found on that endpoint, in order; None when it never checked it
        (the one reader of `preflight`)."""
        stored = (self.preflight or {}).get(str(endpoint_id))
        if not isinstance(stored, list):
            return None
        return [f for f in map(Finding.from_dict, stored) if f is not None]

    @property
    def host_checked(self) -> HostCheck | None:
        """Whether the measuring host was quiet before the run (the one reader of `host_check`)."""
        return HostCheck.from_dict(self.host_check)

    def server_identity(self, endpoint_id) -> StoredIdentity:
        """What it kept of that endpoint's server (the one reader of `server_config`)."""
        return StoredIdentity.from_dict((self.server_config or {}).get(str(endpoint_id)))

    @cached_property
    def plan(self) -> RunPlan:
        """What it measures, typed (engine/plan.py): the one reader of the columns run_create
        wrote from the plan it was given."""
        return RunPlan.from_columns(self)

    @cached_property
    def load(self) -> load_modes.LoadMode:
        """What its load mode measures, typed (engine/load_modes): the one reader of the load
        columns (load_mode, concurrency_levels, request_rates, arrivals, arrival_pattern,
        conversation, max_concurrency, search_rates)."""
        return load_modes.from_columns(self.load_mode, {k: getattr(self, k) for k in load_modes.COLUMNS})

    def loads(self) -> list[Load]:
        """The run's load levels, in order (engine.client.Load); an SLO search has none fixed:
        its levels are `search_load`s, found as it goes."""
        return self.load.loads(self.requests_per_level, self.duration_s)

    @property
    def is_search(self) -> bool:
        return self.load.is_search

    def search_load(self, load: float) -> Load:
        """An SLO search's probe as a level: `load` users, or `load` req/s."""
        return self.load.probe(load, self.requests_per_level, self.duration_s)

    def probe_load(self, level: "LevelResult") -> float:
        """The load a stored SLO-search probe was measured at (its users, or its rate)."""
        return self.load.probe_load(level.concurrency, level.rate)

    def widest_search_load(self) -> Load:
        """An SLO search's heaviest probe (what the connection pool is sized for)."""
        return self.load.widest_probe(self.requests_per_level, self.duration_s)

    @property
    def slo_target(self) -> SloTarget:
        return SloTarget(self.slo_percentile, **self.slo)

    def new_search(self) -> SloSearch:
        return self.load.new_search(self.slo_target)

    def searches(self) -> dict[str, SloSearch]:
        """Endpoint id (as stored) -> its SLO search, through the one reader."""
        return {k: SloSearch.from_dict(v) for k, v in (self.slo_search or {}).items()}

    def evaluation_text(self) -> EvalText:
        """The quality step's text as the engine scores it: the uploaded one, or the built-in."""
        if self.quality_text_id:
            return EvalText(self.quality_text.name, self.quality_text.text)
        return builtin_text()

    @property
    def quality_positions(self) -> int:
        """Positions the quality step scores per endpoint, when the text is long enough."""
        return scored_positions(self.quality_ctx, self.quality_chunks) if self.quality else 0

    @property
    def slo(self) -> dict:
        return {k: v for k, v in (("ttft_ms", self.slo_ttft_ms), ("tpot_ms", self.slo_tpot_ms),
                                  ("e2e_ms", self.slo_e2e_ms)) if v is not None}

    @property
    def levels_label(self) -> str:
        trials = f" × {self.trials} trials" if self.trials > 1 else ""
        return self.load.describe() + trials

    def claim(self, worker: str = "") -> bool:
        """queued -> running (or a running run whose worker stopped beating), atomically: only
        one worker can ever hold a run at a time."""
        now = timezone.now()
        stale = now - timedelta(seconds=settings.RUN_HEARTBEAT_STALE_S)
        claimable = Q(status=Run.QUEUED) | Q(status=Run.RUNNING, heartbeat__lt=stale)
        won = Run.objects.filter(claimable, id=self.id).update(
            status=Run.RUNNING, started=Coalesce(F("started"), now), heartbeat=now,
            attempts=F("attempts") + 1, worker=worker[:200])
        if won:
            self.refresh_from_db()
        return bool(won)


class LevelResult(models.Model):
    """One endpoint at one load level: aggregates from engine.metrics.summarize_level, the
    client's own load, validity flags and the GPU / server time series on the same clock. Each
    JSON field has its typed shape in the engine (metrics.LevelSummary, gpu.GpuSummary and
    GpuSeries, server_metrics.ServerSummary and ServerSeries): written by its to_dict, read by
    its from_dict (`stats`, `gpu`, `server` below)."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    run = models.ForeignKey(Run, models.CASCADE, related_name="levels")
    endpoint = models.ForeignKey(Endpoint, models.PROTECT, related_name="levels")
    level_index = models.PositiveSmallIntegerField(default=0)  # an SLO search: its probe's number
    trial = models.PositiveSmallIntegerField(default=0)  # 0 .. run.trials - 1
    concurrency = models.PositiveIntegerField()  # streams, or the cap in rate mode (0 = none)
    rate = models.FloatField(null=True, blank=True)  # requests/s in rate mode
    started_at = models.DateTimeField()
    wall_s = models.FloatField()
    completed = models.PositiveIntegerField()
    failed = models.PositiveIntegerField()
    summary = models.JSONField()
    client = models.JSONField(default=dict)
    flags = models.JSONField(default=list)
    gpu_summary = models.JSONField(default=dict)
    gpu_series = models.JSONField(default=dict)
    server_summary = models.JSONField(default=dict)
    server_series = models.JSONField(default=dict)
    # Which earlier levels it compares with: the same model, variant, GPU and workload
    # (history.workload_fingerprint); its history page is /history/<fingerprint>/.
    fingerprint = models.CharField(max_length=16, blank=True, db_index=True)

    class Meta:
        ordering = ["run", "endpoint__name", "level_index", "trial"]
        constraints = [models.UniqueConstraint(fields=["run", "endpoint", "level_index", "trial"],
                                               name="level_run_endpoint_index_trial")]

    def __str__(self):
        return f"{self.endpoint} @ {self.load_label}"

    @property
    def load_label(self) -> str:
        if self.rate is None:
            return f"{self.concurrency} concurrent"
        return f"{self.rate:.4g} req/s" + (f" (cap {self.concurrency})" if self.concurrency else "")

    @property
    def trial_label(self) -> str:
        """Its load, and its trial when the run repeats levels: "8 concurrent · trial 2"."""
        return self.load_label + (f" · trial {self.trial + 1}" if self.run.trials > 1 else "")

    # The stored JSON, read through its one reader (every stored version reads).
    @cached_property
    def stats(self) -> LevelSummary:
        return LevelSummary.from_dict(self.summary)

    @cached_property
    def gpu(self) -> GpuSummary:
        return GpuSummary.from_dict(self.gpu_summary)

    @property
    def energy_per_token_j(self) -> float | None:
        """catalogue energy_per_token_j: its GPUs' energy over the level per output token."""
        return self.gpu.joules_per_token(self.stats.output_tokens)

    @property
    def tokens_per_joule(self) -> float | None:
        """catalogue tokens_per_joule."""
        joules = self.energy_per_token_j
        return 1.0 / joules if joules else None

    @property
    def cost_per_mtok(self) -> float | None:
        """catalogue cost_per_mtok, at its endpoint's host's stated price (None: no price, or an
        owned host's electricity priced and the energy not measured)."""
        price = self.endpoint.host.hourly_price
        return price.per_million_tokens(self.stats.wall_s, self.gpu.joules, self.stats.output_tokens) if price else None

    # The catalogue figures a level computes itself (its GPUs' energy, its host's price), not
    # read from its summary.
    OWN_FIGURES = ("energy_per_token_j", "tokens_per_joule", "cost_per_mtok")

    def figure(self, f) -> float | None:
        """A catalogue figure (catalogue.Figure) of this level."""
        return getattr(self, f.key) if f.key in self.OWN_FIGURES else self.stats.figure(f)

    def energy_and_cost(self) -> dict:
        """Its energy and cost figures as the export and the API give them."""
        price = self.endpoint.host.hourly_price
        return {"energy_per_token_j": self.energy_per_token_j, "tokens_per_joule": self.tokens_per_joule,
                "cost_per_mtok": self.cost_per_mtok, "price": price.to_dict() if price else None}

    @cached_property
    def server(self) -> ServerSummary:
        return ServerSummary.from_dict(self.server_summary)

    @cached_property
    def client_figures(self) -> ClientFigures:
        """How busy the load generator was, shard by shard (its reader reads every version)."""
        return ClientFigures.from_dict(self.client)


class QualityMeasurement(models.Model):
    """The quality step of one endpoint in a run: the engine's QualityResult (its `figures`,
    one writer and one reader), or why it could not be measured (`error`)."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    run = models.ForeignKey(Run, models.CASCADE, related_name="quality_results")
    endpoint = models.ForeignKey(Endpoint, models.PROTECT, related_name="quality_results")
    result = models.JSONField(default=dict, blank=True)  # QualityFigures.to_dict(); read it as `figures`
    error = models.TextField(blank=True)
    measured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "endpoint__name"]
        constraints = [models.UniqueConstraint(fields=["run", "endpoint"], name="quality_run_endpoint")]

    def __str__(self):
        return f"quality of {self.endpoint} in {self.run}"

    @cached_property
    def figures(self) -> QualityFigures | None:
        return QualityFigures.from_dict(self.result) if self.result else None


class RequestRecord(models.Model):
    """One measured request. Times are seconds: `sent` from the level's start, the others
    from `sent`."""

    level = models.ForeignKey(LevelResult, models.CASCADE, related_name="requests")
    index = models.PositiveIntegerField()
    sent = models.FloatField()
    scheduled = models.FloatField(null=True)  # rate mode: when it was due to leave
    conversation = models.PositiveIntegerField(null=True)  # conversation mode: which conversation of the level
    turn = models.PositiveSmallIntegerField(null=True)  # and its turn (0 = the first)
    first_content = models.FloatField(null=True)
    first_answer = models.FloatField(null=True)  # first non-reasoning content
    end = models.FloatField(null=True)
    chunk_times = models.JSONField(default=list)
    prompt_tokens = models.PositiveIntegerField(null=True)
    output_tokens = models.PositiveIntegerField(null=True)
    client_output_tokens = models.PositiveIntegerField(default=0)
    finish_reason = models.CharField(max_length=30, blank=True)
    timings = models.JSONField(null=True)
    status_code = models.PositiveSmallIntegerField(null=True)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=20, blank=True)

    class Meta:
        ordering = ["level", "index"]

    @property
    def ok(self) -> bool:
        return not self.error


class ImportedReport(models.Model):
    """Numbers measured elsewhere (vllm bench serve, GuideLLM, llama-bench files) or published
    (the V100 write-up): kept apart from our own runs and always labelled as such."""

    KINDS = [("vllm-bench-serve", "vllm bench serve"), ("guidellm", "GuideLLM"),
             ("llama-bench", "llama-bench"), ("published", "published")]
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    kind = models.CharField(max_length=30, choices=KINDS)
    title = models.CharField(max_length=300)
    filename = models.CharField(max_length=300, blank=True)
    gpu = models.CharField("GPU", max_length=200, blank=True)
    backend = models.CharField(max_length=30, blank=True, help_text="vllm / llamacpp, when known")
    quantization = models.CharField(max_length=20, blank=True, choices=Variant.QUANTIZATIONS)
    report = models.JSONField()  # importers.ImportedReport.to_dict(); read it as `data`
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return self.title

    def get_absolute_url(self):
        return reverse("import-detail", args=[self.public_id])

    @cached_property
    def data(self) -> ParsedReport:
        """The stored report through its one reader (every schema version reads)."""
        return ParsedReport.from_dict(self.report)

    @property
    def label(self) -> str:
        return ("published, not measured here" if self.kind == "published"
                else f"imported from {self.get_kind_display()}, not measured here")


class Comparison(models.Model):
    """A saved side-by-side view of runs and imported reports, behind a permalink."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    title = models.CharField(max_length=200, blank=True)
    runs = models.ManyToManyField(Run, blank=True, related_name="comparisons")
    reports = models.ManyToManyField(ImportedReport, blank=True, related_name="comparisons")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return self.title or f"comparison {self.public_id[:8]}"

    def get_absolute_url(self):
        return reverse("comparison-detail", args=[self.public_id])


class DeletedRun(models.Model):
    """What is left of a deleted run: its permalink answers 410 Gone with this, and the
    comparisons that held it say which run was deleted and when (a decision finds it by the
    public ids in its evidence links)."""

    public_id = models.CharField(max_length=32, unique=True, editable=False)
    name = models.CharField(max_length=300)
    deleted = models.DateTimeField(default=timezone.now)
    deleted_by = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True, related_name="+")
    comparisons = models.ManyToManyField(Comparison, blank=True, related_name="deleted_runs")

    class Meta:
        ordering = ["-deleted"]

    def __str__(self):
        return f"run “{self.name}”"

    @property
    def note(self) -> str:
        return f"Run “{self.name}” was deleted on {timezone.localtime(self.deleted):%Y-%m-%d %H:%M}."


class Decision(models.Model):
    """A stated workload, the evidence the advisor used and its recommendation, saved so that
    it can be shared by link. `result` is the advisor's Recommendation.to_dict()."""

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    inputs = models.JSONField()
    result = models.JSONField()
    recommended = models.CharField(max_length=50, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.SET_NULL, null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"decision {self.public_id[:8]}: {self.recommended or 'no recommendation'}"

    def get_absolute_url(self):
        return reverse("decision-detail", args=[self.public_id])


class ApiToken(models.Model):
    """A member's key for the REST API and the command-line client. Only its SHA-256 is stored:
    the key itself is shown once, when it is made (services.api_token_create); `prefix` (its
    first characters) is what the token page shows to tell keys apart."""

    KEY_PREFIX = "v100_"
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, editable=False)
    key_sha256 = models.CharField("key SHA-256", max_length=64, unique=True, editable=False)
    created = models.DateTimeField(default=timezone.now)
    last_used = models.DateTimeField(null=True, blank=True)
    revoked = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked is None


class Schedule(AlertSettings):
    """A run repeated by Celery beat: its settings (`template`, the run service's arguments as
    schedules.run_template writes them and schedules.template_kwargs reads them), when (daily,
    weekly, a cron expression, or every N minutes, as the django-celery-beat PeriodicTask it owns)
    and whether it is paused, and why."""

    DAILY, WEEKLY, CRON, INTERVAL = "daily", "weekly", "cron", "interval"
    EVERY = [(DAILY, "daily"), (WEEKLY, "weekly"), (CRON, "cron expression"), (INTERVAL, "at a fixed interval")]
    WEEKDAYS = [(1, "Monday"), (2, "Tuesday"), (3, "Wednesday"), (4, "Thursday"), (5, "Friday"), (6, "Saturday"),
                (0, "Sunday")]  # cron's numbers

    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    name = models.CharField(max_length=200)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, models.CASCADE, related_name="schedules")
    template = models.JSONField()
    every = models.CharField(max_length=20, choices=EVERY, default=DAILY)
    at = models.TimeField(null=True, blank=True, help_text="Daily and weekly: the time of day (UTC).")
    weekday = models.PositiveSmallIntegerField(choices=WEEKDAYS, null=True, blank=True)
    cron = models.CharField("cron expression", max_length=100, blank=True,
                            help_text="Minute hour day-of-month month day-of-week, in UTC, e.g. 30 2 * * 1-5.")
    interval_s = models.PositiveIntegerField("interval (seconds)", null=True, blank=True)
    periodic_task = models.OneToOneField("django_celery_beat.PeriodicTask", models.SET_NULL, null=True, blank=True,
                                         related_name="+", editable=False)
    active = models.BooleanField(default=True)
    paused_reason = models.CharField(max_length=1000, blank=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_fired = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "created"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("schedule-detail", args=[self.public_id])

    @property
    def when(self) -> str:
        """The schedule in words: "daily at 03:00 UTC"."""
        at = f"{self.at:%H:%M} UTC" if self.at else ""
        if self.every == self.DAILY:
            return f"daily at {at}"
        if self.every == self.WEEKLY:
            return f"every {dict(self.WEEKDAYS).get(self.weekday, '?')} at {at}"
        if self.every == self.INTERVAL:
            n = self.interval_s or 0
            for unit, seconds in (("hours", 3600), ("minutes", 60)):
                if n >= seconds and n % seconds == 0:
                    return f"every {n // seconds} {unit}"
            return f"every {n} seconds"
        return f"cron {self.cron} (UTC)"


class AlertDelivery(models.Model):
    """One alert of a run's regression, by e-mail or webhook, with every attempt to deliver it
    ({"at", "status_code", "error"}, oldest first)."""

    EMAIL, WEBHOOK = "email", "webhook"
    PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
    STATUSES = [(PENDING, "pending"), (DELIVERED, "delivered"), (FAILED, "gave up")]
    public_id = models.CharField(max_length=32, unique=True, default=new_public_id, editable=False)
    run = models.ForeignKey(Run, models.CASCADE, related_name="alerts")
    schedule = models.ForeignKey(Schedule, models.SET_NULL, null=True, blank=True, related_name="alerts")
    endpoint = models.ForeignKey(Endpoint, models.SET_NULL, null=True, blank=True, related_name="alerts")
    channel = models.CharField(max_length=10, choices=[(EMAIL, "e-mail"), (WEBHOOK, "webhook")])
    target = models.CharField(max_length=500)  # the addresses, or the webhook URL
    status = models.CharField(max_length=10, choices=STATUSES, default=PENDING)
    attempts = models.JSONField(default=list, blank=True)
    created = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created", "id"]

    def __str__(self):
        return f"{self.get_channel_display()} alert for {self.run}"

    @property
    def target_shown(self) -> str:
        """The addresses, or only the webhook's scheme and host: a hook's path often holds its key."""
        if self.channel == self.EMAIL:
            return self.target
        from urllib.parse import urlsplit

        parts = urlsplit(self.target)
        return f"{parts.scheme}://{parts.netloc}/…"


# The prediction ledger's tables, kept with their services (benchmarks/ledger/); after
# new_public_id, which they use.
from benchmarks.ledger.models import Prediction, PredictionPair  # noqa: E402,F401
