#!/usr/bin/env python
"""Proof of accuracy: how close each load generator's TTFT and inter-token gaps are to the truth.

The simulator (benchmarks/engine/simulator.py, `truth=True`) records on the machine's monotonic
clock when each request arrived (the kernel's receive time of its bytes) and when its own code
read it, when each chunk was due and when it really handed each chunk to the socket. A load
generator on the same machine reports TTFT and inter-token gaps; each of its requests is
matched one-to-one to the simulator's record of that request (ours by prompt content, AIPerf by
its X-Request-ID header, GuideLLM by prompt content), and

    TTFT error   = reported TTFT - (first chunk written - request arrived)
    (also shown against the simulator's read: reported TTFT - (first chunk written - request read))
    gap error    = reported gap k - (chunk k written - chunk k-1 written)
    schedule lag = chunk k written - chunk k due      (the simulator keeping its schedule)

Because both sides use the same clock, a TTFT error splits into the request leg (request
arrived - client sent) and the response leg (client saw the first chunk - simulator wrote it);
loopback transfer itself is tens of microseconds (printed as `loopback one-way`). Results and
method: benchmarks/engine/ACCURACY.md.

The same script runs NVIDIA AIPerf and GuideLLM (each from PyPI, each in its own virtualenv
under ~/.cache/v100site-bench, created on first use) against a fresh simulator at the same
loads: closed loop, N streams, fixed prompt and output lengths, /v1/completions, streaming.
Always compare tools within one run: the machine is shared and its load changes the numbers.

    .venv/bin/python scripts/bench_accuracy.py [--loads 8,256] [--tools ours,aiperf,guidellm]
                                                [--requests N] [--json results.json]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
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

from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.metrics import percentile  # noqa: E402
from benchmarks.engine.simulator import SimConfig, SimulatorProcess, prompt_key  # noqa: E402

CACHE = Path(os.environ.get("V100SITE_BENCH_CACHE", Path.home() / ".cache" / "v100site-bench"))
TOOLS = ("ours", "aiperf", "guidellm")
PACKAGES = {"aiperf": ["aiperf"], "guidellm": ["guidellm"]}
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


# ----------------------------------------------------------------------------- venvs
def venv_bin(tool: str) -> Path:
    return CACHE / tool / "bin"


def ensure_venv(tool: str, log) -> Path | None:
    """The tool's own virtualenv under CACHE, created and pip-installed on first use.
    Returns its bin/ or None (the reason is logged)."""
    bin_dir = venv_bin(tool)
    exe = bin_dir / tool
    if exe.exists():
        return bin_dir
    CACHE.mkdir(parents=True, exist_ok=True)
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
            return None
    return bin_dir if exe.exists() else None


def tool_version(tool: str) -> str:
    try:
        out = subprocess.run([str(venv_bin(tool) / "pip"), "show", tool], capture_output=True, text=True).stdout
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
    find it in the simulator's truth)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.prompt_of: dict[int, int] = {}

    async def send(self, index, prompt, max_tokens, t0, scheduled=None, prompt_tokens_asked=None, **more):
        if index >= 0:
            self.prompt_of[index] = prompt_key(prompt)
        return await super().send(index, prompt, max_tokens, t0, scheduled, prompt_tokens_asked, **more)


async def _run_ours(url: str, streams: int, n: int, prompt_tokens: int, output_tokens: int):
    wl = Workload(prompt_tokens=prompt_tokens, output_tokens=output_tokens, temperature=0.0,
                  warmup_requests=2, seed=1)
    load = Load(concurrency=streams, requests=n)
    session = TracedSession(Target(url, "vllm"), wl, loads=[load])
    try:
        pf = await session.preflight()
        if not pf.ok:
            raise RuntimeError(pf.cause)
        await session.prepare(pf.model)
        outcome = await session.measure(load)
        return outcome, session.prompt_of
    finally:
        await session.close()


def run_ours(url: str, streams: int, n: int, args) -> tuple[dict, list[dict]]:
    cpu0, w0 = time.process_time(), time.perf_counter()
    outcome, prompt_of = asyncio.run(_run_ours(url, streams, n, args.prompt_tokens, args.output_tokens))
    info = {"cpu_s": time.process_time() - cpu0, "wall_s": time.perf_counter() - w0,
            "client": outcome.client, "failed": sum(1 for r in outcome.results if not r.ok)}
    records = []
    for r in outcome.results:
        if not r.ok or r.first_content is None:
            continue
        sent = outcome.t0 + r.sent
        ct = r.chunk_times
        records.append({"match": ("prompt", prompt_of.get(r.index)), "ttft": r.first_content,
                        "gaps": [b - a for a, b in zip(ct, ct[1:])],
                        "mean_itl": (ct[-1] - ct[0]) / (len(ct) - 1) if len(ct) > 1 else None,
                        "sent": sent, "first_seen": sent + r.first_content})
    return info, records


# ----------------------------------------------------------------------------- AIPerf
def run_aiperf(url: str, streams: int, n: int, args, tokenizer: Path, workdir: Path, log):
    out = workdir / f"aiperf-{streams}"
    cmd = [str(venv_bin("aiperf") / "aiperf"), "profile", "--model", MODEL, "--url", url,
           "--endpoint-type", "completions", "--streaming", "--tokenizer", str(tokenizer),
           "--isl", str(args.prompt_tokens), "--isl-stddev", "0",
           "--osl", str(args.output_tokens), "--osl-stddev", "0", "--use-legacy-max-tokens",
           "--extra-inputs", "ignore_eos:true", "--concurrency", str(streams),
           "--request-count", str(n), "--warmup-request-count", str(streams),
           "--random-seed", "1", "--artifact-dir", str(out), "--ui", "none",
           "--no-server-metrics", "--no-gpu-telemetry"]
    info = _run_tool(cmd, out / "stdout.log", args.tool_timeout, log)
    info["command"] = " ".join(cmd)
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
def run_guidellm(url: str, streams: int, n: int, args, tokenizer: Path, workdir: Path, log):
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
    info = _run_tool(cmd, out / "stdout.log", args.tool_timeout, log)
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


def _run_tool(cmd: list[str], log_path: Path, timeout: float, log) -> dict:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # No HF_HUB_OFFLINE: the tokenizer is a local directory, and AIPerf 0.13 in offline mode
    # looks a local path up in the Hub cache as if it were a repository id, and fails.
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", NO_COLOR="1", TERM="dumb", COLUMNS="200")
    cpu0, w0 = children_cpu_s(), time.perf_counter()
    with open(log_path, "w") as f:
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout,
                                cwd=log_path.parent, stdin=subprocess.DEVNULL).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    info = {"rc": rc, "cpu_s": children_cpu_s() - cpu0, "wall_s": time.perf_counter() - w0}
    if rc != 0:
        info["tail"] = log_path.read_text(errors="replace")[-1500:]
        log(f"  exit {rc}; see {log_path}")
    return info


# ----------------------------------------------------------------------------- one run
def measure(tool: str, streams: int, n: int, args, tokenizer: Path | None, workdir: Path, log) -> dict:
    slots = max(1024, streams * 2)
    cfg = SimConfig(dialect="vllm", model=MODEL, prefill_ms=PREFILL_MS,
                    prefill_ms_per_token=PREFILL_MS_PER_TOKEN, decode_ms=DECODE_MS, slots=slots, truth=True)
    load0 = os.getloadavg()
    with SimulatorProcess(cfg) as sim:
        sim_cpu0 = proc_cpu_s(sim.proc.pid)
        if tool == "ours":
            info, records = run_ours(sim.url, streams, n, args)
        elif tool == "aiperf":
            info, records = run_aiperf(sim.url, streams, n, args, tokenizer, workdir, log)
        else:
            info, records = run_guidellm(sim.url, streams, n, args, tokenizer, workdir, log)
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
    return {"tool": tool, "streams": streams, "requests": n, "info": info, **errors.report()}


# ----------------------------------------------------------------------------- output
def fmt(x, digits=1) -> str:
    return "–" if x is None else f"{x:+.{digits}f}" if digits >= 0 else f"{x:.0f}"


def table(results: list[dict]) -> str:
    head = ("| tool | streams | matched | TTFT error p50 / p99 (ms) | TTFT error vs simulator's read p50 / p99 "
            "| request leg p50 / p99 | response leg p50 / p99 "
            "| gap error abs p50 / p99 (ms) | mean-ITL error abs p50 / p99 (ms) "
            "| simulator schedule lag p50 / p99 (ms) | tool CPU s | sim CPU % | load avg |")
    lines = [head, "|" + "---|" * 13]
    for r in results:
        if r.get("skipped"):
            lines.append(f"| {r['tool']} | {r['streams']} | – | {r['skipped']} |" + " |" * 9)
            continue
        t, g, m, s = r["ttft_error_ms"], r["gap_abs_error_ms"], r["mean_itl_abs_error_ms"], r["schedule_lag_ms"]
        tr, rq, rs = r["ttft_error_vs_read_ms"], r["request_leg_ms"], r["response_leg_ms"]
        lines.append(
            f"| {r['tool']} | {r['streams']} | {r['matched']}/{r['matched'] + r['unmatched']} "
            f"| {fmt(t.get('p50'), 2)} / {fmt(t.get('p99'), 2)} | {fmt(tr.get('p50'), 2)} / {fmt(tr.get('p99'), 2)} "
            f"| {fmt(rq.get('p50'), 2)} / {fmt(rq.get('p99'), 2)} | {fmt(rs.get('p50'), 2)} / {fmt(rs.get('p99'), 2)} "
            f"| {fmt(g.get('p50'), 2)} / {fmt(g.get('p99'), 2)} | {fmt(m.get('p50'), 3)} / {fmt(m.get('p99'), 3)} "
            f"| {fmt(s.get('p50'), 2)} / {fmt(s.get('p99'), 2)} | {r['info'].get('cpu_s', 0):.1f} "
            f"| {r['info'].get('simulator_cpu_percent') or 0:.0f} | {r['info']['loadavg_before'][0]:.2f} |")
    return "\n".join(lines)


def ratios(results: list[dict]) -> list[str]:
    out = []
    for streams in sorted({r["streams"] for r in results}):
        ours = next((r for r in results if r["tool"] == "ours" and r["streams"] == streams and not r.get("skipped")), None)
        others = [r for r in results if r["tool"] != "ours" and r["streams"] == streams
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
    ap.add_argument("--requests", type=int, default=0,
                    help="measured requests per load (default: max(64, 4 x streams))")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--tool-timeout", type=float, default=900.0, help="seconds per external tool run")
    ap.add_argument("--json", default="", help="write every result (and the raw summaries) here")
    ap.add_argument("--keep", default="", help="keep the tools' own result files in this directory")
    args = ap.parse_args(argv)
    loads = [int(x) for x in args.loads.split(",") if x]
    tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    for t in tools:
        if t not in TOOLS:
            ap.error(f"unknown tool {t!r}")

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
    tokenizer = ensure_tokenizer(log) if any(t != "ours" for t in usable) else None
    if any(t != "ours" for t in usable) and tokenizer is None:
        for t in [t for t in usable if t != "ours"]:
            usable.remove(t)
            skipped[t] = "no local tokenizer could be built"
    versions = {t: tool_version(t) for t in usable if t != "ours"}
    log(f"tools: {usable} {versions} skipped: {skipped}")

    keep = Path(args.keep) if args.keep else None
    workdir = keep or Path(tempfile.mkdtemp(prefix="bench-accuracy-"))
    results = []
    try:
        for streams in loads:
            n = args.requests or max(64, 4 * streams)
            for tool in tools:
                if tool in skipped:
                    results.append({"tool": tool, "streams": streams, "skipped": skipped[tool]})
                    continue
                log(f"{tool} at {streams} streams, {n} requests (load average {os.getloadavg()[0]:.2f}) ...")
                r = measure(tool, streams, n, args, tokenizer, workdir, log)
                results.append(r)
                t = r["ttft_error_ms"]
                log(f"  matched {r['matched']}/{r['matched'] + r['unmatched']}, TTFT error p50 "
                    f"{fmt(t.get('p50'), 2)} ms p99 {fmt(t.get('p99'), 2)} ms, schedule lag p99 "
                    f"{fmt(r['schedule_lag_ms'].get('p99'), 2)} ms, {r['info'].get('wall_s', 0):.0f} s"
                    + (f"  ERROR {r['info']['error'][:300]}" if r["info"].get("error") else ""))
    finally:
        if keep is None:
            shutil.rmtree(workdir, ignore_errors=True)

    total = time.perf_counter() - started
    print()
    print(table(results))
    print()
    for line in ratios(results):
        print(line)
    print(f"\nloopback one-way {machine['loopback_one_way_us']} us; load average at start "
          f"{machine['loadavg_start'][0]:.2f}, at end {os.getloadavg()[0]:.2f}; the script took {total:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "versions": versions, "args": vars(args),
                                               "results": results, "seconds": total}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
