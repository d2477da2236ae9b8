#!/usr/bin/env python3
"""How many chunks a second the load generator times correctly, for 1, 2, 4, 8, 16 processes.

For each process count P it measures closed-loop levels of growing width (streams per process:
8, 16, 32, ...) against the simulator, itself run as several processes sharing one port
(SO_REUSEPORT), and keeps the highest chunk rate at which

    the client's loop lag p99 < 5 ms (the worst shard's)  and
    the TTFT error p99 < 1 ms  (reported TTFT - (first chunk written - request arrived),
                                from the simulator's truth, on the machine's one monotonic clock)

while the simulator itself kept its schedule (its own lag, chunk written - chunk due, is
reported beside each line: a level where the simulator fell behind says so, since then the
server, not the client, was the limit). The first width that fails ends the ladder for that P.

Standalone: needs only Python 3.11+, httpx 0.28.1 / httpcore 1.0.9 (their own small
dependencies, h11, anyio, idna, certifi, come with them) and httptools 0.8.0: no Django, no
database, no network, nothing installed; it imports the engine from this repository's copy (benchmarks/engine).
About 6 minutes at most for the five process counts (`--budget-s`, default 330 s, bounds the
measuring; a process count it cannot reach in time is reported as skipped):

    python3 scripts/bench_capacity.py --procs 1,2,4,8,16 --out capacity.json

Writes the JSON (`--out`) and a markdown table beside it (same name, .md): the machine (cores,
CPU model), the versions, and one row per process count. The workload: prompts of 32 tokens,
64 output tokens at `--decode-ms` (10 ms: 100 tok/s per stream), prefill 5 ms, each level three
requests per stream. Method and earlier figures: benchmarks/engine/ACCURACY.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpcore  # noqa: E402
import httptools  # noqa: E402
import httpx  # noqa: E402

from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.client_figures import ClientFigures  # noqa: E402
from benchmarks.engine.metrics import percentile  # noqa: E402
from benchmarks.engine.shards import CHUNKS_PER_S_PER_PROCESS, available_cores, measure_level  # noqa: E402
from benchmarks.engine.simulator import SimConfig, prompt_key  # noqa: E402

PROMPT_TOKENS, OUTPUT_TOKENS, PREFILL_MS = 32, 64, 5.0
LOOP_LAG_LIMIT_MS, TTFT_ERROR_LIMIT_MS = 5.0, 1.0
WIDTHS = (8, 16, 32, 64, 128, 256, 512)  # streams per process


class IndexedSession(Session):
    """Prompts that say which request they are (so each is found in the simulator's truth by
    content, whichever shard sent it)."""

    def request(self, i: int, *_, **__):
        prompt = [100 + i % 20000, 100 + i // 20000] + [500 + j for j in range(PROMPT_TOKENS - 2)]
        return prompt, PROMPT_TOKENS, OUTPUT_TOKENS


def prompt_of(i: int) -> int:
    return prompt_key(IndexedSession.request(None, i)[0])


class ShardedSimulator:
    """`n` simulator processes on one port (SO_REUSEPORT), each with a control port of its own."""

    def __init__(self, n: int, decode_ms: float):
        self.n, self.decode_ms = n, decode_ms
        self.procs: list[subprocess.Popen] = []
        self.controls: list[str] = []
        self.url = ""

    def __enter__(self):
        config = SimConfig(dialect="vllm", prefill_ms=PREFILL_MS, decode_ms=self.decode_ms, slots=100_000, truth=True)
        port = 0
        for _ in range(self.n):
            proc = subprocess.Popen([sys.executable, "-m", "benchmarks.engine.simulator", "--port", str(port),
                                     "--reuse-port", "--config-json", json.dumps(asdict(config))],
                                    stdout=subprocess.PIPE, text=True, cwd=ROOT)
            self.procs.append(proc)
            listening, control = proc.stdout.readline(), proc.stdout.readline()
            if not listening.startswith("listening on ") or not control.startswith("control on "):
                raise RuntimeError(f"simulator did not start: {listening!r} {control!r}")
            self.url = listening.split()[-1]
            self.controls.append(control.split()[-1])
            port = int(self.url.rsplit(":", 1)[1])
        return self

    def truth(self) -> list[dict]:
        return [t for url in self.controls for t in httpx.get(url + "/_truth", timeout=60).json()]

    def cpu_s(self) -> float:
        total = 0.0
        for proc in self.procs:
            with open(f"/proc/{proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def __exit__(self, *exc):
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


async def ready_session(url: str, load: Load) -> IndexedSession:
    """A session of this workload for `load` against the simulator at `url`, checked and warmed up."""
    session = IndexedSession(Target(url, "vllm"), Workload(prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS,
                                                          warmup_requests=1, seed=1), loads=[load])
    try:
        pf = await session.preflight()
        if not pf.ok:
            raise RuntimeError(pf.cause)
        await session.prepare(pf.model)
    except BaseException:
        await session.close()
        raise
    return session


async def one_level(url: str, processes: int, streams: int) -> dict:
    load = Load(concurrency=streams, requests=streams * 3)
    session = await ready_session(url, load)
    try:
        if processes == 1:
            await session.open_connections(streams)
        return await measure_level(session, load, processes)
    finally:
        await session.close()


def judge(outcome, truth: list[dict], decode_ms: float) -> dict:
    by_prompt = {t["prompt"]: t for t in truth if t.get("chunks")}
    errors, lags, matched = [], [], 0
    for r in outcome.results:
        t = by_prompt.get(prompt_of(r.index))
        if t is None or not r.ok or r.first_content is None:
            continue
        matched += 1
        arrived = t.get("arrived") or t["received"]
        errors.append((r.first_content - (t["chunks"][0] - arrived)) * 1000)
    for t in by_prompt.values():
        lags.extend((c - (t["due"] + k * t["step"])) * 1000 for k, c in enumerate(t["chunks"]))
    figures = ClientFigures.from_dict(outcome.client)
    chunks = sum(len(r.chunk_times) for r in outcome.results)
    return {
        "requests": len(outcome.results), "failed": sum(1 for r in outcome.results if not r.ok), "matched": matched,
        "chunks": chunks, "chunk_rate": chunks / outcome.wall_s if outcome.wall_s else None,
        "nominal_chunk_rate": len({r.index for r in outcome.results}) / 3 * 1000.0 / decode_ms,
        "ttft_error_ms_p50": percentile(errors, 50), "ttft_error_ms_p99": percentile(errors, 99),
        "loop_lag_ms_p99": figures.loop_lag_ms_p99, "client_cpu_percent_per_shard": [s.cpu_percent for s in figures.shards],
        "sim_schedule_lag_ms_p50": percentile(lags, 50), "sim_schedule_lag_ms_p99": percentile(lags, 99),
    }


def machine() -> dict:
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cores": available_cores(), "cpu_count": os.cpu_count(), "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version(), "httpx": httpx.__version__,
            "httpcore": httpcore.__version__, "httptools": httptools.__version__, "load_1m_at_start": os.getloadavg()[0]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", default="1,2,4,8,16", help="process counts to measure (comma-separated)")
    ap.add_argument("--sim-procs", type=int, default=0,
                    help="simulator processes (0: the cores the client processes leave, at least 1, at most P)")
    ap.add_argument("--decode-ms", type=float, default=10.0)
    ap.add_argument("--budget-s", type=float, default=330.0, help="stop starting levels after this long")
    ap.add_argument("--out", default="capacity.json")
    args = ap.parse_args(argv)
    procs = [int(p) for p in args.procs.split(",") if p.strip()]
    began = time.monotonic()
    info = machine()
    rows = []
    for p in procs:
        sims = args.sim_procs or max(1, min(p, info["cores"] - p))
        row = {"processes": p, "simulator_processes": sims, "levels": [], "best": None}
        rows.append(row)
        for width in WIDTHS:
            if time.monotonic() - began > args.budget_s:
                row["skipped"] = "out of time" if not row["levels"] else "ladder cut short: out of time"
                break
            with ShardedSimulator(sims, args.decode_ms) as sim:
                cpu0 = sim.cpu_s()
                outcome = asyncio.run(one_level(sim.url, p, width * p))
                level = {"streams": width * p, **judge(outcome, sim.truth(), args.decode_ms)}
                level["sim_cpu_s"] = sim.cpu_s() - cpu0
            level["ok"] = bool(level["failed"] == 0 and level["loop_lag_ms_p99"] is not None
                               and level["loop_lag_ms_p99"] < LOOP_LAG_LIMIT_MS
                               and level["ttft_error_ms_p99"] is not None
                               and level["ttft_error_ms_p99"] < TTFT_ERROR_LIMIT_MS)
            row["levels"].append(level)
            print(f"P={p} sims={sims} streams={width * p}: {level['chunk_rate'] or 0:,.0f} chunks/s, loop lag p99 "
                  f"{level['loop_lag_ms_p99'] or 0:.2f} ms, TTFT error p99 {level['ttft_error_ms_p99'] or 0:+.3f} ms, "
                  f"sim lag p99 {level['sim_schedule_lag_ms_p99'] or 0:.2f} ms -> {'ok' if level['ok'] else 'over'}",
                  flush=True)
            if not level["ok"]:
                break
            row["best"] = level
    result = {"machine": info, "criteria": {"loop_lag_ms_p99_below": LOOP_LAG_LIMIT_MS,
                                            "ttft_error_ms_p99_below": TTFT_ERROR_LIMIT_MS},
              "workload": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS, "prefill_ms": PREFILL_MS,
                           "decode_ms": args.decode_ms, "requests_per_stream": 3},
              "engine_constant_chunks_per_s_per_process": CHUNKS_PER_S_PER_PROCESS,
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": time.monotonic() - began,
              "rows": rows}
    out = Path(args.out)
    out.write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [f"Capacity ({result['when']}): {m['cores']} cores ({m['cpu_model'] or 'CPU model unknown'}), "
             f"{m['platform']}, Python {m['python']}, httpx {m['httpx']}, httpcore {m['httpcore']}, "
             f"httptools {m.get('httptools', '(not used)')}, "
             f"load average {m['load_1m_at_start']:.2f} at the start. Highest chunk rate with loop lag p99 < "
             f"{LOOP_LAG_LIMIT_MS:g} ms and TTFT error p99 < {TTFT_ERROR_LIMIT_MS:g} ms.", "",
             "| processes | simulator processes | streams | chunks/s | loop lag p99 (ms) | TTFT error p50 / p99 (ms) "
             "| simulator schedule lag p50 / p99 (ms) | first width over the limits |", "|---|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        b = row["best"]
        over = next((lv for lv in row["levels"] if not lv["ok"]), None)
        over_text = (f"{over['streams']} streams: {over['chunk_rate'] or 0:,.0f} chunks/s, lag {over['loop_lag_ms_p99'] or 0:.1f}"
                     f" ms, TTFT error p99 {over['ttft_error_ms_p99'] or 0:+.2f} ms" if over else row.get("skipped", "–"))
        if b is None:
            lines.append(f"| {row['processes']} | {row['simulator_processes']} | – | none passed | – | – | – | {over_text} |")
            continue
        lines.append(f"| {row['processes']} | {row['simulator_processes']} | {b['streams']} | {b['chunk_rate']:,.0f} | "
                     f"{b['loop_lag_ms_p99']:.2f} | {b['ttft_error_ms_p50']:+.3f} / {b['ttft_error_ms_p99']:+.3f} | "
                     f"{b['sim_schedule_lag_ms_p50']:.2f} / {b['sim_schedule_lag_ms_p99']:.2f} | {over_text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
