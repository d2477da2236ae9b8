import json

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from benchmarks.engine import backends
from benchmarks.models import Host, Model, ServerRecipe, Variant


class Command(BaseCommand):
    help = ("Register (or update) a server recipe: a server the host's worker starts itself, measures and "
            "stops. Checked as the inventory's form checks it; whether the host allows it is decided there.")

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--host", required=True, help="the host whose worker starts it (created if new)")
        parser.add_argument("--backend", choices=backends.names(), required=True)
        parser.add_argument("--executable", required=True, help="absolute path on the host")
        parser.add_argument("--model-path", required=True, help="the model file or folder on the host")
        parser.add_argument("--args", dest="server_args", required=True, help='JSON list, e.g. ["-m", "{model}", "--port", "{port}"]')
        parser.add_argument("--sweep", default="{}", help='JSON, e.g. {"--parallel": [1, 4]}')
        parser.add_argument("--model", default="", help="base model, e.g. gemma-3-270m")
        parser.add_argument("--variant", default="", help="variant name, e.g. Q4_K_M")
        parser.add_argument("--quantization", default="other", choices=[q for q, _ in Variant.QUANTIZATIONS])

    def handle(self, *args, **o):
        try:
            arguments, sweep = json.loads(o["server_args"]), json.loads(o["sweep"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--args and --sweep are JSON: {exc}") from None
        host, _ = Host.objects.get_or_create(name=o["host"])
        variant = None
        if o["model"]:
            model, _ = Model.objects.get_or_create(name=o["model"])
            variant, _ = Variant.objects.get_or_create(model=model, name=o["variant"] or o["quantization"],
                                                       defaults={"quantization": o["quantization"]})
        recipe = ServerRecipe.objects.filter(name=o["name"]).first() or ServerRecipe(name=o["name"])
        recipe.host, recipe.backend, recipe.executable, recipe.model_path = (
            host, o["backend"], o["executable"], o["model_path"])
        recipe.args, recipe.sweep, recipe.variant, recipe.enabled = arguments, sweep, variant, True
        created = recipe.pk is None
        try:
            recipe.full_clean()
        except ValidationError as exc:
            raise CommandError("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from None
        recipe.save()
        self.stdout.write(f"{'Registered' if created else 'Updated'} recipe {recipe.name} on host {host.name}")
