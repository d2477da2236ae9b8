#!/usr/bin/env python
"""Proof of accuracy: how close each load generator's TTFT and inter-token gaps are to the truth.

The simulator (benchmarks/engine/simulator.py, `truth=True`) records on the machine's monotonic
clock when each request arrived (the kernel's receive time of its bytes) and when its own code
read it, when each chunk was due and when it really handed each chunk to the socket. A load
generator on the same machine reports TTFT and inter-token gaps; each of its requests is
matched one-to-one to the simulator's record of that request (ours and naive by prompt content,
AIPerf by its X-Request-ID header, GuideLLM by prompt content), and

    TTFT error   = reported TTFT - (first chunk written - request arrived)
    (also shown against the simulator's read: reported TTFT - (first chunk written - request read))
    gap error    = reported gap k - (chunk k written - chunk k-1 written)
    schedule lag = chunk k written - chunk k due      (the simulator keeping its schedule)

Because both sides use the same clock, a TTFT error splits into the request leg (request
arrived - client sent) and the response leg (client saw the first chunk - simulator wrote it);
loopback transfer itself is tens of microseconds (printed as `loopback one-way`). Results and
method: benchmarks/engine/ACCURACY.md.

The same script runs NVIDIA AIPerf, GuideLLM and `naive` (the obvious aiohttp client,
scripts/naive_aiohttp.py) against a fresh simulator at the same loads, each from PyPI in its
own virtualenv under ~/.cache/v100site-bench, created on first use: closed loop, N streams,
fixed prompt and output lengths, /v1/completions, streaming. Ours runs in this process or
sharded over processes (`--ours-procs 1,2`: benchmarks.engine.shards), AIPerf with its default
worker count or another (`--aiperf-workers 0,2`: its --workers-max). Beside the errors, a second
table gives what each client cost: its CPU time (all its processes, children included, sampled
from /proc) over the span its measured requests ran, per chunk; its own event loop's lag (ours'
ClientMonitor, the naive client's probe of the same kind; AIPerf and GuideLLM say nothing of
theirs); and the simulator's schedule lag during its run.
Always compare tools within one run: the machine is shared and its load changes the numbers.

    .venv/bin/python scripts/bench_accuracy.py [--loads 8,256] [--tools ours,naive,aiperf,guidellm]
        [--requests N | N1,N2] [--ours-procs 1,2] [--aiperf-workers 0,2] [--json r.json] [--md r.md]
"""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import platform
import random
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpcore  # noqa: E402
import httpx  # noqa: E402

from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.client_figures import ClientFigures  # noqa: E402
from benchmarks.engine.metrics import percentile  # noqa: E402
from benchmarks.engine.shards import measure_level  # noqa: E402
from benchmarks.engine.simulator import SimConfig, SimulatorProcess, prompt_key  # noqa: E402

CACHE = Path(os.environ.get("V100SITE_BENCH_CACHE", Path.home() / ".cache" / "v100site-bench"))
TOOLS = ("ours", "naive", "aiperf", "guidellm")
# Each external tool's virtualenv: what pip installs there; its first package names its version.
PACKAGES = {"aiperf": ["aiperf"], "guidellm": ["guidellm"], "naive": ["aiohttp"]}
NAIVE_SCRIPT = ROOT / "scripts" / "naive_aiohttp.py"
MODEL = "sim-model"

# A 7B model on a V100, roughly: prefill 30 ms + 0.1 ms per prompt token, 25 tok/s decode.
PREFILL_MS, PREFILL_MS_PER_TOKEN, DECODE_MS = 30.0, 0.1, 40.0


# ----------------------------------------------------------------------------- helpers
def ms(x: float | None) -> float | None:
    return None if x is None else x * 1000.0


def pct(values: list[float], q: float) -> float | None:
    return percentile(values, q) if values else None


def summary(values: list[float]) -> dict:
    """p1/p50/p99/mean/max of a list of seconds, in ms."""
    if not values:
        return {"n": 0}
    v = [x * 1000.0 for x in values]
    return {"n": len(v), "p1": pct(v, 1), "p50": pct(v, 50), "p99": pct(v, 99),
            "mean": statistics.fmean(v), "max": max(v)}


def wall_minus_mono() -> float:
    """time.time() - time.perf_counter(), to put the tools' wall-clock stamps on the
    simulator's monotonic clock (best of 9 close pairs)."""
    best = None
    for _ in range(9):
        a = time.perf_counter()
        w = time.time()
        b = time.perf_counter()
        if best is None or b - a < best[0]:
            best = (b - a, w - (a + b) / 2)
    return best[1]


def loopback_one_way_us(n: int = 400) -> float:
    """Median one-way latency of a 100-byte message over loopback TCP (RTT / 2), blocking
    sockets in two threads: the floor of any client's TTFT error on this machine."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def echo() -> None:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(4096):
            conn.sendall(data)
        conn.close()

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    c = socket.create_connection(srv.getsockname())
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    msg = b"x" * 100
    for _ in range(n):
        a = time.perf_counter()
        c.sendall(msg)
        got = 0
        while got < len(msg):
            got += len(c.recv(4096))
        rtts.append(time.perf_counter() - a)
    c.close()
    srv.close()
    t.join(2)
    return statistics.median(rtts) / 2 * 1e6


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


SAMPLER_CODE = r'''
import os, sys, time
root, interval, out = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
skip = {int(p) for p in sys.argv[4:]} | {os.getpid()}
tick = os.sysconf("SC_CLK_TCK")

def children(pid):
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    kids = []
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(k) for k in f.read().split()]
        except OSError:
            pass
    return kids

with open(out, "w") as f:
    while True:
        now, todo, lines = time.perf_counter(), [root], []
        while todo:
            pid = todo.pop()
            if pid in skip:
                continue
            try:
                with open(f"/proc/{pid}/stat") as s:
                    fields = s.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            lines.append(f"{now:.6f} {pid} {(int(fields[11]) + int(fields[12])) / tick}\n")
            todo += children(pid)
        f.writelines(lines)
        f.flush()
        time.sleep(interval)
'''


class TreeCPU:
    """CPU time of a process and all its descendants (AIPerf's services and workers, our shards),
    sampled every `interval` s on the machine's monotonic clock by a separate small process (so
    that it takes no GIL from a client measured in this process). `per_process(t0, t1)` is the CPU the
    tree's processes used in that span (each one's samples interpolated), to count only what a tool spent
    while its measured requests ran, not its start-up."""

    def __init__(self, root: int, skip: list[int] = (), interval: float = 0.2):
        self.path = Path(tempfile.mkstemp(prefix="tree-cpu-", suffix=".txt")[1])
        self.proc = subprocess.Popen([sys.executable, "-c", SAMPLER_CODE, str(root), str(interval), str(self.path),
                                      *map(str, skip)])
        self.series: dict[int, list[tuple[float, float]]] = {}

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)
        for line in self.path.read_text().splitlines():
            t, pid, cpu = line.split()
            self.series.setdefault(int(pid), []).append((float(t), float(cpu)))
        self.path.unlink(missing_ok=True)

    def per_process(self, t0: float, t1: float) -> dict[int, float]:
        """CPU seconds each process of the tree used between t0 and t1."""
        def at(points: list[tuple[float, float]], t: float) -> float:
            if t <= points[0][0]:
                return points[0][1]
            for (ta, ca), (tb, cb) in zip(points, points[1:]):
                if t <= tb:
                    return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else cb
            return points[-1][1]

        return {pid: at(p, t1) - at(p, t0) for pid, p in self.series.items()}

    def ran(self, t0: float, t1: float) -> list[int]:
        """The processes whose CPU counter advanced between the samples around t0..t1. Not read
        from per_process: a short span's interpolated share of one clock tick can be far below
        a tick though the process did run in it."""
        def around(points: list[tuple[float, float]]) -> float:
            before = [c for t, c in points if t <= t0] or [points[0][1]]
            after = [c for t, c in points if t >= t1] or [points[-1][1]]
            return after[0] - before[-1]

        return [pid for pid, p in self.series.items() if around(p) > 0]


# ----------------------------------------------------------------------------- venvs
def venv_bin(tool: str) -> Path:
    return CACHE / tool / "bin"


def installed(tool: str) -> bool:
    """The tool's virtualenv was completed (its last step writes .complete)."""
    return (CACHE / tool / ".complete").exists()


def ensure_venv(tool: str, log) -> Path | None:
    """The tool's own virtualenv under CACHE, created and pip-installed on first use.
    Returns its bin/ or None (the reason is logged)."""
    bin_dir = venv_bin(tool)
    if installed(tool):
        return bin_dir
    CACHE.mkdir(parents=True, exist_ok=True)
    # One maker at a time; a venv left half-made (no .complete) is made again from scratch.
    with open(CACHE / f".{tool}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed(tool):
            shutil.rmtree(CACHE / tool, ignore_errors=True)
            if not _make_venv(tool, log):
                return None
    return bin_dir


def _make_venv(tool: str, log) -> bool:
    bin_dir = venv_bin(tool)
    log(f"[{tool}] creating {CACHE / tool} and installing from PyPI (first use; minutes) ...")
    steps = [[shutil.which("python3") or sys.executable, "-m", "venv", str(CACHE / tool)],
             [str(bin_dir / "pip"), "install", "-q", "--upgrade", "pip"]]
    if tool == "guidellm":
        # guidellm pulls in torch; the CPU build is enough and far smaller than the CUDA one.
        steps.append([str(bin_dir / "pip"), "install", "-q", "torch==2.13.0"])
    steps.append([str(bin_dir / "pip"), "install", "-q", *PACKAGES[tool]])
    for step in steps:
        proc = subprocess.run(step, capture_output=True, text=True)
        if proc.returncode != 0 and "torch==" not in " ".join(step):
            log(f"[{tool}] install failed: {' '.join(step)}\n{proc.stderr[-2000:]}")
            return False
    (CACHE / tool / ".complete").touch()
    return True


def tool_version(tool: str) -> str:
    try:
        out = subprocess.run([str(venv_bin(tool) / "pip"), "show", PACKAGES[tool][0]], capture_output=True,
                             text=True).stdout
        return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Version:")), "?")
    except OSError:
        return "?"


TOKENIZER_CODE = r'''
import re, sys
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast
out, corpora = sys.argv[1], sys.argv[2:]
words = set()
for path in corpora:
    with open(path, encoding="utf-8", errors="ignore") as f:
        words.update(re.findall(r"[a-z]+", f.read().lower()))
try:
    from faker.providers.lorem.en_US import Provider
    words.update(w.lower() for w in Provider.word_list)
except ImportError:
    pass
vocab = {"unk": 0}
for w in sorted(words):
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab, unk_token="unk"))
tok.normalizer = normalizers.Sequence([normalizers.Lowercase(), normalizers.Replace(Regex(r"[^a-z]+"), " ")])
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=1 << 20).save_pretrained(out)
print(len(vocab))
'''


def ensure_tokenizer(log) -> Path | None:
    """A local Hugging Face tokenizer (no download) that counts tokens the way the simulator
    does: one token per lowercase word. Built from the corpora the tools themselves sample
    prompts from (AIPerf's Shakespeare, GuideLLM's Faker words), so their prompts decode to
    plain words and the simulator sees exactly the prompt length asked for."""
    out = CACHE / "word-tokenizer"
    if (out / "tokenizer.json").exists():
        return out
    py = next((venv_bin(t) / "python" for t in ("guidellm", "aiperf") if (venv_bin(t) / "python").exists()), None)
    if py is None:
        return None
    corpora = [str(p) for p in CACHE.glob("aiperf/lib/python3*/site-packages/aiperf/dataset/generator/assets/*.txt")]
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run([str(py), "-c", TOKENIZER_CODE, str(tmp), *corpora], capture_output=True, text=True)
    if proc.returncode != 0:
        log(f"tokenizer build failed: {proc.stderr[-1500:]}")
        return None
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


# ----------------------------------------------------------------------------- matching
def index_truth(truth: list[dict], key: str) -> dict:
    out: dict = {}
    for t in truth:
        k = t.get(key)
        if k is not None:
            out.setdefault(k, []).append(t)
    return out


class Errors:
    """Errors of one tool at one load, request by request."""

    def __init__(self):
        self.ttft_err: list[float] = []  # against the kernel's arrival time of the request
        self.ttft_err_read: list[float] = []  # against when the simulator's code read it
        self.read_delay: list[float] = []  # simulator: read - arrived
        self.req_leg: list[float] = []
        self.resp_leg: list[float] = []
        self.gap_err: list[float] = []  # per gap, reported - true (only tools that report gaps)
        self.mean_itl_err: list[float] = []  # per request, mean gap reported - true
        self.lag: list[float] = []  # simulator: written - due, per chunk
        self.truth_ttft: list[float] = []
        self.tool_ttft: list[float] = []
        self.matched = 0
        self.unmatched = 0
        self.buffered = 0
        self.span: tuple[float, float] | None = None  # first arrival .. last chunk written
        self.chunks = 0

    def add(self, t: dict, ttft: float, gaps: list[float] | None = None, mean_itl: float | None = None,
            sent: float | None = None, first_seen: float | None = None) -> None:
        chunks = t["chunks"]
        arrived = t.get("arrived") or t["received"]
        true_ttft = chunks[0] - arrived
        self.matched += 1
        self.truth_ttft.append(true_ttft)
        self.tool_ttft.append(ttft)
        self.ttft_err.append(ttft - true_ttft)
        self.ttft_err_read.append(ttft - (chunks[0] - t["received"]))
        self.read_delay.append(t["received"] - arrived)
        if sent is not None:
            self.req_leg.append(arrived - sent)
        if first_seen is not None:
            self.resp_leg.append(first_seen - chunks[0])
        true_gaps = [b - a for a, b in zip(chunks, chunks[1:])]
        if gaps is not None and len(gaps) == len(true_gaps):
            self.gap_err.extend(g - tg for g, tg in zip(gaps, true_gaps))
        if mean_itl is not None and len(chunks) > 1:
            self.mean_itl_err.append(mean_itl - (chunks[-1] - chunks[0]) / (len(chunks) - 1))
        self.lag.extend(c - (t["due"] + k * t["step"]) for k, c in enumerate(chunks))
        self.buffered += t.get("buffered", 0)
        self.chunks += len(chunks)
        first, last = self.span or (arrived, chunks[-1])
        self.span = (min(first, arrived), max(last, chunks[-1]))

    def report(self) -> dict:
        abs_gap = [abs(x) for x in self.gap_err]
        abs_mean = [abs(x) for x in self.mean_itl_err]
        return {
            "matched": self.matched, "unmatched": self.unmatched,
            "ttft_error_ms": summary(self.ttft_err), "ttft_error_vs_read_ms": summary(self.ttft_err_read),
            "simulator_read_delay_ms": summary(self.read_delay),
            "request_leg_ms": summary(self.req_leg), "response_leg_ms": summary(self.resp_leg),
            "gap_abs_error_ms": summary(abs_gap), "gap_error_ms": summary(self.gap_err),
            "mean_itl_abs_error_ms": summary(abs_mean),
            "schedule_lag_ms": summary(self.lag),
            "truth_ttft_ms": summary(self.truth_ttft), "tool_ttft_ms": summary(self.tool_ttft),
            "chunks_buffered_in_simulator": self.buffered,
        }


# ----------------------------------------------------------------------------- ours
class TracedSession(Session):
    """Our engine, unchanged, plus a note of which prompt each measured request carried (to
    find it in the simulator's truth); the engine's own tests (tests/test_engine_client.py) use it."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.prompt_of: dict[int, int] = {}

    async def send(self, index, prompt, max_tokens, t0, scheduled=None, prompt_tokens_asked=None, **more):
        if index >= 0:
            self.prompt_of[index] = prompt_key(prompt)
        return await super().send(index, prompt, max_tokens, t0, scheduled, prompt_tokens_asked, **more)


class IndexedSession(Session):
    """Our engine, unchanged, but for its prompts: request i's tokens are drawn from a generator
    seeded with i (same length, same pool), so that the script knows every request's prompt and
    finds it in the simulator's truth, whichever shard process sent it."""

    def request(self, i: int, *args, **kwargs):
        prompt, asked, output = super().request(i, *args, **kwargs)
        if i >= 0 and isinstance(prompt, list) and self.prompts.pool:
            prompt = random.Random(i).choices(self.prompts.pool, k=len(prompt))
        return prompt, asked, output


async def _run_ours(url: str, streams: int, n: int, prompt_tokens: int, output_tokens: int, processes: int):
    wl = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, temperature=0.0,
                  warmup_requests=2, seed=1)
    load = Load(concurrency=streams, requests=n)
    session = IndexedSession(Target(url, "vllm"), wl, loads=[load])
    try:
        pf = await session.preflight()
        if not pf.ok:
            raise RuntimeError(pf.cause)
        await session.prepare(pf.model)
        if not session.prompts.pool:
            raise RuntimeError("the simulator gave no token pool: prompts could not be matched")
        index_of = {prompt_key(session.request(i)[0]): i for i in range(n)}
        if processes <= 1:
            await session.open_connections(streams)
        outcome = await measure_level(session, load, processes, why=f"--ours-procs {processes}")
        return outcome, index_of
    finally:
        await session.close()


def run_ours(url: str, streams: int, n: int, args, processes: int = 1) -> tuple[dict, list[dict]]:
    # This process and its shard processes (counted once they are joined, at the level's end).
    cpu0, children0, w0 = time.process_time(), children_cpu_s(), time.perf_counter()
    outcome, index_of = asyncio.run(_run_ours(url, streams, n, args.prompt_tokens, args.output_tokens, processes))
    figures = ClientFigures.from_dict(outcome.client)
    info = {"cpu_s": time.process_time() - cpu0 + children_cpu_s() - children0, "wall_s": time.perf_counter() - w0,
            "client": outcome.client, "failed": sum(1 for r in outcome.results if not r.ok),
            "processes": figures.processes, "loop_lag_ms": {"p99": figures.loop_lag_ms_p99, "max": figures.loop_lag_ms_max}}
    key_of = {i: key for key, i in index_of.items()}
    records = []
    for r in outcome.results:
        if not r.ok or r.first_content is None:
            continue
        sent = outcome.t0 + r.sent
        ct = r.chunk_times
        records.append({"match": ("prompt", key_of.get(r.index)), "ttft": r.first_content,
                        "gaps": [b - a for a, b in zip(ct, ct[1:])],
                        "mean_itl": (ct[-1] - ct[0]) / (len(ct) - 1) if len(ct) > 1 else None,
                        "sent": sent, "first_seen": sent + r.first_content})
    return info, records


# ----------------------------------------------------------------------------- naive aiohttp
def run_naive(url: str, streams: int, n: int, args, workdir: Path, log, on_start=None):
    out = workdir / f"naive-{streams}"
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(venv_bin("naive") / "python"), str(NAIVE_SCRIPT), "--url", url, "--model", MODEL,
           "--streams", str(streams), "--requests", str(n), "--prompt-tokens", str(args.prompt_tokens),
           "--output-tokens", str(args.output_tokens), "--out", str(out / "naive.json")]
    info = _run_tool(cmd, out / "stdout.log", args.tool_timeout, log, on_start)
    info["command"] = " ".join(cmd)
    records = []
    path = out / "naive.json"
    if not path.exists():
        info["error"] = f"no {path.name} (exit {info['rc']}): " + info.get("tail", "")
        return info, records
    data = json.loads(path.read_text())
    lags = [x * 1000 for x in data["loop_lag_s"]]
    info.update(processes=1, loop_lag_ms={"p50": pct(lags, 50), "p99": pct(lags, 99), "max": max(lags, default=None)},
                own_measured_cpu_s=data["measured_cpu_s"], own_measured_wall_s=data["measured_wall_s"],
                failed=sum(1 for r in data["records"] if r["error"]))
    for r in data["records"]:
        ct = r["chunks"]
        if r["error"] or not ct:
            continue
        records.append({"match": ("prompt", prompt_key(r["prompt"])), "ttft": ct[0] - r["sent"],
                        "gaps": [b - a for a, b in zip(ct, ct[1:])],
                        "mean_itl": (ct[-1] - ct[0]) / (len(ct) - 1) if len(ct) > 1 else None,
                        "sent": r["sent"], "first_seen": ct[0]})
    return info, records


# ----------------------------------------------------------------------------- AIPerf
def run_aiperf(url: str, streams: int, n: int, args, tokenizer: Path, workdir: Path, log, on_start=None,
               workers: int = 0):
    """AIPerf's closed loop (`--concurrency`) in its own processes: a system controller, dataset,
    timing and records managers, record processors and `workers` worker processes (0: its own
    default, max(1, min(int(cores * 0.75) - 1, 32)) capped by the concurrency: 1 on 2 cores)."""
    out = workdir / f"aiperf-{streams}-w{workers}"
    cmd = [str(venv_bin("aiperf") / "aiperf"), "profile", "--model", MODEL, "--url", url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tokenizer),
           "--isl", str(args.prompt_tokens), "--isl-stddev", "0",
           "--osl", str(args.output_tokens), "--osl-stddev", "0", "--use-legacy-max-tokens",
           "--extra-inputs", "ignore_eos:true", "--concurrency", str(streams),
           "--request-count", str(n), "--warmup-request-count", str(streams),
           "--random-seed", "1", "--artifact-dir", str(out), "--ui", "none",
           "--no-server-metrics", "--no-gpu-telemetry"] + (["--workers-max", str(workers)] if workers else [])
    info = _run_tool(cmd, out / "stdout.log", args.tool_timeout, log, on_start)
    info["command"] = " ".join(cmd)
    # The worker processes it really started (its log names each once it registered).
    if (out / "stdout.log").exists():
        info["workers"] = len(set(re.findall(r"Registered: Worker \('([^']+)'\)", (out / "stdout.log").read_text())))
    offset = wall_minus_mono()
    records = []
    path = out / "profile_export.jsonl"
    if not path.exists():
        info["error"] = f"no {path.name} (exit {info['rc']}): " + info.get("tail", "")
        return info, records
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        meta, m = rec.get("metadata", {}), rec.get("metrics", {})
        if meta.get("benchmark_phase") != "profiling" or rec.get("error") or "time_to_first_token" not in m:
            continue
        ttft = m["time_to_first_token"]["value"] / 1000.0
        icl = m.get("inter_chunk_latency", {}).get("value")
        itl = m.get("inter_token_latency", {}).get("value")
        sent = meta["request_start_ns"] / 1e9 - offset
        records.append({"match": ("id", meta.get("x_request_id")), "ttft": ttft,
                        "gaps": [g / 1000.0 for g in icl] if isinstance(icl, list) else None,
                        "mean_itl": itl / 1000.0 if itl is not None else None,
                        "sent": sent, "first_seen": sent + ttft})
    return info, records


# ----------------------------------------------------------------------------- GuideLLM
def run_guidellm(url: str, streams: int, n: int, args, tokenizer: Path, workdir: Path, log, on_start=None):
    out = workdir / f"guidellm-{streams}"
    out.mkdir(parents=True, exist_ok=True)
    scenario = {"spec": {
        "backend": {"kind": "openai_http", "target": url, "model": MODEL,
                    "request_format": "/v1/completions"},
        "profile": {"kind": "concurrent", "streams": [streams],
                    "warmup": {"value": streams, "mode": "requests"}},
        "constraints": [{"kind": "max_requests", "count": n + streams}],
        "tokenizer": {"kind": "huggingface_auto", "model": str(tokenizer)},
        "data": [{"kind": "synthetic_text", "prompt_tokens": args.prompt_tokens,
                  "output_tokens": args.output_tokens}],
        "outputs": [{"kind": "json", "path": str(out / "benchmarks.json")}],
        "metrics": {"kind": "generative", "sample_size": None},
    }}
    (out / "scenario.json").write_text(json.dumps(scenario, indent=1))
    cmd = [str(venv_bin("guidellm") / "guidellm"), "run", "-c", str(out / "scenario.json"),
           "--disable-console-interactive"]
    info = _run_tool(cmd, out / "stdout.log", args.tool_timeout, log, on_start)
    info["command"] = " ".join(cmd) + "  # scenario.json: " + json.dumps(scenario["spec"])
    offset = wall_minus_mono()
    records = []
    path = out / "benchmarks.json"
    if not path.exists():
        info["error"] = f"no {path.name} (exit {info['rc']}): " + info.get("tail", "")
        return info, records
    bench = json.loads(path.read_text())["benchmarks"][0]
    done = sorted(bench["requests"]["successful"], key=lambda r: r["info"]["timings"]["request_start"])
    info["failed"] = len(bench["requests"].get("errored", [])) + len(bench["requests"].get("incomplete", []))
    for r in done[streams:]:  # the first `streams` requests were its warmup
        tm = r["info"]["timings"]
        try:
            prompt = json.loads(r["request_args"])["body"]["prompt"]
        except (TypeError, KeyError, ValueError):
            prompt = None
        if tm.get("first_token_iteration") is None:
            continue
        ttft = tm["first_token_iteration"] - tm["request_start"]
        itl = r.get("inter_token_latency_ms")
        sent = tm["request_start"] - offset
        records.append({"match": ("prompt", prompt_key(prompt) if prompt is not None else None),
                        "ttft": ttft, "gaps": None, "mean_itl": itl / 1000.0 if itl is not None else None,
                        "sent": sent, "first_seen": tm["first_token_iteration"] - offset})
    return info, records


def _run_tool(cmd: list[str], log_path: Path, timeout: float, log, on_start=None) -> dict:
    """Run an external tool to its end; `on_start(pid)` is called once it is started."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # No HF_HUB_OFFLINE: the tokenizer is a local directory, and AIPerf 0.13 in offline mode
    # looks a local path up in the Hub cache as if it were a repository id, and fails.
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", NO_COLOR="1", TERM="dumb", COLUMNS="200")
    cpu0, w0 = children_cpu_s(), time.perf_counter()
    with open(log_path, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=log_path.parent,
                                stdin=subprocess.DEVNULL)
        if on_start is not None:
            on_start(proc.pid)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            rc = "timeout"
    info = {"rc": rc, "cpu_s": children_cpu_s() - cpu0, "wall_s": time.perf_counter() - w0}
    if rc != 0:
        info["tail"] = log_path.read_text(errors="replace")[-1500:]
        log(f"  exit {rc}; see {log_path}")
    return info


# ----------------------------------------------------------------------------- one run
def variants(tools: list[str], ours_procs: list[int], aiperf_workers: list[int]) -> list[tuple[str, str, int]]:
    """(label, tool, setting) of every client to run: ours once per process count, AIPerf once
    per worker setting (0: its default), the others once."""
    out = []
    for tool in tools:
        if tool == "ours":
            out += [("ours" if p == 1 else f"ours ×{p}", tool, p) for p in ours_procs]
        elif tool == "aiperf":
            out += [("aiperf" if w == 0 else f"aiperf {w}w", tool, w) for w in aiperf_workers]
        else:
            out.append((tool, tool, 0))
    return out


def measure(label: str, tool: str, setting: int, streams: int, n: int, args, tokenizer: Path | None,
            workdir: Path, log) -> dict:
    slots = max(1024, streams * 2)
    cfg = SimConfig(dialect="vllm", model=MODEL, prefill_ms=PREFILL_MS,
                    prefill_ms_per_token=PREFILL_MS_PER_TOKEN, decode_ms=DECODE_MS, slots=slots, truth=True)
    load0 = os.getloadavg()
    samplers: list[TreeCPU] = []
    with SimulatorProcess(cfg) as sim:
        sim_cpu0 = proc_cpu_s(sim.proc.pid)
        try:
            if tool == "ours":  # this process (the simulator aside) and its shards
                samplers.append(TreeCPU(os.getpid(), skip=[sim.proc.pid]))
                info, records = run_ours(sim.url, streams, n, args, processes=setting)
            else:
                def start(pid: int) -> None:
                    samplers.append(TreeCPU(pid))
                if tool == "naive":
                    info, records = run_naive(sim.url, streams, n, args, workdir, log, start)
                elif tool == "aiperf":
                    info, records = run_aiperf(sim.url, streams, n, args, tokenizer, workdir, log, start, setting)
                else:
                    info, records = run_guidellm(sim.url, streams, n, args, tokenizer, workdir, log, start)
        finally:
            for sampler in samplers:
                sampler.stop()
        sim_cpu = proc_cpu_s(sim.proc.pid) - sim_cpu0
        truth = sim.truth()
    info["loadavg_before"] = [round(x, 2) for x in load0]
    info["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    # CPU share of the simulator while it was serving (first request received to last chunk
    # written; it idles while a tool starts up).
    active = [t for t in truth if t.get("chunks")]
    span = (max(t["chunks"][-1] for t in active) - min(t["received"] for t in active)) if active else 0.0
    info["simulator_cpu_s"] = sim_cpu
    info["simulator_cpu_percent"] = 100.0 * sim_cpu / span if span > 0 else None
    by_prompt, by_id = index_truth(truth, "prompt"), index_truth(truth, "id")
    errors = Errors()
    for rec in records:
        kind, key = rec["match"]
        found = (by_prompt if kind == "prompt" else by_id).get(key) or []
        if len(found) != 1 or len(found[0]["chunks"]) != args.output_tokens:
            errors.unmatched += 1
            continue
        errors.add(found[0], rec["ttft"], rec["gaps"], rec["mean_itl"], rec["sent"], rec["first_seen"])
    # The client's CPU while its measured requests ran: from the first one's arrival at the
    # simulator to the last one's last chunk (start-up, warm-up and writing results left out).
    if errors.span and samplers:
        t0, t1 = errors.span
        used = samplers[0].per_process(t0, t1)
        cpu = sum(used.values())
        # Processes that ran in the span, not idle helpers.
        busy = len(samplers[0].ran(t0, t1))
        info.update(measured_span_s=t1 - t0, measured_cpu_s=cpu, client_processes_busy=busy,
                    chunks_per_s=errors.chunks / (t1 - t0) if t1 > t0 else None,
                    cpu_us_per_chunk=cpu / errors.chunks * 1e6 if errors.chunks else None)
    return {"tool": label, "kind": tool, "setting": setting, "streams": streams, "requests": n, "info": info,
            **errors.report()}


# ----------------------------------------------------------------------------- output
def fmt(x, digits=1) -> str:
    return "–" if x is None else f"{x:+.{digits}f}" if digits >= 0 else f"{x:.0f}"


def markdown(head: list[str], results: list[dict], row) -> str:
    """A markdown table: one line per result, `row(result)` its cells after tool and streams."""
    lines = ["| " + " | ".join(["tool", "streams", *head]) + " |", "|" + "---|" * (len(head) + 2)]
    for r in results:
        cells = [r["skipped"]] + [""] * (len(head) - 1) if r.get("skipped") else row(r)
        lines.append("| " + " | ".join([r["tool"], str(r["streams"]), *cells]) + " |")
    return "\n".join(lines)


def pair(d: dict, digits: int = 2) -> str:
    return f"{fmt(d.get('p50'), digits)} / {fmt(d.get('p99'), digits)}"


def table(results: list[dict]) -> str:
    head = ["matched", "TTFT error p50 / p99 (ms)", "TTFT error vs simulator's read p50 / p99",
            "request leg p50 / p99", "response leg p50 / p99", "gap error abs p50 / p99 (ms)",
            "mean-ITL error abs p50 / p99 (ms)", "simulator schedule lag p50 / p99 (ms)", "tool CPU s", "sim CPU %",
            "load avg"]

    def row(r: dict) -> list[str]:
        return [f"{r['matched']}/{r['matched'] + r['unmatched']}", pair(r["ttft_error_ms"]),
                pair(r["ttft_error_vs_read_ms"]), pair(r["request_leg_ms"]), pair(r["response_leg_ms"]),
                pair(r["gap_abs_error_ms"]), pair(r["mean_itl_abs_error_ms"], 3), pair(r["schedule_lag_ms"]),
                f"{r['info'].get('cpu_s', 0):.1f}", f"{r['info'].get('simulator_cpu_percent') or 0:.0f}",
                f"{r['info']['loadavg_before'][0]:.2f}"]

    return markdown(head, results, row)


def cost_table(results: list[dict]) -> str:
    """What each client spent and how prompt its own loop was, beside what the simulator kept."""
    head = ["client processes busy in the span", "chunks/s", "client CPU s in the measured span", "µs CPU per chunk",
            "client loop lag p50 / p99 / max (ms)", "simulator schedule lag p50 / p99 (ms)", "tool CPU s, whole run",
            "load avg"]

    def num(x, digits: int) -> str:
        return "–" if x is None else f"{x:,.{digits}f}"

    def row(r: dict) -> list[str]:
        i = r["info"]
        lag = i.get("loop_lag_ms") or {}
        return [str(i.get("client_processes_busy", "–")), num(i.get("chunks_per_s"), 0),
                num(i.get("measured_cpu_s"), 1), num(i.get("cpu_us_per_chunk"), 0),
                f"{num(lag.get('p50'), 2)} / {num(lag.get('p99'), 2)} / {num(lag.get('max'), 1)}",
                pair(r["schedule_lag_ms"]), f"{i.get('cpu_s', 0):.1f}", f"{i['loadavg_before'][0]:.2f}"]

    return markdown(head, results, row)


def ratios(results: list[dict]) -> list[str]:
    out = []
    for streams in sorted({r["streams"] for r in results}):
        ours = next((r for r in results if r["tool"] == "ours" and r["streams"] == streams and not r.get("skipped")), None)
        others = [r for r in results if r.get("kind", r["tool"]) != "ours" and r["streams"] == streams
                  and not r.get("skipped") and r["ttft_error_ms"].get("n")]
        if not ours or not others or not ours["ttft_error_ms"].get("n"):
            continue
        for q in ("p50", "p99"):
            mine = abs(ours["ttft_error_ms"][q])
            best = min(others, key=lambda r: abs(r["ttft_error_ms"][q]))
            theirs = abs(best["ttft_error_ms"][q])
            ratio = theirs / mine if mine > 0 else float("inf")
            out.append(f"{streams} streams, TTFT error {q}: ours {mine:.2f} ms, best other "
                       f"({best['tool']}) {theirs:.2f} ms: {ratio:.1f}x closer to the truth")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--loads", default="8,256", help="comma-separated stream counts (closed loop)")
    ap.add_argument("--tools", default=",".join(TOOLS), help="comma-separated: " + ",".join(TOOLS))
    ap.add_argument("--requests", default="",
                    help="measured requests per load: one number, or one per load (default: max(64, 4 x streams))")
    ap.add_argument("--ours-procs", default="1", help="comma-separated process counts for ours (2: sharded over 2 "
                                                      "processes, benchmarks.engine.shards)")
    ap.add_argument("--aiperf-workers", default="0", help="comma-separated AIPerf --workers-max values (0: its "
                                                          "default, 1 worker on 2 cores)")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--tool-timeout", type=float, default=900.0, help="seconds per external tool run")
    ap.add_argument("--json", default="", help="write every result (and the raw summaries) here")
    ap.add_argument("--md", default="", help="write the tables, machine, versions and date here (markdown)")
    ap.add_argument("--keep", default="", help="keep the tools' own result files in this directory")
    args = ap.parse_args(argv)
    loads = [int(x) for x in args.loads.split(",") if x]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    for t in tools:
        if t not in TOOLS:
            ap.error(f"unknown tool {t!r}")
    asked = [int(x) for x in args.requests.split(",") if x]
    if len(asked) not in (0, 1, len(loads)):
        ap.error("--requests: one number, or one per load")
    requests = {streams: (asked[k] if len(asked) == len(loads) else asked[0]) if asked else max(64, 4 * streams)
                for k, streams in enumerate(loads)}
    clients = variants(tools, [int(x) for x in args.ours_procs.split(",") if x],
                       [int(x) for x in args.aiperf_workers.split(",") if x])

    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", flush=True)

    machine = {"python": platform.python_version(), "cpus": os.cpu_count(), "kernel": platform.release(),
               "cpu": next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                            if line.startswith("model name")), "?") if Path("/proc/cpuinfo").exists() else "?",
               "loopback_one_way_us": round(loopback_one_way_us(), 1), "loadavg_start": os.getloadavg()}
    log(f"machine: {machine}")
    usable, skipped = [], {}
    for t in tools:
        if t == "ours":
            usable.append(t)
        elif ensure_venv(t, log):
            usable.append(t)
        else:
            skipped[t] = "could not be installed (see the log above)"
    needs_tokenizer = [t for t in usable if t in ("aiperf", "guidellm")]
    tokenizer = ensure_tokenizer(log) if needs_tokenizer else None
    if needs_tokenizer and tokenizer is None:
        for t in needs_tokenizer:
            usable.remove(t)
            skipped[t] = "no local tokenizer could be built"
    versions = {"ours (httpx / httpcore)": f"{httpx.__version__} / {httpcore.__version__}",
                **{f"{t} ({PACKAGES[t][0]})" if t == "naive" else t: tool_version(t) for t in usable if t != "ours"}}
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    log(f"tools: {usable} {versions} skipped: {skipped}")

    keep = Path(args.keep) if args.keep else None
    workdir = keep or Path(tempfile.mkdtemp(prefix="bench-accuracy-"))
    results = []
    try:
        for streams in loads:
            n = requests[streams]
            for label, tool, setting in clients:
                if tool in skipped:
                    results.append({"tool": label, "kind": tool, "streams": streams, "skipped": skipped[tool]})
                    continue
                log(f"{label} at {streams} streams, {n} requests (load average {os.getloadavg()[0]:.2f}) ...")
                r = measure(label, tool, setting, streams, n, args, tokenizer, workdir, log)
                results.append(r)
                t, i = r["ttft_error_ms"], r["info"]
                log(f"  matched {r['matched']}/{r['matched'] + r['unmatched']}, TTFT error p50 "
                    f"{fmt(t.get('p50'), 2)} ms p99 {fmt(t.get('p99'), 2)} ms, schedule lag p99 "
                    f"{fmt(r['schedule_lag_ms'].get('p99'), 2)} ms, CPU {i.get('measured_cpu_s') or 0:.1f} s in "
                    f"{i.get('measured_span_s') or 0:.1f} s, loop lag p99 {(i.get('loop_lag_ms') or {}).get('p99')}, "
                    f"{i.get('wall_s', 0):.0f} s" + (f"  ERROR {i['error'][:300]}" if i.get("error") else ""))
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)

    total = time.perf_counter() - started
    machine["loadavg_end"] = os.getloadavg()
    report = "\n\n".join([table(results), cost_table(results), "\n".join(ratios(results)),
                           f"loopback one-way {machine['loopback_one_way_us']} us; load average at start "
                           f"{machine['loadavg_start'][0]:.2f}, at end {machine['loadavg_end'][0]:.2f}; "
                           f"the script took {total:.0f} s"])
    print("\n" + report)
    if args.json:
        Path(args.json).write_text(json.dumps({"date": date, "machine": machine, "versions": versions,
                                               "args": vars(args), "results": results, "seconds": total}, indent=1))
    if args.md:
        Path(args.md).write_text(
            f"# Load generators against the simulator's truth ({date})\n\n"
            f"Machine: {machine['cpus']} cores, {machine['cpu']}, Linux {machine['kernel']}, Python "
            f"{machine['python']}. Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".\n\n"
            f"Command: `{' '.join(['scripts/bench_accuracy.py', *(argv if argv is not None else sys.argv[1:])])}`\n\n"
            + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
