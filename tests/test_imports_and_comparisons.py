"""Imported result files, the published V100 reference, and side-by-side comparisons."""
import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.compare import CONTENDED
from benchmarks.models import Comparison, ImportedReport
from benchmarks.selectors import comparison_series
from benchmarks.services import published_reports_load
from factories import endpoint, measured_run, user

pytestmark = pytest.mark.django_db
DATA = Path(__file__).parent / "data" / "imports"


def upload(client, name, **fields):
    client.force_login(user())
    f = SimpleUploadedFile(name, (DATA / name).read_bytes())
    return client.post(reverse("import-new"), {"file": f, **fields})


def test_importing_needs_login(client):
    assert client.get(reverse("import-new")).status_code == 302


def test_a_vllm_bench_serve_result_is_imported_and_labelled(client):
    r = upload(client, "vllm_bench_serve_c8_detailed.json", backend="vllm", quantization="fp8_e4m3",
               gpu="Tesla V100-PCIE-16GB")
    report = ImportedReport.objects.exclude(kind="published").get()
    assert r.status_code == 302 and r.url == report.get_absolute_url()
    assert report.kind == "vllm-bench-serve" and report.backend == "vllm"
    client.logout()
    page = client.get(report.get_absolute_url()).content.decode()
    assert "Imported from vllm bench serve, not measured here" in page
    assert ("<tr><td>concurrency 8</td><td>8</td><td>—</td><td>512 / 100</td><td>522.3 / 683.4 / 717.4</td>\n"
            "      <td>41.26</td><td>24.2</td><td>154.4</td><td>—</td>") in page


@pytest.mark.parametrize("name", ["bad_console_output.txt", "bad_truncated_vllm.json", "bad_vllm_missing_ttft.json",
                                  "bad_llama_no_avg_ts.json", "bad_guidellm_empty.json"])
def test_a_bad_file_gets_a_clear_error_and_nothing_is_stored(client, name):
    r = upload(client, name)
    assert r.status_code == 200
    page = r.content.decode()
    assert f"Could not import {name}:" in page
    assert not ImportedReport.objects.exclude(kind="published").exists()


def test_the_published_v100_reference_ships_labelled():
    ImportedReport.objects.all().delete()
    assert published_reports_load() == 3
    assert published_reports_load() == 0  # idempotent
    reports = {r.backend + "/" + r.quantization: r for r in ImportedReport.objects.filter(kind="published")}
    assert set(reports) == {"vllm/fp8_e4m3", "llamacpp/gguf_q4_k_m", "vllm/awq"}
    assert all(r.label == "published, not measured here" for r in reports.values())


def test_the_published_reference_page_says_it_was_not_measured_here(client):
    published_reports_load()
    report = ImportedReport.objects.get(backend="llamacpp", kind="published")
    page = client.get(report.get_absolute_url()).content.decode()
    assert "Published, not measured here" in page and "56.0" in page
    fig = client.get(reverse("import-chart", args=[report.public_id, "json"])).json()
    assert fig["data"][1]["y"] == [56.0, 29.4]


def test_a_comparison_puts_measured_beside_published_with_ratios_and_warnings(client):
    published_reports_load()
    llama = endpoint(name="v100-llama", backend="llamacpp", quantization="gguf_q4_k_m")
    run = measured_run([llama], levels=(1, 8), prompt_tokens=512, tokens=100)
    vllm_pub = ImportedReport.objects.get(kind="published", backend="vllm", quantization="fp8_e4m3")
    client.force_login(user())
    r = client.post(reverse("comparison-new"), {"runs": [run.public_id], "reports": [vllm_pub.public_id], "title": "FP8 vs Q4"})
    comparison = Comparison.objects.get()
    assert r.url == comparison.get_absolute_url()
    client.logout()
    page = client.get(comparison.get_absolute_url()).content.decode()
    # the measured levels against the published ones: a level a contention flag marks (a loaded
    # machine) names no winner, every other one names the faster
    measured = next(s for s in comparison_series(comparison) if s["kind"] == "measured")["levels"]
    contended = [bool(set(p.flags) & set(CONTENDED)) for p in measured]
    if not all(contended):
        assert "decodes" in page and "faster than" in page
    if any(contended):
        assert "No winner named for" in page
    # The measured endpoint has no GPU registered: its GPU is unknown, not a different one.
    assert f"GPU model unknown for v100-llama (GGUF Q4_K_M); the others used {vllm_pub.gpu}." in page
    assert "Different GPU model" not in page
    assert "published, not measured here" in page


def test_a_comparison_needs_something_to_compare(client):
    client.force_login(user())
    r = client.post(reverse("comparison-new"), {"title": "empty"})
    assert "Pick at least one run or report" in r.content.decode()


def test_comparing_across_workloads_warns(client):
    a = measured_run([endpoint(name="a")], levels=(1,), requests=3, prompt_tokens=512)
    b = measured_run([endpoint(name="b")], levels=(1,), requests=3, prompt_tokens=2048)
    client.force_login(user())
    client.post(reverse("comparison-new"), {"runs": [a.public_id, b.public_id]})
    page = client.get(Comparison.objects.get().get_absolute_url()).content.decode()
    assert "Different prompt tokens" in page


# --- bounded imports: the largest accepted report, and one over the bounds -------------------

def largest_vllm_file(levels: int) -> bytes:
    """`levels` appended vllm bench serve results (--append-result), each at its own concurrency:
    the heaviest level kind (latency percentiles and notes) at the most levels an import takes."""
    line = json.loads((DATA / "vllm_bench_serve_appended_c1_c8.jsonl").read_text().splitlines()[1])
    return "\n".join(json.dumps({**line, "max_concurrency": i + 1}) for i in range(levels)).encode()


def test_a_file_over_the_level_limit_is_refused_and_nothing_is_stored(client, settings):
    settings.MAX_IMPORT_LEVELS = 3
    client.force_login(user())
    r = client.post(reverse("import-new"), {"file": SimpleUploadedFile("sweep.jsonl", largest_vllm_file(4))})
    assert r.context["form"].errors["file"] == [
        "Could not import sweep.jsonl: vllm bench serve JSON: 4 results; one import holds at most 3 — split the file"]
    assert not ImportedReport.objects.exclude(kind="published").exists()


def test_the_largest_report_an_import_accepts_has_pages_of_few_queries(client, settings, django_assert_max_num_queries):
    client.force_login(user())
    r = client.post(reverse("import-new"), {"file": SimpleUploadedFile("sweep.jsonl",
                                                                       largest_vllm_file(settings.MAX_IMPORT_LEVELS))})
    report = ImportedReport.objects.exclude(kind="published").get()
    assert r.url == report.get_absolute_url() and len(report.report["levels"]) == settings.MAX_IMPORT_LEVELS
    with django_assert_max_num_queries(4):  # session, user, report, messages
        page = client.get(report.get_absolute_url()).content.decode()
    assert page.count("<tr><td>concurrency ") == settings.MAX_IMPORT_LEVELS
    with django_assert_max_num_queries(3):
        fig = client.get(reverse("import-chart", args=[report.public_id, "json"])).json()
    assert len(fig["data"][0]["x"]) == settings.MAX_IMPORT_LEVELS
    comparison = Comparison.objects.create(title="big")
    comparison.reports.set([report])
    with django_assert_max_num_queries(6):
        assert "concurrency 1000" in client.get(comparison.get_absolute_url()).content.decode()


def test_the_compare_form_lists_reports_without_loading_their_levels(client):
    published_reports_load()
    client.force_login(user())
    client.post(reverse("import-new"), {"file": SimpleUploadedFile("sweep.jsonl", largest_vllm_file(50))})
    with CaptureQueriesContext(connection) as queries:
        page = client.get(reverse("comparison-new")).content.decode()
    assert "vllm bench serve" in page and "V100 write-up (published)" in page
    report_queries = [q["sql"] for q in queries if 'FROM "benchmarks_importedreport"' in q["sql"]]
    assert len(report_queries) == 1
    assert '"benchmarks_importedreport"."report"' not in report_queries[0]
