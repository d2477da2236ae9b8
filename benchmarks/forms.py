from django import forms
from django.conf import settings

from benchmarks import selectors
from benchmarks.models import Endpoint, Run


class EndpointChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, obj: Endpoint) -> str:
        variant = f" · {obj.variant}" if obj.variant_id else ""
        return f"{obj.name} ({obj.get_backend_display()} on {obj.host}){variant}"


class RunForm(forms.Form):
    title = forms.CharField(max_length=200, required=False)
    endpoints = EndpointChoiceField(
        queryset=Endpoint.objects.none(), widget=forms.CheckboxSelectMultiple,
        error_messages={"invalid_choice": "Endpoint %(value)s is not a registered, enabled endpoint.",
                        "invalid_pk_value": "%(pk)s is not a valid endpoint id.",
                        "required": "Choose at least one endpoint."})
    prompt_tokens = forms.IntegerField(initial=512, min_value=1, help_text="Exact prompt length, in the server's tokens.")
    output_tokens = forms.IntegerField(initial=100, min_value=1, help_text="Forced with ignore_eos.")
    temperature = forms.FloatField(initial=0.7, min_value=0.0, max_value=2.0)
    api = forms.ChoiceField(choices=Run.APIS, initial="completions", label="API")
    concurrency_levels = forms.CharField(initial="1,8", help_text="Comma-separated, e.g. 1,8,16.")
    requests_per_level = forms.IntegerField(initial=16, min_value=1)
    warmup_requests = forms.IntegerField(initial=2, min_value=0, max_value=100,
                                         help_text="Sent before measuring; never part of a result.")
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**63 - 1,
                              help_text="Optional: makes the random prompts repeatable.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["endpoints"].queryset = selectors.endpoints_for_runs()
        self.fields["prompt_tokens"].max_value = settings.MAX_TOKENS
        self.fields["prompt_tokens"].validators.append(_max(settings.MAX_TOKENS))
        self.fields["output_tokens"].validators.append(_max(settings.MAX_TOKENS))
        self.fields["requests_per_level"].validators.append(_max(settings.MAX_REQUESTS_PER_LEVEL))

    def clean_concurrency_levels(self) -> list[int]:
        raw = self.cleaned_data["concurrency_levels"]
        parts = [p.strip() for p in raw.replace(";", ",").split(",") if p.strip()]
        if not parts:
            raise forms.ValidationError("Give at least one concurrency level, e.g. 1,8.")
        levels = []
        for part in parts:
            if not part.isdigit():
                raise forms.ValidationError(f"{part!r} is not a whole number.")
            level = int(part)
            if level < 1:
                raise forms.ValidationError("Concurrency levels must be at least 1.")
            if level > settings.MAX_CONCURRENCY:
                raise forms.ValidationError(
                    f"{level} is above the limit of {settings.MAX_CONCURRENCY} concurrent requests.")
            levels.append(level)
        if len(levels) > 20:
            raise forms.ValidationError("At most 20 concurrency levels per run.")
        return sorted(set(levels))

    def clean(self):
        data = super().clean()
        prompt, output = data.get("prompt_tokens"), data.get("output_tokens")
        if prompt and output and prompt + output > settings.MAX_TOKENS:
            raise forms.ValidationError(
                f"Prompt plus output tokens ({prompt + output}) exceed the limit of {settings.MAX_TOKENS}.")
        return data


def _max(limit: int):
    def check(value):
        if value is not None and value > limit:
            raise forms.ValidationError(f"Ensure this value is at most {limit}.")
    return check
