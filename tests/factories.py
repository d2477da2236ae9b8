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


def measured_run(endpoints, levels=(1, 8), requests=20, owner=None, seed=0, ttft=0.1, gap=0.02, tokens=20,
                 prompt_tokens=512, gpu=None, server=None, **fields):
    """A finished run stored through the real service (level_store), from synthetic requests."""
    import random
    from benchmarks.engine.client import LevelOutcome
    from benchmarks.engine.metrics import RequestResult, level_wall_time
    from benchmarks.models import Run
    from benchmarks.services import level_store

    rng = random.Random(seed)
    run = Run.objects.create(owner=owner, prompt_tokens=prompt_tokens, output_tokens=tokens, temperature=0.7,
                             concurrency_levels=list(levels), requests_per_level=requests, warmup_requests=0,
                             status=Run.SUCCEEDED, progress_total=len(endpoints) * len(levels) * requests, **fields)
    run.endpoints.set(endpoints)
    for e in endpoints:
        for index, c in enumerate(levels):
            results = []
            for i in range(requests):
                first = ttft * (1 + rng.random())
                chunks = [first + gap * k * (1 + 0.1 * rng.random()) for k in range(tokens)]
                results.append(RequestResult(
                    index=i, sent=(i // c) * chunks[-1], prompt_tokens_asked=prompt_tokens, output_tokens_asked=tokens,
                    first_content=first, chunk_times=chunks, chunk_tokens=[1] * tokens, prompt_tokens=prompt_tokens,
                    output_tokens=tokens, client_output_tokens=tokens,
                    timings={"prompt_ms": first * 600, "predicted_per_second": 1 / gap, "prompt_per_second": 5000.0},
                    finish_reason="length"))
            outcome = LevelOutcome(c, results, 1_700_000_000.0 + index * 60, level_wall_time(results))
            level_store(run=run, endpoint=e, outcome=outcome, level_index=index, gpu=gpu, server=server)
    return run
