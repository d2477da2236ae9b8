"""The V100 write-up's perplexities (FP8 6.15, Q4_K_M 6.28) ship as structured published quality
figures of its reports, labelled, their evaluation text unknown; a variant no longer holds a
perplexity of its own, and one typed there before is kept in words."""
import pytest

from benchmarks.importers.published import QUALITY_LABEL, v100_writeup_reports
from benchmarks.models import ImportedReport
from benchmarks.services import published_reports_load

pytestmark = pytest.mark.django_db


def test_the_write_up_s_perplexities_are_published_quality_figures_with_their_text_unknown():
    published_reports_load()
    by_quantization = {r.quantization: r for r in ImportedReport.objects.filter(kind="published")}
    fp8, q4, awq = (by_quantization[q].data for q in ("fp8_e4m3", "gguf_q4_k_m", "awq"))
    assert fp8.quality.figures == {"perplexity": 6.15} and q4.quality.figures == {"perplexity": 6.28}
    assert awq.quality is None  # the write-up published none for AWQ
    for data in (fp8, q4):
        assert data.quality.text is None and data.quality.windows is None
        assert any(QUALITY_LABEL in n for n in data.quality.notes)
        point = data.quality.point(label=data.title, kind="published", model=data.model)
        assert point.text_words == "not stated" and point.kind == "published"
    assert QUALITY_LABEL == "published, not measured here; evaluation text not stated"


def test_the_report_page_shows_its_published_perplexity_labelled(client):
    published_reports_load()
    report = ImportedReport.objects.get(kind="published", quantization="gguf_q4_k_m")
    page = client.get(report.get_absolute_url()).content.decode()
    quality = page.split('id="quality"')[1].split("</table>")[0]
    assert "6.280" in quality and "published, not measured here" in quality and "not stated" in quality


@pytest.mark.django_db(transaction=True)
def test_the_migration_keeps_a_typed_perplexity_in_words_and_gives_stored_reports_their_quality():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("benchmarks", "0005_quality_step")], [("benchmarks", "0006_published_quality")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        model = old.get_model("benchmarks", "Model").objects.create(name="Team-7B", notes="Our model.")
        old.get_model("benchmarks", "Variant").objects.create(model=model, name="q4", quantization="gguf_q4_k_m",
                                                              perplexity=7.5, perplexity_source="our wiki")
        old.get_model("benchmarks", "Variant").objects.create(model=model, name="fp16", quantization="fp16")
        # A published report as schema 2 stored it: no quality.
        reports = old.get_model("benchmarks", "ImportedReport").objects.filter(kind="published")
        for r in reports:
            r.report = {**{k: v for k, v in r.report.items() if k != "quality"}, "schema_version": 2}
            r.save()
        executor = MigrationExecutor(connection)
        executor.migrate(after)
        new = executor.loader.project_state(after).apps
        notes = new.get_model("benchmarks", "Model").objects.get(name="Team-7B").notes
        assert notes == "Our model.\nVariant q4: perplexity 7.5 (our wiki; evaluation text not stated)."
        stored = {r.quantization: r.report for r in new.get_model("benchmarks", "ImportedReport").objects.filter(
            kind="published")}
        current = {r.raw_meta["quantization"]: r.to_dict() for r in v100_writeup_reports()}
        assert stored["fp8_e4m3"] == current["FP8 (E4M3)"] and stored["fp8_e4m3"]["quality"]["figures"] == {
            "perplexity": 6.15}
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
