"""Tiny factories: inventory rows made inline, named for what they are."""
from django.contrib.auth import get_user_model

from benchmarks.models import Endpoint, Host, Model, Variant


def user(username="alice", staff=False):
    User = get_user_model()
    existing = User.objects.filter(username=username).first()
    return existing or User.objects.create_user(username, password="pw-for-tests-1", is_staff=staff,
                                                is_superuser=staff)


def endpoint(url="http://127.0.0.1:9", name="sim", backend="vllm", host="lab-1", model_name="",
             quantization="fp8_e4m3", api_key=""):
    h, _ = Host.objects.get_or_create(name=host)
    m, _ = Model.objects.get_or_create(name="DeepSeek-R1-Distill-Qwen-7B",
                                       defaults=dict(params_b=7.6, layers=28, kv_heads=4, head_dim=128))
    v, _ = Variant.objects.get_or_create(model=m, name=quantization, defaults={"quantization": quantization})
    return Endpoint.objects.create(name=name, host=h, backend=backend, base_url=url, model_name=model_name,
                                   variant=v, api_key=api_key)


def run_form(endpoint_rows, **overrides):
    data = {"title": "", "endpoints": [e.id for e in endpoint_rows], "prompt_tokens": 64, "output_tokens": 8,
            "temperature": 0.7, "api": "completions", "load_mode": "concurrency", "concurrency_levels": "1,2",
            "request_rates": "", "arrivals": "poisson", "max_concurrency": "", "requests_per_level": 3,
            "duration_s": "", "warmup_requests": 1, "seed": "", "slo_ttft_ms": "", "slo_tpot_ms": "", "slo_e2e_ms": ""}
    data.update(overrides)
    return data
