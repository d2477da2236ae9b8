"""A run submitted as JSON, turned into what the run page's form receives: the form then judges
it with the page's own messages. Here only what JSON adds is checked: the body's shape, field
names, and value types the form would otherwise read as text. A file (a prompts file, a trace,
an evaluation text) comes as an object {"name": "trace.jsonl", "content": "<its text>"}: the form
then reads it as the page's upload, with the page's limits and messages."""
from __future__ import annotations

from django import forms
from django.core.files.uploadedfile import SimpleUploadedFile

from benchmarks.forms import RunForm, with_mode_fields
from benchmarks.models import Endpoint

# Fields that take several values; a list is joined with commas for the form's text fields.
LIST_TEXT_FIELDS = ("concurrency_levels", "request_rates", "trace_speedups")


class RunPayloadError(Exception):
    def __init__(self, errors: dict):
        super().__init__(errors)
        self.errors = errors


def api_fields(form: RunForm | None = None) -> dict[str, forms.Field]:
    """The run form's fields a JSON body can set: its declared ones, or with `form` also those it
    adds per recipe (the sweep values, `sweep_<recipe id>_<n>`)."""
    return dict(form.fields if form is not None else with_mode_fields(RunForm.base_fields))


def _file(name: str, value) -> SimpleUploadedFile:
    if not (isinstance(value, dict) and set(value) == {"name", "content"} and isinstance(value["name"], str)
            and isinstance(value["content"], str) and value["name"].strip()):
        raise RunPayloadError({name: ['Send the file as {"name": "its file name", "content": "its text"}.']})
    try:
        content = value["content"].encode("utf-8")
    except UnicodeEncodeError as exc:
        raise RunPayloadError({name: [f"The content has an invalid character (a lone surrogate) at position "
                                      f"{exc.start + 1}; send valid Unicode text."]}) from None
    return SimpleUploadedFile(value["name"].strip()[:200], content)


def _default(field: forms.Field):
    initial = field.initial() if callable(field.initial) else field.initial
    return initial


def _endpoint_id(value, field: forms.Field, names: dict[str, int]):
    """An endpoint given by name (what pages and scripts know) or by id."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RunPayloadError({field: ["Give endpoints by name (or id)."]})
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        if value not in names:
            message = RunForm.base_fields["endpoints"].error_messages["invalid_choice"] % {"value": repr(value)[:120]}
            raise RunPayloadError({field: [message]})
        return names[value]
    return value


def run_form_data(body) -> tuple[dict, dict]:
    """The form's data and its files from a JSON body."""
    if not isinstance(body, dict):
        raise RunPayloadError({"__all__": ["Send a JSON object with the run's fields."]})
    fields = api_fields(RunForm())
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise RunPayloadError({"__all__": [f"Unknown fields: {', '.join(unknown)[:500]}; known: {', '.join(fields)}."]})
    errors: dict[str, list[str]] = {}
    data: dict = {}
    files: dict = {}
    names = dict(Endpoint.objects.values_list("name", "pk"))
    for name, field in fields.items():
        value = body.get(name)
        if isinstance(field, forms.FileField):
            if value is not None:
                try:
                    files[name] = _file(name, value)
                except RunPayloadError as e:
                    errors.update(e.errors)
            continue
        if value is None:
            default = _default(field)
            if default is not None and not isinstance(field, forms.BooleanField):
                data[name] = default
            continue
        try:
            data[name] = _value(name, field, value, names)
        except RunPayloadError as e:
            errors.update(e.errors)
    if errors:
        raise RunPayloadError(errors)
    return data, files


def sent_value_errors(body: dict, data: dict) -> dict[str, list[str]]:
    """Each number or choice the body sent, judged by its field alone: the form, for its page,
    drops the errors of fields the chosen load mode hides, and a value sent must never be replaced
    by a default in silence (added to the form's own errors, which win for a field they name)."""
    errors = {}
    for name, field in api_fields(RunForm()).items():
        if name in body and name in data and isinstance(field, (forms.IntegerField, forms.FloatField,
                                                               forms.TypedChoiceField)):
            try:
                field.clean(data[name])
            except forms.ValidationError as e:
                errors[name] = list(e.messages)
    return errors


def _value(name: str, field: forms.Field, value, names: dict[str, int]):
    multiple = isinstance(field, forms.MultipleChoiceField) or isinstance(field, forms.ModelMultipleChoiceField)
    if multiple:
        if not isinstance(value, list):
            raise RunPayloadError({name: ["Send a list."]})
        if isinstance(field, forms.ModelMultipleChoiceField) and name == "endpoints":
            return [_endpoint_id(v, name, names) for v in value]
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in value):
            raise RunPayloadError({name: ["Send a list of names."]})
        return value
    if name in LIST_TEXT_FIELDS and isinstance(value, list):
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            raise RunPayloadError({name: ["Send numbers, as a list or comma-separated text."]})
        return ",".join(repr(v) if isinstance(v, float) else str(v) for v in value)
    if isinstance(field, forms.BooleanField):
        if not isinstance(value, bool):
            raise RunPayloadError({name: ["Send true or false."]})
        return value
    if isinstance(field, forms.ModelChoiceField):
        if name == "quality_reference":
            return _endpoint_id(value, name, names)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise RunPayloadError({name: ["Send an id."]})
        return value
    if isinstance(value, (dict, list)):
        raise RunPayloadError({name: ["Send a single value, not a list or an object."]})
    if isinstance(value, bool) and not isinstance(field, forms.BooleanField):
        raise RunPayloadError({name: ["Send a number or text, not true or false."]})
    return value
