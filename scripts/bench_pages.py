#!/usr/bin/env python
"""How fast the result pages are with big runs: server time and queries of the run page with
10 000 request records, chart payload sizes, and the comparison page with 5 runs.

Targets: run page < 300 ms of server time with at most 20 queries; every chart payload < 1 MB;
the comparison page as fast with 5 runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/v100site_bench .venv/bin/python scripts/bench_pages.py

It creates the database's tables if needed and adds its own runs (stored through the real
level_store service from synthetic requests); it never deletes anything.
"""
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "v100site.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/v100site_bench")

import django  # noqa: E402

django.setup()
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.urls import reverse  # noqa: E402


def ensure_database() -> None:
    import psycopg

    if connection.vendor != "postgresql":
        return
    s = connection.settings_dict
    with psycopg.connect(host=s["HOST"], port=s["PORT"] or 5432, user=s["USER"], dbname="postgres",
                         autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [s["NAME"]]).fetchone():
            conn.execute(f'CREATE DATABASE "{s["NAME"]}"')


def timed(client: Client, url: str, repeat: int = 7) -> tuple[float, int, int]:
    """Median server time (ms), queries and bytes of GET url (first call warms caches)."""
    client.get(url)
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            t = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - t) * 1000)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(times), len(queries), len(response.content)


def main() -> None:
    from factories import endpoint, measured_run

    ensure_database()
    call_command("migrate", verbosity=0)
    tag = str(int(time.time()))
    gpu_series = {"t": [i * 0.2 for i in range(3000)],
                  "gpus": {"0": {k: [100.0] * 3000 for k in ("memory_used_mib", "utilization_gpu", "temperature_c", "power_w")}}}
    gpu = {"summary": {"samples": 3000}, "series": gpu_series}
    server = {"summary": {"samples": 1200}, "series": {"t": [i * 0.5 for i in range(1200)], "running": [8] * 1200,
                                                      "waiting": [0] * 1200, "kv_cache_usage": [0.5] * 1200}}
    print("creating a run with 10 000 request records ...", flush=True)
    t = time.perf_counter()
    big = measured_run([endpoint(name=f"bench-llama-{tag}", backend="llamacpp"),
                        endpoint(name=f"bench-vllm-{tag}", backend="vllm")],
                       levels=(1, 8, 16, 32, 64), requests=1000, tokens=100, gpu=gpu, server=server)
    print(f"  stored in {time.perf_counter() - t:.1f} s")
    client = Client(HTTP_HOST="localhost")
    rows = []
    ms, q, size = timed(client, big.get_absolute_url())
    rows.append(("run page, 10 000 requests", ms, q, size))
    for name in ("throughput", "ttft", "tpot", "e2e", "timeline", "gpu", "server"):
        ms, q, size = timed(client, reverse("run-chart", args=[big.public_id, name, "json"]), repeat=3)
        rows.append((f"chart {name}", ms, q, size))
    runs = [big] + [measured_run([endpoint(name=f"bench-{tag}-{i}", backend="vllm")], levels=(1, 8, 16, 32, 64),
                                 requests=200, tokens=100) for i in range(4)]
    from benchmarks.services import comparison_create

    comparison = comparison_create(owner=None, runs=runs, reports=[], title="5 runs")
    ms, q, size = timed(client, comparison.get_absolute_url())
    rows.append(("comparison page, 5 runs", ms, q, size))
    ms, q, size = timed(client, reverse("comparison-chart", args=[comparison.public_id, "json"]), repeat=3)
    rows.append(("comparison chart, 5 runs", ms, q, size))

    print(f"\n{connection.vendor}, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'page':34} {'server ms':>10} {'queries':>8} {'bytes':>10}")
    for name, ms, q, size in rows:
        print(f"{name:34} {ms:10.1f} {q:8d} {size:10d}")
    run_page = rows[0]
    ok = run_page[1] < 300 and run_page[2] <= 20 and all(size < 1_000_000 for *_, size in rows)
    print("\ntargets (run page < 300 ms and <= 20 queries; every payload < 1 MB):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
