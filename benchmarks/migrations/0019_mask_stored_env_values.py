"""Stored launch commands held the recipe's environment values (an HF_TOKEN) in clear: the lab's
endpoints' launch_command and each launch report's command. Masked here as the launcher now
writes them (NAME=…, the GPU variables kept), so that no search or lookup can match a value."""
from django.db import migrations

from benchmarks.engine.launcher import mask_env


def mask(apps, schema_editor):
    Endpoint = apps.get_model("benchmarks", "Endpoint")
    ServerLaunch = apps.get_model("benchmarks", "ServerLaunch")
    for e in Endpoint.objects.exclude(launch_command="").only("id", "launch_command").iterator():
        masked = mask_env(e.launch_command)
        if masked != e.launch_command:
            Endpoint.objects.filter(id=e.id).update(launch_command=masked)
    for launch in ServerLaunch.objects.only("id", "report").iterator():
        report = launch.report if isinstance(launch.report, dict) else {}
        command = report.get("command")
        if isinstance(command, str) and mask_env(command) != command:
            ServerLaunch.objects.filter(id=launch.id).update(report={**report, "command": mask_env(command)})


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0018_slo_search_by_rate")]

    operations = [migrations.RunPython(mask, migrations.RunPython.noop)]
