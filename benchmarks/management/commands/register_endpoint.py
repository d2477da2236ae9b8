import os

from django.core.management.base import BaseCommand, CommandError

from benchmarks.engine import backends
from benchmarks.models import Endpoint, Host, Model, Variant, endpoint_url_problem
from benchmarks.services import endpoint_api_key


class Command(BaseCommand):
    help = "Register (or update) an OpenAI-compatible server as an endpoint, with its host, model and variant."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="server root, e.g. http://gpu1:8000")
        parser.add_argument("--backend", choices=backends.names(), required=True)
        parser.add_argument("--host", default="localhost", help="host name (created if new)")
        parser.add_argument("--served-model", default="", help="id in /v1/models (blank: the only one)")
        parser.add_argument("--model", default="", help="base model, e.g. DeepSeek-R1-Distill-Qwen-7B")
        parser.add_argument("--variant", default="", help="variant name, e.g. Q4_K_M")
        parser.add_argument("--quantization", default="other", choices=[q for q, _ in Variant.QUANTIZATIONS])
        parser.add_argument("--size-bytes", type=int, default=None)
        parser.add_argument("--launch-command", default="")
        parser.add_argument("--api-key-env", default="",
                            help="name of an environment variable holding the key; without it an update "
                                 "keeps the stored key, unless --url changes (then the key is removed)")

    def handle(self, *args, **o):
        problem = endpoint_url_problem(o["url"])
        if problem:
            raise CommandError(f"--url: {problem}")
        host, _ = Host.objects.get_or_create(name=o["host"])
        variant = None
        if o["model"]:
            model, _ = Model.objects.get_or_create(name=o["model"])
            variant, _ = Variant.objects.update_or_create(
                model=model, name=o["variant"] or o["quantization"],
                defaults={"quantization": o["quantization"], "size_bytes": o["size_bytes"]})
        typed = ""
        if o["api_key_env"]:
            typed = os.environ.get(o["api_key_env"], "")
            if not typed:
                raise CommandError(f"--api-key-env: the environment variable {o['api_key_env']} is not set")
        existing = Endpoint.objects.filter(name=o["name"]).first()
        api_key, note = endpoint_api_key(stored=existing.api_key if existing else "", typed=typed,
                                         old_url=existing.base_url if existing else "", new_url=o["url"])
        endpoint, created = Endpoint.objects.update_or_create(name=o["name"], defaults=dict(
            host=host, backend=o["backend"], base_url=o["url"], model_name=o["served_model"],
            variant=variant, launch_command=o["launch_command"], api_key=api_key, enabled=True))
        self.stdout.write(f"{'Registered' if created else 'Updated'} endpoint {endpoint.name} -> {endpoint.base_url}")
        if note:
            self.stdout.write(self.style.WARNING(note))
