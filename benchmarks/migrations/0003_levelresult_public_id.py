import re
import secrets

from django.db import migrations, models

import benchmarks.models

ANCHOR = re.compile(r"#level-([0-9]+)$")


def backfill(apps, schema_editor):
    """A random public id for every stored level, and the saved decisions' links to levels
    (run permalink + #level-<database id>) pointed at it."""
    LevelResult = apps.get_model("benchmarks", "LevelResult")
    Decision = apps.get_model("benchmarks", "Decision")
    public = {}
    batch = []
    for level in LevelResult.objects.filter(public_id=None).only("id").iterator(chunk_size=2000):
        level.public_id = public[level.id] = secrets.token_urlsafe(16)
        batch.append(level)
        if len(batch) == 2000:
            LevelResult.objects.bulk_update(batch, ["public_id"])
            batch = []
    LevelResult.objects.bulk_update(batch, ["public_id"])

    def relink(value):
        if isinstance(value, dict):
            return {k: relink(v) for k, v in value.items()}
        if isinstance(value, list):
            return [relink(v) for v in value]
        if isinstance(value, str) and (m := ANCHOR.search(value)) and int(m.group(1)) in public:
            return value[:m.start()] + "#level-" + public[int(m.group(1))]
        return value

    for decision in Decision.objects.only("id", "result").iterator(chunk_size=500):
        result = relink(decision.result)
        if result != decision.result:
            Decision.objects.filter(id=decision.id).update(result=result)


class Migration(migrations.Migration):
    """Levels get a public id: permalinks, charts and exports name levels without database ids."""

    dependencies = [("benchmarks", "0002_published_v100_reference")]
    operations = [
        migrations.AddField("levelresult", "public_id", models.CharField(max_length=32, null=True)),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField("levelresult", "public_id", models.CharField(
            max_length=32, unique=True, default=benchmarks.models.new_public_id, editable=False)),
    ]
