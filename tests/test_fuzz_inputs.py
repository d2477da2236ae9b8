"""Fuzzing every input a user or a server controls: no crash, no 500, a clear message."""
import asyncio
import os

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings, strategies as st

from benchmarks.engine.client import Session, Target, Workload
from benchmarks.engine.stream import StreamError, parse_chunk
from benchmarks.forms import RunForm
from factories import endpoint, measured_run, user

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
TALLY = {"inputs": 0, "500s": 0}
text = st.text(max_size=40)
values = st.one_of(text, st.integers(-10**12, 10**12).map(str), st.floats(allow_nan=True).map(str),
                   st.sampled_from(["", "0", "-1", "1,8", "1e9", "nan", "inf", "1,,2", " 8 ", "\x00", "<script>"]))


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


def post_ok(client, url, data, **kw):
    TALLY["inputs"] += 1
    r = client.post(url, data, **kw)
    if r.status_code >= 500:
        TALLY["500s"] += 1
    assert r.status_code < 500, (url, data)
    return r


@pytest.mark.django_db
class TestForms:
    @given(st.dictionaries(st.sampled_from(list(RunForm.base_fields)), values, max_size=12))
    @FUZZ
    def test_the_run_form_never_crashes(self, data):
        form = RunForm(data)
        if not form.is_valid():
            assert form.errors

    @given(st.dictionaries(st.sampled_from(list(RunForm.base_fields) + ["endpoints"]), values, max_size=14))
    @FUZZ
    def test_posting_anything_to_new_run_is_never_a_500(self, data):
        e = endpoint(name="fuzz") if not hasattr(self, "_e") else self._e
        self._e = e
        client = Client()
        client.force_login(user())
        post_ok(client, reverse("run-new"), data)

    @given(st.binary(max_size=3000), st.text(max_size=30))
    @FUZZ
    def test_uploading_any_file_is_never_a_500(self, blob, name):
        client = Client()
        client.force_login(user())
        filename = name if os.path.basename(name) not in {"", ".", ".."} else "x"  # what a browser can send
        post_ok(client, reverse("import-new"), {"file": SimpleUploadedFile(filename, blob), "gpu": name})

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
        TALLY["inputs"] += 1
        try:
            url = reverse("run-chart", args=[self._run.public_id, name or "x", "json"])
        except Exception:
            return  # not a URL at all: the router refuses it before any view runs
        r = Client().get(url, params)
        assert r.status_code in (200, 404)

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


def test_zz_report_the_tally(capsys):
    with capsys.disabled():
        print(f"\nfuzzed HTTP inputs: {TALLY['inputs']}, 500s seen: {TALLY['500s']}")
    assert TALLY["500s"] == 0
