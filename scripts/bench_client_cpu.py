#!/usr/bin/env python3
"""Client CPU per streamed chunk: the load generator's own cost, robust to a noisy machine.

For each width (closed-loop streams) it measures one level against the simulator (its own
process) and reports the client process's CPU time over the level (time.process_time: every
thread of the process, the socket-reading one included) divided by the chunks it received,
with the level's loop lag p99 and wall time. CPU time, unlike chunks/s, hardly moves when
other work shares the cores, so before/after figures can be compared on a shared 2-core
machine; the loop lag cannot (it is what the machine's other work does to us too).

    python3 scripts/bench_client_cpu.py --widths 8,64,256 --decode-ms 10,10,40 --repeat 2

`--profile FILE` writes a cProfile of the event loop thread over the measured levels (the
socket thread is not in it: cProfile profiles one thread). Standalone like bench_capacity.py:
the engine from this repository, httpx/httpcore/httptools, no Django. Figures:
benchmarks/engine/ACCURACY.md, "A client below httpx".
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.engine import http1  # noqa: E402
from benchmarks.engine.client import Load  # noqa: E402
from benchmarks.engine.simulator import SimulatorProcess  # noqa: E402
from scripts.bench_capacity import ready_session  # noqa: E402


def reader_cpu_s() -> float:
    """CPU seconds of the socket-reading thread (http1._SocketReader) so far: 0 when none runs."""
    reader = http1._SocketReader._instance
    if reader is None or not reader.thread.is_alive():
        return 0.0
    with open(f"/proc/self/task/{reader.thread.native_id}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_width(url: str, streams: int, rounds: int, profile: cProfile.Profile | None) -> dict:
    load = Load(concurrency=streams, requests=streams * rounds)
    session = await ready_session(url, load)  # bench_capacity.py's workload: 32-token prompts, 64 out
    try:
        await session.open_connections(streams)
        if profile is not None:
            profile.enable()
        cpu0, reader0 = time.process_time(), reader_cpu_s()
        outcome = await session.measure(load, open_pool=False)
        cpu, reader = time.process_time() - cpu0, reader_cpu_s() - reader0
        if profile is not None:
            profile.disable()
    finally:
        await session.close()
    chunks = sum(len(r.chunk_times) for r in outcome.results)
    failed = [r.error for r in outcome.results if not r.ok]
    return {"streams": streams, "requests": len(outcome.results), "failed": len(failed),
            "first_error": failed[0] if failed else None, "chunks": chunks, "cpu_s": cpu,
            "us_per_chunk": cpu / chunks * 1e6 if chunks else None,
            "reader_us_per_chunk": reader / chunks * 1e6 if chunks else None, "wall_s": outcome.wall_s,
            "loop_lag_ms_p99": outcome.client.get("loop_lag_ms_p99"),
            "parse_cpu_s": outcome.client.get("parse_cpu_s"), "load_1m": os.getloadavg()[0]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--widths", default="8,64,256", help="streams per level (comma-separated)")
    ap.add_argument("--decode-ms", default="10,10,40",
                    help="the simulator's time per token for each width (one value: for all)")
    ap.add_argument("--rounds", type=int, default=4, help="requests per stream in each level")
    ap.add_argument("--repeat", type=int, default=1, help="levels per width (alternate runs see the same noise)")
    ap.add_argument("--profile", default="", help="write a cProfile of the event loop thread here")
    ap.add_argument("--json", default="", help="also write the figures here")
    args = ap.parse_args(argv)
    widths = [int(w) for w in args.widths.split(",")]
    decodes = [float(d) for d in args.decode_ms.split(",")]
    decodes = decodes * len(widths) if len(decodes) == 1 else decodes
    profile = cProfile.Profile() if args.profile else None
    rows = []
    for _ in range(args.repeat):
        for streams, decode_ms in zip(widths, decodes):
            with SimulatorProcess(dialect="vllm", prefill_ms=5.0, decode_ms=decode_ms, slots=100_000) as sim:
                row = {"decode_ms": decode_ms, **asyncio.run(one_width(sim.url, streams, args.rounds, profile))}
            rows.append(row)
            print(f"{streams:4d} streams at {decode_ms:g} ms/token: {row['us_per_chunk'] or 0:6.1f} µs CPU/chunk "
                  f"(socket thread {row['reader_us_per_chunk'] or 0:5.1f}; {row['chunks']} chunks, {row['failed']} failed), "
                  f"loop lag p99 {row['loop_lag_ms_p99'] or 0:.2f} ms, "
                  f"wall {row['wall_s']:.2f} s, load {row['load_1m']:.2f}", flush=True)
    if profile is not None:
        profile.dump_stats(args.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
