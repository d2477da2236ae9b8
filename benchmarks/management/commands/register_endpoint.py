import os

from django.core.management.base import BaseCommand, CommandError

from benchmarks.models import Endpoint, Host, Model, Variant, endpoint_url_problem


class Command(BaseCommand):
    help = "Register (or update) an OpenAI-compatible server as an endpoint, with its host, model and variant."

    def add_arguments(self, parser):
        parser.add_argument("--name", required=True)
        parser.add_argument("--url", required=True, help="server root, e.g. http://gpu1:8000")
        parser.add_argument("--backend", choices=[b for b, _ in Endpoint.BACKENDS], required=True)
        parser.add_argument("--host", default="localhost", help="host name (created if new)")
        parser.add_argument("--served-model", default="", help="id in /v1/models (blank: the only one)")
        parser.add_argument("--model", default="", help="base model, e.g. DeepSeek-R1-Distill-Qwen-7B")
        parser.add_argument("--variant", default="", help="variant name, e.g. Q4_K_M")
        parser.add_argument("--quantization", default="other", choices=[q for q, _ in Variant.QUANTIZATIONS])
        parser.add_argument("--size-bytes", type=int, default=None)
        parser.add_argument("--launch-command", default="")
        parser.add_argument("--api-key-env", default="", help="name of an environment variable holding the key")

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
        api_key = os.environ.get(o["api_key_env"], "") if o["api_key_env"] else ""
        endpoint, created = Endpoint.objects.update_or_create(name=o["name"], defaults=dict(
            host=host, backend=o["backend"], base_url=o["url"], model_name=o["served_model"],
            variant=variant, launch_command=o["launch_command"], api_key=api_key, enabled=True))
        self.stdout.write(f"{'Registered' if created else 'Updated'} endpoint {endpoint.name} -> {endpoint.base_url}")
