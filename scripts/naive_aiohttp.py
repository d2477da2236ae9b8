#!/usr/bin/env python
"""The obvious streaming load generator, for scripts/bench_accuracy.py's `naive` tool: one aiohttp
ClientSession, N concurrent tasks each sending its next request when the last one ended (closed
loop), `async for line in resp.content`, time.perf_counter() at every SSE data line, TTFT = the
first line with content. No tuning: plain asyncio, the garbage collector as it is, JSON parsed as
each line arrives. Only the pool is widened to N connections (aiohttp's default of 100 would
hold 256 streams to 100 in flight, which anyone measuring 256 streams notices at once).

It runs in its own virtualenv (aiohttp from PyPI, not a dependency of the project) and knows
nothing of the project: it writes what it saw as JSON (`--out`), and bench_accuracy.py matches
each request to the simulator's truth by its prompt. Besides the requests it measures its own
event loop's lag the way the engine's ClientMonitor does (a 10 ms sleep that wakes late) and its
CPU time over the measured requests.

    python naive_aiohttp.py --url http://127.0.0.1:8100 --streams 256 --requests 1024 --out out.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

import aiohttp

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge every move "
         "of old kings and young queens in distant lands near calm seas under bright stars").split()
TICK_S = 0.01  # the lag probe's sleep, as the engine's ClientMonitor


async def one_request(session: aiohttp.ClientSession, url: str, model: str, prompt: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "stream": True,
            "ignore_eos": True, "temperature": 0.0}
    sent = time.perf_counter()
    chunks: list[float] = []
    error = ""
    try:
        async with session.post(url + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                error = f"HTTP {resp.status}"
            async for line in resp.content:
                now = time.perf_counter()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                choices = event.get("choices") or []
                if choices and choices[0].get("text"):
                    chunks.append(now)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        error = f"{exc.__class__.__name__}: {exc}"
    return {"prompt": prompt, "sent": sent, "chunks": chunks, "error": error}


async def run(args) -> dict:
    rng = random.Random(args.seed)
    connector = aiohttp.TCPConnector(limit=args.streams)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        # One warm-up request per stream (as AIPerf's and GuideLLM's warm-ups): the pool's
        # connections are open before the measured requests.
        await asyncio.gather(*(one_request(session, args.url, args.model, " ".join(rng.choices(WORDS, k=args.prompt_tokens)),
                                           4) for _ in range(args.streams)))
        prompts = iter([" ".join(rng.choices(WORDS, k=args.prompt_tokens)) for _ in range(args.requests)])
        records: list[dict] = []
        lags: list[float] = []

        async def stream() -> None:
            for prompt in prompts:
                records.append(await one_request(session, args.url, args.model, prompt, args.output_tokens))

        async def probe() -> None:
            while True:
                before = time.perf_counter()
                await asyncio.sleep(TICK_S)
                lags.append(time.perf_counter() - before - TICK_S)

        prober = asyncio.get_running_loop().create_task(probe())
        cpu0, wall0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(stream() for _ in range(args.streams)))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        prober.cancel()
    return {"records": records, "loop_lag_s": lags, "measured_cpu_s": cpu, "measured_wall_s": wall,
            "aiohttp": aiohttp.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", default="sim-model")
    ap.add_argument("--streams", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--prompt-tokens", type=int, default=256, help="words (the simulator counts one token a word)")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    result = asyncio.run(run(args))
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
