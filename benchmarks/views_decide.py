"""The decision page: the form, the saved decision behind its permalink, and the JSON API."""
import json
import re

from django import forms
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.core.validators import MaxValueValidator
from django.http import JsonResponse
from django.shortcuts import redirect, render

from benchmarks import decisions, selectors
from benchmarks.advisor import PRIORITIES
from benchmarks.decorators import api_login_required, permalink
from benchmarks.forms import TextField
from benchmarks.models import Host, Model


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
                         help_text="As nvidia-smi names it, e.g. Tesla V100-PCIE-16GB or NVIDIA H200.")
    compute_capability = TextField(max_length=10, required=False,
                                   help_text="e.g. 7.0 (V100), 8.0 (A100), 8.9 (L4), 9.0 (H100/H200).")
    vram_gib = forms.FloatField(required=False, min_value=1, max_value=1024, label="VRAM per GPU (GiB)")
    gpu_count = forms.IntegerField(required=False, min_value=1, max_value=64, initial=1, label="GPUs")
    interconnect = forms.ChoiceField(choices=list(decisions.INTERCONNECTS.items()), required=False,
                                     initial="pcie", help_text="How the GPUs of the machine talk to each other.")
    model = IdChoiceField(queryset=Model.objects.all(), required=False,
                          empty_label=f"{decisions.DEEPSEEK_R1_DISTILL_QWEN_7B.name} (built-in spec)",
                          error_messages={"invalid_choice": "Pick a registered model (or none for the built-in)."})
    users = forms.IntegerField(min_value=1, max_value=1024, initial=8, label="Concurrent users",
                               help_text="Requests in flight at once.")
    prompt_tokens = forms.IntegerField(min_value=1, initial=512)
    output_tokens = forms.IntegerField(min_value=1, initial=100)
    context_tokens = forms.IntegerField(required=False, min_value=1, max_value=10_000_000, initial=8192,
                                        label="Context length needed (tokens per user)",
                                        help_text="Blank = prompt + output.")
    ttft_p90_ms = forms.FloatField(required=False, max_value=1e7, validators=[_positive],
                                   label="Target: TTFT p90 (ms)", help_text="Optional.")
    tpot_ms = forms.FloatField(required=False, max_value=1e7, validators=[_positive], label="Target: TPOT (ms)",
                               help_text="Optional: time per output token.")
    min_user_tok_s = forms.FloatField(required=False, max_value=1e6, validators=[_positive],
                                      label="Target: per-user decode (tok/s)", help_text="Optional: at least this.")
    priority = forms.ChoiceField(choices=list(decisions.PRIORITY_LABELS.items()), required=False,
                                 initial=PRIORITIES[0], widget=forms.RadioSelect)

    FIELDSETS = (
        ("host", "The GPU: a registered host…", ("host",)),
        ("stated-gpu", "…or state it", ("gpu_name", "compute_capability", "vram_gib", "gpu_count", "interconnect")),
        ("model", "The model", ("model",)),
        ("workload", "The workload", ("users", "prompt_tokens", "output_tokens", "context_tokens")),
        ("targets", "Targets (optional)", ("ttft_p90_ms", "tpot_ms", "min_user_tok_s")),
        ("priority", "What matters most", ("priority",)),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("prompt_tokens", "output_tokens"):
            self.fields[name].max_value = settings.MAX_TOKENS
            self.fields[name].validators.append(MaxValueValidator(settings.MAX_TOKENS))

    def fieldsets(self):
        return [(key, legend, [self[name] for name in names]) for key, legend, names in self.FIELDSETS]

    def clean_compute_capability(self):
        text = self.cleaned_data["compute_capability"].strip()
        if text and not self.cleaned_data.get("host") and decisions.parse_cc(text) is None:
            raise forms.ValidationError("Give a compute capability such as 7.0 or 9.0 (from 3.0 to 15.9).")
        return text

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            decisions.specs_from_inputs(self.inputs)
        except decisions.InputError as e:
            self.add_error(e.field if e.field in self.fields else None, e.message)
        return data

    @property
    def inputs(self) -> dict:
        """The cleaned data as JSON: what is saved with the decision and what the API takes."""
        d = self.cleaned_data
        return {"host": d["host"].pk if d.get("host") else None, "gpu_name": d.get("gpu_name", ""),
                "compute_capability": d.get("compute_capability", ""), "vram_gib": d.get("vram_gib"),
                "gpu_count": d.get("gpu_count") or 1, "interconnect": d.get("interconnect") or "pcie",
                "model": d["model"].pk if d.get("model") else None,
                **{k: d.get(k) for k in ("users", "prompt_tokens", "output_tokens", "context_tokens",
                                         "ttft_p90_ms", "tpot_ms", "min_user_tok_s")},
                "priority": d.get("priority") or PRIORITIES[0]}


def _errors(form) -> dict:
    return {k: [str(m) for m in v] for k, v in form.errors.items()}


def _api_body(raw: bytes) -> tuple[dict, bool]:
    """The JSON object sent; raises ValueError with the reason."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise ValueError(f"the body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ValueError("send a JSON object with the workload's fields")
    unknown = sorted(set(body) - set(decisions.INPUT_KEYS) - {"save"})
    if unknown:
        raise ValueError(f"unknown fields: {', '.join(unknown)[:500]}; known: {', '.join(decisions.INPUT_KEYS)}, save")
    save = body.pop("save", False)
    if not isinstance(save, bool):
        raise ValueError("save must be true or false")
    return body, save


# --- views ------------------------------------------------------------------------------------

@login_required
def decision_new(request):
    # ?from=<public_id>: start from a saved decision's inputs ("change the workload").
    form = DecisionForm(request.POST or None, initial=decisions.decision_inputs(request.GET.get("from")))
    if request.method == "POST" and form.is_valid():
        try:
            return redirect(decisions.decision_create(owner=request.user, inputs=form.inputs))
        except ValueError as e:  # the inventory changed since the form was checked
            form.add_error(None, str(e))
    return render(request, "benchmarks/decision_new.html",
                  {"form": form, "recent": decisions.decisions_recent(owner=request.user)})


@permalink
def decision_detail(request, public_id: str):
    decision = selectors.decision_by_public_id(public_id)
    return render(request, "benchmarks/decision_detail.html", {
        "decision": decision, "d": decisions.decision_display(decision.result),
        "measure_next": decisions.measure_next_links(decision.result),
        "permalink": request.build_absolute_uri(decision.get_absolute_url()),
    })


@api_login_required
def decision_api(request):
    if request.method != "POST":
        return JsonResponse({"error": "POST a JSON workload"}, status=405, headers={"Allow": "POST"})
    try:
        body, save = _api_body(request.body)
    except RequestDataTooBig:
        return JsonResponse({"error": f"the body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes; "
                                      "a workload is a few hundred"}, status=413)
    except ValueError as e:
        return JsonResponse({"error": str(e)}, status=400)
    form = DecisionForm(body)
    if not form.is_valid():
        return JsonResponse({"error": "invalid input", "errors": _errors(form)}, status=400)
    try:
        if not save:
            return JsonResponse({"inputs": form.inputs, "recommendation": decisions.decision_compute(inputs=form.inputs)})
        decision = decisions.decision_create(owner=request.user, inputs=form.inputs)
    except ValueError as e:  # the inventory changed since the form was checked
        return JsonResponse({"error": str(e)}, status=400)
    return JsonResponse({"inputs": decision.inputs, "recommendation": decision.result, "public_id": decision.public_id,
                         "permalink": request.build_absolute_uri(decision.get_absolute_url())}, status=201)
