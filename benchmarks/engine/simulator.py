"""A simulated OpenAI-compatible streaming server with known latencies.

It speaks the dialect of any registered backend (`dialect`, a name in engine.backends; each
backend's module says how: its identity endpoints, its /tokenize, its /metrics names, a BOS token
it adds, how its stream ends, what it refuses): vLLM (usage chunk, /version, vllm:* metrics),
llama.cpp (`timings` in the last chunk, /props, /slots, llamacpp:* metrics, a BOS token added
to every prompt), SGLang (/get_model_info, /get_server_info, sglang:* metrics) and a strict
plain-OpenAI server (no /tokenize, no /metrics, unknown request fields refused); all with
/health, /v1/models, /v1/completions and /v1/chat/completions.

Latency model: a request waits for one of `slots`, then its prefill takes
`prefill_ms + prompt_tokens * prefill_ms_per_token`, then one token is written every
`decode_ms`. Tokens are scheduled on absolute times, so the truth does not drift.

It knows the truth: with `truth=True` it records, on the machine's monotonic clock (the same
clock as `time.perf_counter()` in the client on Linux), when each request was received and
when each chunk was written (GET /_truth): per request `received` (its body fully read by the
simulator), `arrived` (when the bytes that completed it reached the socket: the kernel's
receive time, so the simulator's own scheduling delay does not move it; None where the
system gives no such time), `id` (the X-Request-Id header, if any), `prompt` (`prompt_key` of the prompt, to match a
client's request by content), `prompt_tokens` (as its usage counts them), `messages` (a chat
request's [role, tokens] per message), `start` (a slot was free), `due` and `step` (chunk k was due at
`due + k * step`: the schedule), `chunks` (when each chunk was handed to the socket),
`chunks_from` (just before each was: the kernel took the bytes between the two) and `done`
(when the stream's last bytes were).

Faults for tests (`fault`, applied to every `fault_every`-th request): http500, reset (the
connection is dropped mid-stream), stall (stops writing mid-stream), malformed (a non-JSON
chunk), error_chunk (an error object in the stream), truncate (the stream ends without
finish_reason or usage), slow_drip (each token split over several chunks, slowly), endless
(bytes without an event delimiter, forever).

More faults: `max_keepalive_requests` (a request arriving on a connection that already served
that many is read and dropped without a byte of response, like a server that closed an idle
keep-alive connection), `fail_paths` ("/v1/models=500,/tokenize=404": those routes answer that
status), `fail_scoring_request` (that quality-scoring request answers 500) and `api_key` (every
route but /health answers 401 without `Authorization: Bearer <api_key>`, like `vllm serve
--api-key`). `tls_cert` / `tls_key` (PEM files) serve HTTPS, TLS
terminated in front of the plain server the way a reverse proxy does. GET /_stats says what
the server saw: connections accepted and still open, requests, keep-alive drops, requests
refused for a missing or wrong key.

Written on raw non-blocking sockets driven by asyncio rather than a web framework (or even
asyncio transports) because fault injection needs control of the socket (dropping a
connection mid-chunk), the truth needs the kernel's receive times, and the overhead must stay
small at hundreds of streams on two cores.

Run: python -m benchmarks.engine.simulator --port 8100 --dialect llamacpp --decode-ms 10
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import socket
import ssl
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import asdict, dataclass

from . import backends

FAULTS = ("none", "http500", "reset", "stall", "malformed", "error_chunk", "truncate", "slow_drip",
          "endless")


@dataclass
class SimConfig:
    dialect: str = "vllm"  # a backend name: vllm, llamacpp, sglang, openai, ...
    model: str = "sim-model"
    prefill_ms: float = 5.0
    prefill_ms_per_token: float = 0.0
    decode_ms: float = 10.0
    slots: int = 64
    reasoning_tokens: int = 0  # chat: the first N tokens are reasoning_content
    eos_after: int = 0  # without ignore_eos, stop after N tokens (0 = never)
    honor_ignore_eos: bool = True  # False: a server that stops at eos_after regardless
    fault: str = "none"
    fault_every: int = 1
    fault_after_tokens: int = 3
    max_keepalive_requests: int = 0  # drop the request after N on one connection (0 = never)
    fail_paths: str = ""  # "/v1/models=500,/tokenize=404": those routes answer that status
    api_key: str = ""  # required as "Authorization: Bearer <key>" on every route but /health
    tls_cert: str = ""  # PEM certificate (chain) and key: serve HTTPS
    tls_key: str = ""
    truth: bool = False
    vocab: int = 32000
    sharpness: float = 1.0  # the known next-token model (KnownModel); 0 = uniform over the vocabulary
    token_offset: int = 0  # /tokenize answers ids shifted by this: a server with another tokenizer
    score_ms: float = 0.0  # each scoring request (quality: prompt_logprobs, n_probs) answers after this long
    max_logprobs: int = 0  # vLLM's --max-logprobs: a larger prompt_logprobs is refused in its words (0 = no cap)
    fail_scoring_request: int = 0  # that scoring request (1 = the first) answers HTTP 500, the rest as usual
    # A prefix cache of blocks of this many prompt tokens (0 = none): a prompt's leading whole
    # blocks seen before are not computed again (no prefill cost), as vLLM's automatic prefix caching.
    prefix_cache_block: int = 0
    # The most tokens (prompt + max_tokens) one request may hold, as a server's context (a
    # llama.cpp slot, vLLM's max_model_len): said in its identity, longer requests refused.
    context: int = 4096


class KnownModel:
    """The simulator's language model, with log-probabilities known in closed form, for the
    quality step. After token p, the tokens ranked j = 0 .. ranked-1 are
    (p * 7919 + j * 104729 + 13) mod vocab, with weight exp(-sharpness * j); every other token
    has weight exp(-sharpness * ranked). log P(t | p) = -sharpness * rank(t) - log Z."""

    ranked = 64

    def __init__(self, vocab: int, sharpness: float):
        self.vocab, self.sharpness = vocab, sharpness
        self.log_z = math.log(sum(math.exp(-sharpness * j) for j in range(self.ranked))
                              + (vocab - self.ranked) * math.exp(-sharpness * self.ranked))

    def candidate(self, prev: int, j: int) -> int:
        return (prev * 7919 + j * 104729 + 13) % self.vocab

    def rank(self, prev: int, token: int) -> int:
        for j in range(self.ranked):
            if self.candidate(prev, j) == token:
                return j
        return self.ranked

    def logprob(self, prev: int, token: int) -> float:
        return -self.sharpness * self.rank(prev, token) - self.log_z

    def top(self, prev: int, k: int) -> list[tuple[int, float]]:
        return [(self.candidate(prev, j), -self.sharpness * j - self.log_z) for j in range(min(k, self.ranked))]


def _streamed(body: bytes | None) -> bool:
    try:
        return json.loads(body or b"{}").get("stream") is True
    except (ValueError, AttributeError):
        return True  # let the generation route answer it


def prompt_key(prompt) -> int:
    """A short fingerprint of a prompt (a string or a list of token ids), recorded in the truth
    so that a client's request can be matched to it by content."""
    text = prompt if isinstance(prompt, str) else ",".join(map(str, prompt))
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def count_tokens(prompt) -> list[int]:
    """The simulator's tokenizer: one token per whitespace-separated word; token-id lists as
    they are."""
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    if isinstance(prompt, str):
        return [zlib.crc32(w.encode()) % 30000 + 1000 for w in prompt.split()]
    raise ValueError("prompt must be a string or a list of token ids")


class Simulator:
    def __init__(self, config: SimConfig):
        self.config = config
        self.backend = backends.get(config.dialect)
        self.identity_routes = self.backend.sim_routes(config)
        self.slots = asyncio.Semaphore(config.slots)
        self.request_count = 0
        self.running = 0
        self.waiting = 0
        self.tokens_predicted = 0
        self.prompt_tokens_total = 0
        self.prefix_blocks: set[int] = set()
        self.cached_tokens_total = 0
        self.prompt_tokens_looked_up = 0
        self.truth: list[dict] = []
        self.listener: socket.socket | None = None
        self.tasks: set[asyncio.Task] = set()
        # What the server saw (GET /_stats).
        self.stats = {"connections": 0, "open_connections": 0, "requests": 0, "dropped": 0, "unauthorized": 0,
                      "scoring_requests": 0,  # quality: prompt_logprobs or n_probs requests received
                      "scoring_per_slot_max": 0,  # the most scoring requests for one id_slot at once
                      # requests reusing a slot's cache that came while a fresh one (cache_prompt
                      # false: a window's first step) was still being scored on it
                      "reused_during_fresh": 0}
        self.scoring_per_slot: dict = {}
        self.fresh_per_slot: dict = {}
        self.fail_paths = {path.strip(): int(status) for path, _, status in
                           (item.rpartition("=") for item in config.fail_paths.split(",") if item.strip())}

    async def start(self, host: str = "127.0.0.1", port: int = 0, reuse_port: bool = False) -> int:
        """Listen on host:port. `reuse_port`: several simulator processes share the port
        (SO_REUSEPORT: the kernel spreads connections over them), one server on many cores."""
        self.listener = self._listen(host, port, reuse_port)
        return self.listener.getsockname()[1]

    def _listen(self, host: str, port: int, reuse_port: bool = False) -> socket.socket:
        listener = socket.create_server((host, port), backlog=2048, reuse_port=reuse_port)
        listener.setblocking(False)
        self.tasks.add(asyncio.get_running_loop().create_task(self._accept(listener)))
        return listener

    async def control(self, host: str = "127.0.0.1") -> int:
        """A second port of this process alone: with a shared port, the only way to ask one
        particular process for its truth and stats."""
        return self._listen(host, 0).getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and drop every connection (for a simulator run inside a test's process)."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.listener is not None:
            self.listener.close()

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            sock, _ = await loop.sock_accept(listener)
            conn = Connection(sock, loop)
            self.stats["connections"] += 1
            task = loop.create_task(self.handle(conn, conn))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    # ------------------------------------------------------------------ HTTP
    async def handle(self, reader: "Connection", writer: "Connection") -> None:
        served = 0
        counted = True  # in the stats: a connection of the client under test
        self.stats["open_connections"] += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                received = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (line.partition(":") for line in lines[1:] if line)}
                try:
                    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                except asyncio.IncompleteReadError:
                    return
                received = time.perf_counter()
                served += 1
                if path.split("?")[0] in ("/_stats", "/_truth"):
                    if counted:  # a test asking what the server saw: not part of what it saw
                        counted = False
                        self.stats["connections"] -= 1
                        self.stats["open_connections"] -= 1
                else:
                    self.stats["requests"] += 1
                if 0 < self.config.max_keepalive_requests < served:
                    # Like a server that already closed an idle keep-alive connection: the
                    # request is read and dropped without a byte of response.
                    self.stats["dropped"] += 1
                    return
                close = headers.get("connection", "").lower() == "close"
                keep = await self.route(method, path.split("?")[0], body, writer, received, close, headers)
                if not keep or close:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            if counted:
                self.stats["open_connections"] -= 1
            try:
                writer.close()
            except Exception:
                pass

    async def respond(self, writer, status: int, payload, close: bool, content_type="application/json") -> bool:
        data = payload if isinstance(payload, bytes) else (
            payload.encode() if isinstance(payload, str) else json.dumps(payload).encode())
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
                  500: "Internal Server Error", 503: "Service Unavailable"}.get(status, "Error")
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                     f"Content-Length: {len(data)}\r\n"
                     f"Connection: {'close' if close else 'keep-alive'}\r\n\r\n".encode() + data)
        await writer.drain()
        return not close

    async def route(self, method, path, body, writer, received, close, headers=None) -> bool:
        cfg = self.config
        if method == "GET" and path == "/_stats":
            return await self.respond(writer, 200, self.stats, close)
        if method == "GET" and path == "/_truth":
            return await self.respond(writer, 200, self.truth, close)
        if cfg.api_key and path != "/health" and (headers or {}).get("authorization") != f"Bearer {cfg.api_key}":
            self.stats["unauthorized"] += 1
            return await self.respond(writer, 401, {"error": {"message": "invalid api key"}}, close)
        if path in self.fail_paths:
            status = self.fail_paths[path]
            return await self.respond(writer, status, {"error": {"message": f"simulated HTTP {status}"}}, close)
        backend = self.backend
        if method == "GET" and path == "/health":
            return await self.respond(writer, 200, backend.sim_health(), close)
        if method == "GET" and path == "/v1/models":
            return await self.respond(writer, 200, {"object": "list", "data": [
                {"id": cfg.model, "object": "model", "owned_by": "simulator", **backend.sim_model_card(cfg)}]},
                close)
        if method == "GET" and path == "/metrics" and backend.sim_metrics:
            return await self.respond(writer, 200, backend.sim_exposition(self.figures(), cfg.model), close,
                                      "text/plain; version=0.0.4")
        if method == "GET" and path in self.identity_routes:
            return await self.respond(writer, 200, self.identity_routes[path], close)
        if method == "POST" and path in backend.sim_tokenize_paths:
            try:
                req = json.loads(body or b"{}")
                out = backend.sim_tokenize(req, count_tokens)
                if cfg.token_offset and isinstance(out.get("tokens"), list):  # another tokenizer
                    out = {**out, "tokens": [t + cfg.token_offset for t in out["tokens"]]}
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                return await self.respond(writer, 400, {"error": {"message": f"bad request: {exc}"}}, close)
            return await self.respond(writer, 200, out, close)
        if method == "POST" and (path == "/completion" and backend.quality_method == "teacher_forcing"
                                 or path == "/v1/completions" and backend.quality_method == "prompt_logprobs"
                                 and not _streamed(body)):
            try:
                req = json.loads(body or b"{}")
            except ValueError as exc:
                return await self.respond(writer, 400, {"error": {"message": f"bad request: {exc}"}}, close)
            self.stats["scoring_requests"] += 1
            if self.stats["scoring_requests"] == cfg.fail_scoring_request:
                return await self.respond(writer, 500, {"error": {"message": "simulated HTTP 500"}}, close)
            slot = req.get("id_slot") if isinstance(req, dict) else None
            slot = slot if isinstance(slot, int) else None
            self.scoring_per_slot[slot] = self.scoring_per_slot.get(slot, 0) + 1
            self.stats["scoring_per_slot_max"] = max(self.stats["scoring_per_slot_max"], self.scoring_per_slot[slot])
            fresh = isinstance(req, dict) and req.get("cache_prompt") is False
            if not fresh and self.fresh_per_slot.get(slot):
                self.stats["reused_during_fresh"] += 1
            self.fresh_per_slot[slot] = self.fresh_per_slot.get(slot, 0) + fresh
            try:
                if cfg.score_ms:
                    await asyncio.sleep(cfg.score_ms / 1000)
            finally:
                self.scoring_per_slot[slot] -= 1
                self.fresh_per_slot[slot] -= fresh
            try:
                asked = req.get("prompt_logprobs")
                if cfg.max_logprobs and isinstance(asked, int) and asked > cfg.max_logprobs:
                    return await self.respond(writer, 400, {"error": {"type": "BadRequestError", "message": (
                        f"Requested prompt logprobs of {asked}, which is greater than max allowed: "
                        f"{cfg.max_logprobs}")}}, close)
                return await self.respond(writer, 200, self.score(path, req), close)
            except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
                return await self.respond(writer, 400, {"error": {"message": f"bad request: {exc}"}}, close)
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            return await self.generate(path, body, writer, received, close, headers or {})
        return await self.respond(writer, 404, {"error": {"message": f"no route {method} {path}"}}, close)

    # ------------------------------------------------------------------ scoring (quality)
    def score(self, path: str, req: dict) -> dict:
        """Non-streamed answers of the KnownModel: vLLM's prompt_logprobs and greedy token ids,
        llama-server's n_probs with a logit_bias-forced token and return_tokens."""
        model = KnownModel(self.config.vocab, self.config.sharpness)
        prompt = count_tokens(req["prompt"])
        n = int(req.get("max_tokens") or req.get("n_predict") or 1)
        generated, prev = [], prompt[-1]
        forced = {int(t): float(b) for t, b in (req.get("logit_bias") or [])}
        for _ in range(n):
            nxt = max(forced, key=forced.get) if forced else model.candidate(prev, 0)
            generated.append(nxt)
            prev = nxt
        if path == "/completion":
            k = int(req.get("n_probs") or 0)
            probs = [{"id": t, "token": f"<{t}>", "logprob": model.logprob(p, t),
                      "top_logprobs": [{"id": c, "token": f"<{c}>", "logprob": lp} for c, lp in model.top(p, k)]}
                     for p, t in zip([prompt[-1], *generated], generated)]
            return {"content": "".join(f"<{t}>" for t in generated), "tokens": generated if req.get("return_tokens") else [],
                    "completion_probabilities": probs if k else [], "tokens_predicted": n,
                    "tokens_evaluated": len(prompt), "stop": True}
        k = req.get("prompt_logprobs")
        choice = {"index": 0, "text": "".join(f"<{t}>" for t in generated), "finish_reason": "length",
                  "logprobs": {"tokens": [f"token_id:{t}" for t in generated]} if req.get("logprobs") else None}
        if k is not None:
            entries = [None]
            for i in range(1, len(prompt)):
                prev, actual = prompt[i - 1], prompt[i]
                entry = {str(c): {"logprob": lp, "rank": j + 1, "decoded_token": f"<{c}>"}
                         for j, (c, lp) in enumerate(model.top(prev, int(k)))}
                entry.setdefault(str(actual), {"logprob": model.logprob(prev, actual),
                                               "rank": model.rank(prev, actual) + 1, "decoded_token": f"<{actual}>"})
                entries.append(entry)
            choice["prompt_logprobs"] = entries
        return {"id": "cmpl-sim-score", "object": "text_completion", "model": self.config.model, "choices": [choice],
                "usage": {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}}

    # ------------------------------------------------------------------ generation
    async def generate(self, path, body, writer, received, close, headers=None) -> bool:
        cfg = self.config
        chat = path.endswith("chat/completions")
        try:
            req = json.loads(body)
            refused = self.backend.sim_refuses(req)
            if refused:
                return await self.respond(writer, 400, {"error": {"message": refused,
                                                                  "type": "invalid_request_error"}}, close)
            if req.get("model") not in (cfg.model, None, "") and self.backend.sim_checks_model:
                return await self.respond(writer, 404, {"error": {
                    "message": f"The model `{req.get('model')}` does not exist."}}, close)
            prompt = (" ".join(str(m.get("content", "")) for m in req["messages"]) if chat
                      else req["prompt"])
            prompt_ids = count_tokens(prompt)
            max_tokens = int(req.get("max_tokens") or req.get("n_predict") or 16)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return await self.respond(writer, 400, {"error": {"message": f"bad request: {exc}"}}, close)
        n_prompt = len(prompt_ids) + self.backend.sim_bos_tokens + (8 if chat else 0)
        if cfg.context and n_prompt + max_tokens > cfg.context:  # as vLLM words it
            return await self.respond(writer, 400, {"error": {"type": "BadRequestError", "message": (
                f"This model's maximum context length is {cfg.context} tokens. However, you requested "
                f"{n_prompt + max_tokens} tokens ({n_prompt} in the messages, {max_tokens} in the completion).")}},
                close)
        n_cached = self.prefix_cache_lookup(prompt_ids)
        n_out = max_tokens
        if cfg.eos_after and not (self.backend.sim_exact_length(req) and cfg.honor_ignore_eos):
            n_out = min(n_out, cfg.eos_after)
        self.request_count += 1
        fault = cfg.fault if cfg.fault != "none" and self.request_count % max(cfg.fault_every, 1) == 0 else "none"
        if fault == "http500":
            return await self.respond(writer, 500, {"error": {"message": "simulated internal error"}}, close)
        truth = {"received": received, "arrived": getattr(writer, "arrived", None),
                 "id": (headers or {}).get("x-request-id"), "prompt": prompt_key(prompt),
                 "prompt_tokens": n_prompt, "chunks": [], "chunks_from": [],
                 # A chat request's messages: each one's role and its length in the simulator's tokens.
                 "messages": [[m.get("role"), len(count_tokens(str(m.get("content", ""))))] for m in req["messages"]]
                 if chat else None} if cfg.truth else None
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n" +
                     (b"Connection: close\r\n\r\n" if close else b"Connection: keep-alive\r\n\r\n"))
        await writer.drain()

        def event(obj) -> bytes:
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            return b"%x\r\n%s\r\n" % (len(data), data)

        encoded: dict = {}  # the same chunk, serialized once per request (keeps the loop light)

        cid = f"cmpl-sim-{self.request_count}"
        base = {"id": cid, "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": cfg.model}
        self.waiting += 1
        async with self.slots:
            self.waiting -= 1
            self.running += 1
            try:
                start = time.perf_counter()
                prefill_s = (cfg.prefill_ms + (n_prompt - n_cached) * cfg.prefill_ms_per_token) / 1000.0
                if chat:
                    writer.write(event({**base, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                                             "finish_reason": None}]}))
                first_at = start + prefill_s
                decode_s = cfg.decode_ms / 1000.0
                if truth is not None:
                    truth.update(start=start, due=first_at, step=decode_s)
                for k in range(n_out):
                    await _sleep_until(first_at + k * decode_s)
                    if fault in ("reset", "stall", "malformed", "error_chunk", "truncate", "endless") and k == cfg.fault_after_tokens:
                        if fault == "endless":
                            writer.write(b"6\r\ndata: \r\n")
                            while True:  # one event that never ends: 16 KiB every 10 ms
                                writer.write(b"%x\r\n%s\r\n" % (16384, b"x" * 16384))
                                await writer.drain()
                                await asyncio.sleep(0.01)
                        if fault == "reset":
                            writer.transport.abort()
                            return False
                        if fault == "stall":
                            await asyncio.sleep(3600)
                        if fault == "malformed":
                            writer.write(event(b"{not json"))
                        if fault == "error_chunk":
                            writer.write(event({"error": {"message": "simulated failure in stream", "code": 500}}))
                        if fault == "truncate":
                            writer.write(b"0\r\n\r\n")
                            await writer.drain()
                            return False
                        await writer.drain()
                        if fault in ("malformed", "error_chunk"):
                            writer.write(b"0\r\n\r\n")
                            await writer.drain()
                            return not close
                    text = " tok"
                    last = k == n_out - 1
                    finish = (("length" if n_out == max_tokens else "stop")
                              if last and self.backend.sim_finish_in_last_token else None)
                    if chat:
                        key = "reasoning_content" if k < cfg.reasoning_tokens else "content"
                        choice = {"index": 0, "delta": {key: text}, "finish_reason": finish}
                    else:
                        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
                    pieces = [text]
                    if fault == "slow_drip":
                        pieces = [text[:2], text[2:]]
                    for p in pieces:
                        data = encoded.get((key if chat else "", p, finish))
                        if data is None:
                            c = dict(choice)
                            if chat:
                                c["delta"] = {key: p}
                            else:
                                c["text"] = p
                            data = encoded[(key if chat else "", p, finish)] = event({**base, "choices": [c]})
                        if truth is not None:
                            truth["chunks_from"].append(time.perf_counter())
                        writer.write(data)
                        if truth is not None:
                            # Right after write(): the bytes are in the kernel's socket buffer
                            # (asyncio sends at once when nothing is queued).
                            truth["chunks"].append(time.perf_counter())
                            if writer.transport.get_write_buffer_size():
                                # Not sent yet (the client reads slowly): this time is early.
                                truth["buffered"] = truth.get("buffered", 0) + 1
                        await writer.drain()
                        if fault == "slow_drip":
                            await asyncio.sleep(decode_s)
                    self.tokens_predicted += 1
                end = time.perf_counter()
                self.prompt_tokens_total += n_prompt
                usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out,
                         "total_tokens": n_prompt + n_out}
                predicted_ms = max((end - first_at) * 1000.0, 1e-6)
                timings = {"cache_n": n_cached, "prompt_n": n_prompt - n_cached, "prompt_ms": prefill_s * 1000.0,
                           "prompt_per_second": n_prompt / prefill_s if prefill_s else 0.0,
                           "predicted_n": n_out, "predicted_ms": predicted_ms,
                           "predicted_per_second": (n_out - 1) / predicted_ms * 1000.0 if n_out > 1 else 0.0}
                for final in self.backend.sim_final_chunks(base, chat, "length" if n_out == max_tokens else "stop",
                                                           usage, timings):
                    writer.write(event(final))
                writer.write(event(b"[DONE]") + b"0\r\n\r\n")
                if truth is not None:
                    truth["done"] = time.perf_counter()
                await writer.drain()
                if truth is not None:
                    self.truth.append(truth)
                return not close
            finally:
                self.running -= 1

    def figures(self) -> dict[str, float]:
        """What the server knows of itself now, under the product's metric keys (each backend's
        /metrics page says these under its own names)."""
        return {"running": self.running, "waiting": self.waiting,
                "kv_cache_usage": min(1.0, self.running / max(self.config.slots, 1)),
                "generation_tokens_total": self.tokens_predicted, "prompt_tokens_total": self.prompt_tokens_total,
                "cached_prompt_tokens_total": self.cached_tokens_total,
                "prefix_cache_queries_total": self.prompt_tokens_looked_up}

    def prefix_cache_lookup(self, prompt_ids: list[int]) -> int:
        """Tokens of this prompt the prefix cache holds (its leading whole blocks seen before);
        the prompt's blocks are cached from now on."""
        block = self.config.prefix_cache_block
        if block <= 0:
            return 0
        self.prompt_tokens_looked_up += len(prompt_ids)
        key, cached, hit = 0, 0, True
        for start in range(0, len(prompt_ids) - block + 1, block):
            key = hash((key, tuple(prompt_ids[start:start + block])))
            if hit and key in self.prefix_blocks:
                cached += block
            else:
                hit = False
                self.prefix_blocks.add(key)
        self.cached_tokens_total += cached
        return cached


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
_TIMESPEC = struct.Struct("@ll")  # struct timespec
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0


class Connection:
    """One client connection on a raw non-blocking socket, used as both reader and writer
    (the subset of asyncio's StreamReader/StreamWriter the simulator needs).

    Not an asyncio transport, so that reads can take the kernel's receive time of their
    bytes: `arrived` (time.perf_counter clock) is when the bytes that completed the latest
    read reached the socket, whatever the simulator's own scheduling delay; and a chunk
    goes out with one send() as soon as it is written."""

    HIGH_WATER = 1 << 16

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop):
        self.sock, self.loop, self.fd = sock, loop, sock.fileno()
        self.transport = self  # writer.transport.abort() / get_write_buffer_size()
        self.arrived: float | None = None
        self.buf = bytearray()
        self.out = bytearray()
        self.eof = False
        self.lost = False
        self.closing = False
        self.flushed: asyncio.Future | None = None
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.stamped = False
        if _SO_TIMESTAMPNS is not None and hasattr(sock, "recvmsg"):
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.stamped = True
            except OSError:
                pass

    # -------------------------------------------------------------- reading
    async def _fill(self) -> None:
        while True:
            try:
                if self.stamped:
                    data, ancdata, _, _ = self.sock.recvmsg(65536, _CMSG_SPACE)
                else:
                    data, ancdata = self.sock.recv(65536), ()
            except (BlockingIOError, InterruptedError):
                waiter = self.loop.create_future()
                self.loop.add_reader(self.fd, _wake, waiter)
                try:
                    await waiter
                finally:
                    if self.fd >= 0:
                        self.loop.remove_reader(self.fd)
                continue
            except OSError as exc:
                raise ConnectionResetError(str(exc)) from exc
            now = time.perf_counter()
            for _, kind, raw in ancdata:
                if kind == _SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(raw)
                    age = time.time() - (sec + nsec * 1e-9)
                    if 0.0 <= age < 60.0:
                        now -= age
            if not data:
                self.eof = True
                return
            self.buf += data
            self.arrived = now
            return

    async def readuntil(self, separator: bytes) -> bytes:
        start = 0
        while True:
            i = self.buf.find(separator, start)
            if i >= 0:
                end = i + len(separator)
                out = bytes(self.buf[:end])
                del self.buf[:end]
                return out
            if self.eof or self.fd < 0:
                raise asyncio.IncompleteReadError(bytes(self.buf), None)
            start = max(0, len(self.buf) - len(separator) + 1)
            await self._fill()

    async def readexactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if self.eof or self.fd < 0:
                raise asyncio.IncompleteReadError(bytes(self.buf), n)
            await self._fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    # -------------------------------------------------------------- writing
    def write(self, data: bytes) -> None:
        if self.lost or self.fd < 0:
            return
        if self.out:
            self.out += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._lose()
            return
        if sent < len(data):
            self.out += data[sent:]
            self.loop.add_writer(self.fd, self._flush)

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._lose()
            return
        del self.out[:sent]
        if not self.out:
            self.loop.remove_writer(self.fd)
            if self.closing:
                self._close_now()
        if len(self.out) <= self.HIGH_WATER // 2 and self.flushed is not None and not self.flushed.done():
            self.flushed.set_result(None)

    async def drain(self) -> None:
        if self.lost:
            raise ConnectionResetError("connection lost")
        if len(self.out) > self.HIGH_WATER:
            self.flushed = self.loop.create_future()
            await self.flushed
            if self.lost:
                raise ConnectionResetError("connection lost")

    def get_write_buffer_size(self) -> int:
        return len(self.out)

    def _lose(self) -> None:
        self.lost = True
        self.out.clear()
        if self.flushed is not None and not self.flushed.done():
            self.flushed.set_result(None)
        self._close_now()

    def _close_now(self) -> None:
        if self.fd >= 0:
            self.loop.remove_writer(self.fd)
            self.loop.remove_reader(self.fd)
            self.fd = -1
            self.sock.close()

    def abort(self) -> None:
        """Drop the connection at once, unsent data included."""
        self.out.clear()
        self._lose()

    def close(self) -> None:
        if self.out and not self.lost:
            self.closing = True  # after the last bytes are sent
        else:
            self._close_now()


def _wake(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _sleep_until(deadline: float) -> None:
    delay = deadline - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)


async def tls_front(host: str, port: int, inner_port: int, cert: str, key: str) -> int:
    """HTTPS in front of the plain simulator on `inner_port`, the way a reverse proxy
    terminates TLS: each TLS connection is piped to a plain one. Returns its port."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key or None)

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            inner_reader, inner_writer = await asyncio.open_connection("127.0.0.1", inner_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, inner_writer), pipe(inner_reader, writer))

    server = await asyncio.start_server(handle, host, port, ssl=context)
    return server.sockets[0].getsockname()[1]


class SimulatorProcess:
    """Start the simulator in its own process (so it never shares an event loop or the GIL
    with the client it is measuring). Use as a context manager; `.url` is its base URL."""

    def __init__(self, config: SimConfig | None = None, **overrides):
        self.config = config or SimConfig(**overrides)
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "SimulatorProcess":
        args = [sys.executable, "-m", "benchmarks.engine.simulator", "--port", "0",
                "--config-json", json.dumps(asdict(self.config))]
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, cwd=root)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"simulator did not start: {line!r}")
        self.url = line.split()[-1]
        return self

    def truth(self) -> list[dict]:
        return self._get("/_truth")

    def stats(self) -> dict:
        """What the server saw: connections (accepted, still open), requests, keep-alive drops,
        requests refused for want of the API key."""
        return self._get("/_stats")

    def _get(self, path: str):
        import httpx  # only the test's handle needs it: the server process starts ~0.1 s sooner without
        # Our own simulator: its HTTPS certificate is whatever the test made.
        return httpx.get(self.url + path, timeout=30, verify=False).json()

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8100)
    ap.add_argument("--config-json", default="", help="all settings at once, as JSON")
    ap.add_argument("--reuse-port", action="store_true",
                    help="share --port with other simulator processes (SO_REUSEPORT); each also prints "
                         "'control on URL', a port of its own for its /_truth and /_stats")
    for name, f in SimConfig.__dataclass_fields__.items():
        kind = type(f.default)
        if kind is bool:
            kind = lambda v: v.lower() in ("1", "true", "yes", "on")  # noqa: E731
        ap.add_argument("--" + name.replace("_", "-"), type=kind, default=None)
    a = ap.parse_args(argv)
    cfg = SimConfig(**json.loads(a.config_json)) if a.config_json else SimConfig()
    for name in SimConfig.__dataclass_fields__:
        value = getattr(a, name)
        if value is not None:
            setattr(cfg, name, value)
    if cfg.fault not in FAULTS:
        ap.error(f"--fault must be one of {', '.join(FAULTS)}")
    if cfg.dialect not in backends.BACKENDS:
        ap.error(f"--dialect must be one of {', '.join(backends.names())}")

    async def serve() -> None:
        sim = Simulator(cfg)
        if cfg.tls_cert:
            port = await tls_front(a.host, a.port, await sim.start("127.0.0.1", 0), cfg.tls_cert, cfg.tls_key)
            print(f"listening on https://{a.host}:{port}", flush=True)
        else:
            port = await sim.start(a.host, a.port, reuse_port=a.reuse_port)
            print(f"listening on http://{a.host}:{port}", flush=True)
            if a.reuse_port:
                print(f"control on http://{a.host}:{await sim.control(a.host)}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
