#!/usr/bin/env python
"""How fast the result pages are with big runs: server time and queries of the run page with
10 000 request records, chart payload sizes, and the comparison page with 5 runs; then the
largest report an import accepts (MAX_IMPORT_LEVELS levels): its import (time, peak Python
memory), its page, chart and comparison, and /compare/ listing it beside every other report;
and what refusing the 16 MB, 200 000-entry llama-bench file costs. With --runs-list: a lab of 10 000
runs (bulk-created, with a real run's levels copied into each finished one) and the runs list,
filtered lists, the run picker (the list with 12 runs ticked, and /compare/ with them) and the
API's runs list; its figures are written to benchmarks/engine/results/pages_runs_list.json.

Targets: run page < 300 ms of server time with at most 20 queries; every chart payload < 1 MB;
the comparison page as fast with 5 runs; the largest import's page, its comparison and /compare/
< 300 ms each; with 10 000 runs, every runs-list page, the picker and the API list < 300 ms with
at most 16 queries, whatever the number of runs.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/v100site_bench .venv/bin/python scripts/bench_pages.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/v100site_bench .venv/bin/python scripts/bench_pages.py --runs-list

It creates the database's tables if needed and adds its own runs (stored through the real
level_store service from synthetic requests); it never deletes anything.
"""
import json
import os
import statistics
import sys
import time
import tracemalloc
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
    from factories import endpoint, gpu_samples, measured_run

    ensure_database()
    call_command("migrate", verbosity=0)
    if "--runs-list" in sys.argv:
        bench_runs_list()
        return
    tag = str(int(time.time()))
    gpu = gpu_samples(ticks=3000)  # 10 minutes at 5 Hz per level
    print("creating a run with 10 000 request records ...", flush=True)
    t = time.perf_counter()
    big = measured_run([endpoint(name=f"bench-llama-{tag}", backend="llamacpp"),
                        endpoint(name=f"bench-vllm-{tag}", backend="vllm")],
                       levels=(1, 8, 16, 32, 64), requests=1000, tokens=100, gpu=gpu, server=True)
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

    import_rows, import_notes = bench_imports(client, tag)
    rows += import_rows

    print(f"\n{connection.vendor}, Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.2f}")
    print(f"{'page':40} {'server ms':>10} {'queries':>8} {'bytes':>10}")
    for name, ms, q, size in rows:
        print(f"{name:40} {ms:10.1f} {q:8d} {size:10d}")
    print()
    for line in import_notes:
        print(line)
    run_page = rows[0]
    ok = run_page[1] < 300 and run_page[2] <= 20 and all(size < 1_000_000 for *_, size in rows)
    print("\ntargets (run page < 300 ms and <= 20 queries; every payload < 1 MB):", "met" if ok else "NOT met")
    ok = all(ms < 300 for _, ms, *_ in import_rows)
    print("targets (largest import's page, its comparison and /compare/ < 300 ms):", "met" if ok else "NOT met")


def largest_import_file(levels: int) -> bytes:
    """`levels` appended vllm bench serve results, the level kind with the most figures and notes."""
    line = json.loads((ROOT / "tests" / "data" / "imports" / "vllm_bench_serve_appended_c1_c8.jsonl")
                      .read_text().splitlines()[1])
    return "\n".join(json.dumps({**line, "max_concurrency": i + 1}) for i in range(levels)).encode()


def measured(fn):
    """(result or the exception raised, seconds, peak MiB of Python allocations) of fn()."""
    tracemalloc.start()
    t = time.perf_counter()
    try:
        result = fn()
    except Exception as exc:  # a refused import: what refusing cost is the figure
        result = exc
    seconds = time.perf_counter() - t
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return result, seconds, peak


def bench_imports(client: Client, tag: str) -> tuple[list, list[str]]:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from benchmarks.services import comparison_create, report_import

    member, _ = get_user_model().objects.get_or_create(username=f"bench-{tag}")
    client.force_login(member)
    levels = settings.MAX_IMPORT_LEVELS
    data = largest_import_file(levels)
    report, seconds, peak = measured(lambda: report_import(owner=member, data=data, filename="largest.jsonl"))
    stored = len(json.dumps(report.report))
    notes = [f"largest accepted import: {levels} levels, file {len(data) / 2**20:.1f} MiB, stored report "
             f"{stored / 2**20:.2f} MiB; imported in {seconds * 1000:.0f} ms, peak Python memory {peak:.0f} MiB"]
    entries = json.dumps([{"n_prompt": 0, "n_gen": 128, "avg_ts": 56.2,
                           "model_filename": "DeepSeek-R1-Q4_K_M.gguf"}] * 200_000).encode()  # ~17 MiB
    refused, seconds, peak = measured(lambda: report_import(owner=member, data=entries, filename="huge.json"))
    notes.append(f"200 000-entry llama-bench file ({len(entries) / 2**20:.1f} MiB): refused in {seconds * 1000:.0f} ms, "
                 f"peak Python memory {peak:.0f} MiB: {refused}")
    # A file at the byte limit, made of the values an import reads most (per-request arrays).
    detailed = json.loads((ROOT / "tests" / "data" / "imports" / "vllm_bench_serve_c8_detailed.json").read_text())
    detailed["itls"] = [[0.0123456789012345] * 100] * 9000
    big = json.dumps(detailed).encode()
    result, seconds, peak = measured(lambda: report_import(owner=member, data=big, filename="detailed.json"))
    notes.append(f"{len(big) / 2**20:.1f} MiB vllm --save-detailed file (900 000 values): "
                 f"{'imported' if not isinstance(result, Exception) else 'refused'} in {seconds * 1000:.0f} ms, "
                 f"peak Python memory {peak:.0f} MiB")

    rows = []
    ms, q, size = timed(client, report.get_absolute_url())
    rows.append((f"import page, {levels} levels", ms, q, size))
    ms, q, size = timed(client, reverse("import-chart", args=[report.public_id, "json"]), repeat=3)
    rows.append((f"import chart, {levels} levels", ms, q, size))
    comparison = comparison_create(owner=member, runs=[], reports=[report], title="largest import")
    ms, q, size = timed(client, comparison.get_absolute_url())
    rows.append((f"comparison page, {levels}-level import", ms, q, size))
    ms, q, size = timed(client, reverse("comparison-new"))
    from benchmarks.models import ImportedReport, Run

    rows.append((f"/compare/ ({ImportedReport.objects.count()} reports, {Run.objects.count()} runs)", ms, q, size))
    return rows, notes


RUNS = 10_000
LIST_TARGET_MS, LIST_MAX_QUERIES = 300, 16


def bench_runs_list() -> None:
    """Months of runs: RUNS runs of 12 endpoints on 4 hosts by 6 members, 20 minutes apart (about
    five months), each finished one with a copy of a real measured run's levels."""
    import platform

    import django as django_module
    from django.contrib.auth import get_user_model

    from benchmarks.forms import MAX_COMPARED_RUNS
    from benchmarks.models import LevelResult, Run
    from factories import bulk_runs, endpoint, measured_run

    tag = str(int(time.time()))
    owners = [get_user_model().objects.create_user(f"bench-{tag}-{i}") for i in range(6)]
    endpoints = [endpoint(name=f"bench-{tag}-{backend}-{i}", backend=backend, host=f"bench-{tag}-host-{i % 4}",
                          quantization=quant)
                 for i, (backend, quant) in enumerate([("vllm", "fp8_e4m3"), ("llamacpp", "gguf_q4_k_m"),
                                                       ("vllm", "awq")] * 4)]
    template = measured_run(endpoints[:1], levels=(1, 8, 16, 32), requests=20, tokens=20)
    print(f"creating {RUNS:,} runs ...", flush=True)
    t = time.perf_counter()
    runs = bulk_runs(RUNS, endpoints, owners, template=template, seed=int(tag))
    created_s = time.perf_counter() - t
    print(f"  stored in {created_s:.1f} s")
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    client = Client(HTTP_HOST="localhost")
    client.force_login(owners[0])
    picked = [r.public_id for r in runs if r.status in Run.FINISHED][-MAX_COMPARED_RUNS:]
    list_url = reverse("run-list")
    pages = [
        ("runs list, page 1", list_url),
        ("runs list, page 100", f"{list_url}?page=100"),
        ("runs list, last page", f"{list_url}?page=9999"),
        ("filtered: backend + host + status", f"{list_url}?backend=llamacpp&host={endpoints[1].host.name}"
                                              "&status=succeeded"),
        ("filtered: endpoint + flagged", f"{list_url}?endpoint={endpoints[2].name}&flags=few_samples"),
        ("filtered: title text, all archived too", f"{list_url}?q=release&archived=include"),
        ("filtered: owner + date range + model", f"{list_url}?owner={owners[3].username}&created_after="
                                                 f"{runs[RUNS // 3].created:%Y-%m-%d}&created_before="
                                                 f"{runs[2 * RUNS // 3].created:%Y-%m-%d}&model="
                                                 f"{endpoints[0].variant.model.name}"),
        ("picker: list with 12 ticked, page 50", f"{list_url}?page=50&" + "&".join(f"runs={p}" for p in picked)),
        ("picker: /compare/ with 12 ticked", f"{reverse('comparison-new')}?" + "&".join(f"runs={p}" for p in picked)),
        ("API runs list, 100 a page", "/api/v1/runs/?page_size=100"),
        ("API runs list, filtered, page 5", "/api/v1/runs/?backend=vllm&flags=none&page=5&page_size=100"),
    ]
    rows = [(name, *timed(client, url)) for name, url in pages]
    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        postgres = cursor.fetchone()[0].split(",")[0]
    machine = {"python": sys.version.split()[0], "django": django_module.get_version(), "database": postgres,
               "platform": platform.platform(), "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2),
               "processor": platform.processor() or platform.machine()}
    print(f"\n{machine}")
    print(f"{Run.objects.count():,} runs, {LevelResult.objects.count():,} levels in the database")
    print(f"{'page':44} {'server ms':>10} {'queries':>8} {'bytes':>10}")
    for name, ms, q, size in rows:
        print(f"{name:44} {ms:10.1f} {q:8d} {size:10d}")
    ok = all(ms < LIST_TARGET_MS and q <= LIST_MAX_QUERIES for _, ms, q, _ in rows)
    print(f"\ntargets (< {LIST_TARGET_MS} ms and <= {LIST_MAX_QUERIES} queries each):", "met" if ok else "NOT met")
    out = ROOT / "benchmarks" / "engine" / "results" / "pages_runs_list.json"
    out.write_text(json.dumps({
        "what": f"runs list, picker and API list with {Run.objects.count():,} runs in the database "
                f"(scripts/bench_pages.py --runs-list); median of 7 requests after one warm-up, measured "
                "in-process with Django's test client (server time, no network)",
        "machine": machine, "runs_created_in_s": round(created_s, 1),
        "targets": {"server_ms": LIST_TARGET_MS, "queries": LIST_MAX_QUERIES, "met": ok},
        "pages": [{"page": name, "server_ms": round(ms, 1), "queries": q, "bytes": size} for name, ms, q, size in rows],
    }, indent=1) + "\n")
    print(f"written to {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
