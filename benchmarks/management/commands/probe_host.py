import json

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from benchmarks import services


class Command(BaseCommand):
    help = "Probe this machine's NVIDIA GPUs with pynvml and store them in the inventory."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.WORKER_HOST, help="inventory name (default: WORKER_HOST)")
        parser.add_argument("--json", action="store_true", help="also print what was probed")

    def handle(self, *args, host, **options):
        if not host:
            raise CommandError("name the host: --host NAME (or set WORKER_HOST)")
        host_row, result = services.host_probe_here(host_name=host)
        if options["json"]:
            self.stdout.write(json.dumps(result.to_dict(), indent=1))
        self.stdout.write(f"{host_row.name}: {result.status}; {len(result.gpus)} GPU(s)")
