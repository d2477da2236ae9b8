"""Levels measured before fingerprints existed get theirs, so that an upgraded site's history
pages and regression tests include the runs it already has."""
import hashlib
import json

from django.db import migrations


# history.workload_fingerprint as it was when this migration was written, frozen here: a migration
# reads the models of its own state, never the live code (whose run reads its load through a mode).
def gpu_label(endpoint) -> str:
    gpus = list(endpoint.gpus.all()) or list(endpoint.host.gpus.all())
    if not gpus:
        return f"host {endpoint.host.name}"
    names: dict[str, int] = {}
    for g in gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return ", ".join(f"{n}× {name}" for name, n in sorted(names.items()))


def workload_shape(run) -> dict:
    return {"api": run.api, "prompt_tokens": run.prompt_tokens, "output_tokens": run.output_tokens,
            "temperature": run.temperature, "load_mode": run.load_mode,
            "levels": run.request_rates if run.load_mode == "rate" else run.concurrency_levels,
            "arrivals": run.arrivals if run.load_mode == "rate" else "",
            "max_concurrency": run.max_concurrency if run.load_mode == "rate" else 0,
            "requests_per_level": run.requests_per_level, "duration_s": run.duration_s,
            "warmup_requests": run.warmup_requests, "dataset": run.dataset or {},
            "arrival_pattern": run.arrival_pattern or {}, "conversation": run.conversation or {}}


def workload_fingerprint(run, endpoint) -> str:
    variant = endpoint.variant
    identity = {"workload": workload_shape(run), "gpu": gpu_label(endpoint), "tp": endpoint.tensor_parallel_size,
                "model": variant.model.name if variant else endpoint.model_name,
                "variant": [variant.name, variant.quantization] if variant else None}
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def backfill(apps, schema_editor):
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
