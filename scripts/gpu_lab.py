#!/usr/bin/env python
"""The lab on a real NVIDIA GPU, Django-free: the product's own launcher starts a CUDA llama-server
from a recipe (the V100 write-up's flags, swept over --parallel), times start-up to /health and
to the first token, reads GPU memory before the start, after load (per process, pynvml) and at
its peak during the levels, measures the levels with the engine and its GPU telemetry, stops the
server (SIGTERM, then SIGKILL) and checks the memory was given back; then starts a recipe that
cannot fit (a context far past the GPU's memory) to show what "did not start" records.

    python scripts/gpu_lab.py --server WORK/build/bin/llama-server --model WORK/qwen2-7b-q4_k_m.gguf \
        --parallel 1,8 --out OUT/gpu_lab.json

On a CPU-only machine it runs the same way, with RSS in place of GPU memory (and says so).
"""
import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.engine import gpu as gpu_telemetry  # noqa: E402
from benchmarks.engine import launcher  # noqa: E402
from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.metrics import summarize_level  # noqa: E402
from benchmarks.engine.observe import measure_observed  # noqa: E402
from benchmarks.engine.server_metrics import server_identity  # noqa: E402

# The write-up's llama.cpp server, as a recipe's argument list.
ARGS = ["-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "8192", "-ngl", "99", "--metrics"]


async def measure_levels(url: str, levels: list[int], requests: int, gpu_indices, per_stream: int = 0) -> dict:
    """Each level measured with the engine and its GPU telemetry (every GPU in `gpu_indices`),
    at least `requests` requests and `per_stream` per stream. Also scripts/gpu_multi.py's."""
    loads = [Load(concurrency=c, requests=max(requests, per_stream * c)) for c in levels]
    session = Session(Target(url, "llamacpp"), Workload(prompt_tokens=512, output_tokens=100, warmup_requests=2,
                                                        seed=1), loads=loads)
    try:
        preflight = await session.preflight()
        if not preflight.ok:
            return {"error": preflight.cause}
        identity = await server_identity(session.client, url, "llamacpp")
        out = {"server": {k: identity.get(k) for k in ("n_ctx", "total_slots", "build_info")}, "levels": []}
        fits = session.context_check(identity)
        if fits and not fits.ok:  # as the worker does: no request that is sure to fail
            return {**out, "error": f"{fits.check}: {fits.detail}"}
        await session.prepare(preflight.model)
        for load in loads:
            outcome, gpu, _ = await measure_observed(session, load, gpu_indices=list(gpu_indices) if gpu_indices
                                                     else gpu_indices, gpu_interval_s=0.1)
            s = summarize_level(outcome.results, outcome.wall_s)
            out["levels"].append({
                "concurrency": load.concurrency, "completed": s.completed, "failed": s.failed,
                "ttft_ms_p50": s.stat("ttft_ms", "p50"), "decode_tok_s_p50": s.stat("decode_tok_s", "p50"),
                "aggregate_tok_s": s.stat("aggregate_tok_s"),
                "gpu_peak_memory_used_mib": gpu.summary.peak_memory_used_mib,
                "gpu_peak_process_memory_mib": [g.peak_process_memory_mib for g in gpu.summary.gpus],
                "gpu_status": gpu.summary.status,
                "energy": energy_figures(gpu.summary, s.output_tokens),
                "gpus": [{"index": g.index, "peak_memory_used_mib": g.peak_memory_used_mib,
                          "mean_utilization_gpu": g.mean_utilization_gpu,
                          "mean_utilization_memory": g.mean_utilization_memory, "max_power_w": g.max_power_w}
                         for g in gpu.summary.gpus]})
        return out
    finally:
        await session.close()


def energy_figures(summary, output_tokens: int) -> dict:
    """The level's GPU energy both ways: NVML's counter over its span and the power samples
    integrated over theirs (the spans differ by the sampling interval, so their mean powers are
    compared as well as their joules), and J per output token by each."""
    g = summary.gpus[0] if summary.gpus else None
    counter, integrated = summary.energy_j, summary.energy_integrated_j
    out = {"output_tokens": output_tokens, "counter_j": counter, "integrated_j": integrated,
           "counter_s": g.energy_s if g else None, "sampled_s": g.sampled_s if g else None,
           "idle_power_w": summary.idle_power_w, "idle_share": summary.idle_share,
           "j_per_token_counter": counter / output_tokens if counter and output_tokens else None,
           "j_per_token_integrated": integrated / output_tokens if integrated and output_tokens else None}
    if counter and integrated:
        out["integrated_over_counter"] = integrated / counter
        if g and g.energy_s and g.sampled_s:
            out["mean_power_w_counter"] = counter / g.energy_s
            out["mean_power_w_integrated"] = integrated / g.sampled_s
    return out


def one_launch(spec, allow, state, gpu_indices, levels, requests) -> dict:
    server, report = launcher.start(spec, allow, state, timeout_s=600, gpu_indices=gpu_indices)
    entry = {"setting": spec.setting, "label": spec.label}
    if server is None:
        entry["report"] = report.to_dict()
        return entry
    watch = launcher.MemoryWatch(server.pgid, gpu_indices, baseline=report.memory_before).start()
    try:
        entry.update(asyncio.run(measure_levels(server.base_url, levels, requests, gpu_indices)))
    finally:
        peak = watch.stop()
        launcher.finish(server, report, gpu_indices=gpu_indices, peak=peak, freed_timeout_s=60)
    entry["report"] = report.to_dict()
    return entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="the llama-server binary")
    ap.add_argument("--model", required=True, help="the GGUF file")
    ap.add_argument("--parallel", default="1,8", help="the sweep: values of --parallel, comma-separated")
    ap.add_argument("--requests", type=int, default=16, help="requests per level")
    ap.add_argument("--no-failure", action="store_true", help="skip the recipe that cannot fit")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    server, model = os.path.abspath(a.server), os.path.abspath(a.model)
    allow = launcher.Allowlist.from_settings(server, os.path.dirname(model), "18100-18199")
    probe = gpu_telemetry.probe()
    gpu_indices = [0] if probe.ok and probe.gpus else None
    state = tempfile.mkdtemp(prefix="gpu-lab-")
    result = {"probe": probe.to_dict(), "recipe": {"executable": server, "model": model, "args": ARGS},
              "launches": [], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for parallel in [int(p) for p in a.parallel.split(",")]:
        spec = launcher.ServerSpec(server, model, tuple(ARGS), {"--parallel": parallel}, backend="llamacpp",
                                   label=f"llama.cpp Q4_K_M --parallel {parallel}")
        result["launches"].append(one_launch(spec, allow, state, gpu_indices, sorted({1, parallel}), a.requests))
    if not a.no_failure:
        # 4 Mi tokens of f16 KV cache for this shape is ~224 GiB: more than any one GPU holds.
        spec = launcher.ServerSpec(server, model, tuple(ARGS), {"-c": 4194304, "--fit": "off", "--parallel": 1},
                                   backend="llamacpp", label="llama.cpp Q4_K_M -c 4194304 (cannot fit)")
        result["launches"].append(one_launch(spec, allow, state, gpu_indices, [1], 2))
    text = json.dumps(result, indent=1, default=str)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(f"{'setting':<44} {'status':<14} {'health s':>8} {'1st tok s':>9} {'loaded MiB':>10} {'peak MiB':>9} "
          f"{'freed':>5}  cause")
    for entry in result["launches"]:
        r = launcher.LaunchReport.from_dict(entry["report"])
        print(f"{entry['label']:<44} {r.status:<14} {r.health_s or 0:8.2f} {r.first_token_s or 0:9.2f} "
              f"{r.memory_loaded.server_mib or 0:10.0f} {r.memory_peak.server_mib or 0:9.0f} "
              f"{str(r.memory_freed):>5}  {r.cause.code} {r.cause.line[:80]}")
        if entry.get("error"):
            print(f"    not measured: {entry['error']}")
        for lv in entry.get("levels", []):
            if not lv["completed"]:
                print(f"    c={lv['concurrency']:<3} all {lv['failed']} requests failed")
                continue
            print(f"    c={lv['concurrency']:<3} decode p50 {lv['decode_tok_s_p50']:7.1f} tok/s, aggregate "
                  f"{lv['aggregate_tok_s']:7.1f} tok/s, TTFT p50 {lv['ttft_ms_p50']:7.1f} ms, "
                  f"{lv['failed']} failed")
            e = lv.get("energy") or {}
            if e.get("counter_j") is not None:
                print(f"          energy: counter {e['counter_j']:.1f} J over {e['counter_s']:.2f} s "
                      f"({e['j_per_token_counter']:.4f} J/token), integrated {e['integrated_j'] or 0:.1f} J over "
                      f"{e['sampled_s'] or 0:.2f} s ({e['j_per_token_integrated'] or 0:.4f} J/token), "
                      f"ratio {e.get('integrated_over_counter', 0):.4f}, idle {e['idle_power_w'] or 0:.0f} W")
    return 0


if __name__ == "__main__":
    sys.exit(main())
