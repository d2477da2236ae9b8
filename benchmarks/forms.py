import datetime
import re

from django import forms
from django.conf import settings

from benchmarks import selectors
from benchmarks.engine import arrivals as arrival_engine  # `arrivals` is the run's field
from benchmarks.engine import backends, datasets, load_modes
from benchmarks.engine.load_modes import span as _span
from benchmarks.engine import quality as quality_engine  # `quality` is the run's field
from benchmarks.importers import size_text
from benchmarks.engine import validity
from benchmarks.engine.launcher import format_value
from benchmarks.engine.plan import RunPlan
from benchmarks.limits import load_limits, plan_limits
from benchmarks.models import (MAX_TRIALS, Endpoint, EvaluationText, ImportedReport, Run, Schedule,
                               ServerRecipe, Variant, email_list, validate_emails, validate_webhook_url)


def storable_text(value: str) -> None:
    """Refuse text PostgreSQL cannot store: a lone UTF-16 surrogate (e.g. "\\ud800" sent in JSON).
    CharField already refuses NUL characters."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise forms.ValidationError(
            f"Contains an invalid character (a lone surrogate, U+{ord(value[exc.start]):04X}) at position "
            f"{exc.start + 1}; send valid Unicode text.", code="invalid_text") from None


class TextField(forms.CharField):
    """A CharField whose text can be stored: no NUL (CharField's own check), no lone surrogate."""
    default_validators = [storable_text]


def _comparable(value) -> bool:
    """Whether the database can compare `value` with a stored text: no NUL, no lone surrogate."""
    if not isinstance(value, str):
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


class NamedChoiceField(forms.ModelChoiceField):
    """A row chosen by a text field (a name, a public id): a value no row can have is an invalid
    choice before any lookup (PostgreSQL refuses to compare a NUL)."""

    def to_python(self, value):
        if value not in self.empty_values and not _comparable(value):
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class NamedMultipleChoiceField(forms.ModelMultipleChoiceField):
    def _check_values(self, value):
        for v in value:
            if not _comparable(v):
                raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice",
                                            params={"value": "a value with a NUL or invalid character"})
        return super()._check_values(value)


class EndpointChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Endpoint) -> str:
        variant = f" · {obj.variant}" if obj.variant_id else ""
        return f"{obj.name} ({obj.get_backend_display()} on {obj.host}){variant}"


class RecipeChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: ServerRecipe) -> str:
        variant = f" · {obj.variant}" if obj.variant_id else ""
        return f"{obj.name} ({obj.get_backend_display()}, started by the worker on {obj.host}){variant}"


class EvaluationTextChoiceField(NamedChoiceField):
    def label_from_instance(self, obj: EvaluationText) -> str:  # the text itself stays unread
        return f"{obj.name} · sha256 {obj.sha256[:12]} · {obj.created:%Y-%m-%d}"


class ReferenceChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Endpoint) -> str:
        return EndpointChoiceField.label_from_instance(self, obj)


# Bounds on the quality step: a window as llama-perplexity's -c, windows as its --chunks, and the
# positions one endpoint scores (teacher forcing sends one request per position).
QUALITY_CTX = (16, 8192)
QUALITY_WINDOWS = (1, 1000)
QUALITY_MAX_POSITIONS = 200_000
QUALITY_FIELDS = ("quality", "quality_text", "quality_text_file", "quality_text_name", "quality_reference",
                  "quality_reference_recipe",
                  "quality_ctx", "quality_chunks")
DATASET_FIELDS = ("dataset_source", "length_distribution", "length_spread", "dataset_file", "output_lengths",
                  "prefix_tokens", "prefix_share")
# Folded under "More options" on the run form: the common case (endpoints, a preset, the levels,
# the lengths, the SLOs) fits one screen without them.
MORE_FIELDS = ("temperature", "api", "duration_s", "trials", "warmup_requests", "load_processes", "load_workers",
               "seed")


# A level split over more shards than this is not one a worker can start in reasonable time.
MAX_LOAD_PROCESSES = 64
MAX_LOAD_WORKERS = 16

# Workloads named after real uses: what each fills in the run form (`?preset=<key>` links on it).
# Lengths are the usual shapes of each use; a member adjusts them to their own.
PRESETS = {
    "quick": {"label": "Quick look", "words": "a first result in a few minutes, sized for a small server or a CPU: "
                                             "short prompts and replies, 1 and 4 users, 100 requests each (enough "
                                             "for the p99 shown)",
              "fields": {"api": "completions", "prompt_tokens": 32, "output_tokens": 16, "concurrency_levels": "1,4",
                         "requests_per_level": 100, "warmup_requests": 2}},
    "chat": {"label": "Chat", "words": "short questions, replies of a few hundred tokens, log-normal lengths, "
                                       "TTFT p99 ≤ 2 s",
             "fields": {"api": "chat", "prompt_tokens": 256, "output_tokens": 256, "length_distribution": "lognormal",
                        "length_spread": 0.5, "concurrency_levels": "1,4,16", "requests_per_level": 32,
                        "slo_ttft_ms": 2000, "slo_tpot_ms": 100}},
    "rag": {"label": "RAG, 2k shared prefix", "words": "a 2048-token context shared by every request (prefix "
                                                      "caching), a short question and answer",
            "fields": {"api": "completions", "prompt_tokens": 128, "output_tokens": 128, "prefix_tokens": 2048,
                       "prefix_share": 100, "concurrency_levels": "1,4,8", "requests_per_level": 24,
                       "slo_ttft_ms": 2000}},
    "rag_sustained": {"label": "RAG: the rate it sustains",
                      "words": "the RAG shape with ShareGPT questions after a 2048-token shared context, bursty "
                               "arrivals (gamma, burstiness 0.5), 3 trials: the highest request rate within "
                               "TTFT p99 ≤ 2 s",
                      "fields": {"api": "completions", "dataset_source": "sharegpt", "prompt_tokens": 128,
                                 "output_tokens": 128, "output_lengths": "dataset", "prefix_tokens": 2048,
                                 "prefix_share": 100, "load_mode": "slo_rate", "arrivals": "gamma", "burstiness": 0.5,
                                 "search_min_rate": 0.25, "search_max_rate": 16, "search_rate_step": 25,
                                 "requests_per_level": 32, "trials": 3, "slo_ttft_ms": 2000, "slo_percentile": 99}},
    "summarisation": {"label": "Summarisation", "words": "long prompts (about 3000 tokens), short summaries",
                      "fields": {"api": "completions", "prompt_tokens": 3000, "output_tokens": 200,
                                 "length_distribution": "normal", "length_spread": 0.2, "concurrency_levels": "1,2,4",
                                 "requests_per_level": 16, "slo_e2e_ms": 30000}},
    "batch": {"label": "Batch", "words": "throughput first: many long generations in flight, no latency target",
              "fields": {"api": "completions", "prompt_tokens": 512, "output_tokens": 512, "concurrency_levels": "16,32,64",
                         "requests_per_level": 128}},
}


class RunForm(forms.Form):
    title = TextField(max_length=200, required=False)
    endpoints = EndpointChoiceField(
        queryset=Endpoint.objects.none(), widget=forms.CheckboxSelectMultiple, required=False,
        error_messages={"invalid_choice": "Endpoint %(value)s is not a registered, enabled endpoint.",
                        "invalid_pk_value": "%(pk)s is not a valid endpoint id."})
    recipes = RecipeChoiceField(
        queryset=ServerRecipe.objects.none(), widget=forms.CheckboxSelectMultiple, required=False,
        label="Server recipes", help_text="Servers the host's worker starts itself, at each setting ticked below, "
                                          "measures and stops.",
        error_messages={"invalid_choice": "Recipe %(value)s is not a server recipe that can be started.",
                        "invalid_pk_value": "%(pk)s is not a valid recipe id."})
    prompt_tokens = forms.IntegerField(initial=512, min_value=1, help_text="Exact prompt length, in the server's tokens.")
    output_tokens = forms.IntegerField(initial=100, min_value=1, help_text="Forced with ignore_eos.")
    temperature = forms.FloatField(initial=0.7, min_value=0.0, max_value=2.0)
    api = forms.ChoiceField(choices=Run.APIS, initial="completions", label="API")
    load_mode = forms.ChoiceField(choices=Run.LOAD_MODES, initial=load_modes.DEFAULT, widget=forms.RadioSelect)
    concurrency_levels = TextField(initial="1,8", required=False, max_length=500,
                                         help_text="Concurrency sweep: comma-separated, e.g. 1,8,16.")
    request_rates = TextField(required=False, label="Request rates", max_length=500,
                                    help_text="Request rate mode: requests per second, e.g. 0.5,1,2.")
    arrivals = forms.ChoiceField(choices=Run.ARRIVALS, initial="poisson",
                                 help_text="Gamma: bursts as vllm bench serve's --burstiness; ramp: the rate rises "
                                           "linearly over each level's requests; trace: the times and lengths of "
                                           "a recorded trace.")
    burstiness = forms.FloatField(required=False, initial=1.0, min_value=arrival_engine.BURSTINESS_RANGE[0],
                                  max_value=arrival_engine.BURSTINESS_RANGE[1], label="Burstiness",
                                  help_text="The gamma shape of the gaps between requests (their mean stays 1 ÷ rate; "
                                            "their coefficient of variation is 1 ÷ √burstiness): 1 is Poisson, "
                                            "below 1 burstier, above 1 more even.")
    ramp_to = forms.FloatField(required=False, label="Ramp to (req/s)",
                               help_text="The rate each level ends at; it starts at its rate above (request i of N "
                                         "at start + (end − start) × i ÷ (N − 1), as vllm bench serve's linear ramp-up).")
    trace_file = forms.FileField(required=False, label="Trace file",
                                 help_text='Mooncake JSONL ({"timestamp": ms, "input_length": …, "output_length": …, '
                                           '"hash_ids": [...]} per line) or BurstGPT CSV (Timestamp in s, Request '
                                           "tokens, Response tokens); each request sent at its time with its lengths, "
                                           "at most the requests per level below.")
    trace_speedups = TextField(required=False, initial="1", max_length=200, label="Speed-ups",
                               help_text="One level per speed-up, e.g. 1,2: the trace's times divided by it.")
    max_concurrency = forms.IntegerField(required=False, min_value=0, label="Concurrency cap",
                                         help_text="Request rate mode: most requests in flight (blank = no cap).")
    # By default as many as the p99 shown needs to mean much (validity's few_samples threshold).
    requests_per_level = forms.IntegerField(initial=validity.THRESHOLDS["min_samples"]["p99"], min_value=1,
                                            help_text="Requests measured per level (an upper bound with a duration); "
                                                      f"a p99 needs at least {validity.THRESHOLDS['min_samples']['p99']} "
                                                      "to mean much.")
    duration_s = forms.FloatField(required=False, min_value=1, max_value=86400, label="Duration per level (s)",
                                  help_text="Optional: stop sending after this long.")
    slo_ttft_ms = forms.FloatField(required=False, min_value=0.001, label="SLO: TTFT (ms)",
                                   help_text="Optional targets for goodput.")
    slo_tpot_ms = forms.FloatField(required=False, min_value=0.001, label="SLO: TPOT (ms)")
    slo_e2e_ms = forms.FloatField(required=False, min_value=0.001, label="SLO: E2E (ms)")
    slo_percentile = forms.TypedChoiceField(choices=[(50, "p50"), (90, "p90"), (99, "p99")], coerce=int, initial=99,
                                            required=False, label="SLO percentile",
                                            help_text="SLO search: the SLOs hold for this percentile of each "
                                                      "level's requests, and no request may fail.")
    trials = forms.IntegerField(initial=1, min_value=1, max_value=MAX_TRIALS, required=False,
                                help_text="Measure each level this many times; the results show each figure's mean "
                                          "and its 95 % confidence interval across trials. Servers the lab starts "
                                          "start afresh for each trial.")
    warmup_requests = forms.IntegerField(initial=2, min_value=0, max_value=100,
                                         help_text="Sent before measuring; never part of a result.")
    load_processes = forms.IntegerField(required=False, min_value=0, max_value=MAX_LOAD_PROCESSES,
                                        label="Client processes",
                                        help_text="Load-generator processes per level (blank or 0: chosen from the "
                                                  "expected chunk rate and the worker's cores).")
    load_workers = forms.IntegerField(required=False, min_value=0, max_value=MAX_LOAD_WORKERS,
                                      label="Client machines",
                                      help_text="Load-generator workers a level is spread over (blank, 0 or 1: "
                                                "the run's own worker).")
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**63 - 1,
                              help_text="Optional: makes the random prompts repeatable.")
    # What the requests ask for (engine/datasets.py); the prompt and output tokens above are the
    # lengths (the means, for a distribution).
    dataset_source = forms.ChoiceField(choices=[
        ("synthetic", "random tokens, lengths as below"), ("jsonl", "my prompts (a JSONL file)"),
        ("sharegpt", "ShareGPT conversations (the set vllm bench serve uses)")], initial="synthetic", required=False,
        label="Prompts", widget=forms.RadioSelect)
    length_distribution = forms.ChoiceField(choices=[
        ("fixed", "fixed"), ("uniform", "uniform range"), ("normal", "normal"), ("lognormal", "log-normal")],
        initial="fixed", required=False, label="Length distribution",
        help_text="Random tokens: prompt and output lengths drawn around the tokens above; with the seed, "
                  "every level draws the same lengths.")
    length_spread = forms.FloatField(required=False, min_value=0.0, max_value=3.0, label="Spread",
                                     help_text="Uniform: the range is the length × (1 ± spread), below 1; normal: "
                                               "the standard deviation is spread × the length; log-normal: σ of "
                                               "the length's logarithm. Normal and log-normal are cut at 4× the length.")
    dataset_file = forms.FileField(required=False, label="Prompts file (JSONL)",
                                   help_text='One JSON object per line: {"prompt": "...", "output_tokens": 128} '
                                             "(output_tokens optional).")
    output_lengths = forms.ChoiceField(choices=[
        ("forced", "forced to the output tokens above"), ("dataset", "the dataset's own (still forced)")],
        initial="forced", required=False, label="Output lengths",
        help_text="My prompts: their output_tokens (lines without one get the output tokens above); ShareGPT: "
                  "the length of each conversation's reply in the server's tokens.")
    prefix_tokens = forms.IntegerField(required=False, min_value=0, initial=0, label="Shared prefix (tokens)",
                                       help_text="Random tokens put before the prompt of a share of the requests, "
                                                 "the same for all of them (a system prompt, a RAG context); the "
                                                 "server's prefix caching stays on.")
    prefix_share = forms.FloatField(required=False, min_value=0.0, max_value=100.0, label="Requests with it (%)")
    # The quality step (engine/quality.py), after the load levels.
    quality = forms.BooleanField(required=False, label="Measure quality",
                                 help_text="After the load levels: each endpoint's perplexity on one text and, "
                                           "against the reference, KL divergence and agreement.")
    quality_text = EvaluationTextChoiceField(
        queryset=EvaluationText.objects.none(), required=False, label="Evaluation text", to_field_name="public_id",
        empty_label="built-in: Python's documentation (pydoc topics)",
        error_messages={"invalid_choice": "That evaluation text does not exist (any more)."})
    quality_text_file = forms.FileField(required=False, label="…or upload a text",
                                        help_text="A UTF-8 text file; the same text uploaded again is reused.")
    quality_text_name = TextField(max_length=200, required=False, label="Name of the uploaded text",
                                  help_text="Blank: the file's name.")
    quality_reference = ReferenceChoiceField(
        queryset=Endpoint.objects.none(), required=False, label="Reference endpoint",
        empty_label="none: perplexity only",
        help_text="One of the chosen endpoints, the same base model at higher precision (e.g. FP16 or Q8_0); "
                  "the others are compared with it.",
        error_messages={"invalid_choice": "Choose a registered, enabled endpoint as the reference."})
    quality_reference_recipe = forms.ModelChoiceField(
        queryset=ServerRecipe.objects.none(), required=False, to_field_name="name", label="…or a reference recipe",
        empty_label="none",
        help_text="One of the chosen recipes whose server llama.cpp starts from a GGUF file: the host's "
                  "llama-perplexity scores that file, and each server the lab starts from a GGUF is compared with "
                  "it over the whole vocabulary (registered endpoints get perplexity only).",
        error_messages={"invalid_choice": "Choose a recipe that can be started as the reference."})
    quality_ctx = forms.IntegerField(required=False, initial=quality_engine.DEFAULT_CTX, min_value=QUALITY_CTX[0],
                                     max_value=QUALITY_CTX[1], label="Quality window (tokens)",
                                     help_text="llama-perplexity's -c: the second half of each window is scored.")
    quality_chunks = forms.IntegerField(required=False, initial=quality_engine.DEFAULT_CHUNKS, min_value=QUALITY_WINDOWS[0],
                                        max_value=QUALITY_WINDOWS[1], label="Quality windows",
                                        help_text="llama-perplexity's --chunks: at most this many windows of the text.")

    # The fields of each load mode are its own (engine/load_modes): the form shows only the chosen
    # mode's (static/js/run_form.js), and in a mode that sends at rates, only those of the arrivals.
    ARRIVAL_FIELDS = {"request_rates": ("poisson", "constant", "gamma", "ramp"), "burstiness": ("gamma", "ramp"),
                      "ramp_to": ("ramp",), "trace_file": ("trace",), "trace_speedups": ("trace",)}

    def __init__(self, *args, upload_refused: str = "", **kwargs):
        """`upload_refused`: why the upload handler stopped receiving the file (uploads.py)."""
        super().__init__(*args, **kwargs)
        self.upload_refused = upload_refused
        self.fields["load_mode"].choices = load_modes.choices()
        self.fields = with_mode_fields(self.fields)
        for mode in load_modes.LOAD_MODES.values():
            for name in mode.fields:
                field = self.fields[name]
                field.load_modes = getattr(field, "load_modes", ()) + (mode.name,)
                field.load_mode = " ".join(field.load_modes)
        for name, kinds in self.ARRIVAL_FIELDS.items():
            self.fields[name].arrival_kinds = " ".join(kinds)
        self.fields["trace_file"].help_text += f" At most {settings.MAX_DATASET_MIB} MiB and " \
                                               f"{arrival_engine.MAX_TRACE_REQUESTS:,} requests."
        self.fields["endpoints"].queryset = selectors.endpoints_for_runs()
        self.fields["quality_reference"].queryset = selectors.endpoints_for_runs()
        self.fields["quality_text"].queryset = selectors.evaluation_texts()
        self.fields["quality_text_file"].help_text += f" At most {settings.MAX_EVALUATION_TEXT_MIB} MiB."
        self.fields["recipes"].queryset = selectors.recipes_for_runs()
        self.fields["quality_reference_recipe"].queryset = selectors.recipes_for_runs()
        self._add_sweep_fields()
        self.fields["prompt_tokens"].max_value = settings.MAX_TOKENS
        self.fields["prompt_tokens"].validators.append(_max(settings.MAX_TOKENS))
        self.fields["output_tokens"].validators.append(_max(settings.MAX_TOKENS))
        self.fields["requests_per_level"].validators.append(_max(settings.MAX_REQUESTS_PER_LEVEL))
        self.fields["duration_s"].validators.append(_max(
            settings.RUN_TIME_LIMIT_S, f"the run time limit, {_span(settings.RUN_TIME_LIMIT_S)}"))

    def _add_sweep_fields(self) -> None:
        """One field per recipe and sweep parameter, after the recipes: the values to measure
        (all allowed ones ticked at first)."""
        self.sweep_fields = {}  # field name -> (recipe, flag, allowed values)
        fields = {}
        for name, field in self.fields.items():
            fields[name] = field
            if name != "recipes":
                continue
            for recipe in field.queryset:
                for i, (flag, values) in enumerate((recipe.sweep or {}).items()):
                    key = f"sweep_{recipe.id}_{i}"
                    fields[key] = forms.MultipleChoiceField(
                        required=False, widget=forms.CheckboxSelectMultiple, label=f"{recipe.name}: {flag}",
                        choices=[(str(j), format_value(v)) for j, v in enumerate(values)],
                        initial=[str(j) for j in range(len(values))],
                        error_messages={"invalid_choice": f"%(value)s is not one of the values {recipe.name} "
                                                          f"allows for {flag}."})
                    self.sweep_fields[key] = (recipe, flag, values)
        self.fields = fields

    def _clean_sweep(self, data) -> int:
        """`sweep` (recipe id -> flag -> the values ticked) from the sweep fields; returns how many
        servers the run starts."""
        chosen = set(data.get("recipes") or [])
        sweep, servers = {}, 0
        for key, (recipe, flag, values) in self.sweep_fields.items():
            picked = data.pop(key, None) or []
            if recipe in chosen:
                if not picked:
                    self.add_error(key, f"Tick at least one value of {flag}, or untick {recipe.name}.")
                sweep.setdefault(str(recipe.id), {})[flag] = [values[int(j)] for j in picked]
        for recipe in chosen:
            servers += len(recipe.settings(sweep.get(str(recipe.id))))
        hosts = sorted({r.host.name for r in chosen})
        if len(hosts) > 1:
            self.add_error("recipes", f"The recipes of one run are started by one host's worker; these are on "
                                      f"{', '.join(hosts)}. Queue one run per host.")
        data["sweep"] = sweep
        return servers

    def clean_concurrency_levels(self) -> list[int]:
        levels = []
        for part in _parts(self.cleaned_data["concurrency_levels"]):
            if part.startswith("-") and _ASCII_INT.fullmatch(part[1:]):
                raise forms.ValidationError(f"{part} is negative: a concurrency level is at least 1 request.")
            if not _ASCII_INT.fullmatch(part):  # str.isdigit() also takes "²", which int() refuses
                raise forms.ValidationError(f"{part!r} is not a whole number (use the digits 0-9).")
            if len(part) > 9:
                raise forms.ValidationError(
                    f"{part[:12]}… is above the limit of {settings.MAX_CONCURRENCY} concurrent requests.")
            level = int(part)
            if level < 1:
                raise forms.ValidationError("Concurrency levels must be at least 1.")
            if level > settings.MAX_CONCURRENCY:
                raise forms.ValidationError(
                    f"{level} is above the limit of {settings.MAX_CONCURRENCY} concurrent requests.")
            if level in levels:
                raise forms.ValidationError(f"{level} is listed twice: give each concurrency level once.")
            levels.append(level)
        if len(levels) > 20:
            raise forms.ValidationError("At most 20 concurrency levels per run.")
        return sorted(levels)

    def clean_request_rates(self) -> list[float]:
        rates = []
        for part in _parts(self.cleaned_data["request_rates"]):
            if part.startswith("-") and _ASCII_NUMBER.fullmatch(part[1:]):
                raise forms.ValidationError(f"{part} is negative: a request rate is above 0 per second.")
            if not _ASCII_NUMBER.fullmatch(part):  # float() also takes "inf", "nan", "1_0", "１"
                raise forms.ValidationError(f"{part!r} is not a number (e.g. 0.5 or 2).")
            rate = float(part)
            if not 0 < rate <= settings.MAX_REQUEST_RATE:
                raise forms.ValidationError(
                    f"Request rates must be above 0 and at most {settings.MAX_REQUEST_RATE:g} per second.")
            if rate < settings.MIN_REQUEST_RATE:
                raise forms.ValidationError(
                    f"{part} per second is below the lowest request rate, {settings.MIN_REQUEST_RATE:g} per second "
                    f"(one request every {_span(1 / settings.MIN_REQUEST_RATE)}).")
            if rate in rates:
                raise forms.ValidationError(f"{part} per second is listed twice: give each request rate once.")
            rates.append(rate)
        if len(rates) > 20:
            raise forms.ValidationError("At most 20 request rates per run.")
        return sorted(rates)

    @property
    def load_mode_value(self) -> str:
        """The load mode the form shows: the one sent, else the initial one."""
        value = self["load_mode"].value()
        return value if value in load_modes.LOAD_MODES else load_modes.DEFAULT

    @property
    def rate_modes(self) -> str:
        """The load modes whose fields of arrivals show only for their kinds (static/js/run_form.js)."""
        return " ".join(m.name for m in load_modes.LOAD_MODES.values() if m.sends_at_rates)

    @property
    def arrivals_value(self) -> str:
        value = self["arrivals"].value()
        return value if value in dict(Run.ARRIVALS) else "poisson"

    def field_hidden(self, field) -> bool:
        """A field of another load mode, or of other arrivals, is not shown (static/js/run_form.js
        shows it when its mode is chosen)."""
        modes = getattr(field.field, "load_modes", None)
        if modes and self.load_mode_value not in modes:
            return True
        kinds = getattr(field.field, "arrival_kinds", "")
        return bool(kinds) and load_modes.get(self.load_mode_value).sends_at_rates and \
            self.arrivals_value not in kinds.split()

    def clean_trace_file(self) -> "arrival_engine.Trace | None":
        """The uploaded trace: UTF-8, within MAX_DATASET_MIB, every line a request (the first bad one named)."""
        f = self.cleaned_data.get("trace_file")
        if not f:
            return None
        text = _utf8_upload(f, settings.MAX_DATASET_MIB, "a trace")
        try:
            return arrival_engine.parse_trace(text, f.name[:200], max_tokens=settings.MAX_TOKENS)
        except arrival_engine.TraceError as exc:
            raise forms.ValidationError(f"{f.name}: {exc}") from None

    def clean_trace_speedups(self) -> list[float]:
        speedups = []
        low, high = arrival_engine.SPEEDUP_RANGE
        for part in _parts(self.cleaned_data.get("trace_speedups") or ""):
            if not _ASCII_NUMBER.fullmatch(part):
                raise forms.ValidationError(f"{part!r} is not a number (e.g. 1 or 2.5).")
            value = float(part)
            if not low <= value <= high:
                raise forms.ValidationError(f"A speed-up is from {low:g} to {high:g}; {part} is not.")
            if value in speedups:
                raise forms.ValidationError(f"{part} is listed twice: give each speed-up once.")
            speedups.append(value)
        if len(speedups) > 20:
            raise forms.ValidationError("At most 20 speed-ups per run.")
        return sorted(speedups)

    def clean_ramp_to(self) -> float | None:
        value = self.cleaned_data.get("ramp_to")
        if value is not None and not settings.MIN_REQUEST_RATE <= value <= settings.MAX_REQUEST_RATE:
            raise forms.ValidationError(f"A rate from {settings.MIN_REQUEST_RATE:g} to {settings.MAX_REQUEST_RATE:g} "
                                        "per second.")
        return value

    def _clean_load(self, data) -> None:
        """The chosen load mode judges its fields and leaves run_create's load arguments in `data`
        (engine/load_modes); the inputs of every mode are taken out, and the errors of the fields
        the chosen mode does not show are dropped."""
        mode, kind = data.get("load_mode"), data.get("arrivals") or "poisson"
        names = {name for m in load_modes.LOAD_MODES.values() for name in m.inputs}
        inputs = {name: data.pop(name, None) for name in names}
        for name in {name for m in load_modes.LOAD_MODES.values() for name in m.fields}:
            if not self._shows(name, mode, kind):
                self._errors.pop(name, None)
        if mode in load_modes.LOAD_MODES:  # else the choice's own error says so
            load_modes.get(mode).clean(data, inputs, _FormProblems(self), load_limits())

    def _shows(self, name: str, mode, kind) -> bool:
        field = self.fields[name]
        if mode not in getattr(field, "load_modes", ()):
            return False
        kinds = getattr(field, "arrival_kinds", "")
        return not kinds or not load_modes.get(mode).sends_at_rates or kind in kinds.split()

    @property
    def workload_fields(self):
        fields = [f for f in self if f.name not in QUALITY_FIELDS + DATASET_FIELDS + MORE_FIELDS]
        for f in fields:
            f.initially_hidden = self.field_hidden(f)
        return fields

    @property
    def more_fields(self):
        return [self[name] for name in MORE_FIELDS]

    @property
    def dataset_fields(self):
        return [self[name] for name in DATASET_FIELDS]

    @property
    def quality_fields(self):
        return [self[name] for name in QUALITY_FIELDS]

    def unfolded(self, names) -> bool:
        """Whether a folded group of the form opens: one of its fields has an error, or a preset
        or a link filled one in with other than its default (so that nothing set is out of sight)."""
        if self.is_bound:
            return any(name in self.errors for name in names)
        return any(name in self.initial and str(self.initial[name]) != str(self.fields[name].initial)
                   for name in names)

    @property
    def open_groups(self) -> dict:
        return {"more": self.unfolded(MORE_FIELDS), "requests": self.unfolded(DATASET_FIELDS),
                "quality": self.unfolded(QUALITY_FIELDS)}

    def clean_quality_text_file(self) -> dict | None:
        """The uploaded text as {"name", "text"}: UTF-8, not empty, within MAX_EVALUATION_TEXT_MIB."""
        f = self.cleaned_data.get("quality_text_file")
        return evaluation_text_upload(f) if f else None

    def clean_max_concurrency(self) -> int:
        cap = self.cleaned_data.get("max_concurrency") or 0
        if cap > settings.MAX_CONCURRENCY:
            raise forms.ValidationError(f"{cap} is above the limit of {settings.MAX_CONCURRENCY} concurrent requests.")
        return cap

    def clean_load_processes(self):
        return self.cleaned_data.get("load_processes") or 0

    def clean_load_workers(self):
        workers = self.cleaned_data.get("load_workers") or 0
        if workers > 1 and not settings.LOADGEN_QUEUE:
            raise forms.ValidationError("This site has no load-generator workers (LOADGEN_QUEUE is not set): "
                                        "leave it blank to measure from the run's worker.")
        return workers

    def clean(self):
        data = super().clean()
        for name, field in self.fields.items():  # int() takes "５１２" and "٥": a number here is ASCII digits
            raw = self.data.get(self.add_prefix(name)) if hasattr(self.data, "get") else None
            if isinstance(field, (forms.IntegerField, forms.FloatField)) and isinstance(raw, str) and not raw.isascii():
                self.add_error(name, "Use ASCII digits (0-9).")
        self._clean_quality(data)
        data["trials"] = data.get("trials") or 1
        data["slo_percentile"] = data.get("slo_percentile") or 99
        self._clean_load(data)
        servers = self._clean_sweep(data)
        if not data.get("endpoints") and not data.get("recipes") and "endpoints" not in self.errors:
            self.add_error("endpoints", "Choose at least one endpoint or server recipe.")
        # Each server started from a recipe measures the levels as an endpoint does.
        data["_measured"] = len(data.get("endpoints") or []) + servers
        self._check_limits(data, data.pop("_measured"))
        # The runs-in-flight limit is checked by services.run_create, atomically with the insert.
        self._clean_dataset(data)
        dataset = data.get("dataset")
        if dataset is not None and dataset.source == "synthetic":
            prompt, output = dataset.prompt_lengths.high + dataset.prefix_tokens, dataset.output_lengths.high
            if prompt + output > settings.MAX_TOKENS:
                longest = "" if dataset.prompt_lengths.distribution == "fixed" else " at the longest draws"
                raise forms.ValidationError(
                    f"Prompt plus output tokens ({prompt + output}{longest}, shared prefix included) exceed the "
                    f"limit of {settings.MAX_TOKENS}.")
        return data

    def clean_dataset_file(self) -> dict | None:
        """The uploaded JSONL as {"name", "entries"}: UTF-8, within MAX_DATASET_MIB, every line a prompt."""
        f = self.cleaned_data.get("dataset_file")
        if not f:
            return None
        text = _utf8_upload(f, settings.MAX_DATASET_MIB, "a prompts file")
        try:
            # No tokenizer packs more than 8 characters into a token on average: a prompt longer than
            # that can never fit; the exact check is against the server's tokenizer when the run starts.
            entries = datasets.parse_jsonl(text, max_output_tokens=settings.MAX_TOKENS,
                                           max_prompt_chars=settings.MAX_TOKENS * 8)
        except datasets.DatasetError as exc:
            raise forms.ValidationError(f"{f.name}: {exc}") from None
        for entry in entries:
            try:
                storable_text(entry.prompt)
            except forms.ValidationError as exc:
                raise forms.ValidationError(f"{f.name}, line {entry.line}: {exc.messages[0]}") from None
        return {"name": f.name[:200], "entries": tuple(entries)}

    def _clean_dataset(self, data) -> None:
        """`dataset` (an engine.datasets.Dataset) from the dataset fields, which are dropped."""
        source = data.pop("dataset_source", None) or "synthetic"
        upload = data.pop("dataset_file", None)
        distribution = data.pop("length_distribution", None) or "fixed"
        spread = data.pop("length_spread", None) or 0.0
        outputs = data.pop("output_lengths", None) or "forced"
        prefix_tokens = data.pop("prefix_tokens", None) or 0
        prefix_share = (data.pop("prefix_share", None) or 0.0) / 100.0
        if prefix_tokens > settings.MAX_TOKENS:
            self.add_error("prefix_tokens", f"Ensure this value is at most {settings.MAX_TOKENS}.")
        if prefix_tokens and not prefix_share and "prefix_share" not in self.errors:
            self.add_error("prefix_share", "Say which share of the requests starts with the prefix, e.g. 50.")
        if source == "jsonl" and not upload and "dataset_file" not in self.errors:
            self.add_error("dataset_file", "Upload the prompts file (JSONL), or choose other prompts.")
        if source == "sharegpt" and not datasets.sharegpt_available():
            self.add_error("dataset_source", f"Not available: {datasets.SHAREGPT_MISSING}.")
        if source == "synthetic" and outputs == "dataset":
            self.add_error("output_lengths", "Random tokens have no output lengths of their own: force them.")
        if "prompt_tokens" not in data or "output_tokens" not in data:
            return
        dataset = datasets.Dataset(
            source=source, outputs=outputs,
            prompt_lengths=datasets.Lengths(distribution, data["prompt_tokens"], spread),
            output_lengths=datasets.Lengths(distribution, data["output_tokens"], spread),
            entries=upload["entries"] if upload and source == "jsonl" else (),
            name=upload["name"] if upload and source == "jsonl" else "",
            prefix_tokens=prefix_tokens, prefix_share=prefix_share)
        problem = datasets.Lengths(distribution, 1, spread).problem()
        if problem and "length_spread" not in self.errors:
            self.add_error("length_spread", problem[0].upper() + problem[1:] + ".")
        data["dataset"] = dataset


    def _clean_quality(self, data) -> None:
        """The quality step's fields as services.run_create takes them: `quality_upload` (an
        uploaded text, {"name", "text"}) beside `quality_text` (a stored one, None = the built-in);
        all of it dropped when the step is not asked for."""
        upload = data.pop("quality_text_file", None)
        name = data.pop("quality_text_name", "") or ""
        if self.upload_refused:  # the handler stopped receiving the file at the upload limit
            self._errors.pop("quality_text_file", None)
            self.add_error("quality_text_file", self.upload_refused)
        data["quality_upload"] = None
        if not data.get("quality"):  # what the quality fields say does not matter then
            for field in QUALITY_FIELDS:
                self._errors.pop(field, None)
            data.update(quality=False, quality_text=None, quality_reference=None, quality_reference_recipe=None,
                        quality_ctx=quality_engine.DEFAULT_CTX, quality_chunks=quality_engine.DEFAULT_CHUNKS)
            return
        if upload and data.get("quality_text"):
            self.add_error("quality_text_file", "Choose a stored text or upload one, not both.")
        elif upload:
            data["quality_upload"] = {**upload, "name": name.strip() or upload["name"]}
        reference = data.get("quality_reference")
        if reference is not None and "endpoints" in data and reference not in data["endpoints"]:
            self.add_error("quality_reference", f"{reference.name} is not one of the chosen endpoints: the reference "
                                                "must be measured in the same run. Tick it above, or choose another.")
        recipe = data.get("quality_reference_recipe")
        if recipe is not None and reference is not None:
            self.add_error("quality_reference_recipe", "Choose one reference: an endpoint or a recipe.")
        elif recipe is not None and "recipes" in data and recipe not in (data.get("recipes") or []):
            self.add_error("quality_reference_recipe", f"{recipe.name} is not one of the chosen recipes: tick it "
                                                       "under Server recipes, or choose another.")
        elif recipe is not None and recipe.backend != "llamacpp":
            self.add_error("quality_reference_recipe", f"{recipe.name} starts {recipe.get_backend_display()}: a "
                                                       "reference recipe is scored by llama-perplexity, so it "
                                                       "must start llama.cpp from a GGUF file.")
        others = len(data.get("endpoints") or []) + len(data.get("recipes") or [])  # recipes: their servers
        if reference is not None and others < 2 and "endpoints" in data:
            self.add_error("quality_reference", "A reference needs at least one other endpoint or recipe to compare "
                                                "with.")
        ctx = data["quality_ctx"] = data.get("quality_ctx") or quality_engine.DEFAULT_CTX
        chunks = data["quality_chunks"] = data.get("quality_chunks") or quality_engine.DEFAULT_CHUNKS
        if "quality_ctx" not in self.errors and "quality_chunks" not in self.errors:
            positions = quality_engine.scored_positions(ctx, chunks)
            if positions > QUALITY_MAX_POSITIONS:
                self.add_error("quality_chunks", (
                    f"{chunks} windows of {ctx} tokens score {positions:,} positions per endpoint; the limit is "
                    f"{QUALITY_MAX_POSITIONS:,}. Use fewer or smaller windows."))

    def run_arguments(self) -> dict:
        """run_create's arguments from the cleaned form: the plan, and the rows it runs on."""
        plan, rows = RunPlan.split(self.cleaned_data)
        return {"plan": plan, **rows}

    def _check_limits(self, data, measured: int) -> None:
        """The site's limits on the run as a whole (its requests, its time: the load mode reckons
        levels, trials and endpoints, servers started from recipes too, one after another),
        judged as run_create judges every plan (RunPlan.problems), here beside their fields."""
        try:
            plan = RunPlan.split(data)[0]
        except (TypeError, ValueError, load_modes.UnknownLoadMode):
            return  # a field of the plan is missing or wrong: its own message says so
        for field, message in plan.problems(plan_limits(), measured):
            if field is None or field not in self.errors:
                self.add_error(field, message)


# Where the fields a load mode owns go: its load fields after the cap, its search's after the SLOs.
MODE_FIELDS_AFTER = {"load": "max_concurrency", "slo": "slo_e2e_ms"}


def with_mode_fields(fields: dict) -> dict:
    """`fields` with every registered load mode's own fields (engine/load_modes) in their places."""
    out = {}
    for name, field in fields.items():
        out[name] = field
        for beside, after in MODE_FIELDS_AFTER.items():
            if name == after:
                out.update({n: mode_field(spec) for m in load_modes.LOAD_MODES.values()
                            for n, spec in m.own_fields.items() if spec.beside == beside})
    return out


def mode_field(spec: load_modes.FieldSpec) -> forms.Field:
    common = {"required": False, "label": spec.label, "help_text": spec.help_text, "initial": spec.initial}
    if spec.kind == "choice":
        return forms.ChoiceField(choices=spec.choices, **common)
    bounds = {"min_value": spec.min_value, "max_value": spec.max_value}
    return (forms.IntegerField if spec.kind == "int" else forms.FloatField)(**bounds, **common)


class _FormProblems:
    """A load mode's view of the run form: where it says what is wrong."""

    def __init__(self, form: forms.Form):
        self.form = form

    def add(self, field: str, message: str) -> None:
        self.form.add_error(field, message)

    def has(self, field: str) -> bool:
        return field in self.form.errors


def evaluation_text_upload(f) -> dict:
    """An uploaded evaluation text as {"name", "text"}: UTF-8, not empty, within MAX_EVALUATION_TEXT_MIB."""
    # Strict UTF-8, and nothing stripped: the sha256 is the file's own.
    text = _utf8_upload(f, settings.MAX_EVALUATION_TEXT_MIB, "an evaluation text")
    if not text.strip():
        raise forms.ValidationError(f"{f.name} is empty: an evaluation text needs words to score.")
    if "\x00" in text:
        raise forms.ValidationError(f"{f.name} contains a NUL character (position {text.index(chr(0)) + 1}): "
                                    "it is not plain text.")
    return {"name": f.name[:200], "text": text}


def _utf8_upload(f, limit_mib: int, what: str) -> str:
    """An uploaded file's text: at most `limit_mib` MiB, strict UTF-8; else a message naming the file."""
    if f.size > limit_mib * 1024 * 1024:
        raise forms.ValidationError(f"{f.name} is {size_text(f.size)}; {what} may be at most {limit_mib} MiB.")
    data = f.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise forms.ValidationError(
            f"{f.name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start + 1} does not "
            "decode); save it as UTF-8.") from None


_ASCII_INT = re.compile(r"[0-9]+")
_ASCII_NUMBER = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def _parts(raw: str) -> list[str]:
    return [p.strip() for p in (raw or "").replace(";", ",").split(",") if p.strip()]


def _max(limit: float, what: str = ""):
    def check(value):
        if value is not None and value > limit:
            shown = int(limit) if float(limit).is_integer() else limit
            raise forms.ValidationError(f"Ensure this value is at most {shown}" + (f" ({what})." if what else "."))
    return check


class ImportForm(forms.Form):
    file = forms.FileField(help_text="A `vllm bench serve --save-result` JSON, a GuideLLM JSON report, "
                                     "or `llama-bench -o json` output.")
    title = TextField(max_length=300, required=False, help_text="Blank: taken from the file.")
    backend = forms.ChoiceField(required=False, choices=lambda: [("", "unknown / as the file says")] + [
                                    (b.name, b.label) for b in backends.ordered()],
                                help_text="The server these numbers came from (the client tools do not say).")
    quantization = forms.ChoiceField(required=False, choices=[("", "unknown")] + Variant.QUANTIZATIONS)
    gpu = TextField(max_length=200, required=False, label="GPU", help_text="e.g. Tesla V100-PCIE-16GB")

    def __init__(self, *args, upload_refused: str = "", **kwargs):
        """`upload_refused`: why the upload handler stopped receiving the file (uploads.py)."""
        super().__init__(*args, **kwargs)
        self.upload_refused = upload_refused
        self.fields["file"].help_text += (f" At most {settings.MAX_IMPORT_MIB} MiB and "
                                          f"{settings.MAX_IMPORT_LEVELS:,} levels.")

    def clean_file(self):
        f = self.cleaned_data["file"]
        limit = settings.MAX_IMPORT_MIB * 1024 * 1024
        if f.size > limit:
            raise forms.ValidationError(f"The file is {size_text(f.size)}; the limit is {settings.MAX_IMPORT_MIB} MiB.")
        return f

    def clean(self):
        if self.upload_refused:  # not "This field is required": the file was cut off at the limit
            self._errors.pop("file", None)
            self.add_error("file", self.upload_refused)
        return super().clean()


MAX_COMPARED_RUNS = 12  # runs in one comparison: each endpoint of each is a series of the page


class ComparisonForm(forms.Form):
    """Runs and reports by public id (what the runs list's selection and the API send). Only the
    runs picked are offered as boxes: the runs list pages and filters all of them."""
    title = TextField(max_length=200, required=False)
    runs = NamedMultipleChoiceField(queryset=Run.objects.none(), required=False, to_field_name="public_id",
                                          widget=forms.CheckboxSelectMultiple,
                                          help_text="Pick runs on the runs list: filter it, tick them and press "
                                                    "Compare selected.")
    reports = NamedMultipleChoiceField(queryset=ImportedReport.objects.none(), required=False,
                                             to_field_name="public_id", widget=forms.CheckboxSelectMultiple,
                                             label="Imported and published reports")

    def __init__(self, *args, picked: list[str] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["runs"].queryset = Run.objects.exclude(status__in=[Run.QUEUED, Run.RUNNING])
        shown = list(picked) + (self.data.getlist("runs") if hasattr(self.data, "getlist") else [])
        self.fields["runs"].widget.choices = [
            (r.public_id, str(r)) for r in selectors.runs_picked(shown, limit=MAX_COMPARED_RUNS * 2)]
        # Only what the checkboxes show (the title): never each report's stored levels.
        self.fields["reports"].queryset = ImportedReport.objects.only("id", "public_id", "title")

    def clean_runs(self):
        runs = self.cleaned_data["runs"]
        if len(runs) > MAX_COMPARED_RUNS:
            raise forms.ValidationError(f"At most {MAX_COMPARED_RUNS} runs in one comparison; you picked {len(runs)}.")
        return runs

    def clean(self):
        data = super().clean()
        if len(data.get("runs") or []) + len(data.get("reports") or []) < 1 and not self.errors:
            raise forms.ValidationError("Pick at least one run or report.")
        return data


class EvaluationTextForm(forms.Form):
    """An evaluation text for the quality step, uploaded on its own (the API's; the run form
    takes one beside a run)."""
    file = forms.FileField(help_text="UTF-8 plain text; the same text is stored once, under its SHA-256.")
    name = TextField(max_length=200, required=False, help_text="Blank: the file's name.")

    def __init__(self, *args, upload_refused: str = "", **kwargs):
        super().__init__(*args, **kwargs)
        self.upload_refused = upload_refused
        self.fields["file"].help_text += f" At most {settings.MAX_EVALUATION_TEXT_MIB} MiB."

    def clean_file(self) -> dict:
        if self.upload_refused:
            raise forms.ValidationError(self.upload_refused)
        return evaluation_text_upload(self.cleaned_data["file"])


class RunFilterForm(forms.Form):
    """The runs list's filters, in the query string (a filtered list is a link to share); the
    API's runs list reads the same ones. Named things are given by name, never database id, except
    a variant (names repeat across models)."""

    ARCHIVED = [("", "hide archived"), ("include", "show archived too"), ("only", "only archived")]
    FLAGS = [("", "any"), ("none", "no validity flag"), ("any", "some validity flag")]

    q = TextField(max_length=200, required=False, label="Title contains")
    endpoint = NamedChoiceField(queryset=Endpoint.objects.none(), required=False, to_field_name="name")
    model = NamedChoiceField(queryset=Variant.objects.none(), required=False, to_field_name="name")
    variant = forms.ModelChoiceField(queryset=Variant.objects.none(), required=False)
    host = NamedChoiceField(queryset=Variant.objects.none(), required=False, to_field_name="name")
    backend = forms.ChoiceField(required=False, choices=())
    status = forms.ChoiceField(required=False, choices=[("", "any")] + Run.STATUSES)
    owner = NamedChoiceField(queryset=Variant.objects.none(), required=False, to_field_name="username",
                                   label="Queued by")
    mine = forms.BooleanField(required=False, label="Only mine")
    created_after = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}),
                                    help_text="Queued on or after this day.")
    created_before = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}),
                                     help_text="Queued on or before this day.")
    flags = forms.ChoiceField(required=False, label="Validity flags", choices=())
    archived = forms.ChoiceField(required=False, choices=ARCHIVED)

    def __init__(self, *args, **kwargs):
        from django.contrib.auth import get_user_model

        from benchmarks.engine.validity import FLAG_NAMES
        from benchmarks.models import Host, Model

        super().__init__(*args, **kwargs)
        self.fields["endpoint"].queryset = Endpoint.objects.only("id", "name")
        self.fields["model"].queryset = Model.objects.only("id", "name")
        self.fields["variant"].queryset = Variant.objects.select_related("model").only("id", "name", "model__name")
        self.fields["host"].queryset = Host.objects.only("id", "name")
        self.fields["owner"].queryset = get_user_model().objects.filter(runs__isnull=False).distinct().order_by(
            "username")
        self.fields["backend"].choices = [("", "any")] + list(backends.choices())
        self.fields["flags"].choices = self.FLAGS + [(code, f"flagged: {name}") for code, name in FLAG_NAMES.items()]
        for field in self.fields.values():
            if isinstance(field, forms.ModelChoiceField):
                field.empty_label = "any"

    def _day(self, name: str):
        day = self.cleaned_data.get(name)
        if day and not 1900 <= day.year <= 9000:
            raise forms.ValidationError("A day between the years 1900 and 9000.")
        return day

    def clean_created_after(self):
        return self._day("created_after")

    def clean_created_before(self):
        return self._day("created_before")

    def clean(self):
        data = super().clean()
        after, before = data.get("created_after"), data.get("created_before")
        if after and before and after > before:
            self.add_error("created_before", "The last day is before the first.")
        return data
class ApiTokenForm(forms.Form):
    name = TextField(max_length=100, help_text="What uses it, e.g. “CI on staging”: the list shows it.")


class TextTimeField(forms.TimeField):
    """A time of day as text: the API's JSON may send a number, which TimeField would .strip() (a 500)."""

    def to_python(self, value):
        if value is not None and not isinstance(value, (str, datetime.time)):
            raise forms.ValidationError(self.error_messages["invalid"], code="invalid")
        return super().to_python(value)


def cron_min_gap_s(schedule) -> int:
    """The shortest time between two runs of a celery crontab, in seconds: its firing minutes of a
    day (every hour x minute it names), the gap across midnight included."""
    times = sorted(h * 60 + m for h in schedule.hour for m in schedule.minute)
    gaps = [b - a for a, b in zip(times, times[1:])] + [1440 - times[-1] + times[0]]
    return min(gaps) * 60


class ScheduleForm(forms.Form):
    """When a run repeats, and who is told of a regression: the run page's "Repeat this run on a
    schedule" and the API's schedules (their JSON as this form's data)."""

    name = TextField(max_length=200, required=False, help_text="Blank: the run's title or endpoints.")
    every = forms.ChoiceField(choices=Schedule.EVERY, initial=Schedule.DAILY, label="Repeat")
    at = TextTimeField(required=False, label="At (UTC)", help_text="Daily and weekly: e.g. 03:00.")
    weekday = forms.TypedChoiceField(choices=[("", "—")] + Schedule.WEEKDAYS, coerce=int, empty_value=None,
                                     required=False, label="Weekday", help_text="Weekly.")
    cron = TextField(max_length=100, required=False, label="Cron expression",
                     help_text="Minute hour day-of-month month day-of-week (UTC), e.g. 30 2 * * 1-5.")
    # At most a year: beat's interval and the column are 32-bit (10**30 was a database error).
    interval_s = forms.IntegerField(required=False, min_value=1, max_value=366 * 24 * 3600, label="Interval (s)",
                                    help_text="At a fixed interval: seconds between runs.")
    alert_emails = TextField(max_length=500, required=False, label="Alert e-mails",
                             help_text="Comma-separated addresses told of a regression.")
    webhook_url = TextField(max_length=500, required=False, label="Webhook URL",
                            help_text="POSTed a signed JSON body on a regression.")
    webhook_secret = forms.CharField(max_length=200, required=False, widget=forms.PasswordInput(render_value=False),
                                     label="Webhook secret", help_text="Optional, write-only: signs each body "
                                                                       "(HMAC-SHA256, X-V100-Signature).")

    def clean_alert_emails(self):
        value = self.cleaned_data.get("alert_emails", "")
        validate_emails(value)
        return ", ".join(email_list(value))

    def clean_webhook_url(self):
        value = (self.cleaned_data.get("webhook_url") or "").strip()
        if value:
            validate_webhook_url(value)
        return value

    def clean(self):
        from celery.schedules import crontab

        data = super().clean()
        every = data.get("every")
        if every in (Schedule.DAILY, Schedule.WEEKLY) and data.get("at") is None and "at" not in self.errors:
            self.add_error("at", "Give the time of day, e.g. 03:00.")
        if every == Schedule.WEEKLY and data.get("weekday") is None and "weekday" not in self.errors:
            self.add_error("weekday", "Give the weekday.")
        if every == Schedule.CRON:
            parts = (data.get("cron") or "").split()
            if len(parts) != 5:
                self.add_error("cron", "Five fields: minute hour day-of-month month day-of-week, e.g. 30 2 * * 1-5.")
            else:
                try:
                    schedule = crontab(minute=parts[0], hour=parts[1], day_of_month=parts[2], month_of_year=parts[3],
                                       day_of_week=parts[4])
                except (ValueError, TypeError, IndexError, KeyError) as exc:
                    self.add_error("cron", f"Not a cron expression: {exc}")
                else:
                    gap = cron_min_gap_s(schedule)
                    if gap < settings.SCHEDULE_MIN_INTERVAL_S:  # the interval's minimum holds for cron too
                        self.add_error("cron", f"At least {settings.SCHEDULE_MIN_INTERVAL_S} s between runs: this "
                                               f"expression fires {gap // 60} minute{'s' if gap != 60 else ''} apart.")
                    else:
                        data["cron"] = " ".join(parts)
        if every == Schedule.INTERVAL:
            interval = data.get("interval_s")
            if interval is None and "interval_s" not in self.errors:
                self.add_error("interval_s", "Give the seconds between runs.")
            elif interval is not None and interval < settings.SCHEDULE_MIN_INTERVAL_S:
                self.add_error("interval_s", f"At least {settings.SCHEDULE_MIN_INTERVAL_S} s between runs.")
        return data

    def schedule_fields(self) -> dict:
        """schedules.schedule_create's timing and alert arguments (the fields the timing ignores cleared)."""
        data = self.cleaned_data
        every = data["every"]
        return {"every": every, "at": data.get("at") if every in (Schedule.DAILY, Schedule.WEEKLY) else None,
                "weekday": data.get("weekday") if every == Schedule.WEEKLY else None,
                "cron": data.get("cron", "") if every == Schedule.CRON else "",
                "interval_s": data.get("interval_s") if every == Schedule.INTERVAL else None,
                "alert_emails": data.get("alert_emails", ""), "webhook_url": data.get("webhook_url", ""),
                "webhook_secret": data.get("webhook_secret", "")}


class RepeatForm(ScheduleForm):
    """The run form's optional schedule (prefix "schedule"): judged only when `repeat` is ticked."""

    repeat = forms.BooleanField(required=False, label="Repeat this run on a schedule")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, prefix="schedule", **kwargs)
        self.order_fields(["repeat"])

    @property
    def wanted(self) -> bool:
        return self.is_bound and self.data.get(self.add_prefix("repeat")) in ("on", "true", "1")


class AlertSettingsForm(forms.Form):
    """A schedule's alert settings, edited on its page; the secret is never shown back."""

    alert_emails = ScheduleForm.base_fields["alert_emails"]
    webhook_url = ScheduleForm.base_fields["webhook_url"]
    webhook_secret = ScheduleForm.base_fields["webhook_secret"]
    clear_secret = forms.BooleanField(required=False, label="Remove the stored secret")
    clean_alert_emails = ScheduleForm.clean_alert_emails
    clean_webhook_url = ScheduleForm.clean_webhook_url
