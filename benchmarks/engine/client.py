"""Load generation against one OpenAI-compatible endpoint (vLLM, llama.cpp's llama-server,
SGLang or another compatible server: each one's dialect is in `backends/`), with httpx async
streaming.

A `Session` is one endpoint measured with one workload: preflight, prompt building with the
server's own tokenizer, warmup, then one call of `measure` per load level (a `Load`). It
keeps one httpx client (and so one warm connection pool, sized for the widest of the loads it
is given) for all of it.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib.util
import json
import math
import os
import random
import sys
import time
from dataclasses import dataclass, field, replace
from typing import Awaitable, Callable, Sequence

import httpx

if importlib.util.find_spec("sniffio") is None:
    # httpcore asks `import sniffio` on every request (its locks and cancellation shields),
    # and without sniffio installed each failed import searches sys.path again: about a
    # millisecond of CPU per request, in the measuring loop. A None entry makes the import
    # fail at once, with the same outcome (httpcore then assumes asyncio).
    sys.modules.setdefault("sniffio", None)

from . import backends, http1
from .addresses import AddressPolicy
from .arrivals import Trace, block_tokens, send_times
from .conversations import Conversation
from .datasets import SHAREGPT_PRUNED, Dataset, DatasetError, Lengths, RequestPlan, sharegpt_entries, vllm_bench_keeps
from .metrics import RequestResult, level_wall_time, percentile
from .stream import DONE, StreamError, parse_chunk, sse_data
from .transport import endpoint_transport

# Plain English words; tokenized by the server to get a pool of ordinary token ids.
_WORDS = (
    "time year people way day man thing woman life child world school state family student group "
    "country problem hand part place case week company system program question work government "
    "number night point home water room mother area money story fact month lot right study book "
    "eye job word business issue side kind head house service friend father power hour game line "
    "end member law car city community name president team minute idea kid body information back "
    "parent face others level office door health person art war history party result change "
    "morning reason research girl guy moment air teacher force education river mountain garden "
    "window paper music market field voice light green quick bright silent open simple strong "
    "table chair bridge engine signal answer measure travel winter summer ocean forest number"
).split()


@dataclass
class Target:
    """Where to send requests. `backend` names its dialect (`backends.names()`); `model` is the
    served model id ('' = the only one served)."""

    base_url: str
    backend: str = "openai"
    model: str = ""
    api_key: str = ""

    def url(self, path: str) -> str:
        return self.base_url.rstrip("/") + path

    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


@dataclass
class Workload:
    """What every level of a run shares. The levels themselves (streams or rate, how many
    requests, how long) are each a `Load`."""

    prompt_tokens: int = 512
    output_tokens: int = 100
    temperature: float = 0.7
    warmup_requests: int = 2
    api: str = "completions"
    seed: int | None = None
    # What the requests ask for (datasets.Dataset); None: every prompt `prompt_tokens` long,
    # every output `output_tokens`.
    dataset: Dataset | None = None
    # The most tokens (prompt + output) one request may take; 0 = no limit. A dataset prompt
    # longer than that fails the preparation, with its line.
    token_limit: int = 0

    def requests(self) -> Dataset:
        return self.dataset or Dataset(prompt_lengths=Lengths(mean=self.prompt_tokens),
                                       output_lengths=Lengths(mean=self.output_tokens))


@dataclass
class Timeouts:
    connect: float = 10.0
    first_byte: float = 300.0  # also the longest silence allowed between two chunks
    total: float = 900.0


# ShareGPT conversations drawn per request needed, so that enough remain when those too long for
# the server are left out.
SHAREGPT_DRAWN_PER_REQUEST = 3


@dataclass
class Finding:
    check: str
    ok: bool
    detail: str

    def to_dict(self) -> dict:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}

    @classmethod
    def from_dict(cls, data) -> "Finding | None":
        """A stored finding; None for anything `to_dict` did not write."""
        if not isinstance(data, dict) or not isinstance(data.get("check"), str):
            return None
        return cls(data["check"], data.get("ok") is True, str(data.get("detail") or ""))


@dataclass
class Preflight:
    findings: list[Finding] = field(default_factory=list)
    model: str = ""

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def cause(self) -> str:
        return "; ".join(f"{f.check}: {f.detail}" for f in self.findings if not f.ok)


class PromptFactory:
    """Fresh random prompts of a fixed token length, as token ids (exact) or as text
    (when the server has no /tokenize)."""

    def __init__(self, pool: list[int] | None, rng: random.Random, words_per_token: float = 1.0):
        self.pool = pool
        self.rng = rng
        self.words_per_token = words_per_token
        self.offset = 0  # tokens the server adds to what we send (e.g. a BOS token, a chat template's)
        self.seen: dict[int, int] = {}  # text prompts: words sent -> the server's usage.prompt_tokens

    def make(self, n_tokens: int) -> list[int] | str:
        n = max(1, n_tokens - self.offset)
        # One rng.choices call per prompt: it runs in the measuring loop, for every request.
        if self.pool:
            return self.rng.choices(self.pool, k=n)
        n_words = max(1, round(n * self.words_per_token))
        return " ".join(self.rng.choices(_WORDS, k=n_words))

    def sent_tokens(self, prompt: list[int] | str) -> int | None:
        return len(prompt) if isinstance(prompt, list) else None

    def calibrate(self, prompt: list[int] | str, usage_prompt_tokens: int | None) -> None:
        """Learn from a warmup request's usage how the server counts what we send."""
        if not usage_prompt_tokens:
            return
        if isinstance(prompt, list):
            self.offset = usage_prompt_tokens - len(prompt)
            return
        # Text: tokens = words / words_per_token + offset. Two lengths part the template's fixed
        # tokens (chat) from the words' own; with one, all of it is put on the words.
        self.seen[len(prompt.split())] = usage_prompt_tokens
        (w0, t0), (w1, t1) = min(self.seen.items()), max(self.seen.items())
        if w1 > w0 and t1 > t0:
            self.words_per_token = (w1 - w0) / (t1 - t0)
            self.offset = max(0, round(t0 - w0 / self.words_per_token))
        else:
            self.words_per_token, self.offset = w1 / t1, 0


@dataclass
class LevelOutcome:
    concurrency: int  # streams (closed loop) or the cap (0 = none) in rate mode
    results: list[RequestResult]
    started_at: float  # wall clock (epoch seconds) at the level's t0
    wall_s: float
    t0: float = 0.0  # the level's t0 on the monotonic clock (time.perf_counter)
    rate: float | None = None  # requests per second in rate mode
    client: dict = field(default_factory=dict)  # how busy the client itself was


# Dataset prompts a level bounded only by its duration may take (and ShareGPT conversations drawn).
DATASET_PASS = 1000
# A session's pool holds this many connections beyond its widest level's: the server's
# /metrics scrape and identity calls share the pool and never wait behind a level's requests.
SPARE_CONNECTIONS = 4
# An open loop without a cap has no bound of its own on the requests in flight: this is it
# (the pool's size; a request past it waits for a connection, and its send lag shows it).
OPEN_LOOP_MAX_IN_FLIGHT = 256


@dataclass
class Load:
    """One load level, the only description of one: a closed loop of `concurrency` streams
    (each one a run of multi-turn sessions with a `conversation`), or an open loop at `rate`
    requests/s (arrivals.KINDS: poisson, constant, gamma with `burstiness`, a ramp from `rate`
    to `ramp_to`, or a `trace` replayed at `speedup`, whose mean rate is then `rate`; optionally
    capped at `concurrency` in flight). Bounded by `requests` or by `duration_s` (whichever
    comes first when both are given)."""

    concurrency: int = 1
    rate: float | None = None
    arrivals: str = "poisson"
    requests: int | None = None
    duration_s: float | None = None
    burstiness: float = 1.0
    ramp_to: float | None = None
    trace: Trace | None = None
    speedup: float = 1.0
    conversation: Conversation | None = None

    @property
    def label(self) -> str:
        if self.rate is None:
            if self.conversation is not None:
                return f"{self.concurrency} concurrent {self.conversation.turns}-turn conversations"
            return f"{self.concurrency} concurrent"
        cap = f", at most {self.concurrency} in flight" if self.concurrency else ""
        if self.arrivals == "trace":
            return f"trace ×{self.speedup:g} ({self.rate:.3g} req/s mean){cap}"
        if self.arrivals == "ramp":
            return f"ramp {self.rate:g} → {self.ramp_to:g} req/s{cap}"
        if self.arrivals == "gamma":
            return f"{self.rate:g} req/s gamma (burstiness {self.burstiness:g}){cap}"
        return f"{self.rate:g} req/s {self.arrivals}{cap}"

    @property
    def max_in_flight(self) -> int:
        """The most requests this level can have in flight at once: its streams, its cap, or
        OPEN_LOOP_MAX_IN_FLIGHT for an open loop without a cap."""
        if self.rate is None or self.concurrency:
            return max(1, self.concurrency)
        return OPEN_LOOP_MAX_IN_FLIGHT


ProgressCallback = Callable[[RequestResult], Awaitable[bool]]  # returns False to stop the run


@dataclass(frozen=True)
class Share:
    """Which of a level's requests one process sends (shards.py splits a level): a closed loop
    takes request indices first, first + every, ...; an open loop its `schedule`, (request
    index, send time after t0) pairs. The default is the whole level."""

    first: int = 0
    every: int = 1
    schedule: list[tuple[int, float]] | None = None


async def sleep_until(deadline: float) -> None:
    """Sleep until `deadline` on the monotonic clock (time.perf_counter, CLOCK_MONOTONIC on
    Linux: the same clock in every process of the machine), to within about 0.1 ms: asyncio's
    timer (which wakes up to a millisecond late) to 1 ms before it, then yielding turns."""
    left = deadline - time.perf_counter()
    if left > 0.001:
        await asyncio.sleep(left - 0.001)
    while time.perf_counter() < deadline:
        await asyncio.sleep(0)


class Cancelled(Exception):
    """The run was cancelled while a level was being measured."""


async def until_stopped(awaitable: Awaitable, should_stop: Callable[[], bool], poll_s: float = 0.2):
    """Await `awaitable`, polling `should_stop` every `poll_s`: when it says so, cancel it at once
    (requests in flight included) and raise Cancelled. For every step of a run, not only its
    levels: a warmup request that a server streams forever must not hold a cancelled run."""
    task = asyncio.ensure_future(awaitable)
    while not task.done():
        await asyncio.wait({task}, timeout=poll_s)
        if not task.done() and should_stop():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            raise Cancelled()
    return task.result()


class Session:
    """`loads` are the levels this session will measure: its connection pool holds the widest
    one's requests in flight (plus SPARE_CONNECTIONS), and `measure` refuses a load wider than
    that rather than let the pool quietly cap it. `addresses` says where requests may go
    (default: anywhere but the blocked ranges). A target that cannot be used as given (a
    backend the registry does not hold, a base URL the policy refuses or httpx cannot parse,
    an API key no HTTP header can carry) fails the preflight with the reason, and no request
    is sent; the constructor itself never raises for it."""

    def __init__(self, target: Target, workload: Workload, timeouts: Timeouts | None = None,
                 loads: Sequence[Load] = (), addresses: AddressPolicy | None = None):
        self.target = target
        self.workload = workload
        self.timeouts = timeouts or Timeouts()
        self.addresses = addresses or AddressPolicy()
        self.unusable: list[Finding] = []
        try:
            self.backend = backends.get(target.backend)
        except backends.UnknownBackend as exc:
            self.backend = backends.Backend()
            self.unusable.append(Finding("backend", False, str(exc)))
        url_problem = self.addresses.url_problem(target.base_url)
        if url_problem:
            self.unusable.append(Finding("url", False, url_problem))
        try:
            headers = httpx.Headers(target.headers())
        except UnicodeEncodeError:
            headers = httpx.Headers()
            self.unusable.append(Finding("api key", False, "has characters an HTTP header cannot carry "
                                                           "(only ASCII is possible)"))
        self.rng = random.Random(workload.seed)
        self.prompts = PromptFactory(None, self.rng)
        self.loads = list(loads)
        self.plan = RequestPlan(workload.requests(), workload.seed)
        self.entry_ids: dict[int, list[int]] = {}  # dataset entry -> its prompt's token ids
        self.entry_outputs: dict[int, int] = {}  # dataset entry -> its reply's length, tokenized
        self.entry_offset = 0  # tokens the server adds to a dataset prompt (BOS, chat template)
        self.prefix: list[int] | str = []
        # Why the requests could not be built (a dataset the server cannot tokenize, a prompt
        # over the token limit); set by prepare(), and then no level is measured.
        self.dataset_problem = ""
        self.dataset_note = ""  # what building the dataset's requests left out, and why
        self.context_limit: int | None = None  # tokens the server gives one request, once known
        self.stream_tok_s: float | None = None  # tokens/s of one stream in the warmup (prepare)
        limit = max((load.max_in_flight for load in loads), default=1) + SPARE_CONNECTIONS
        self.max_connections = limit
        limits = httpx.Limits(max_connections=limit, max_keepalive_connections=limit)
        timeout = httpx.Timeout(self.timeouts.first_byte, connect=self.timeouts.connect)
        transport = endpoint_transport(target.base_url, limits, self.addresses)
        self.client = httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers, transport=transport)
        # Plain HTTP: the measured requests go straight to the engine's HTTP/1.1 client (http1.py),
        # sharing its pool with the httpx calls; HTTPS and proxies go through httpx.
        self.http1_transport = transport if isinstance(transport, http1.Transport) else None
        self.http1_timeouts = timeout.as_dict()
        self.http1_heads: dict[str, tuple[httpx.URL, bytes]] = {}

    async def close(self) -> None:
        await self.client.aclose()

    async def _call(self, method: str, path: str, **kwargs) -> httpx.Response:
        """A small non-streaming call, retried once when a pooled keep-alive connection
        turns out to be closed by the server before any response byte."""
        try:
            return await self.client.request(method, self.target.url(path), **kwargs)
        except httpx.RemoteProtocolError:
            return await self.client.request(method, self.target.url(path), **kwargs)

    # ---------------------------------------------------------------- preflight
    async def preflight(self) -> Preflight:
        pf = Preflight()
        if self.unusable:
            pf.findings.extend(self.unusable)
            return pf
        try:
            resp = await self._call("GET", "/health")
            ok = resp.status_code == 200
            pf.findings.append(Finding("health", ok, f"HTTP {resp.status_code}" + (
                "" if ok else f" (server not ready: {resp.text[:200]})")))
        except httpx.HTTPError as exc:
            pf.findings.append(Finding("health", False, f"unreachable: {describe_error(exc)}"))
            return pf
        try:
            resp = await self._call("GET", "/v1/models")
            resp.raise_for_status()
            ids = [m.get("id") for m in resp.json().get("data", []) if isinstance(m, dict)]
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            pf.findings.append(Finding("models", False, f"/v1/models failed: {describe_error(exc)}"))
            return pf
        wanted = self.target.model
        if not wanted and len(ids) == 1:
            wanted = ids[0]
        if wanted and (wanted in ids or self.backend.serves_any_model and ids):
            pf.model = wanted
            pf.findings.append(Finding("model", True, f"serves {', '.join(map(str, ids))}"))
        else:
            pf.findings.append(Finding("model", False, f"model {wanted or '(unspecified)'!r} not "
                                       f"served; the server lists {ids}"))
        return pf

    def context_check(self, identity: dict) -> Finding | None:
        """Whether the longest request planned fits the context the server gives one request
        (a llama.cpp slot's share of -c, vLLM's max_model_len); None when either is unknown
        (the server does not say, or a dataset's lengths are known only once tokenized)."""
        context = self.context_limit = self.backend.context_per_request(identity)
        dataset = self.workload.requests()
        if context is None or dataset.source != "synthetic":
            return None
        one = dataset.prompt_lengths.high + dataset.prefix_tokens + dataset.output_lengths.high
        longest = max((self.longest_request(load, one, dataset.prefix_tokens) for load in self.loads), default=one)
        if longest <= context:
            return Finding("context", True, f"the longest request ({longest} tokens) fits the {context} tokens "
                                            f"the server gives each request")
        return Finding("context", False, f"a request of up to {longest} tokens (prompt and output) does not fit the "
                                         f"{context} tokens the server gives each request: every such request would "
                                         f"fail{self.backend.context_hint}")

    @staticmethod
    def longest_request(load: Load, one: int, prefix: int = 0) -> int:
        """The most tokens (prompt and output) one request of `load` may take, `one` being the
        longest synthetic request: a trace's longest line, or a conversation's last turn (every
        turn's message and reply in its history, the shared prefix once; the chat template's
        tokens come on top)."""
        if load.trace is not None:
            return max(r.input_tokens + r.output_tokens for r in load.trace.first(load.requests))
        if load.conversation is not None:
            return load.conversation.turns * (one - prefix) + prefix
        return one

    # ---------------------------------------------------------------- prompts
    async def tokenize(self, text: str) -> list[int] | None:
        """Token ids of `text` without special tokens, from the server's own tokenizer (as its
        backend calls it); None when it has none (`tokenize_problem` then says why a call it
        has failed)."""
        self.tokenize_problem = ""
        for path, body in self.backend.tokenize_requests(self.target.model, text):
            try:
                resp = await self._call("POST", path, json=body)
                if resp.status_code != 200:
                    self.tokenize_problem = f"{path} answered HTTP {resp.status_code}"
                    continue
                tokens = self.backend.read_tokens(resp.json())
            except (httpx.HTTPError, ValueError) as exc:
                self.tokenize_problem = f"{path} failed: {describe_error(exc)}"
                continue
            if tokens:
                return tokens
            self.tokenize_problem = f"{path} answered no token ids"
        return None

    async def prepare(self, model: str) -> Finding:
        """Build the prompt pool, then send the warmup requests; they calibrate prompt length
        and open connections, and are not part of any result. Returns how the prompts are
        built, for the record (a server without /tokenize gets text prompts)."""
        self.target.model = model
        text = " ".join(self.rng.choice(_WORDS) for _ in range(2000))
        ids = await self.tokenize(text)
        # Chat prompts must be text; completions take exact token ids.
        pool = sorted(set(ids)) if ids and self.workload.api != "chat" else None
        self.prompts = PromptFactory(pool, self.rng)
        if ids is None:
            text_prompts = "the prompts are text, their length calibrated against the server's usage.prompt_tokens"
            finding = (Finding("tokenize", False, f"{self.tokenize_problem}: {text_prompts}") if self.tokenize_problem
                       else Finding("tokenize", True, f"no tokenize call for this backend: {text_prompts}"))
        else:
            finding = Finding("tokenize", True, f"{len(set(ids))} distinct token ids from the server's tokenizer"
                                                + ("; chat prompts are text" if pool is None else ""))
        for i in range(self.workload.warmup_requests):
            prompt = self.prompts.make(self.workload.prompt_tokens)
            result = await self.send(-1 - i, prompt, self.workload.output_tokens, time.perf_counter())
            if result.ok:
                self.prompts.calibrate(prompt, result.prompt_tokens)
                if result.tpot:  # one stream's speed, alone on the server: the most a stream gets
                    self.stream_tok_s = max(self.stream_tok_s or 0.0, 1.0 / result.tpot)
        # Still learn how the server counts prompts, with one short request; text prompts also at
        # half the length, so that a chat template's own tokens are told from the words'.
        for share in ((1.0,) if self.workload.warmup_requests == 0 else ()) + ((0.5,) if pool is None else ()):
            prompt = self.prompts.make(max(2, round(self.workload.prompt_tokens * share)))
            result = await self.send(-1, prompt, 1, time.perf_counter())
            if result.ok:
                self.prompts.calibrate(prompt, result.prompt_tokens)
        await self._prepare_requests()
        if self.dataset_note:
            finding = Finding(finding.check, finding.ok, f"{finding.detail}; {self.dataset_note}")
        return finding

    def requests_needed(self) -> int:
        """Requests the longest level asks for; a level bounded only by its duration may take a
        whole pass through a dataset (DATASET_PASS for the ShareGPT set)."""
        if any(load.requests is None for load in self.loads):
            return max(len(self.plan.dataset.entries), DATASET_PASS)
        return max((load.requests for load in self.loads), default=DATASET_PASS)

    async def _prepare_requests(self) -> None:
        """The shared prefix, and every dataset prompt the levels will use tokenized by the
        server (exact lengths: completions send these token ids), each checked against the token
        limit. What fails is `dataset_problem`."""
        dataset = self.plan.dataset
        if dataset.shares_prefix:
            pool = self.prompts.pool
            # Exactly prefix_tokens ids (no offset: the server's BOS is counted with the body).
            self.prefix = self.rng.choices(pool, k=dataset.prefix_tokens) if pool else \
                self.prompts.make(dataset.prefix_tokens)
        if dataset.source == "synthetic":
            return
        needed = self.requests_needed()
        tokenized: dict[int, tuple[list[int], int | None]] = {}  # by entry line: prompt ids, reply tokens
        if dataset.source == "sharegpt":
            try:
                drawn = await asyncio.to_thread(sharegpt_entries, needed * SHAREGPT_DRAWN_PER_REQUEST,
                                                self.workload.seed)
            except DatasetError as exc:
                self.dataset_problem = str(exc)
                return
            entries = await self._fitting_conversations(drawn, needed, dataset, tokenized)
            if entries is None:
                return
            self.plan = RequestPlan(replace(dataset, entries=tuple(entries)), self.workload.seed)
            dataset = self.plan.dataset
        too_long = []
        # The site's limit, or the server's context per request where it says a smaller one: a
        # dataset request past it would fail every time, so none is sent.
        limit = min((x for x in (self.workload.token_limit, self.context_limit) if x), default=None)
        for index in self.plan.entry_indices(needed):
            entry = dataset.entries[index]
            if entry.line not in tokenized and await self._tokenize_entry(entry, dataset, tokenized) is None:
                return
            ids, reply = tokenized[entry.line]
            self.entry_ids[index] = ids
            if reply is not None:
                self.entry_outputs[index] = reply
            total = self._entry_total(entry, ids, reply, dataset)
            if limit and total > limit:
                too_long.append(f"{'line' if dataset.source == 'jsonl' else 'conversation'} {entry.line} "
                                f"({len(ids)} prompt tokens)")
        if too_long:
            which = (f"the {limit} tokens the server gives each request{self.backend.context_hint}"
                     if limit == self.context_limit and limit != self.workload.token_limit
                     else f"the limit of {limit} tokens")
            self.dataset_problem = (f"{len(too_long)} prompt(s) with their output exceed {which}: "
                                    f"{', '.join(too_long[:5])}" + (" …" if len(too_long) > 5 else ""))
            return
        # How many tokens the server adds to a dataset prompt (a BOS token; for chat, the template).
        self.entry_offset = self.prompts.offset if self.prompts.pool else 0
        first = self.plan.at(0)
        prompt, _, _ = self.request(0)
        result = await self.send(-1, prompt, 1, time.perf_counter())
        if result.ok and result.prompt_tokens is not None:
            self.entry_offset = result.prompt_tokens - len(self.entry_ids[first.entry_index]) - (
                dataset.prefix_tokens if first.shared_prefix else 0)

    async def _tokenize_entry(self, entry, dataset: Dataset, tokenized: dict) -> list[int] | None:
        """A dataset entry's prompt ids and (when the dataset's own output lengths are used and
        the entry has a reply text) its reply's length, both from the server's tokenizer, kept
        in `tokenized` by the entry's line; None (with `dataset_problem`) without a tokenizer."""
        ids = await self.tokenize(entry.prompt)
        if ids is None:
            self.dataset_problem = ("dataset prompts are sent with exact token counts, which needs the "
                                    f"server's tokenizer: {self.tokenize_problem or 'this backend has no tokenize call'}")
            return None
        reply = None
        if dataset.outputs == "dataset" and entry.output_tokens is None and entry.output_text is not None:
            reply = max(1, len(await self.tokenize(entry.output_text) or ()))
        tokenized[entry.line] = (ids, reply)
        return ids

    def _entry_total(self, entry, ids: list[int], reply: int | None, dataset: Dataset) -> int:
        """The most tokens the entry's request holds: its prompt, the server's own tokens, the
        shared prefix and its output."""
        longest_output = ((entry.output_tokens or reply) if dataset.outputs == "dataset" else None) \
            or dataset.output_lengths.high
        return len(ids) + self.prompts.offset + dataset.prefix_tokens + longest_output

    async def _fitting_conversations(self, drawn: list, needed: int, dataset: Dataset, tokenized: dict) -> list | None:
        """The first `needed` drawn ShareGPT conversations whose request fits what one request
        may hold (the token limit, and the server's context per request when it says it), as
        vllm bench serve leaves out those that do not fit; how many were left out goes to
        `dataset_note`. None (with `dataset_problem`) without a tokenizer or when none fits."""
        limits = [x for x in (self.workload.token_limit, self.context_limit) if x]
        kept, skipped, pruned = [], 0, 0
        own_replies = dataset.outputs == "dataset"
        for entry in drawn:
            if len(kept) == needed:
                break
            ids = await self._tokenize_entry(entry, dataset, tokenized)
            if ids is None:
                return None
            reply = tokenized[entry.line][1]
            output = (entry.output_tokens or reply or 0) if own_replies else dataset.output_lengths.high
            if not vllm_bench_keeps(len(ids), output, own_replies):
                pruned += 1
                continue
            if limits and self._entry_total(entry, ids, reply, dataset) > min(limits):
                skipped += 1
                continue
            kept.append(entry)
        notes = []
        if pruned:
            notes.append(f"{pruned} ShareGPT conversation{'s' if pruned != 1 else ''} left out {SHAREGPT_PRUNED}")
        if skipped:
            notes.append(f"{skipped} ShareGPT conversation{'s' if skipped != 1 else ''} left out: longer "
                         f"than the {min(limits)} tokens one request may hold with "
                         f"{'the shared prefix and ' if dataset.prefix_tokens else ''}its output")
        self.dataset_note = "; ".join(notes)
        if not kept:
            self.dataset_problem = (f"no ShareGPT conversation of the {len(drawn)} drawn fits the {min(limits)} tokens "
                                    "one request may hold")
            return None
        return kept

    def request(self, i: int, trace: Trace | None = None, with_prefix: bool = True
                ) -> tuple[list[int] | str, int, int]:
        """Request i of a level: its prompt, the prompt tokens the server should count and the
        output length it is forced to. With a `trace`, its request i's lengths (and Mooncake
        prefix blocks); `with_prefix` False leaves the shared prefix out (a conversation's later
        turns: their history starts with it already)."""
        if trace is not None:
            return self.trace_request(trace.requests[i])
        planned = self.plan.at(i)
        prefix_tokens = self.plan.dataset.prefix_tokens if planned.shared_prefix and with_prefix else 0
        if planned.entry is None:
            body, asked, output = self.prompts.make(planned.prompt_tokens), planned.prompt_tokens, planned.output_tokens
        else:
            ids = self.entry_ids[planned.entry_index]
            body = ids if self.prompts.pool else planned.entry.prompt
            asked = len(ids) + self.entry_offset
            output = planned.output_tokens or planned.entry.output_tokens or self.entry_outputs[planned.entry_index]
        if not prefix_tokens:
            return body, asked, output
        if isinstance(body, list) and isinstance(self.prefix, list):
            return self.prefix + body, asked + prefix_tokens, output
        return f"{self.prefix}\n\n{body}", asked + prefix_tokens, output

    def trace_request(self, req) -> tuple[list[int] | str, int, int]:
        """A trace's request: random tokens of its input length, its Mooncake hash ids' blocks
        first (the same tokens for the same id, so that the server can cache what they share)."""
        pool = self.prompts.pool
        if not (req.hash_ids and pool):
            return self.prompts.make(req.input_tokens), req.input_tokens, req.output_tokens
        n = max(1, req.input_tokens - self.prompts.offset)
        ids = [t for h in req.hash_ids for t in block_tokens(pool, self.plan.base, h)][:n]
        if len(ids) < n:
            ids += self.rng.choices(pool, k=n - len(ids))
        return ids, req.input_tokens, req.output_tokens

    def body(self, prompt: list[int] | str, max_tokens: int, messages: list[dict] | None = None) -> dict:
        body = {
            "model": self.target.model,
            "max_tokens": max_tokens,
            "temperature": self.workload.temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if messages is not None:
            body["messages"] = messages
        elif self.workload.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        body.update(self.backend.request_extras(max_tokens))
        # The point of a shared prefix, and of a conversation's history, is the server's prompt cache.
        if self.plan.dataset.shares_prefix or messages is not None:
            body.update(self.backend.prompt_cache_fields)
        return body

    # ---------------------------------------------------------------- one request
    async def send(self, index: int, prompt: list[int] | str, max_tokens: int, t0: float,
                   scheduled: float | None = None, prompt_tokens_asked: int | None = None,
                   messages: list[dict] | None = None, turn: int | None = None,
                   conversation: int | None = None, defer: bool = False) -> RequestResult:
        """Send one streaming request and time every chunk. Never raises for server faults:
        they end up in `result.error` with their cause. `messages` (a conversation's turn: its
        history and new message, to the chat API) keep the reply's text in `result.reply`.
        `defer`: leave reading what the chunks say to the caller (`_parse_events`, once the
        level is over)."""
        result = await self._send(index, prompt, max_tokens, t0, scheduled, prompt_tokens_asked, messages, turn,
                                  conversation)
        return result if defer else self._parse_events(result)

    async def _send(self, index: int, prompt: list[int] | str, max_tokens: int, t0: float,
                    scheduled: float | None, prompt_tokens_asked: int | None, messages: list[dict] | None,
                    turn: int | None, conversation: int | None) -> RequestResult:
        asked = self.workload.prompt_tokens if prompt_tokens_asked is None else prompt_tokens_asked
        result = RequestResult(index=index, sent=0.0, prompt_tokens_asked=asked,
                               output_tokens_asked=max_tokens, scheduled=scheduled,
                               prompt_tokens_sent=self.prompts.sent_tokens(prompt), turn=turn,
                               conversation=conversation, reply=[] if messages is not None else None)
        path = "/v1/chat/completions" if self.workload.api == "chat" or messages is not None else "/v1/completions"
        body = self.body(prompt, max_tokens) if messages is None else self.body(prompt, max_tokens, messages)
        for try_number in (1, 2):
            attempt = _Attempt(time.perf_counter())
            try:
                async with asyncio.timeout(self.timeouts.total):
                    if self.http1_transport is not None:
                        await self._exchange_http1(path, body, result, t0, attempt)
                    else:
                        await self._exchange_httpx(path, body, result, t0, attempt)
                return result
            except StreamError as exc:
                result.error, result.error_kind = str(exc), "server" if "server error" in str(exc) else "protocol"
            except (TimeoutError, httpx.TimeoutException) as exc:
                result.error, result.error_kind = f"timeout: {describe_error(exc)}", "timeout"
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
                # A keep-alive connection the server had already closed: safe to retry only
                # when no byte of the response arrived.
                if not attempt.answered and try_number == 1:
                    continue
                result.error, result.error_kind = f"connection lost: {describe_error(exc)}", "protocol"
            except httpx.ConnectError as exc:
                result.error, result.error_kind = f"cannot connect: {describe_error(exc)}", "connect"
            except httpx.HTTPError as exc:
                result.error, result.error_kind = f"{describe_error(exc)}", "protocol"
            finally:
                if not attempt.answered:
                    result.sent = attempt.sent - t0
            return result
        return result

    async def _exchange_http1(self, path: str, body: dict, result: RequestResult, t0: float,
                             attempt: "_Attempt") -> None:
        """One streamed request on the engine's HTTP/1.1 client: the socket thread frames the
        events into `result._events` as they arrive (with the kernel's receive time of their
        bytes); this coroutine wakes for the response's headers and its end only."""
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()  # as httpx
        url, head = self._http1_head(path)
        head += b"Content-Length: %d\r\n\r\n" % len(data)
        exchange = await http1.stream_events(self.http1_transport, url, head, data, self.http1_timeouts)
        try:
            response = exchange.response
            attempt.answered = True
            attempt.sent = response.sent  # just before the send() call
            result.sent = response.sent - t0
            result.dispatch_delay = response.sent - attempt.called
            result.status_code = response.status
            if response.status != 200:
                text = (await exchange.read_body(500)).decode("utf-8", "replace")
                result.error, result.error_kind = f"HTTP {response.status}: {text}", "http"
                return
            if response.framer is None:
                raise StreamError(response.problem)
            result._events = (response.times, response.datas)  # filled as they come
            await exchange.read_events()
        finally:
            exchange.close()

    def _http1_head(self, path: str) -> tuple[httpx.URL, bytes]:
        """The URL of `path` and the start of its POST's head, headers as httpx would send them
        (the client's, Host first), but the body uncompressed (the events are framed as they
        arrive, so nothing is there to undo gzip)."""
        cached = self.http1_heads.get(path)
        if cached is None:
            url = httpx.URL(self.target.url(path))
            headers = [(b"Host", url.netloc)] + [(k, v) for k, v in self.client.headers.raw
                                                 if k.lower() != b"accept-encoding"]
            headers += [(b"Accept-Encoding", b"identity"), (b"Content-Type", b"application/json")]
            cached = self.http1_heads[path] = (url, http1.request_head(b"POST", url.raw_path, headers))
        return cached

    async def _exchange_httpx(self, path: str, body: dict, result: RequestResult, t0: float,
                              attempt: "_Attempt") -> None:
        """One streamed request through httpx (HTTPS, proxies): events timed as they are framed."""

        async def trace(event: str, info: dict) -> None:
            # "Sent" is when the request starts going onto the socket, not when we asked
            # httpx for it: the client's own queueing must not count as server latency.
            if event.endswith("send_request_headers.started"):
                attempt.sent = time.perf_counter()

        async with self.client.stream("POST", self.target.url(path), json=body,
                                      extensions={"trace": trace}) as resp:
            attempt.answered = True
            sent = attempt.sent
            result.sent = sent - t0
            result.dispatch_delay = sent - attempt.called
            result.status_code = resp.status_code
            if resp.status_code != 200:
                text = (await resp.aread())[:500].decode("utf-8", "replace")
                result.error, result.error_kind = f"HTTP {resp.status_code}: {text}", "http"
                return
            await self._read_stream(resp, result, sent)

    async def _read_stream(self, resp: httpx.Response, result: RequestResult, sent: float) -> None:
        """Keep every event's data with the time we framed it (httpx's transports give no
        arrival times). Nothing else happens per chunk while the stream runs: what the chunks
        say (content or not, usage, errors) is read afterwards by `_parse_events` (at the
        level's end in `measure`), since a client busy parsing times the next chunks late. A
        stream that ends with `[DONE]` is read to its end so its connection stays in the pool."""
        times: list[float] = []
        datas: list[bytes] = []
        result._events = (times, datas)  # kept as they come: a stream cut short keeps its chunks
        perf_counter = time.perf_counter
        events = sse_data(resp, as_bytes=True)
        async for data in events:
            if len(data) < 16 and data.strip() == DONE:
                await _drain(events)
                break
            if data:
                times.append(perf_counter() - sent)
                datas.append(data)

    @classmethod
    def _parse_events(cls, result: RequestResult) -> RequestResult:
        """What the kept events of a request say (see _read_stream), then whether it is complete.
        A chunk that is not valid (or a server error in the stream) fails the request there, as
        it would have while reading."""
        events = result.__dict__.pop("_events", None)
        if events is None:
            return result
        try:
            for at, data in zip(*events):
                chunk = parse_chunk(data)
                if chunk.done:
                    break
                if chunk.is_content:
                    if result.reply is not None and not chunk.reasoning:
                        result.reply.append(chunk.content)
                    if result.first_content is None:
                        result.first_content = at
                    if not chunk.reasoning and result.first_answer is None:
                        result.first_answer = at
                    if chunk.reasoning:
                        result.reasoning_chunks += 1
                    result.chunk_times.append(at)
                    result.chunk_tokens.append(1)
                    result.client_output_tokens += 1
                if chunk.usage:
                    result.prompt_tokens = _int_or_none(chunk.usage.get("prompt_tokens"))
                    result.output_tokens = _int_or_none(chunk.usage.get("completion_tokens"))
                if chunk.timings:
                    result.timings = chunk.timings
                if chunk.finish_reason:
                    result.finish_reason = chunk.finish_reason
        except StreamError as exc:
            result.error, result.error_kind = str(exc), "server" if "server error" in str(exc) else "protocol"
            return result
        return cls._check_complete(result) if not result.error else result

    @staticmethod
    def _check_complete(result: RequestResult) -> RequestResult:
        if result.first_content is None:
            result.error, result.error_kind = "stream ended without any generated content", "protocol"
        elif result.finish_reason is None and result.output_tokens is None:
            result.error, result.error_kind = "stream ended early (no finish_reason and no usage)", "protocol"
        return result

    # ---------------------------------------------------------------- one level
    async def open_connections(self, n: int, hold_s: float = 2.0) -> None:
        """Open `n` pooled connections with tiny requests, so that connection setup never
        lands in a measured request. The tiny responses are held open until all `n` have
        started (at most `hold_s`), so that each one takes a connection of its own instead of
        reusing one that a quicker tiny request has just freed; each is then read to its end,
        which returns its connection to the pool."""
        n = min(n, self.max_connections)  # more would only queue in the pool
        path = "/v1/chat/completions" if self.workload.api == "chat" else "/v1/completions"
        ready = asyncio.Event()
        started = [0]

        def arrive() -> None:
            started[0] += 1
            if started[0] >= n:
                ready.set()

        async def tiny() -> None:
            arrived = False
            try:
                async with self.client.stream("POST", self.target.url(path),
                                              json=self.body(self.prompts.make(8), 1)) as resp:
                    arrive()
                    arrived = True
                    try:
                        async with asyncio.timeout(hold_s):
                            await ready.wait()
                    except TimeoutError:
                        pass  # a server that answers fewer at once: go on with what is open
                    await resp.aread()
            except httpx.HTTPError:
                pass  # the measured requests will meet and record the same problem
            finally:
                if not arrived:
                    arrive()

        await asyncio.gather(*(tiny() for _ in range(n)))

    @staticmethod
    def streams_for(load: Load) -> int:
        """Connections a level needs open before it starts."""
        fastest = max(load.rate or 0, load.ramp_to or 0)
        return load.concurrency if load.rate is None else (load.concurrency or min(256, max(4, int(fastest * 2))))

    async def measure(self, load: Load, progress: ProgressCallback | None = None,
                      should_stop: Callable[[], bool] | None = None, open_pool: bool = True, *,
                      start_at: float | None = None, share: "Share | None" = None) -> LevelOutcome:
        """Measure one load level. Connections are opened first (unless the caller already
        did: `open_pool=False`), so that connection setup never lands in a measured TTFT.
        `should_stop` is polled every 0.2 s: when it says so, the requests in flight are
        cancelled at once and Cancelled is raised. A load wider than the session's pool (see
        `loads`) raises ValueError before any request.

        A shard of a level split over processes or machines (shards.py) gives `start_at`, the
        level's t0 on this machine's monotonic clock (the level waits for it), and its `share`
        of the requests; its results keep the level's request indices."""
        if load.max_in_flight > self.max_connections - SPARE_CONNECTIONS:
            raise ValueError(f"{load.label} needs {load.max_in_flight} connections; this session's pool holds "
                             f"{self.max_connections - SPARE_CONNECTIONS}: give the Session its loads")
        if open_pool:
            await self.open_connections(self.streams_for(load))
        if start_at is not None:
            await sleep_until(start_at)
        monitor = ClientMonitor()
        monitor.start()
        started_at, t0 = time.time(), time.perf_counter()
        if start_at is not None:
            started_at, t0 = started_at - (t0 - start_at), start_at
        results: list[RequestResult] = []
        stop = asyncio.Event()
        deadline = t0 + load.duration_s if load.duration_s else None

        async def record(result: RequestResult) -> None:
            results.append(result)
            if progress is not None and not await progress(result):
                stop.set()

        mode = self._open_loop if load.rate is not None else (
            self._conversations if load.conversation is not None else self._closed_loop)
        work = asyncio.ensure_future(mode(load, t0, deadline, record, stop, share or Share()))
        try:
            with _measuring_interpreter():
                while not work.done():
                    await asyncio.wait({work}, timeout=0.2)
                    if should_stop is not None and not work.done() and should_stop():
                        stop.set()
                        work.cancel()
                        await asyncio.gather(work, return_exceptions=True)
            work.result() if not work.cancelled() else None
        finally:
            client = monitor.stop()
        if stop.is_set():
            raise Cancelled()
        # What the chunks said is read now, once the level is over (see _read_stream).
        parse_started = time.process_time()
        results = sorted((self._parse_events(r) for r in results), key=lambda r: r.index)
        client["parse_cpu_s"] = time.process_time() - parse_started
        lags = [r.send_lag for r in results if r.send_lag is not None]
        if lags:
            client["send_lag_ms_p99"] = percentile([x * 1000 for x in lags], 99)
            client["send_lag_ms_max"] = max(lags) * 1000
        return LevelOutcome(load.concurrency, results, started_at, level_wall_time(results), t0,
                            rate=load.rate, client=client)

    async def _closed_loop(self, load: Load, t0: float, deadline: float | None, record, stop, share: "Share") -> None:
        """Each stream sends its next request as soon as the previous one finished."""
        limit = load.requests if load.requests is not None else 10**9
        counter = iter(range(share.first, limit, share.every))

        async def stream() -> None:
            for i in counter:
                if stop.is_set() or (deadline and time.perf_counter() >= deadline):
                    return
                prompt, asked, output = self.request(i)
                await record(await self.send(i, prompt, output, t0, prompt_tokens_asked=asked, defer=True))

        await asyncio.gather(*(stream() for _ in range(load.concurrency)))

    async def _conversations(self, load: Load, t0: float, deadline: float | None, record, stop,
                             share: "Share") -> None:
        """Each stream holds one multi-turn session after another: turn k sends the session's
        history (its earlier user messages and the server's actual replies) and a new user
        message, after a think time. Request i is turn i % turns of session i // turns. A turn
        whose reply failed ends its session (its history would be wrong)."""
        conversation = load.conversation
        turns = conversation.turns
        limit = load.requests if load.requests is not None else 10**9
        sessions = iter(range(share.first, math.ceil(limit / turns), share.every))  # a shard's: every n-th

        def over() -> bool:
            return stop.is_set() or bool(deadline and time.perf_counter() >= deadline)

        async def stream() -> None:
            for s in sessions:
                history: list[dict] = []
                before = None  # the previous turn's result
                for k in range(turns):
                    i = s * turns + k
                    if i >= limit or over():
                        break
                    if k:
                        think = conversation.think_time(self.plan.base, s, k)
                        if deadline:
                            think = min(think, max(0.0, deadline - time.perf_counter()))
                        await asyncio.sleep(think)
                        if over():
                            return
                    prompt, asked, output = self.request(i, with_prefix=k == 0)
                    if before is not None:
                        # The history as the server counted it last turn, and the reply it gave;
                        # the chat template's tokens per message come on top.
                        asked += (before.prompt_tokens or 0) + (before.output_tokens or before.client_output_tokens)
                    messages = history + [{"role": "user", "content": prompt}]
                    result = await self.send(i, prompt, output, t0, prompt_tokens_asked=asked, messages=messages,
                                             turn=k, conversation=s)
                    await record(result)
                    if not result.ok:
                        break
                    history = messages + [{"role": "assistant", "content": "".join(result.reply or ())}]
                    before = result

        await asyncio.gather(*(stream() for _ in range(load.concurrency)))

    def schedule(self, load: Load) -> list[float]:
        """Send times (seconds after t0) for an open loop (engine/arrivals.py)."""
        return send_times(load.arrivals, load.rate, load.requests, self.rng, burstiness=load.burstiness,
                          ramp_to=load.ramp_to, duration_s=load.duration_s, trace=load.trace, speedup=load.speedup)

    async def _open_loop(self, load: Load, t0: float, deadline: float | None, record, stop, share: "Share") -> None:
        """Requests leave on a schedule, whatever the server's pace; an optional cap bounds
        how many are in flight (then waiting for a free place counts as send lag)."""
        cap = asyncio.Semaphore(load.concurrency) if load.concurrency else None
        timetable = share.schedule if share.schedule is not None else list(enumerate(self.schedule(load)))
        prompts_ready = {i: self.request(i, load.trace) for i, _ in timetable[:64]}

        async def one(i: int, at: float) -> None:
            prompt, asked, output = prompts_ready.pop(i, None) or self.request(i, load.trace)
            delay = t0 + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if stop.is_set():
                return
            if cap is None:
                result = await self.send(i, prompt, output, t0, scheduled=at, prompt_tokens_asked=asked, defer=True)
            else:
                async with cap:
                    if stop.is_set():
                        return
                    result = await self.send(i, prompt, output, t0, scheduled=at, prompt_tokens_asked=asked,
                                             defer=True)
            await record(result)

        await asyncio.gather(*(one(i, at) for i, at in timetable))

    def failed_level(self, concurrency: int, n_requests: int, cause: str, kind: str) -> LevelOutcome:
        """A level that could not be measured (preflight failed): every request failed with
        the cause, so the run still finishes and shows why."""
        results = [RequestResult(index=i, sent=0.0, prompt_tokens_asked=self.workload.prompt_tokens,
                                 output_tokens_asked=self.workload.output_tokens, error=cause,
                                 error_kind=kind) for i in range(n_requests)]
        return LevelOutcome(concurrency, results, time.time(), 0.0)


@contextlib.contextmanager
def _measuring_interpreter():
    """While a level is measured: no cyclic garbage collection (at hundreds of streams a full
    collection holds the interpreter for 100 ms or more, which delays every stream at once;
    the few dozen cyclic objects a request leaves are collected right after the level) and a
    0.1 ms GIL switch interval instead of 5 ms. The socket-reading thread gives the GIL up in
    every recvmsg() and epoll wait, and while the event loop is busy (a burst of requests to
    send) it waits a whole switch interval to get it back each time: at 5 ms, or even 1 ms,
    reading a burst from hundreds of sockets took longer than the gap to the next chunk, and
    two chunks read together can only be timed together."""
    gc_enabled, interval = gc.isenabled(), sys.getswitchinterval()
    gc.disable()
    sys.setswitchinterval(min(interval, 0.0001))
    try:
        yield
    finally:
        sys.setswitchinterval(interval)
        if gc_enabled:
            gc.enable()
            gc.collect()


def host_cpu_times() -> list[int] | None:
    """The host's CPU time counters (/proc/stat's "cpu" line: user nice system idle iowait irq
    softirq steal ...), None where there is no /proc (not Linux)."""
    try:
        with open("/proc/stat") as f:
            first = f.readline().split()
    except OSError:
        return None
    return [int(v) for v in first[1:]] if first and first[0] == "cpu" else None


def host_load(before: list[int] | None, after: list[int] | None) -> dict:
    """What the whole host did between two host_cpu_times: its CPUs' busy and steal shares (%),
    its 1-minute load average and CPU count. Other work on the host (or a noisy neighbour of a
    virtual machine, CPU steal) slows a server on it and the client alike, whatever the client's
    own loop lag says."""
    out = {"host_cpus": os.cpu_count(), "host_load_1m": None, "host_cpu_busy_percent": None,
           "host_cpu_steal_percent": None}
    try:
        out["host_load_1m"] = os.getloadavg()[0]
    except OSError:
        pass
    if before and after and len(before) == len(after) and len(after) >= 8:
        delta = [b - a for a, b in zip(before, after)]
        total = sum(delta[:8])  # guest time is already counted in user
        if total > 0:
            idle = delta[3] + delta[4]
            out["host_cpu_busy_percent"] = 100.0 * (total - idle) / total
            out["host_cpu_steal_percent"] = 100.0 * delta[7] / total
    return out


class ClientMonitor:
    """How busy the client and its host were during a level: event-loop lag (a 10 ms tick that
    wakes late means requests were timed late too), the process's CPU use, and the host's CPU
    busy and steal shares and load average (host_load)."""

    TICK_S = 0.01

    def __init__(self):
        self.lags: list[float] = []
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.cpu0, self.wall0 = time.process_time(), time.perf_counter()
        self.host0 = host_cpu_times()
        self.task = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self.TICK_S)
            self.lags.append(time.perf_counter() - before - self.TICK_S)

    def stop(self) -> dict:
        if self.task:
            self.task.cancel()
        wall = max(time.perf_counter() - self.wall0, 1e-9)
        lags_ms = [x * 1000 for x in self.lags]
        return {
            "cpu_percent": 100.0 * (time.process_time() - self.cpu0) / wall,
            "loop_lag_ms_p99": percentile(lags_ms, 99),
            "loop_lag_ms_max": max(lags_ms) if lags_ms else None,
            **host_load(self.host0, host_cpu_times()),
        }


async def _drain(events) -> None:
    """Read what follows [DONE] (normally just the end of the chunked body, already here): a
    response read to its end leaves its connection in the pool for the next request, while one
    closed early makes httpcore close the connection, and every request then connects anew."""
    try:
        async with asyncio.timeout(1.0):
            async for _ in events:
                pass
    except (TimeoutError, httpx.HTTPError, StreamError):
        pass


class _Attempt:
    """One try of a request: when it was handed over (`called`), when it went onto the socket
    (`sent`), and whether any of its response came back (only then is a retry unsafe)."""

    __slots__ = ("called", "sent", "answered")

    def __init__(self, called: float):
        self.called = self.sent = called
        self.answered = False


def describe_error(exc: BaseException) -> str:
    text = str(exc) or exc.__class__.__name__
    return f"{exc.__class__.__name__}: {text}"[:300] if str(exc) else text


def _int_or_none(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
