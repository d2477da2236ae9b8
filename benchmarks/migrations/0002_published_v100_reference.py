from django.db import migrations


def load(apps, schema_editor):
    from benchmarks.services import published_reports_load

    published_reports_load(model=apps.get_model("benchmarks", "ImportedReport"))


def unload(apps, schema_editor):
    apps.get_model("benchmarks", "ImportedReport").objects.filter(kind="published").delete()


class Migration(migrations.Migration):
    """Ship the V100 write-up's published figures as a labelled reference report."""

    dependencies = [("benchmarks", "0001_initial")]
    operations = [migrations.RunPython(load, unload)]
