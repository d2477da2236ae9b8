#!/usr/bin/env python
"""Measure a running llama-server on a real NVIDIA GPU with the product's own engine — GPU
telemetry (pynvml) and the server's /metrics on the same clock — and compare our decode speed
and TTFT with the server's own `timings`. Django-free: runs wherever the engine's packages are.

    python scripts/gpu_check.py http://127.0.0.1:8080 --levels 1,8 --requests 16 --out result.json
"""
import argparse
import asyncio
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.engine import gpu as gpu_telemetry  # noqa: E402
from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.metrics import summarize_level  # noqa: E402
from benchmarks.engine.observe import measure_observed  # noqa: E402
from benchmarks.engine.server_metrics import server_identity  # noqa: E402


async def main(a) -> dict:
    loads = [Load(concurrency=int(x), requests=a.requests) for x in a.levels.split(",")]
    wl = Workload(prompt_tokens=a.prompt_tokens, output_tokens=a.output_tokens, temperature=0.7,
                  warmup_requests=2, seed=1)
    session = Session(Target(a.url, "llamacpp"), wl, loads=loads)
    pf = await session.preflight()
    assert pf.ok, pf.cause
    identity = await server_identity(session.client, a.url, "llamacpp")
    await session.prepare(pf.model)
    out = {"probe": gpu_telemetry.probe().to_dict(), "server": identity, "levels": []}
    for load in loads:
        outcome, gpu, server = await measure_observed(session, load, gpu_indices=[0], gpu_interval_s=0.1)
        s = summarize_level(outcome.results, outcome.wall_s).to_dict()  # as a LevelResult stores it
        ratios = [(1 / r.tpot) / ((r.timings["predicted_n"] - 1) / r.timings["predicted_ms"] * 1000)
                  for r in outcome.results if r.ok and r.tpot and r.timings and r.timings.get("predicted_n", 0) > 1]
        prompt_ms = [r.timings["prompt_ms"] for r in outcome.results if r.ok and r.timings]
        out["levels"].append({
            "concurrency": load.concurrency, "completed": s["completed"], "failed": s["failed"],
            "ttft_ms": s["ttft_ms"], "decode_tok_s": s["decode_tok_s"], "aggregate_tok_s": s["aggregate_tok_s"],
            "server_decode_tok_s": s["server_decode_tok_s"], "server_prompt_ms_p50": statistics.median(prompt_ms),
            "ours_over_server_decode": {"p50": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
            "prompt_tokens": sorted({r.prompt_tokens for r in outcome.results}),
            "gpu": {k: v for k, v in gpu.summary.to_dict().items() if k != "gpus"},
            "server_metrics": server.summary.to_dict(), "client": outcome.client,
        })
    await session.close()
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--levels", default="1,8")
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--output-tokens", type=int, default=100)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    result = asyncio.run(main(args))
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        open(args.out, "w").write(text)
    print(f"{'c':>3} {'TTFT p50':>9} {'srv prompt':>10} {'decode p50':>10} {'srv decode':>10} {'ours/srv':>8} "
          f"{'aggregate':>9} {'peak GiB':>8} {'max W':>6} {'max °C':>6} {'util %':>6}")
    for lv in result["levels"]:
        g = lv["gpu"]
        print(f"{lv['concurrency']:>3} {lv['ttft_ms']['p50']:9.1f} {lv['server_prompt_ms_p50']:10.1f} "
              f"{lv['decode_tok_s']['p50']:10.1f} {lv['server_decode_tok_s']['p50']:10.1f} "
              f"{lv['ours_over_server_decode']['p50']:8.4f} {lv['aggregate_tok_s']:9.1f} "
              f"{(g.get('peak_memory_used_mib') or 0) / 1024:8.2f} {g.get('max_power_w') or 0:6.0f} "
              f"{g.get('max_temperature_c') or 0:6} {g.get('mean_utilization_gpu') or 0:6.0f}")
