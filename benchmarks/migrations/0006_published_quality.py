from django.db import migrations


def reload_published(apps, schema_editor):
    """The published reports again, now carrying the write-up's perplexities as stated quality
    figures (report schema 3)."""
    from benchmarks.services import published_reports_load

    published_reports_load(model=apps.get_model("benchmarks", "ImportedReport"))


def keep_stated_perplexities(apps, schema_editor):
    """A perplexity typed on a variant, with no text or windows, is kept in words in its model's
    notes before the fields go: nothing is lost, and nothing unlabelled is compared."""
    Variant = apps.get_model("benchmarks", "Variant")
    for variant in Variant.objects.exclude(perplexity=None).select_related("model"):
        source = variant.perplexity_source or "source not stated"
        line = f"Variant {variant.name}: perplexity {variant.perplexity:g} ({source}; evaluation text not stated)."
        model = variant.model
        model.notes = f"{model.notes}\n{line}".strip()
        model.save(update_fields=["notes"])


class Migration(migrations.Migration):
    """The write-up's perplexities ship as structured published figures of its reports; a
    variant no longer holds a perplexity of its own (measured ones live in QualityMeasurement)."""

    dependencies = [("benchmarks", "0005_quality_step")]
    operations = [
        migrations.RunPython(reload_published, migrations.RunPython.noop),
        migrations.RunPython(keep_stated_perplexities, migrations.RunPython.noop),
        migrations.RemoveField(model_name="variant", name="perplexity"),
        migrations.RemoveField(model_name="variant", name="perplexity_source"),
    ]
