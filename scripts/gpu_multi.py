#!/usr/bin/env python
"""One GPU against two, on a machine with two NVIDIA GPUs, Django-free: the product's own launcher
starts the CUDA llama-server from recipes as a host's worker does (the GPUs given as
CUDA_VISIBLE_DEVICES in PCI bus order, refused outside LAB_GPUS-style bounds), and the engine
measures each with its GPU telemetry of every GPU the server was given:

    the 7B-shape Q4_K_M   on GPU 0 (--split-mode none), on GPUs 0,1 with --split-mode layer and row
    the 14B-shape Q4_K_M  the same way

at levels 1, 8 and 32; beside them the probe's topology (common ancestor, P2P, NVLinks per pair)
and `nvidia-smi topo -m`, and whether the two agree. Writes OUT/gpu_multi.json (everything) and
prints the table (gpu_multi.sh keeps it as gpu_multi.txt).

    python scripts/gpu_multi.py --server WORK/build/bin/llama-server \\
        --model 7b=WORK/qwen2-7b-q4_k_m.gguf --model 14b=WORK/qwen2-14b-q4_k_m.gguf --out OUT/gpu_multi.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.engine import gpu as gpu_telemetry  # noqa: E402
from benchmarks.engine import launcher, multi_gpu  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_lab import measure_levels  # noqa: E402  (the single-GPU lab's, beside this script)

LEVELS = (1, 8, 32)
# The write-up's llama.cpp server as a recipe's argument list, with a slot for each user of the
# highest level (32 x 1024 tokens of context: 512 prompt + 100 output each, with room).
ARGS = ("-m", "{model}", "--host", "{host}", "--port", "{port}", "-c", "32768", "--parallel", "32", "-ngl", "99",
        "--metrics")
# (label, GPUs given, the setting): one GPU, then the two split modes over both.
SPREADS = (("one GPU", (0,), {"--split-mode": "none"}),
           ("layer split", (0, 1), {"--split-mode": "layer"}),
           ("row split", (0, 1), {"--split-mode": "row"}))
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plan(models: dict[str, str]) -> list[dict]:
    """Every server to start: per model (name -> GGUF path), one per spread, as the recipe's spec
    the launcher starts and the spread the advisor reads from its flags."""
    out = []
    for name, path in models.items():
        for label, gpus, setting in SPREADS:
            spread = multi_gpu.spread("llamacpp", setting, ARGS, len(gpus))
            out.append({"model": name, "path": path, "label": f"{name} Q4_K_M, {spread.label}", "gpus": gpus,
                        "setting": setting, "gpus_used": spread.gpus_used, "split": spread.how})
    return out


def parse_topo_matrix(text: str) -> dict[tuple[str, str], str]:
    """`nvidia-smi topo -m`'s matrix: (row, column) -> code for the GPU columns ("GPU0", "GPU1");
    the NIC columns and the CPU/NUMA affinity are left out. Its underline escapes are stripped."""
    lines = [_ANSI.sub("", line).rstrip() for line in text.splitlines()]
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), None)
    if header is None:
        return {}
    columns = [c for c in header if re.fullmatch(r"(GPU|NIC)\d+", c)]
    out = {}
    for line in lines:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]) or len(cells) < len(columns) + 1:
            continue
        for column, code in zip(columns, cells[1:]):
            if column.startswith("GPU"):
                out[(cells[0], column)] = code
    return out


def topology_agreement(topology: gpu_telemetry.Topology, smi_text: str) -> dict:
    """The probe's matrix beside nvidia-smi's: the cells where they differ (nvidia-smi has no code
    for two GPUs on one board; it writes PIX as the probe does)."""
    smi = parse_topo_matrix(smi_text)
    ours = {(row["gpu"], f"GPU{b}"): cell["code"] for row in topology.matrix()["rows"]
            for b, cell in zip(topology.gpus, row["cells"])}
    differ = [{"cell": f"{r}/{c}", "probe": code, "nvidia-smi": smi.get((r, c))}
              for (r, c), code in sorted(ours.items()) if smi and smi.get((r, c)) != code]
    return {"compared": bool(smi), "cells": len(ours), "differ": differ}


def nvidia_smi_topo() -> str:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return ""
    done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 else f"nvidia-smi topo -m: exit {done.returncode}: {done.stderr}"


def one_server(entry: dict, allow: launcher.Allowlist, state: str, requests: int) -> dict:
    spec = launcher.ServerSpec(allow.executables[0], entry["path"], ARGS, entry["setting"], backend="llamacpp",
                               label=entry["label"], gpus=entry["gpus"])
    server, report = launcher.start(spec, allow, state, timeout_s=900, gpu_indices=entry["gpus"])
    out = {k: v for k, v in entry.items() if k != "path"}
    if server is not None:
        watch = launcher.MemoryWatch(server.pgid, entry["gpus"], baseline=report.memory_before).start()
        try:
            out.update(asyncio.run(measure_levels(server.base_url, LEVELS, requests, entry["gpus"], per_stream=2)))
        finally:
            launcher.finish(server, report, gpu_indices=entry["gpus"], peak=watch.stop(), freed_timeout_s=60)
    out["report"] = report.to_dict()
    return out


def _cell(value, width: int, divisor: float = 1.0, digits: int = 1) -> str:
    """A figure right-aligned in `width`, or a dash: a figure not measured is never printed as 0."""
    return f"{'-':>{width}}" if value is None else f"{value / divisor:{width}.{digits}f}"


def table(result: dict) -> list[str]:
    """The result as lines: per server and level, decode and aggregate speed and each GPU's peak
    memory and mean utilization."""
    lines = [f"{'server':<40} {'users':>5} {'decode p50':>10} {'aggregate':>9}  per GPU: peak GiB / util %"]
    for s in result["servers"]:
        r = launcher.LaunchReport.from_dict(s["report"])
        if not s.get("levels"):
            lines.append(f"{s['label']:<40} {r.status}: {s.get('error') or r.refusal or r.failure} {r.cause.line[:60]}")
            continue
        for lv in s["levels"]:
            per_gpu = "  ".join(f"GPU{g['index']} {_cell(g['peak_memory_used_mib'], 5, 1024)} / "
                                f"{_cell(g['mean_utilization_gpu'], 3, digits=0)}" for g in lv["gpus"])
            lines.append(f"{s['label']:<40} {lv['concurrency']:>5} {_cell(lv['decode_tok_s_p50'], 10)} "
                         f"{_cell(lv['aggregate_tok_s'], 9)}  {per_gpu}")
    agreement = result["topology_vs_nvidia_smi"]
    lines.append("topology: " + ("nvidia-smi not compared" if not agreement["compared"] else
                                 "the probe agrees with nvidia-smi topo -m" if not agreement["differ"] else
                                 f"differs from nvidia-smi in {agreement['differ']}"))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True, help="the CUDA llama-server binary")
    ap.add_argument("--model", action="append", required=True, help="NAME=GGUF, e.g. 7b=WORK/qwen2-7b-q4_k_m.gguf")
    ap.add_argument("--requests", type=int, default=32, help="requests per level (at least twice its users)")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    models = dict(m.split("=", 1) for m in a.model)
    models = {name: os.path.abspath(path) for name, path in models.items()}
    probe = gpu_telemetry.probe()
    if not probe.ok or len(probe.gpus) < 2:
        print(f"two GPUs needed; the probe says: {probe.status}, {len(probe.gpus)} GPU(s)", file=sys.stderr)
        return 2
    server = os.path.abspath(a.server)
    allow = launcher.Allowlist.from_settings(server, ",".join(sorted({os.path.dirname(p) for p in models.values()})),
                                             "18100-18199", gpus="0,1")
    smi = nvidia_smi_topo()
    result = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "probe": probe.to_dict(),
              "topology_matrix": probe.topology.matrix(), "nvidia_smi_topo": smi,
              "topology_vs_nvidia_smi": topology_agreement(probe.topology, smi),
              "recipe": {"executable": server, "args": list(ARGS), "levels": list(LEVELS)}, "servers": []}
    state = tempfile.mkdtemp(prefix="gpu-multi-")
    for entry in plan(models):
        result["servers"].append(one_server(entry, allow, state, a.requests))
        if a.out:  # what is measured so far survives a later server that hangs the machine
            with open(a.out, "w") as f:
                json.dump(result, f, indent=1, default=str)
    print("\n".join(table(result)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
