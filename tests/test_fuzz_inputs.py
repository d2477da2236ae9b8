"""Fuzzing every input a user or a server controls: no crash, no 500, a clear message.

The inputs that once answered 500 are sent as they were, through the real views, with the
message each must get and a check that nothing was stored; then hypothesis fuzzes every form,
upload, GET parameter and JSON field, each response checked as it comes back.
"""
import asyncio
import io
import json
import os
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, RequestFactory
from django.test.client import ClientHandler
from django.urls import reverse
from hypothesis import HealthCheck, given, settings, strategies as st

from benchmarks.engine.client import Session, Target, Workload
from benchmarks.engine.stream import StreamError, parse_chunk
from benchmarks.forms import RunForm
from benchmarks.models import Comparison, Decision, ImportedReport, Run, Schedule
from factories import endpoint, measured_run, run_form, user

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
TALLY = {"inputs": 0, "500s": 0}
text = st.text(max_size=40)
# What once crashed a form: digits int() refuses ("²") or reads ("１"), NUL, rates that park a worker.
NASTY = ["", "0", "-1", "1,8", "1e9", "nan", "inf", "1,,2", " 8 ", "\x00", "a\x00b", "<script>", "²", "１", "１,８",
         "٣", "1e-300", "1e308", "9" * 5000, "0.000001", "1_000", "\u202e8"]
values = st.one_of(text, st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True).map(str),
                   st.sampled_from(NASTY))
nasty_first = st.sampled_from(NASTY) | values  # half of the values from the list above
# Any character, lone surrogates and NUL included (what JSON can carry; st.text leaves surrogates out),
# and often one of those spliced into ordinary text.
any_text = st.text(st.characters(categories=["Cs", "Cc", "Cf", "L", "M", "N", "P", "S", "Z"]), max_size=40)
any_text = any_text | st.tuples(text, st.sampled_from(["\ud800", "\udfff", "\x00", "\ud83d"]), text).map("".join)


@pytest.fixture(scope="module", autouse=True)
def report_the_tally(request):
    """The figures for the record: how many HTTP inputs were fuzzed, and the 500s among them (each
    response is also checked where it is sent)."""
    yield
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and TALLY["inputs"]:
        with request.config.pluginmanager.get_plugin("capturemanager").global_and_fixture_disabled():
            reporter.write_line(f"\nfuzzed HTTP inputs: {TALLY['inputs']}, 500s seen: {TALLY['500s']}")


@given(st.text(max_size=300))
@FUZZ
def test_the_chunk_parser_only_ever_raises_stream_error(data):
    try:
        parse_chunk(data)
    except StreamError:
        pass


@given(st.binary(max_size=2000), st.sampled_from([200, 200, 200, 500, 429]))
@FUZZ
def test_the_client_turns_any_response_into_a_result_never_an_exception(body, status):
    async def go():
        s = Session(Target("http://sim.invalid", "vllm", model="m"), Workload(output_tokens=4))
        await s.client.aclose()
        s.client = httpx.AsyncClient(transport=httpx.MockTransport(
            lambda request: httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})))
        result = await s.send(0, [1, 2, 3], 4, 0.0)
        await s.client.aclose()
        return result
    result = asyncio.run(go())
    assert result.ok or result.error  # a result, with a cause when it failed


DATA = Path(__file__).parent / "data" / "imports"


def _places(node):
    """Every (container, key) of a JSON document, to change one value at a time."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        yield node, key
        yield from _places(child)


def _decision_fields():
    from benchmarks.views_decide import DecisionForm
    return DecisionForm.base_fields


def checked(r, *context):
    """Every fuzzed response: counted, and never a server error."""
    TALLY["inputs"] += 1
    if r.status_code >= 500:
        TALLY["500s"] += 1
    assert r.status_code < 500, context
    return r


def post_ok(client, url, data, **kw):
    return checked(client.post(url, data, **kw), url, data)


@pytest.mark.django_db
class TestForms:
    @given(st.dictionaries(st.sampled_from(list(RunForm.base_fields)), nasty_first, max_size=12), st.data())
    @settings(FUZZ, max_examples=1000)
    def test_the_run_form_never_crashes_and_what_it_accepts_is_within_bounds(self, data, more):
        if not hasattr(self, "_e"):
            self._e = endpoint(name="fuzz")
        if more.draw(st.booleans()):  # half of the cases start from a valid form, one field changed
            data = {**run_form([self._e], load_mode=more.draw(st.sampled_from(["concurrency", "rate"])),
                               request_rates="1"), **data}
        form = RunForm(data)
        if not form.is_valid():
            return
        d = form.cleaned_data
        assert all(1 <= c <= django_settings.MAX_CONCURRENCY for c in d["concurrency_levels"])
        assert all(django_settings.MIN_REQUEST_RATE <= r <= django_settings.MAX_REQUEST_RATE
                   for r in d["request_rates"])
        n, duration = d["requests_per_level"], d["duration_s"] or float("inf")
        per_level = ([min(n / r, duration) for r in d["request_rates"]] if d["load_mode"] == "rate"
                     else [d["duration_s"] or 0] * len(d["concurrency_levels"]))
        assert len(d["endpoints"]) * sum(per_level) <= django_settings.RUN_TIME_LIMIT_S
        if d["load_mode"] == "rate" and d["duration_s"]:
            assert min(d["request_rates"]) * d["duration_s"] >= 1

    @given(st.dictionaries(st.sampled_from(list(RunForm.base_fields) + ["endpoints"]), values, max_size=14))
    @FUZZ
    def test_posting_anything_to_new_run_is_never_a_500(self, data):
        e = endpoint(name="fuzz") if not hasattr(self, "_e") else self._e
        self._e = e
        client = Client()
        client.force_login(user())
        post_ok(client, reverse("run-new"), data)

    @given(st.binary(max_size=3000), st.text(max_size=30),
           st.fixed_dictionaries({}, optional={"title": values, "gpu": values, "backend": values,
                                               "quantization": values}))
    @FUZZ
    def test_uploading_any_file_is_never_a_500(self, blob, name, fields):
        client = Client()
        client.force_login(user())
        filename = name if os.path.basename(name) not in {"", ".", ".."} else "x"  # what a browser can send
        post_ok(client, reverse("import-new"), {"file": SimpleUploadedFile(filename, blob), "gpu": name, **fields})

    @given(st.sampled_from(["vllm_bench_serve_c8_detailed.json", "llama_bench_pp512_tg128.json",
                            "guidellm_sync_concurrent8.json"]), st.data())
    @FUZZ
    def test_uploading_a_real_file_with_any_text_in_any_string_field_is_never_a_500(self, name, data):
        tree = json.loads((DATA / name).read_text())
        strings = [(parent, key) for parent, key in _places(tree) if isinstance(parent[key], str)]
        parent, key = data.draw(st.sampled_from(strings))
        parent[key] = data.draw(any_text | st.text(min_size=300, max_size=400))
        client = Client()
        client.force_login(user())
        r = post_ok(client, reverse("import-new"), {"file": SimpleUploadedFile(name, json.dumps(tree).encode())})
        assert r.status_code in (200, 302)
        if r.status_code == 200:  # refused: the message is on the page, nothing stored under it
            assert f"Could not import {name}:" in r.content.decode()

    @given(st.dictionaries(st.sampled_from(["from", "endpoints", "runs", "reports", "title", "concurrency_levels",
                                            "request_rates", "prompt_tokens", "load_mode"]), values, max_size=4))
    @FUZZ
    def test_any_prefill_parameter_is_never_a_500(self, params):
        client = Client()
        client.force_login(user())
        for name in ("run-new", "comparison-new", "decision-new"):
            r = checked(client.get(reverse(name), params), name, params)
            assert r.status_code == 200

    @given(st.dictionaries(st.sampled_from(list(_decision_fields())), values, max_size=8))
    @FUZZ
    def test_posting_anything_to_the_decision_form_is_never_a_500(self, data):
        client = Client()
        client.force_login(user())
        r = post_ok(client, reverse("decision-new"), data)
        assert r.status_code in (200, 302)

    @given(st.dictionaries(st.sampled_from(["gpu_name", "gpu_name", "gpu_name", "compute_capability", "users",
                                            "priority", "interconnect", "host", "model", "vram_gib", "context_tokens"]),
                           any_text.map("Tesla V100-PCIE-16GB{}".format) | any_text | st.integers(-5, 2000),
                           max_size=1),
           st.booleans(), st.just({}) | st.just({}) | st.just({}) | st.dictionaries(any_text, any_text, max_size=1))
    @FUZZ
    def test_any_text_in_the_decision_api_is_never_a_500(self, changes, save, extra):
        client = Client()
        client.force_login(user())
        body = {"gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": 16, "users": 8,
                "prompt_tokens": 512, "output_tokens": 100, "save": save, **changes}  # valid but for what was drawn
        r = checked(client.post(reverse("decision-api"), json.dumps({**body, **extra}), content_type="application/json"),
                    body, extra)
        assert r.status_code in (200, 201, 400) and r.json()

    @given(st.dictionaries(st.sampled_from(["runs", "reports", "title"]), values, max_size=3))
    @FUZZ
    def test_posting_anything_to_compare_is_never_a_500(self, data):
        client = Client()
        client.force_login(user())
        post_ok(client, reverse("comparison-new"), data)

    @given(text, st.dictionaries(text, text, max_size=3))
    @FUZZ
    def test_any_chart_name_or_parameter_is_never_a_500(self, name, params):
        if not hasattr(self, "_run"):
            self._run = measured_run([endpoint(name="charted")], levels=(1,), requests=2)
        try:
            url = reverse("run-chart", args=[self._run.public_id, name or "x", "json"])
        except Exception:
            return  # not a URL at all: the router refuses it before any view runs
        r = checked(Client().get(url, params), url, params)
        assert r.status_code in (200, 404)

    @given(st.sampled_from(["run-detail", "run-progress", "run-export", "run-requests-csv", "import-detail",
                            "comparison-detail", "decision-detail", "import-chart", "comparison-chart"]),
           text, st.sampled_from(["json", "csv", "x", "JSON"]))
    @FUZZ
    def test_any_permalink_id_is_a_404_never_a_500(self, name, public_id, fmt):
        args = ["PUBLICID"] + ([fmt] if name.endswith("-chart") else [])
        url = reverse(name, args=args).replace("PUBLICID", quote(public_id or "x", safe=""))
        assert checked(Client().get(url), url).status_code == 404

    @given(values, st.sampled_from(["vllm", "llamacpp", "openai", "", "x"]))
    @FUZZ
    def test_the_admin_endpoint_form_never_crashes(self, url, backend):
        from test_admin_inventory import endpoint_post
        if not hasattr(self, "_admin"):
            self._admin = (endpoint(name="admin-fuzz"), user("root", staff=True))
        e, root = self._admin
        client = Client()
        client.force_login(root)
        post_ok(client, reverse("admin:benchmarks_endpoint_change", args=[e.id]),
                endpoint_post(e, base_url=url, backend=backend))




# --- the inputs that once answered 500, as they were sent ------------------------------------

def _member():
    client = Client()
    client.force_login(user())
    return client


def _upload(client, name, content, **fields):
    return client.post(reverse("import-new"), {"file": SimpleUploadedFile(name, content), **fields})


def _vllm_file(**changes) -> bytes:
    tree = json.loads((DATA / "vllm_bench_serve_c8_detailed.json").read_text())
    tree.update(changes)
    return json.dumps(tree).encode()


@pytest.mark.django_db
@pytest.mark.parametrize("levels, message", [
    ("²", "'²' is not a whole number (use the digits 0-9)."),
    ("１", "'１' is not a whole number (use the digits 0-9)."),
    ("1,８", "'８' is not a whole number (use the digits 0-9)."),
    ("9" * 400, "999999999999… is above the limit of 512 concurrent requests."),
    ("9" * 5000, "Ensure this value has at most 500 characters (it has 5000)."),
])
def test_a_concurrency_python_would_misread_gets_a_field_error(levels, message):
    r = _member().post(reverse("run-new"), run_form([endpoint()], concurrency_levels=levels))
    assert r.status_code == 200
    assert r.context["form"].errors["concurrency_levels"] == [message]
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["title", "concurrency_levels"])
def test_a_nul_byte_in_a_run_field_gets_a_field_error(field):
    r = _member().post(reverse("run-new"), run_form([endpoint()], **{field: "1\x00"}))
    assert r.context["form"].errors[field] == ["Null characters are not allowed."]
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name, content, message", [
    ("nul.json", _vllm_file(model_id="Qwen\x00-7B"),
     "vllm bench serve JSON: the model name contains a NUL character (\\u0000), which cannot be stored"),
    ("raw-nul.json", b'{"mean_ttft_ms": 1, "model_id": "a\x00b"}', "not JSON: Invalid control character"),
    ("surrogate.json", _vllm_file(model_id="\ud800"),
     "vllm bench serve JSON: the model name contains a lone surrogate (\\ud800), which is not valid Unicode text"),
    ("huge-model.json", _vllm_file(model_id="m" * 5_000_000),
     "vllm bench serve JSON: the model name is 5,000,000 characters long; at most 200 are accepted"),
])
def test_an_import_with_text_a_database_cannot_store_gets_a_field_error_and_stores_nothing(name, content, message):
    r = _upload(_member(), name, content)
    assert r.status_code == 200
    [error] = r.context["form"].errors["file"]
    assert error.startswith(f"Could not import {name}: ") and message in error
    assert not ImportedReport.objects.exclude(kind="published").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field, value, message", [
    ("title", "t" * 301, "Ensure this value has at most 300 characters (it has 301)."),
    ("gpu", "g" * 201, "Ensure this value has at most 200 characters (it has 201)."),
    ("title", "a\x00b", "Null characters are not allowed."),
    ("gpu", "V100\x00", "Null characters are not allowed."),
])
def test_an_import_field_over_its_column_or_with_nul_gets_a_field_error(field, value, message):
    r = _upload(_member(), "ok.json", _vllm_file(), **{field: value})
    assert r.context["form"].errors[field] == [message]
    assert not ImportedReport.objects.exclude(kind="published").exists()


@pytest.mark.django_db
def test_a_title_made_from_names_longer_than_its_column_is_cut_to_fit():
    tree = json.loads((DATA / "llama_bench_pp512_tg128.json").read_text())
    for entry in tree:
        entry.update(model_filename="m" * 200, gpu_info="g" * 200)
    r = _upload(_member(), "long.json", json.dumps(tree).encode())
    report = ImportedReport.objects.exclude(kind="published").get()
    assert r.status_code == 302 and len(report.title) == 300 and report.title.endswith("…")
    assert report.gpu == "g" * 200


@pytest.mark.django_db
def test_bytes_that_are_not_utf8_in_a_form_field_are_never_a_500():
    # A lone surrogate cannot travel in a form (browsers send UTF-8; Django replaces invalid bytes).
    r = _member().post(reverse("comparison-new"), b"title=%ED%A0%80&runs=1",
                       content_type="application/x-www-form-urlencoded")
    assert r.status_code == 200 and not Comparison.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("field, value", [("gpu_name", "V100\ud800"), ("compute_capability", "7.0\udc00")])
def test_the_decision_api_refuses_a_lone_surrogate_it_would_save(field, value):
    host = endpoint(name="e", host="lab-1").host
    body = {"gpu_name": "Tesla V100-PCIE-16GB", "compute_capability": "7.0", "vram_gib": 16, "users": 8,
            "prompt_tokens": 512, "output_tokens": 100, field: value, "save": True}
    if field == "compute_capability":
        body["host"] = host.pk  # with a host the stated capability is not parsed, only kept
    r = _member().post(reverse("decision-api"), json.dumps(body), content_type="application/json")
    assert r.status_code == 400
    [message] = r.json()["errors"][field]
    assert message.startswith("Contains an invalid character (a lone surrogate, U+D") and "position" in message
    assert not Decision.objects.exists()


@pytest.mark.django_db
def test_the_decision_api_refuses_a_body_over_the_memory_limit_in_json(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = _member().post(reverse("decision-api"), json.dumps({"gpu_name": "x" * 2000}), content_type="application/json")
    assert r.status_code == 413
    assert r.json() == {"error": "the body is larger than 1,000 bytes; a workload is a few hundred"}


# --- uploads are refused while they arrive ---------------------------------------------------

class CountingInput(io.BytesIO):
    """A request body that counts what the server read of it."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.bytes_read = 0

    def read(self, size=-1):
        chunk = super().read(size)
        self.bytes_read += len(chunk)
        return chunk

    def readline(self, size=-1):
        line = super().readline(size)
        self.bytes_read += len(line)
        return line


def _serve_upload(file_bytes: bytes, content_length: int | None = None) -> tuple[int, str, CountingInput, int]:
    """POST the import form as a browser does (CSRF token first, then the file) through Django's request
    handling over a WSGI environ, CSRF checks on, with a body that counts what was read of it."""
    member = Client()
    member.force_login(user())
    token = "t" * 32
    request = RequestFactory().post(reverse("import-new"), {
        "csrfmiddlewaretoken": token, "file": SimpleUploadedFile("big.json", file_bytes), "title": "big"})
    environ = dict(request.environ)
    body = environ["wsgi.input"].read()
    environ["wsgi.input"] = stream = CountingInput(body)
    environ["CONTENT_LENGTH"] = str(len(body) if content_length is None else content_length)
    environ["HTTP_COOKIE"] = (f"{django_settings.SESSION_COOKIE_NAME}={member.session.session_key}; "
                              f"{django_settings.CSRF_COOKIE_NAME}={token}")
    response = ClientHandler(enforce_csrf_checks=True)(environ)
    return response.status_code, response.content.decode(), stream, len(body)


@pytest.fixture
def upload_dir(settings, tmp_path):
    """Uploads over 1 KiB go to temporary files in a folder of the test's own."""
    settings.FILE_UPLOAD_TEMP_DIR = str(tmp_path)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 1024
    return tmp_path


@pytest.mark.django_db
def test_an_upload_over_the_limit_is_refused_before_its_body_is_read(upload_dir):
    status, page, stream, length = _serve_upload(b" " * (25 * 1024 * 1024))
    assert status == 413 and 25 * 1024 * 1024 < length < 25 * 1024 * 1024 + 1024
    assert "This upload is 25.0 MiB; a result file may be at most 20 MiB. Nothing was read or stored." in page
    assert stream.bytes_read == 0
    assert list(upload_dir.iterdir()) == [] and not ImportedReport.objects.exclude(kind="published").exists()


@pytest.mark.django_db
def test_a_file_part_over_the_limit_stops_being_received_at_the_limit(settings, upload_dir):
    settings.MAX_IMPORT_MIB = 1  # the request (1.5 MiB) is under the request limit, its file is not
    file_bytes = b" " * (1536 * 1024)
    status, page, stream, _ = _serve_upload(file_bytes)
    assert status == 200
    assert "big.json is larger than the limit of 1 MiB; it was not stored." in page
    assert "This field is required" not in page
    assert stream.bytes_read < 1024 * 1024 + 256 * 1024 < len(file_bytes)
    assert list(upload_dir.iterdir()) == [] and not ImportedReport.objects.exclude(kind="published").exists()


@pytest.mark.django_db
def test_a_content_length_smaller_than_the_body_bounds_what_is_read(upload_dir):
    status, page, stream, _ = _serve_upload(b" " * (25 * 1024 * 1024), content_length=1024)
    assert status == 200 and stream.bytes_read <= 1024
    assert not ImportedReport.objects.exclude(kind="published").exists()


@pytest.mark.django_db
def test_a_file_just_under_the_limit_is_read_and_judged_by_content(settings, upload_dir):
    settings.MAX_IMPORT_MIB = 1
    status, page, *_ = _serve_upload(b" " * (1024 * 1024))
    assert status == 200 and "Could not import big.json: empty file" in page


# --- bounded rates and durations -------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("fields, field, message", [
    ({"request_rates": "1e-300"}, "request_rates",
     "1e-300 per second is below the lowest request rate, 0.01 per second (one request every 100 s)."),
    ({"request_rates": "１"}, "request_rates", "'１' is not a number (e.g. 0.5 or 2)."),
    ({"request_rates": "inf"}, "request_rates", "'inf' is not a number (e.g. 0.5 or 2)."),
    ({"request_rates": "nan"}, "request_rates", "'nan' is not a number (e.g. 0.5 or 2)."),
    ({"request_rates": "1e400"}, "request_rates", "Request rates must be above 0 and at most 1000 per second."),
    ({"request_rates": "0.01,1", "requests_per_level": 10000}, "request_rates",
     "At 0.01 requests per second, 10000 requests take 278 h per level; this run (2 level(s) × 1 endpoint(s)) would "
     "take about 281 h, above the run time limit of 6 h. Raise the rates, send fewer requests per level or set a "
     "shorter duration."),
    ({"request_rates": "0.05", "duration_s": 10}, "duration_s",
     "At 0.05 requests per second requests leave 20 s apart, so a 10 s level would send only its first request: "
     "make rate × duration at least 1."),
    ({"duration_s": 86400}, "duration_s", "Ensure this value is at most 21600 (the run time limit, 6 h)."),
])
def test_a_rate_or_duration_a_run_could_not_finish_with_gets_a_field_error(fields, field, message):
    mode = "rate" if "request_rates" in fields else "concurrency"
    r = _member().post(reverse("run-new"), run_form([endpoint()], load_mode=mode, **fields))
    assert r.context["form"].errors[field] == [message]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_concurrency_sweep_whose_durations_exceed_the_run_time_limit_is_refused():
    a, b = endpoint(name="a"), endpoint(name="b")
    r = _member().post(reverse("run-new"), run_form([a, b], concurrency_levels="1,8", duration_s=3 * 3600))
    assert r.context["form"].errors["duration_s"] == [
        "2 level(s) × 2 endpoint(s) × 3 h could take 12 h, above the run time limit of 6 h. Set a shorter duration "
        "or fewer levels."]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_bounds_follow_the_settings_and_count_the_first_request_at_once(settings):
    settings.MIN_REQUEST_RATE, settings.RUN_TIME_LIMIT_S = 0.001, 100
    e = endpoint()
    # 0.005 req/s: requests 200 s apart. One request per level leaves at once; two take 200 s.
    assert RunForm(run_form([e], load_mode="rate", request_rates="0.005", requests_per_level=1)).is_valid()
    form = RunForm(run_form([e], load_mode="rate", request_rates="0.005", requests_per_level=2))
    assert form.errors["request_rates"] == [
        "At 0.005 requests per second, 2 requests take 3.33 min per level; this run (1 level(s) × 1 endpoint(s)) "
        "would take about 3.33 min, above the run time limit of 100 s. Raise the rates, send fewer requests per "
        "level or set a shorter duration."]
    assert RunForm(run_form([e], load_mode="rate", request_rates="0.005", requests_per_level=2,
                            duration_s=100)).errors["duration_s"][0].startswith("At 0.005 requests per second")
    assert RunForm(run_form([e], load_mode="rate", request_rates="0.0005")).errors["request_rates"] == [
        "0.0005 per second is below the lowest request rate, 0.001 per second (one request every 16.7 min)."]


@pytest.mark.django_db
def test_a_prefilled_link_cannot_bypass_the_bounds():
    # The decision page's "measure this next" links only pre-fill the form: posting it is validated.
    e = endpoint()
    client = _member()
    page = client.get(reverse("run-new") + f"?endpoints={e.name}&load_mode=rate&request_rates=1e-300")
    assert 'value="1e-300"' in page.content.decode()
    r = client.post(reverse("run-new"), run_form([e], load_mode="rate", request_rates="1e-300"))
    assert "below the lowest request rate" in r.context["form"].errors["request_rates"][0]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_admin_cannot_queue_or_change_a_run_around_the_bounds():
    e = endpoint()
    run = Run.objects.create(prompt_tokens=64, output_tokens=8, temperature=0, load_mode="rate", request_rates=[1.0],
                             requests_per_level=3, warmup_requests=0)
    run.endpoints.set([e])
    staff = Client()
    staff.force_login(user("root", staff=True))
    assert staff.get(reverse("admin:benchmarks_run_add")).status_code == 403
    r = staff.post(reverse("admin:benchmarks_run_change", args=[run.id]), {
        "title": "renamed", "request_rates": "[1e-300]", "duration_s": "86400000", "requests_per_level": "10000",
        "endpoints": [e.id], "levels-TOTAL_FORMS": "0", "levels-INITIAL_FORMS": "0"})
    assert r.status_code == 302
    run.refresh_from_db()
    assert (run.title, run.request_rates, run.duration_s, run.requests_per_level) == ("renamed", [1.0], None, 3)


# --- the API's bad input: a field error in JSON, never a 500 or an HTML page -------------------

def _api_member(name="alice"):
    from test_api import token_for
    from django.core.cache import cache
    cache.clear()  # the API's rate limit
    return token_for(name)[0]


def _api_post(client, path, body):
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return checked(client.post("/api/v1/" + path, data=data, content_type="application/json"), path)


def _a_run_of(owner):
    return measured_run([endpoint()], levels=(1,), requests=3, tokens=8, prompt_tokens=32, owner=owner)


def _jsonl_run(e, content: str) -> dict:
    return {"endpoints": [e.name], "output_tokens": 4, "concurrency_levels": [1], "requests_per_level": 2,
            "warmup_requests": 0, "dataset_source": "jsonl", "dataset_file": {"name": "p.jsonl", "content": content}}


@pytest.mark.django_db
@pytest.mark.parametrize("path, body, field, echoed", [
    ("runs/", {"\ud800": 1}, "__all__", "Unknown fields: \\ud800"),
    ("runs/", {"load_mode": "x\ud800"}, "load_mode", "x\\ud800"),
    ("runs/", {"api": "\udfff"}, "api", "\\udfff"),
    ("schedules/", {"\ud800": 1}, "__all__", "Unknown fields: \\ud800"),
    ("schedules/", {"every": "\ud83d"}, "every", "\\ud83d"),
])
def test_a_lone_surrogate_the_api_error_echoes_is_escaped_not_a_500(path, body, field, echoed):
    client = _api_member()
    if path == "runs/":
        body = {"endpoints": [endpoint().name], **body}
    else:
        body = {"run": _a_run_of(user("alice")).public_id, "every": "daily", "at": "02:00", **body}
    r = _api_post(client, path, body)
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    assert any(echoed in m for m in r.json()["errors"][field]), r.json()
    assert not Schedule.objects.exists() and Run.objects.count() == (0 if path == "runs/" else 1)


@pytest.mark.django_db
def test_a_json_body_nested_10000_deep_gets_a_json_error_not_a_500():
    r = _api_post(_api_member(), "runs/", "[" * 10_000 + "]" * 10_000)
    assert r.status_code == 400
    assert r.json() == {"error": "invalid input", "errors": {"__all__": ["The JSON body is nested too deeply."]}}
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_dataset_line_nested_50000_deep_gets_a_field_error():
    content = '{"prompt": "hello"}\n' + '{"a": ' * 50_000 + "1" + "}" * 50_000 + "\n"
    r = _api_post(_api_member(), "runs/", _jsonl_run(endpoint(), content))
    assert r.status_code == 400
    assert r.json()["errors"]["dataset_file"] == [
        "p.jsonl: line 2 is nested too deeply to be a JSON object of the expected shape."]
    assert not Run.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("fields, field, message", [
    ({"every": "interval", "interval_s": 10**30}, "interval_s", "Ensure this value is less than or equal to 31622400."),
    ({"every": "daily", "at": 3}, "at", "Enter a valid time."),
    ({"every": "weekly", "at": 2.5, "weekday": 1}, "at", "Enter a valid time."),
])
def test_a_schedule_time_the_database_or_form_could_not_take_gets_a_field_error(fields, field, message):
    client = _api_member()
    run = _a_run_of(user("alice"))
    r = _api_post(client, "schedules/", {"run": run.public_id, **fields})
    assert r.status_code == 400 and r.json()["errors"][field] == [message]
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_the_schedule_form_of_the_run_page_refuses_an_interval_of_10_to_the_30():
    from django.contrib.messages import get_messages
    owner = user("alice")
    run = _a_run_of(owner)
    client = Client()
    client.force_login(owner)
    r = checked(client.post(reverse("run-schedule", args=[run.public_id]),
                            {"every": "interval", "interval_s": str(10**30)}))
    assert r.status_code == 302 and not Schedule.objects.exists()
    assert [str(m) for m in get_messages(r.wsgi_request)] == [
        "Not scheduled: Interval (s): Ensure this value is less than or equal to 31622400."]


@pytest.mark.django_db
def test_a_dataset_of_2_9_mib_can_be_sent_as_json_and_the_body_limit_follows_the_dataset_limit():
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE >= 2 * django_settings.MAX_DATASET_MIB * 1024 * 1024
    line = json.dumps({"prompt": "say \"hi\" " * 200, "output_tokens": 4}) + "\n"
    content = line * (int(2.9 * 1024 * 1024) // len(line))
    assert 2.8 * 2**20 < len(content) < 2.9 * 2**20 < len(json.dumps(content))
    r = _api_post(_api_member(), "runs/", _jsonl_run(endpoint(), content))
    assert r.status_code == 201, r.content[:500]
    assert Run.objects.get().dataset


@pytest.mark.django_db
def test_an_api_body_over_the_memory_limit_gets_a_json_413(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    r = _api_post(_api_member(), "runs/", {"title": "x" * 2000})
    assert r.status_code == 413 and r["Content-Type"] == "application/json"
    message = "The body is larger than the limit of 1,000 bytes; nothing was read."
    assert r.json() == {"error": message, "errors": {"__all__": [message]}}
    assert not Run.objects.exists()
