"""The one validation of a decision's input: the decision page's form, whose errors /api/decide
answers with as JSON. A valid form holds the advisor's inputs (`specs`) and the JSON saved with
the decision (`inputs`)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator, RegexValidator

from benchmarks.advisor import (BUILTIN_MODELS, DEEPSEEK_R1_DISTILL_QWEN_7B, PRIORITIES, PRIORITY, AdviceInputError,
                                EngineBuilds, GpuSpec, ModelSpec, Workload, validate_inputs)
from benchmarks.advisor.economics import rented_gpu
from benchmarks.advisor.gpus import PEAKS, peak_of
from benchmarks.advisor.specs import parse_version
from benchmarks.decisions.selectors import (CC_RANGE, InputError, engine_builds_for, gpu_spec_from_host,
                                            model_spec_from_model, parse_cc)
from benchmarks.engine.cost import OWNERSHIP, RENTED, HourlyPrice
from benchmarks.forms import TextField
from benchmarks.models import Host, Model

INTERCONNECTS = {"pcie": "PCIe only", "nvlink": "NVLink"}


@dataclass(frozen=True)
class Specs:
    """Everything advise() needs."""

    gpu: GpuSpec
    model: ModelSpec
    workload: Workload
    variant_bytes: dict[str, float]
    host: str | None  # the registered host's name, when the GPU came from one
    model_source: str  # "registered" | "built-in"
    builds: EngineBuilds = EngineBuilds()  # stated, else read from the registered endpoints
    gpu_memory_utilization: float | None = None  # vLLM's; None = its default
    price: HourlyPrice | None = None  # the GPUs' price: stated, else the registered host's
    price_source: str = ""  # "as stated" | "the host's stated price" | ""
    rented: tuple[GpuSpec, HourlyPrice] | None = None  # compare with this rented GPU at this rate


def _positive(value):
    if value is not None and value <= 0:
        raise forms.ValidationError("Must be greater than 0 (or blank for no target).")


class IdChoiceField(forms.ModelChoiceField):
    """A registered row by id; anything but a plain id (JSON true, 1.5, a huge number) is refused
    before it reaches the database."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if isinstance(value, bool) or not re.fullmatch(r"[0-9]{1,9}", str(value)):
            raise forms.ValidationError(self.error_messages["invalid_choice"], code="invalid_choice")
        return super().to_python(value)


class DecisionForm(forms.Form):
    host = IdChoiceField(queryset=Host.objects.prefetch_related("gpus"), required=False,
                         empty_label="— none: I state the GPU below —", label="Registered host",
                         error_messages={"invalid_choice": "Pick a registered host (or none and state the GPU)."},
                         help_text="Its GPU model, compute capability, VRAM, count and interconnect come from "
                                   "the inventory; the fields below are then ignored.")
    gpu_name = TextField(max_length=100, required=False, label="GPU model",
                         widget=forms.TextInput(attrs={"list": "gpu-models", "autocomplete": "off"}),
                         help_text="Pick one from the list (its compute capability and memory are then filled in "
                                   "from its datasheet when left blank), or type the name nvidia-smi gives.")
    compute_capability = TextField(max_length=10, required=False,
                                   help_text="e.g. 7.0 (V100), 8.0 (A100), 8.9 (L4), 9.0 (H100/H200). Blank: the "
                                             "listed GPU's.")
    vram_gib = forms.FloatField(required=False, min_value=1, max_value=1024, label="VRAM per GPU (GiB)",
                                help_text="Blank: the listed GPU's nominal memory.")
    gpu_count = forms.IntegerField(required=False, min_value=1, max_value=64, initial=1, label="GPUs")
    interconnect = forms.ChoiceField(choices=list(INTERCONNECTS.items()), required=False,
                                     initial="pcie", help_text="How the GPUs of the machine talk to each other.")
    model = IdChoiceField(queryset=Model.objects.prefetch_related("variants"), required=False,
                          empty_label="— none: a built-in spec below —", label="Registered model",
                          error_messages={"invalid_choice": "Pick a registered model (or none for a built-in one)."})
    builtin_model = forms.ChoiceField(choices=[(name, name) for name in BUILTIN_MODELS], required=False,
                                      initial=DEEPSEEK_R1_DISTILL_QWEN_7B.name, label="Built-in model",
                                      help_text="Used when no registered model is picked.")
    users = forms.IntegerField(min_value=1, max_value=1024, initial=8, label="Concurrent users",
                               help_text="Requests in flight at once.")
    prompt_tokens = forms.IntegerField(min_value=1, initial=512)
    output_tokens = forms.IntegerField(min_value=1, initial=100)
    # No initial value: blank means prompt + output here and in the API alike (one question, one answer).
    context_tokens = forms.IntegerField(required=False, min_value=1, max_value=10_000_000,
                                        label="Context length needed (tokens per user)",
                                        help_text="Blank = prompt + output.")
    ttft_p90_ms = forms.FloatField(required=False, max_value=1e7, validators=[_positive],
                                   label="Target: TTFT p90 (ms)", help_text="Optional.")
    tpot_ms = forms.FloatField(required=False, max_value=1e7, validators=[_positive], label="Target: TPOT (ms)",
                               help_text="Optional: time per output token.")
    min_user_tok_s = forms.FloatField(required=False, max_value=1e6, validators=[_positive],
                                      label="Target: per-user decode (tok/s)", help_text="Optional: at least this.")
    vllm_version = TextField(max_length=20, required=False, label="vLLM version",
                             help_text="e.g. 0.11. Blank: read from the endpoints registered on the host (their "
                                       "/version), else the answer says which releases it holds for.")
    gpu_memory_utilization = forms.FloatField(required=False, label="vLLM --gpu-memory-utilization",
                                              help_text="A share of each GPU's memory, more than 0 and at most 1. "
                                                        "Blank = vLLM's 0.9.")
    priority = forms.ChoiceField(choices=[(key, p.label) for key, p in PRIORITY.items()], required=False,
                                 initial=PRIORITIES[0], widget=forms.RadioSelect)
    # What your GPUs cost (engine/cost.py): blank with a registered host = the host's stated price.
    price_ownership = forms.ChoiceField(choices=[("", "— no price —"), *OWNERSHIP], required=False,
                                        label="Your GPUs are",
                                        help_text="Blank with a registered host: the price staff stated for it.")
    price_per_hour = forms.FloatField(required=False, min_value=0, max_value=1e6, label="Price per hour",
                                      help_text="Owned: the cards' amortisation per hour (purchase over the hours you "
                                                "expect to run them). Rented: the provider's rate, all GPUs.")
    price_per_kwh = forms.FloatField(required=False, min_value=0, max_value=1e3, label="Electricity per kWh",
                                     help_text="Owned only: the energy is measured where a run measured it, else "
                                               "estimated from the GPU's maximum board power.")
    price_currency = TextField(max_length=3, required=False, initial="USD", label="Currency",
                               validators=[RegexValidator(r"^[A-Z]{3}$", "A three-letter code such as USD.")],
                               help_text="Of both prices. Blank: USD, or the host's.")
    rent_gpu = forms.ChoiceField(choices=[("", "— no comparison —"), *((p.name, p.name) for p in PEAKS)],
                                 required=False, label="Compare with a rented GPU",
                                 help_text="The cheapest candidate on it against yours, at the rate below.")
    rent_per_hour = forms.FloatField(required=False, min_value=0, max_value=1e6, label="Its rate per hour",
                                     help_text="The provider's rate for all the rented GPUs, electricity included.")
    rent_gpu_count = forms.IntegerField(required=False, min_value=1, max_value=64, initial=1, label="Rented GPUs")

    FIELDSETS = (
        ("host", "The GPU: a registered host…", ("host",)),
        ("stated-gpu", "…or state it", ("gpu_name", "compute_capability", "vram_gib", "gpu_count", "interconnect")),
        ("model", "The model", ("model", "builtin_model")),
        ("workload", "The workload", ("users", "prompt_tokens", "output_tokens", "context_tokens")),
        ("targets", "Targets (optional)", ("ttft_p90_ms", "tpot_ms", "min_user_tok_s")),
        ("engines", "The engines (optional)", ("vllm_version", "gpu_memory_utilization")),
        ("priority", "What matters most", ("priority",)),
        ("price", "What it costs (optional; needed to rank on cost)", ("price_ownership", "price_per_hour",
                                                                        "price_per_kwh", "price_currency")),
        ("rent", "Compare with a rented GPU (optional)", ("rent_gpu", "rent_per_hour", "rent_gpu_count")),
    )
    STATED_GPU = (("gpu_name", "the GPU model, e.g. Tesla V100-PCIE-16GB"),
                  ("compute_capability", "the compute capability, e.g. 7.0"),
                  ("vram_gib", "the VRAM per GPU in GiB, e.g. 16"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.specs: Specs | None = None
        for name in ("prompt_tokens", "output_tokens"):
            self.fields[name].max_value = settings.MAX_TOKENS
            self.fields[name].validators.append(MaxValueValidator(settings.MAX_TOKENS))

    GPU_MODELS = tuple(p.name for p in PEAKS)  # the datalist the GPU model field offers

    def fieldsets(self):
        return [(key, legend, [self[name] for name in names]) for key, legend, names in self.FIELDSETS]

    def clean_compute_capability(self):
        text = self.cleaned_data["compute_capability"].strip()
        if text and not self.cleaned_data.get("host") and parse_cc(text) is None:
            raise forms.ValidationError(f"Give a compute capability such as 7.0 or 9.0 ({CC_RANGE}).")
        return text

    def clean_vllm_version(self):
        text = self.cleaned_data["vllm_version"].strip()
        if text and parse_version(text) is None:
            raise forms.ValidationError("Give a vLLM release such as 0.11 or 0.21.1.")
        return text

    def clean_gpu_memory_utilization(self):
        value = self.cleaned_data["gpu_memory_utilization"]
        if value is not None and not 0 < value <= 1:
            raise forms.ValidationError(f"A share of the GPU's memory: more than 0 and at most 1 (got {value:g}).")
        return value

    def clean(self):
        """What only shows once the fields are put together (a host without GPUs, a context the
        model cannot hold), then the advisor's specs."""
        data = super().clean()
        if self.errors:
            return data
        try:
            specs = self._specs(data)
            validate_inputs(specs.model, specs.workload, specs.gpu, specs.gpu_memory_utilization, specs.price)
            self.specs = specs
        except InputError as e:
            self.add_error(e.field, e.message)
        except AdviceInputError as e:  # what the advisor itself refuses, on the field it came from
            for field, message in e.errors.items():
                field = "host" if data.get("host") and field in ("gpu_count", "vram_gib") else field
                self.add_error(field if field in self.fields else None, message[0].upper() + message[1:] + ".")
        return data

    def _specs(self, d: dict) -> Specs:
        host = d.get("host")
        if host is not None:
            gpu = gpu_spec_from_host(host)
        else:
            listed = peak_of(d.get("gpu_name") or "")
            if listed is not None:  # a GPU of the table: what is left blank comes from its datasheet
                d.setdefault("compute_capability", "")
                d["compute_capability"] = d["compute_capability"] or f"{listed.compute_capability[0]}." \
                                                                     f"{listed.compute_capability[1]}"
                d["vram_gib"] = d.get("vram_gib") or float(listed.memory_gib)
            for field, what in self.STATED_GPU:
                if d.get(field) in (None, ""):
                    raise InputError(field, f"Pick a registered host, or state {what}.")
            gpu = GpuSpec(name=d["gpu_name"].strip(), compute_capability=parse_cc(d["compute_capability"]),
                          vram_gib=float(d["vram_gib"]), count=d.get("gpu_count") or 1,
                          interconnect=d.get("interconnect") or "pcie")
        if d.get("model") is not None:
            model, variant_bytes = model_spec_from_model(d["model"])
        else:
            model, variant_bytes = BUILTIN_MODELS[d.get("builtin_model") or DEEPSEEK_R1_DISTILL_QWEN_7B.name], {}
        prompt, output = d["prompt_tokens"], d["output_tokens"]
        context = d.get("context_tokens") or prompt + output
        if context < prompt + output:
            raise InputError("context_tokens", f"The context must hold the prompt and the output: at least "
                                               f"{prompt + output} tokens.")
        if context > model.context_length:
            raise InputError("context_tokens", f"{model.name} handles at most {model.context_length} tokens "
                                               f"of context.")
        workload = Workload(users=d["users"], prompt_tokens=prompt, output_tokens=output, context_tokens=context,
                            ttft_p90_ms=d.get("ttft_p90_ms"), tpot_ms=d.get("tpot_ms"),
                            min_user_tok_s=d.get("min_user_tok_s"), priority=d.get("priority") or PRIORITIES[0])
        if d.get("vllm_version"):
            builds = EngineBuilds(vllm_version=parse_version(d["vllm_version"]), source="as stated")
        else:
            builds = engine_builds_for(gpu.host_id, gpu.name, gpu.compute_capability)
        price, price_source = self._price(d, host)
        return Specs(gpu, model, workload, variant_bytes, host.name if host else None,
                     "registered" if d.get("model") is not None else "built-in", builds,
                     d.get("gpu_memory_utilization"), price, price_source, self._rented(d, price))

    def _price(self, d: dict, host) -> tuple[HourlyPrice | None, str]:
        """The stated price, else the registered host's; a half-stated one is refused on its field."""
        ownership, per_hour, per_kwh = d.get("price_ownership"), d.get("price_per_hour"), d.get("price_per_kwh")
        if not ownership and per_hour is None and per_kwh is None:
            price = host.hourly_price if host is not None else None
            return (price, "the host's stated price") if price is not None else (None, "")
        if not ownership:
            raise InputError("price_ownership", "Say whether your GPUs are owned or rented.")
        if per_hour is None:
            raise InputError("price_per_hour", "Give the price per hour (0 for none), or no price.")
        if per_kwh is not None and ownership == RENTED:
            raise InputError("price_per_kwh", "Electricity is priced for owned GPUs; a rented GPU's rate includes "
                                              "it: leave it blank.")
        return HourlyPrice(ownership, per_hour, d.get("price_currency") or "USD", per_kwh), "as stated"

    def _rented(self, d: dict, price: HourlyPrice | None) -> tuple[GpuSpec, HourlyPrice] | None:
        name, rate = d.get("rent_gpu"), d.get("rent_per_hour")
        if not name and rate is None:
            return None
        if not name:
            raise InputError("rent_gpu", "Pick the rented GPU to compare with (or leave its rate blank).")
        if rate is None:
            raise InputError("rent_per_hour", f"Give the {name}'s rate per hour to compare with it.")
        if price is None:
            raise InputError("price_per_hour", "To compare with a rented GPU, state your own GPUs' price (or pick a "
                                               "registered host that has one).")
        gpu = rented_gpu(name, d.get("rent_gpu_count") or 1)
        if gpu is None:  # the choices are the table's rows: only a stale form gets here
            raise InputError("rent_gpu", f"{name} is not in the datasheet table.")
        return gpu, HourlyPrice(RENTED, rate, price.currency)

    @property
    def inputs(self) -> dict:
        """The cleaned data as JSON: what is saved with the decision and what the API takes."""
        d = self.cleaned_data
        return {"host": d["host"].pk if d.get("host") else None, "gpu_name": d.get("gpu_name", ""),
                "compute_capability": d.get("compute_capability", ""), "vram_gib": d.get("vram_gib"),
                "gpu_count": d.get("gpu_count") or 1, "interconnect": d.get("interconnect") or "pcie",
                "model": d["model"].pk if d.get("model") else None,
                "builtin_model": d.get("builtin_model") or DEEPSEEK_R1_DISTILL_QWEN_7B.name,
                "vllm_version": d.get("vllm_version", ""), "gpu_memory_utilization": d.get("gpu_memory_utilization"),
                **{k: d.get(k) for k in ("users", "prompt_tokens", "output_tokens", "context_tokens",
                                         "ttft_p90_ms", "tpot_ms", "min_user_tok_s")},
                "priority": d.get("priority") or PRIORITIES[0],
                **{k: d.get(k) for k in ("price_ownership", "price_per_hour", "price_per_kwh", "price_currency",
                                         "rent_gpu", "rent_per_hour", "rent_gpu_count")}}


INPUT_KEYS = tuple(DecisionForm.base_fields)
