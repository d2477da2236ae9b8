#!/usr/bin/env python
"""llama.cpp on one GPU across model shapes and quantizations, Django-free, in one lease: for each
random-weight Qwen2-architecture GGUF (Qwen2.5-3B, -7B and -14B shapes; Q4_K_M and Q8_0, each
quantized by llama-quantize from one F16), llama-bench (pp512, pp2048, tg128), llama-server through
the product's own launcher and engine (users 1..128 at prompt 512 / output 128 on one server with
--parallel 128; prompt 128, 2048, 8192 at users 1 and 16, output 64, on one with --parallel 16)
and llama-batched-bench (-npp 512 -ntg 128 -npl 1,4,16,64,128).

    python scripts/gpu_sweep.py --bin BUILD/bin --src LLAMA_CPP_SRC --work WORK --out OUT/lab_sweep_h200.json \
        [--deadline EPOCH] [--resume EARLIER.json] [--plan 7b:Q4_K_M,7b:Q8_0,...]

Robust by design: the JSON is rewritten after every step and every level (a level or a step that
fails is recorded and the rest goes on); a step that would not finish before --deadline is skipped
and said so; --resume takes an earlier result and measures only what it lacks (a later call on
the same or a fresh machine). scripts/gpu_sweep.sh builds and calls this on the GPU machine.
"""
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
from benchmarks.engine import launcher  # noqa: E402
from benchmarks.engine.client import Load, Session, Target, Workload  # noqa: E402
from benchmarks.engine.metrics import summarize_level  # noqa: E402
from benchmarks.engine.observe import measure_observed  # noqa: E402
from benchmarks.engine.server_metrics import server_identity  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
# Real shapes (config.json of each); Qwen2.5-3B ties its output to token_embd, 7B and 14B do not.
SHAPES = {
    "3b": {"layers": 36, "hidden": 2048, "ffn": 11008, "heads": 16, "kv_heads": 2, "tied": True,
           "vocab": 151936, "like": "Qwen2.5-3B"},
    "7b": {"layers": 28, "hidden": 3584, "ffn": 18944, "heads": 28, "kv_heads": 4, "tied": False,
           "vocab": 151936, "like": "Qwen2.5-7B"},
    "14b": {"layers": 48, "hidden": 5120, "ffn": 13824, "heads": 40, "kv_heads": 8, "tied": False,
            "vocab": 151936, "like": "Qwen2.5-14B"},
}
QUANT_BPW = {"Q4_K_M": 4.9, "Q8_0": 8.5}  # for disk planning only
DEFAULT_PLAN = "7b:Q4_K_M,7b:Q8_0,3b:Q4_K_M,14b:Q4_K_M,3b:Q8_0,14b:Q8_0"
STEPS = ("bench", "users", "prompts", "batched")
# The server recipe, as gpu_lab.py's: the sweep's -c and --parallel are its setting.
ARGS = ["-m", "{model}", "--host", "{host}", "--port", "{port}", "-ngl", "99", "--metrics"]
MARGIN = 128  # tokens per slot beyond prompt + output
USERS, USERS_PROMPT, USERS_OUTPUT, USERS_PARALLEL = (1, 4, 16, 64, 128), 512, 128, 128
PROMPTS, PROMPT_USERS, PROMPTS_OUTPUT, PROMPTS_PARALLEL = (128, 2048, 8192), (1, 16), 64, 16
NPL = (1, 4, 16, 64, 128)
# Seconds each step took for the 7B Q4_K_M on an H200, before anything is measured (the estimate
# that decides whether a step still fits before the deadline; measured durations replace it).
BASE_S = {"bench": 20, "users": 90, "prompts": 80, "batched": 45}


def params(shape: dict) -> float:
    h, f, kv = shape["hidden"], shape["ffn"], shape["kv_heads"] * shape["hidden"] // shape["heads"]
    layer = 2 * h * h + 2 * h * kv + 3 * h * f
    return shape["layers"] * layer + shape["vocab"] * h * (1 if shape["tied"] else 2)


def scale(name: str) -> float:
    """How much longer than the 7B Q4_K_M a file's steps take (by weights, Q8_0 a little slower)."""
    shape, quant = name.split(":")
    return params(SHAPES[shape]) / params(SHAPES["7b"]) * (1.15 if quant == "Q8_0" else 1.0)


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class Sweep:
    def __init__(self, a):
        self.a = a
        self.bin = os.path.abspath(a.bin)
        self.work = os.path.abspath(a.work)
        self.deadline = a.deadline or time.time() + 540
        self.t0 = time.time()
        self.result = {}
        if a.resume and os.path.exists(a.resume):
            with open(a.resume) as f:
                self.result = json.load(f)
        r = self.result
        r.setdefault("what", "llama.cpp on one NVIDIA H200: random-weight Qwen2-architecture GGUFs of the "
                             "Qwen2.5-3B/7B/14B shapes in Q4_K_M and Q8_0 (llama-quantize from one F16), "
                             "llama-bench, llama-server through the product's launcher and engine, "
                             "llama-batched-bench (scripts/gpu_sweep.sh, scripts/gpu_sweep.py)")
        r.setdefault("method", {
            "users_sweep": {"users": list(USERS), "prompt_tokens": USERS_PROMPT, "output_tokens": USERS_OUTPUT,
                            "server": f"one llama-server per file, --parallel {USERS_PARALLEL} (fixed), "
                                      f"-c {USERS_PARALLEL} x ({USERS_PROMPT}+{USERS_OUTPUT}+{MARGIN}) = "
                                      f"{USERS_PARALLEL * (USERS_PROMPT + USERS_OUTPUT + MARGIN)}, -ngl 99 --metrics",
                            "requests": f"min({a.cap}, max({a.min_requests}, {a.mult} x users)), at least users"},
            "prompt_sweep": {"prompt_tokens": list(PROMPTS), "users": list(PROMPT_USERS),
                             "output_tokens": PROMPTS_OUTPUT,
                             "server": f"one llama-server per file, --parallel {PROMPTS_PARALLEL}, "
                                       f"-c {PROMPTS_PARALLEL} x ({max(PROMPTS)}+{PROMPTS_OUTPUT}+{MARGIN}) = "
                                       f"{PROMPTS_PARALLEL * (max(PROMPTS) + PROMPTS_OUTPUT + MARGIN)}, -ngl 99 --metrics",
                             "requests": f"max({a.min_requests}, users) per level"},
            "engine": "benchmarks.engine: closed loop of `users` streams, /completion with token-id prompts of "
                      "exactly prompt_tokens, ignore_eos and n_predict = output_tokens, 2 warm-up requests per "
                      "prompt length, GPU telemetry (NVML, 0.1 s); aggregate_tok_s = output tokens / level wall "
                      "time; decode_tok_s = 1/TPOT per request; TPOT = (e2e - TTFT) / (tokens - 1)",
            "llama_bench": "-ngl 99 -p 512,2048 -n 128 -r 2 -o json",
            "batched_bench": f"-ngl 99 -c {max(NPL) * (USERS_PROMPT + USERS_OUTPUT + MARGIN)} -b 2048 -ub 512 "
                             f"-npp 512 -ntg 128 -npl {','.join(map(str, NPL))} --output-format jsonl",
            "weights": "scripts/gen_qwen2_random.py --tile (one 64 MiB block of N(0, 0.02) F16 values repeated "
                       "through every tensor; the tokenizer is the real Qwen2 one, 151936 tokens), then "
                       "llama-quantize F16 -> Q4_K_M / Q8_0; the speed of a random-weight model equals the real "
                       "one's when the output length is forced",
        })
        r.setdefault("files", {})
        r.setdefault("calls", [])
        r["calls"].append({"started": now(), "deadline_in_s": round(self.deadline - self.t0), "log": []})
        self.call = r["calls"][-1]
        self.gpu_indices = None
        self.allow = None
        self.state = tempfile.mkdtemp(prefix="gpu-sweep-")

    # ------------------------------------------------------------------ bookkeeping
    def left(self) -> float:
        return self.deadline - time.time()

    def log(self, text: str) -> None:
        line = f"[{time.time() - self.t0:6.1f}s] {text}"
        print(line, flush=True)
        self.call["log"].append(line)
        self.save()

    def save(self) -> None:
        tmp = self.a.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.result, f, indent=1, default=str)
        os.replace(tmp, self.a.out)
        if self.a.mirror:
            shutil.copyfile(self.a.out, self.a.mirror + ".tmp")
            os.replace(self.a.mirror + ".tmp", self.a.mirror)

    def entry(self, name: str) -> dict:
        shape, quant = name.split(":")
        return self.result["files"].setdefault(name, {"shape": {"name": shape, **SHAPES[shape]}, "quant": quant,
                                                      "params": params(SHAPES[shape])})

    def estimate(self, name: str, step: str) -> float:
        done = [(other, e[step]["duration_s"]) for other, e in self.result["files"].items()
                if isinstance(e.get(step), dict) and e[step].get("status") == "ok" and e[step].get("duration_s")]
        if done:
            return max(d / scale(o) for o, d in done) * scale(name) * 1.1
        return BASE_S[step] * scale(name)

    def step(self, name: str, prep: dict, key: str, what: str, argv: list[str], dest: str) -> tuple[str | None, float]:
        """One preparation step that writes dest + ".part", moved into place only when it succeeded:
        (its output, or None when it failed (said in prep), seconds)."""
        rc, out, took = self.run(argv, self.left() - 10)
        prep.update({f"{key}_command": " ".join(argv), f"{key}_s": round(took, 1)})
        if rc != 0:
            prep["error"] = f"{what} failed (rc {rc}): {out[-1500:]}"
            self.log(f"{name}: {prep['error']}")
            return None, took
        os.replace(dest + ".part", dest)
        return out, took

    def run(self, argv: list[str], timeout: float, split: bool = False) -> tuple[int | None, str, float]:
        """Runs argv (its output to a file), at most `timeout` s: (exit code or None when stopped
        at the timeout, its output, seconds). `split`: stdout alone, then stderr's last lines."""
        t = time.time()
        path = os.path.join(self.state, f"run-{int(t * 1000)}.log")
        with open(path, "wb") as out, open(path + ".err", "wb") as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err if split else subprocess.STDOUT,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=max(1.0, timeout))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                rc = None
        with open(path, errors="replace") as f, open(path + ".err", errors="replace") as e:
            text = f.read()
            if split:
                text += "\n--- stderr ---\n" + e.read()[-3000:]
            return rc, text, time.time() - t

    # ------------------------------------------------------------------ machine
    def machine(self) -> None:
        if self.result.get("machine"):
            return
        m = {}
        try:
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,power.limit,"
                                "clocks.max.sm,clocks.max.mem,pci.bus_id", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
            m["nvidia_smi_query"] = q
            name, driver, mem, power, sm, memclk, bus = [x.strip() for x in q.splitlines()[0].split(",")]
            m.update(gpu=name, driver=driver, memory_total=mem, power_limit=power, max_sm_clock=sm,
                     max_mem_clock=memclk)
        except Exception as exc:  # noqa: BLE001
            m["error"] = f"nvidia-smi: {exc}"
        try:
            head = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=30).stdout
            found = re.search(r"CUDA Version:\s*([\d.]+)", head)
            m["cuda_version"] = found.group(1) if found else None
            m["nvidia_smi"] = head
        except Exception as exc:  # noqa: BLE001
            m["error"] = f"nvidia-smi: {exc}"
        m["cpus"] = os.cpu_count()
        m["kernel"] = os.uname().release
        probe = gpu_telemetry.probe()
        m["probe"] = probe.to_dict()
        self.result["machine"] = m
        self.result["date"] = now()

    def llama_build(self) -> None:
        rc, out, _ = self.run([os.path.join(self.bin, "llama-server"), "--version"], 60)
        b = self.result.setdefault("llama_cpp", {})
        b["version_output"] = out.strip()[-2000:]
        b["source"] = self.a.source_note
        if self.a.build_note or not b.get("build_flags"):
            b["build_flags"] = self.a.build_note
        b["binaries"] = self.bin
        try:
            b["nvcc"] = subprocess.run(["nvcc", "--version"], capture_output=True, text=True,
                                       timeout=30).stdout.strip().splitlines()[-2:]
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ models
    def paths(self, name: str) -> tuple[str, str]:
        shape, quant = name.split(":")
        return (os.path.join(self.work, f"qwen2-{shape}-f16.gguf"),
                os.path.join(self.work, f"qwen2-{shape}-{quant.lower()}.gguf"))

    def finished(self, name: str) -> bool:
        e = self.result["files"].get(name, {})
        return all(isinstance(e.get(s), dict) and e[s].get("status") == "ok" for s in STEPS)

    def ensure_model(self, name: str, plan: list[str]) -> str | None:
        shape, quant = name.split(":")
        f16, path = self.paths(name)
        if os.path.exists(path):
            return path
        e = self.entry(name)
        prep = e.setdefault("prep", {})
        p = params(SHAPES[shape])
        need = p * QUANT_BPW[quant] / 8 + (0 if os.path.exists(f16) else 2 * p) + 2e9
        self.free_disk(need, plan, keep=name)
        if not os.path.exists(f16):
            est = 2 * p / 1.0e9 + 5
            if self.left() < est + 30:
                prep["error"] = f"not generated: {self.left():.0f} s left, ~{est:.0f} s needed"
                self.log(f"{name}: {prep['error']}")
                return None
            s = SHAPES[shape]
            argv = [sys.executable, os.path.join(HERE, "gen_qwen2_random.py"), self.a.src, f16 + ".part",
                    "--layers", str(s["layers"]), "--hidden", str(s["hidden"]), "--ffn", str(s["ffn"]),
                    "--heads", str(s["heads"]), "--kv-heads", str(s["kv_heads"]), "--tile",
                    "--name", f"random-{s['like'].lower()}-shape"] + (["--tied"] if s["tied"] else [])
            self.log(f"{name}: writing the F16 ({2 * p / 1e9:.1f} GB)")
            out, took = self.step(name, prep, "f16", "F16 generation", argv, f16)
            if out is None:
                return None
            prep["f16_bytes"] = os.path.getsize(f16)
            self.log(f"{name}: F16 written in {took:.1f} s ({prep['f16_bytes'] / took / 1e9:.2f} GB/s)")
        argv = [os.path.join(self.bin, "llama-quantize"), f16, path + ".part", quant, str(os.cpu_count())]
        out, took = self.step(name, prep, "quantize", "llama-quantize", argv, path)
        if out is None:
            return None
        e["file_bytes"] = os.path.getsize(path)
        found = re.search(r"quant size\s*=\s*[\d.]+ MiB(?: \([\d.]+ BPW\))?", out)
        if found:
            e["quantize_report"] = found.group(0)
        self.log(f"{name}: quantized in {took:.1f} s, {e['file_bytes'] / 1e9:.2f} GB")
        # The F16 stays while another quantization of the same shape is still to be made and there
        # is room (20 GB) beside it; else it goes, and is written again if that one's turn comes.
        pending = any(n.split(":")[0] == shape and n != name and not os.path.exists(self.paths(n)[1])
                      and not self.finished(n) for n in plan)
        if not pending or shutil.disk_usage(self.work).free < 20e9:
            os.remove(f16)
        return path

    def free_disk(self, need: float, plan: list[str], keep: str) -> None:
        """Removes model files no longer needed (all their steps done), then F16s, until `need`
        bytes are free under the work folder."""
        def free():
            return shutil.disk_usage(self.work).free
        if free() >= need:
            return
        for n in plan:
            f16, path = self.paths(n)
            if n != keep and os.path.exists(path) and (self.finished(n) or plan.index(n) < plan.index(keep)):
                os.remove(path)
                self.log(f"removed {path} for room")
                if free() >= need:
                    return
        for n in plan:
            f16, _ = self.paths(n)
            if n.split(":")[0] != keep.split(":")[0] and os.path.exists(f16):
                os.remove(f16)
                self.log(f"removed {f16} for room")

    # ------------------------------------------------------------------ steps
    def step_bench(self, name: str, model: str) -> dict:
        argv = [os.path.join(self.bin, "llama-bench"), "-m", model, "-ngl", "99", "-p", "512,2048", "-n", "128",
                "-r", "2", "-o", "json"]
        rc, out, took = self.run(argv, self.left() - 5, split=True)
        rec = {"command": " ".join(argv), "duration_s": round(took, 1), "rc": rc}
        stdout = out.split("\n--- stderr ---\n")[0]
        try:
            rows = json.loads(stdout[stdout.index("["):stdout.rindex("]") + 1])
            keep = ("n_prompt", "n_gen", "avg_ts", "stddev_ts", "samples_ts", "n_batch", "n_ubatch", "flash_attn",
                    "type_k", "type_v", "n_gpu_layers", "n_threads", "model_size", "model_n_params")
            rec["tests"] = [{k: r.get(k) for k in keep} for r in rows]
            if rows:
                rec["build"] = {k: rows[0].get(k) for k in ("build_commit", "build_number", "gpu_info", "backends",
                                                             "model_type", "cpu_info")}
            rec["status"] = "ok" if rc == 0 and rows else "failed"
        except ValueError:
            rec["status"] = "failed"
        if rec["status"] != "ok":
            rec["output_tail"] = out[-2000:]
        return rec

    def step_batched(self, name: str, model: str) -> dict:
        ctx = max(NPL) * (USERS_PROMPT + USERS_OUTPUT + MARGIN)
        argv = [os.path.join(self.bin, "llama-batched-bench"), "-m", model, "-ngl", "99", "-c", str(ctx),
                "-b", "2048", "-ub", "512", "-npp", "512", "-ntg", "128", "-npl", ",".join(map(str, NPL)),
                "--output-format", "jsonl"]
        rc, out, took = self.run(argv, self.left() - 5)
        rows = []
        for line in out.splitlines():
            line = line.strip()
            if line.startswith("{") and line.endswith("}"):
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
        rec = {"command": " ".join(argv), "duration_s": round(took, 1), "rc": rc, "rows": rows,
               "status": "ok" if rc == 0 and len(rows) == len(NPL) else ("partial" if rows else "failed")}
        if rec["status"] != "ok":
            rec["output_tail"] = out[-2000:]
        return rec

    def requests_for(self, users: int, sweep: str) -> int:
        if sweep == "users":
            return max(users, min(self.a.cap, max(self.a.min_requests, self.a.mult * users)))
        return max(self.a.min_requests, users)

    def serve(self, name: str, model: str, sweep: str, rec: dict) -> dict:
        """One llama-server for a sweep (the product's launcher), its levels measured with the
        engine; each level appended to rec["levels"] (and saved) as it is measured."""
        if sweep == "users":
            parallel, ctx = USERS_PARALLEL, USERS_PARALLEL * (USERS_PROMPT + USERS_OUTPUT + MARGIN)
            sessions = [(USERS_PROMPT, USERS_OUTPUT, list(USERS))]
        else:
            parallel, ctx = PROMPTS_PARALLEL, PROMPTS_PARALLEL * (max(PROMPTS) + PROMPTS_OUTPUT + MARGIN)
            sessions = [(p, PROMPTS_OUTPUT, list(PROMPT_USERS)) for p in PROMPTS]
        have = {(lv["prompt_tokens"], lv["users"]) for lv in rec.get("levels", []) if lv.get("status") == "ok"}
        rec["levels"] = [lv for lv in rec.get("levels", []) if lv.get("status") == "ok"]
        todo = [(p, o, [u for u in us if (p, u) not in have]) for p, o, us in sessions]
        todo = [t for t in todo if t[2]]
        if not todo:
            rec["status"] = "ok"
            return rec
        spec = launcher.ServerSpec(os.path.join(self.bin, "llama-server"), model, tuple(ARGS),
                                   {"-c": ctx, "--parallel": parallel}, backend="llamacpp",
                                   label=f"{name} --parallel {parallel} -c {ctx}")
        server, report = launcher.start(spec, self.allow, self.state, timeout_s=max(30, min(300, self.left() - 20)),
                                        gpu_indices=self.gpu_indices)
        rec.setdefault("servers", []).append({"command": report.command})
        srv = rec["servers"][-1]
        if server is None:
            srv["report"] = report.to_dict()
            rec["status"] = "failed"
            rec["error"] = f"the server did not start: {report.failure} {report.cause.line}"
            return rec
        srv.update(health_s=report.health_s, first_token_s=report.first_token_s,
                   loaded_mib=report.memory_loaded.server_mib if report.memory_loaded else None)
        self.log(f"{name} {sweep}: server up in {report.health_s} s: {report.command}")
        watch = launcher.MemoryWatch(server.pgid, self.gpu_indices, baseline=report.memory_before).start()
        try:
            for prompt, output, users in todo:
                out = asyncio.run(self.measure_session(name, server.base_url, sweep, prompt, output, users, rec))
                if out.get("server"):
                    srv["identity"] = out["server"]
                if out.get("error"):
                    rec.setdefault("errors", []).append(out["error"])
                    self.log(f"{name} {sweep} prompt {prompt}: {out['error']}")
        finally:
            peak = watch.stop()
            launcher.finish(server, report, gpu_indices=self.gpu_indices, peak=peak, freed_timeout_s=20)
            srv["peak_mib"] = report.memory_peak.server_mib if report.memory_peak else None
            srv["memory_freed"] = report.memory_freed
            srv["stopped"] = report.stopped
        want = sum(len(us) for _, _, us in sessions)
        ok = sum(1 for lv in rec["levels"] if lv.get("status") == "ok")
        rec["status"] = "ok" if ok == want else ("partial" if ok else "failed")
        return rec

    async def measure_session(self, name, url, sweep, prompt, output, users, rec) -> dict:
        loads = [Load(concurrency=u, requests=self.requests_for(u, sweep)) for u in users]
        session = Session(Target(url, "llamacpp"), Workload(prompt_tokens=prompt, output_tokens=output,
                                                            warmup_requests=2, seed=1), loads=loads)
        out: dict = {}
        try:
            preflight = await session.preflight()
            if not preflight.ok:
                return {"error": f"preflight: {preflight.cause}"}
            identity = await server_identity(session.client, url, "llamacpp")
            out["server"] = {k: identity.get(k) for k in ("n_ctx", "total_slots", "build_info")}
            fits = session.context_check(identity)
            if fits and not fits.ok:
                return {**out, "error": f"{fits.check}: {fits.detail}"}
            await session.prepare(preflight.model)
            for load in loads:
                est = self.level_estimate(name, sweep, prompt, load.concurrency, load.requests)
                lv = {"users": load.concurrency, "prompt_tokens": prompt, "output_tokens": output,
                      "requests": load.requests}
                if self.left() < est + 15:
                    lv.update(status="skipped", why=f"{self.left():.0f} s left, ~{est:.0f} s needed")
                    rec["levels"].append(lv)
                    self.log(f"{name} {sweep} p{prompt} u{load.concurrency}: skipped ({lv['why']})")
                    continue
                t = time.time()
                try:
                    outcome, gpu, _ = await asyncio.wait_for(
                        measure_observed(session, load, gpu_indices=self.gpu_indices, gpu_interval_s=0.1),
                        timeout=max(5.0, self.left() - 8))
                except asyncio.TimeoutError:
                    lv.update(status="failed", why="stopped at the call's deadline", duration_s=round(time.time() - t, 1))
                    rec["levels"].append(lv)
                    self.log(f"{name} {sweep} p{prompt} u{load.concurrency}: stopped at the deadline")
                    break
                s = summarize_level(outcome.results, outcome.wall_s)
                errors = sorted({r.error[:200] for r in outcome.results if r.error})
                lv.update({
                    "status": "ok" if s.completed and not s.failed else ("partial" if s.completed else "failed"),
                    "completed": s.completed, "failed": s.failed, "stopped_short": s.stopped_short,
                    "aggregate_tok_s": s.stat("aggregate_tok_s"),
                    "decode_tok_s_p50": s.stat("decode_tok_s", "p50"),
                    "ttft_ms_p50": s.stat("ttft_ms", "p50"), "ttft_ms_p90": s.stat("ttft_ms", "p90"),
                    "tpot_ms_p50": s.stat("tpot_ms", "p50"), "tpot_ms_p90": s.stat("tpot_ms", "p90"),
                    "itl_ms_p50": s.stat("itl_ms", "p50"), "e2e_ms_p50": s.stat("e2e_ms", "p50"),
                    "prefill_tok_s_p50": s.stat("prefill_tok_s", "p50"),
                    "request_throughput": s.stat("request_throughput"),
                    "output_tokens_total": s.output_tokens, "prompt_tokens_total": s.prompt_tokens,
                    "wall_s": round(outcome.wall_s, 3), "duration_s": round(time.time() - t, 1),
                    "errors": errors[:3],
                    "gpu": {"status": gpu.summary.status, "peak_memory_used_mib": gpu.summary.peak_memory_used_mib,
                            "mean_utilization_gpu": gpu.summary.mean_utilization_gpu,
                            "max_power_w": gpu.summary.max_power_w, "energy_j": gpu.summary.energy_j,
                            "min_sm_clock_mhz": gpu.summary.min_sm_clock_mhz},
                    "client": {k: (outcome.client or {}).get(k) for k in ("cpu_percent", "loop_lag_ms_p99",
                                                                          "host_cpus", "host_cpu_busy_percent")},
                })
                if s.output_tokens and gpu.summary.energy_j:
                    lv["gpu"]["j_per_output_token"] = gpu.summary.energy_j / s.output_tokens
                rec["levels"].append(lv)
                self.log(f"{name} {sweep} p{prompt} u{load.concurrency}: {s.completed}/{load.requests} ok, "
                         f"aggregate {lv['aggregate_tok_s'] or 0:.1f} tok/s, per stream {lv['decode_tok_s_p50'] or 0:.1f}"
                         f" tok/s, TTFT p50 {lv['ttft_ms_p50'] or 0:.0f} ms p90 {lv['ttft_ms_p90'] or 0:.0f} ms "
                         f"({lv['duration_s']} s)")
            return out
        except Exception as exc:  # noqa: BLE001 - one session's failure must not lose the rest
            return {**out, "error": f"{type(exc).__name__}: {exc}"}
        finally:
            await session.close()

    def level_estimate(self, name, sweep, prompt, users, requests) -> float:
        """Seconds a level should take, from the 7B Q4_K_M's guessed rates scaled by the file."""
        rounds = -(-requests // users)
        per_stream = {1: 230, 4: 150, 16: 70, 64: 25, 128: 14}.get(users, 20)
        out = USERS_OUTPUT if sweep == "users" else PROMPTS_OUTPUT
        prefill = users * prompt / 9000 * (1 + prompt / 16000)
        return rounds * (out / per_stream + prefill) * scale(name) + 2

    # ------------------------------------------------------------------ main
    def main(self) -> int:
        self.machine()
        self.llama_build()
        self.save()
        server = os.path.join(self.bin, "llama-server")
        self.allow = launcher.Allowlist.from_settings(server, self.work, "18100-18199")
        probe = gpu_telemetry.probe()
        self.gpu_indices = [0] if probe.ok and probe.gpus else None
        plan = [p.strip() for p in self.a.plan.split(",") if p.strip()]
        steps = [s for s in self.a.steps.split(",") if s]
        for name in plan:
            if all(isinstance(self.entry(name).get(s), dict) and self.entry(name)[s].get("status") == "ok"
                   for s in steps):
                continue
            if self.left() < 40:
                self.log(f"{name}: not started, {self.left():.0f} s left")
                continue
            try:
                model = self.ensure_model(name, plan)
            except Exception as exc:  # noqa: BLE001
                self.entry(name).setdefault("prep", {})["error"] = f"{type(exc).__name__}: {exc}"
                self.log(f"{name}: preparing failed: {exc}")
                model = None
            if model is None:
                continue
            e = self.entry(name)
            e["file_bytes"] = os.path.getsize(model)
            for step in steps:
                old = e.get(step)
                if isinstance(old, dict) and old.get("status") == "ok":
                    continue
                est = self.estimate(name, step)
                if step in ("bench", "batched") and self.left() < est + 10:
                    e[step] = {"status": "skipped", "why": f"{self.left():.0f} s left, ~{est:.0f} s needed"}
                    self.log(f"{name} {step}: skipped ({e[step]['why']})")
                    continue
                if step in ("users", "prompts") and self.left() < 40:
                    e[step] = {**(old or {}), "status": "skipped", "why": f"{self.left():.0f} s left"}
                    self.log(f"{name} {step}: skipped ({self.left():.0f} s left)")
                    continue
                self.log(f"{name} {step}: start (~{est:.0f} s, {self.left():.0f} s left)")
                t = time.time()
                try:
                    if step == "bench":
                        e[step] = self.step_bench(name, model)
                    elif step == "batched":
                        e[step] = self.step_batched(name, model)
                    else:
                        rec = old if isinstance(old, dict) else {}
                        e[step] = rec
                        self.serve(name, model, step, rec)
                except Exception as exc:  # noqa: BLE001
                    e[step] = {**(e.get(step) or {}), "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
                e[step]["duration_s"] = round(time.time() - t, 1)
                self.log(f"{name} {step}: {e[step].get('status')} in {e[step]['duration_s']} s")
        self.call["ended"] = now()
        self.call["used_s"] = round(time.time() - self.t0, 1)
        self.save()
        print_table(self.result)
        return 0


def print_table(result: dict) -> None:
    print(f"\n{'file':<12} {'users':>5} {'prompt':>6} {'out':>4} {'ok':>7} {'agg tok/s':>9} {'stream':>7} "
          f"{'TTFT p50':>8} {'p90':>7} {'TPOT p50':>8}")
    for name, e in result.get("files", {}).items():
        for sweep in ("users", "prompts"):
            for lv in (e.get(sweep) or {}).get("levels", []):
                if lv.get("status") == "skipped":
                    print(f"{name:<12} {lv['users']:>5} {lv['prompt_tokens']:>6} {lv['output_tokens']:>4} skipped")
                    continue
                print(f"{name:<12} {lv['users']:>5} {lv['prompt_tokens']:>6} {lv['output_tokens']:>4} "
                      f"{lv.get('completed', 0):>3}/{lv.get('requests', 0):<3} {lv.get('aggregate_tok_s') or 0:9.1f} "
                      f"{lv.get('decode_tok_s_p50') or 0:7.1f} {lv.get('ttft_ms_p50') or 0:8.0f} "
                      f"{lv.get('ttft_ms_p90') or 0:7.0f} {lv.get('tpot_ms_p50') or 0:8.2f}")
    print(f"\n{'file':<12} llama-bench (t/s)                         batched-bench S_TG t/s by npl")
    for name, e in result.get("files", {}).items():
        b = e.get("bench") or {}
        tests = {("pp%d" % t["n_prompt"]) if t.get("n_prompt") else ("tg%d" % t["n_gen"]): t.get("avg_ts")
                 for t in b.get("tests", [])}
        bb = {r.get("pl"): r.get("speed_tg") for r in (e.get("batched") or {}).get("rows", [])}
        print(f"{name:<12} " + " ".join(f"{k} {v:8.1f}" for k, v in tests.items() if v) + "   " +
              " ".join(f"{k}:{v:.0f}" for k, v in bb.items() if v))


def cli() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the folder of llama-server, llama-quantize, llama-bench, "
                                                 "llama-batched-bench")
    ap.add_argument("--src", required=True, help="llama.cpp source (gguf-py and models/ggml-vocab-qwen2.gguf)")
    ap.add_argument("--work", required=True, help="where the GGUFs are written")
    ap.add_argument("--out", required=True)
    ap.add_argument("--resume", default="", help="an earlier result: measure only what it lacks")
    ap.add_argument("--mirror", default="", help="a second path the result is written to (the machine's own state)")
    ap.add_argument("--deadline", type=float, default=0.0, help="epoch seconds by which to be done")
    ap.add_argument("--plan", default=DEFAULT_PLAN, help="shape:quant, in order")
    ap.add_argument("--steps", default=",".join(STEPS))
    ap.add_argument("--min-requests", type=int, default=8)
    ap.add_argument("--mult", type=int, default=2)
    ap.add_argument("--cap", type=int, default=128, help="users sweep: most requests per level")
    ap.add_argument("--shapes", default="", help="JSON: other shapes by name (a quick check on a CPU)")
    ap.add_argument("--source-note", default="")
    ap.add_argument("--build-note", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    if a.shapes:
        SHAPES.update(json.loads(a.shapes))
    return Sweep(a).main()


if __name__ == "__main__":
    sys.exit(cli())
