"""Perplexity and full-vocabulary KL divergence by llama.cpp's own `llama-perplexity`, run on the
GGUF file a server was started from. Django-free.

The endpoint path (engine.quality) asks llama-server once per position; on a CPU that is tens of
minutes where this tool needs seconds, and its KL covers the reference's top-k only (a lower
bound). Where the host has the tool and the model file, the lab runs it on the same text and
windows (`-c N_CTX --chunks CHUNKS`, the windows engine.quality copies): the reference's file once
with `--kl-divergence-base FILE` (its perplexity, and every position's full distribution saved),
then each tested file with `--kl-divergence-base FILE --kl-divergence` (its perplexity, and the KL
over the whole vocabulary, its 99th percentile and how often both pick the same top token).

`parse` reads the tool's own summary lines (tools/perplexity/perplexity.cpp): "Final estimate:
PPL = …" and, when comparing, "Mean PPL(Q)", "Mean    KLD", "99.0%   KLD" and "Same top p".
"""
from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable

METHOD = "llama_perplexity"
METHOD_WORDS = "llama-perplexity on the server's GGUF file (full vocabulary)"

_FINAL = re.compile(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)")
_MEAN_PPL_Q = re.compile(r"Mean PPL\(Q\)\s*:\s*([\d.]+) ± +([\d.]+)")
_KLD_MEAN = re.compile(r"Mean\s+KLD:\s*([\d.]+) ± +([\d.]+)")
_KLD_P99 = re.compile(r"99\.0%\s+KLD:\s*([\d.]+)")
_SAME_TOP = re.compile(r"Same top p:\s*([\d.]+) ± +([\d.]+) %")
_CHUNKS = re.compile(r"(?:calculating perplexity|computing) over (\d+) chunks, n_ctx=(\d+)")


class ToolError(Exception):
    """The tool could not give a figure; the message says why, with its output's last lines."""


@dataclass(frozen=True)
class ToolScores:
    perplexity: float
    perplexity_stderr: float
    chunks: int
    n_ctx: int
    seconds: float
    command: tuple[str, ...] = ()
    kl_mean: float | None = None  # nats, over the full vocabulary (against the base file)
    kl_mean_stderr: float | None = None
    kl_p99: float | None = None
    same_top_share: float | None = None  # 0..1
    same_top_stderr: float | None = None
    extra: dict = field(default_factory=dict)

    @property
    def tokens_scored(self) -> int:
        """Positions scored: llama-perplexity scores the second half of each window, less one."""
        return self.chunks * (self.n_ctx - 1 - self.n_ctx // 2)

    def reference(self, name: str) -> dict | None:
        """The comparison as QualityResult.reference holds it (None without one)."""
        if self.kl_mean is None:
            return None
        return {"name": name, "kl_mean": self.kl_mean, "kl_mean_stderr": self.kl_mean_stderr, "kl_p99": self.kl_p99,
                "same_top_share": self.same_top_share, "positions": self.tokens_scored, "vocabulary": "full",
                "method": METHOD_WORDS}


def command(binary: str, model: str, text_path: str, n_ctx: int, chunks: int, *, base: str = "",
            compare: bool = False, threads: int | None = None) -> list[str]:
    """The tool's command line: the reference with `base` (its distributions saved there), a
    tested file with `base` and `compare` (read from there)."""
    argv = [binary, "-m", model, "-f", text_path, "-c", str(n_ctx), "--chunks", str(chunks)]
    if base:
        argv += ["--kl-divergence-base", base]
        if compare:
            argv += ["--kl-divergence"]
    if threads:
        argv += ["-t", str(threads)]
    return argv


def parse(output: str, seconds: float = 0.0, argv=()) -> ToolScores:
    """The figures of one run of the tool from its output (stdout and stderr together)."""
    chunks = _CHUNKS.search(output)
    ppl = _MEAN_PPL_Q.search(output) or _FINAL.search(output)
    if not ppl or not chunks:
        tail = "\n".join(output.strip().splitlines()[-8:])
        raise ToolError(f"llama-perplexity printed no perplexity; its last lines:\n{tail}")
    kl, p99, same = _KLD_MEAN.search(output), _KLD_P99.search(output), _SAME_TOP.search(output)
    return ToolScores(
        perplexity=float(ppl.group(1)), perplexity_stderr=float(ppl.group(2)), chunks=int(chunks.group(1)),
        n_ctx=int(chunks.group(2)), seconds=seconds, command=tuple(argv),
        kl_mean=float(kl.group(1)) if kl else None, kl_mean_stderr=float(kl.group(2)) if kl else None,
        kl_p99=float(p99.group(1)) if p99 else None,
        same_top_share=float(same.group(1)) / 100 if same else None,
        same_top_stderr=float(same.group(2)) / 100 if same else None)


def run(argv: list[str], *, timeout_s: float, should_stop: Callable[[], bool] = lambda: False,
        env: dict | None = None, poll_s: float = 0.5, **popen) -> ToolScores:
    """Run the tool to its end (stopped within `poll_s` of `should_stop`, or at `timeout_s`);
    `popen`: the user and group to run it as."""
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env, close_fds=True, **popen)
    try:
        while True:
            try:
                output, _ = proc.communicate(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                if should_stop():
                    raise ToolError("stopped: the run was cancelled") from None
                if time.monotonic() - started > timeout_s:
                    raise ToolError(f"llama-perplexity did not finish within {timeout_s:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        tail = "\n".join((output or "").strip().splitlines()[-8:])
        raise ToolError(f"llama-perplexity exited with {proc.returncode}; its last lines:\n{tail}")
    return parse(output, seconds, argv)
