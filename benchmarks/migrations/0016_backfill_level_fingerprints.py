"""Levels measured before fingerprints existed get theirs, so that an upgraded site's history
pages and regression tests include the runs it already has."""
from django.db import migrations


def backfill(apps, schema_editor):
    from benchmarks.history import workload_fingerprint  # reads only fields this state has

    LevelResult = apps.get_model("benchmarks", "LevelResult")
    levels = (LevelResult.objects.filter(fingerprint="").select_related("run", "endpoint__variant__model",
                                                                         "endpoint__host")
              .defer("summary", "gpu_summary", "gpu_series", "server_summary", "server_series"))
    by_pair: dict = {}
    changed = []
    for level in levels.iterator(chunk_size=500):
        key = (level.run_id, level.endpoint_id)
        if key not in by_pair:
            by_pair[key] = workload_fingerprint(level.run, level.endpoint)
        level.fingerprint = by_pair[key]
        changed.append(level)
        if len(changed) >= 500:
            LevelResult.objects.bulk_update(changed, ["fingerprint"])
            changed = []
    if changed:
        LevelResult.objects.bulk_update(changed, ["fingerprint"])


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0015_schedules_history_alerts")]
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
