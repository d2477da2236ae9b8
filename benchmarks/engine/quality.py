"""Quality of an endpoint, measured through its own API: perplexity on a fixed text, and against
a reference endpoint (the same base model at higher precision) the KL divergence of the
next-token distributions, how often both pick the same top token, and greedy-continuation
agreement.

Windows are llama-perplexity's, so a figure can be reproduced with
`llama-perplexity -m MODEL -f TEXT -c N_CTX --chunks CHUNKS`: the text is tokenized once with
the model's special tokens (a BOS where the model adds one), cut into windows of `n_ctx` tokens
that do not overlap, the first token of each window replaced by the BOS, and in each window
the tokens after its first half are scored (n_ctx/2 tokens of context for each; n_ctx - 1 -
n_ctx/2 scored per window).

How a position is scored depends on what the server can say:
- prompt log-probabilities (vLLM `prompt_logprobs`): one request per window; the actual
  token's log-probability is always returned, with the top-k beside it;
- teacher forcing (llama.cpp, which returns no prompt log-probabilities): one request per
  position, the window's prefix as the prompt, one token generated, `n_probs` = top-k. A
  `logit_bias` on the actual next token makes it the one sampled, and llama-server reports the
  sampled token's log-probability from the model's raw distribution (before any sampler), so
  it is exact even when the token is outside the top-k. With `cache_prompt` on and each
  window pinned to one slot (`id_slot`), each step costs one token of prefill; windows are
  spread over the server's slots.

KL divergence over the top-k of the reference (as large as both servers allow, at most
TOP_K_CEILING; the result says which): KL(P||Q) summed over the reference's top-k
tokens plus one bucket for the rest of the vocabulary (probability 1 - sum of the top-k on
each side). Merging tokens into a bucket can only lower a divergence, so the figure is a
lower bound of the full-vocabulary KL; a top-k token of the reference that the tested server
did not list is given the tested server's remaining mass shared evenly among the missing ones,
at most its k-th probability (how often that happened is reported).

The reference is scored once (`measure_reference`, which keeps its top-k at every position and
its greedy continuations in a ReferenceScores) and every tested endpoint is compared with that
(`measure(..., reference=...)`), so the reference server need not be up while the others are
measured. Endpoints whose tokenizers differ are still scored for perplexity; only the comparison
is refused, with the reason (`QualityResult.reference_refused`).

Django-free: `python -m benchmarks.engine.quality URL --backend llamacpp --json`.
"""
from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from . import backends

DEFAULT_CTX = 512
DEFAULT_CHUNKS = 16
# The top-k asked of a server is as large as it allows (vLLM caps it at its --max-logprobs, 20 by
# default, and says so when asked for more), at most this: each position's answer lists every
# one of them (~70 bytes each from llama-server), and the larger the top-k, the less the KL's
# tail bucket hides.
TOP_K_CEILING = 100
AGREEMENT_PROMPTS = 8
AGREEMENT_PROMPT_TOKENS = 64
AGREEMENT_TOKENS = 32
MAX_STREAMS = 16  # windows (vLLM) or slots (llama.cpp) scored at once, at most
# Teacher-forcing requests in flight per llama-server slot: the next position is already queued
# at the server while one is scored, so a slot never idles for the client's round trip (on an
# H200, one slot scored 143.9 tokens/s against 104.8 with one request in flight).
PIPELINE = 2
BUILTIN_TEXT = "python-docs"
PROBE_TEXT = "The quick brown fox jumps over the lazy dog. 1234567890 naïve café – ∑ ✓ 東京"


class QualityError(Exception):
    """The quality step cannot be done as asked; the message says why."""


class NotSupported(QualityError):
    """The server cannot return what a quality figure needs."""


async def _all_or_none(coroutines) -> list:
    """Await the coroutines together, their results in order. The first to fail stops the
    others before its error is raised: left running, they would go on loading the server (and
    counting progress) after its step had failed, in a worker's event loop that outlives it."""
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ---------------------------------------------------------------------------------- the text
@dataclass
class EvalText:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def describe(self) -> dict:
        return {"name": self.name, "sha256": self.sha256, "chars": len(self.text)}


def builtin_text(max_chars: int = 400_000) -> EvalText:
    """Python's own documentation topics (pydoc_data, shipped with every CPython), in sorted
    topic order: English prose with code, the same on every machine with the same Python."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k].strip() for k in sorted(topics))[:max_chars]
    return EvalText(f"{BUILTIN_TEXT} (pydoc topics, Python {sys.version.split()[0]})", text)


def file_text(path: str | Path) -> EvalText:
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise QualityError(f"{path}: not UTF-8 text") from None
    return EvalText(Path(path).name, text)


# ---------------------------------------------------------------------------------- windows
@dataclass
class Windows:
    n_ctx: int
    first: int  # scored positions per window start after this many tokens
    windows: list[list[int]]
    bos: int | None

    @property
    def scored_per_window(self) -> int:
        return self.n_ctx - 1 - self.first

    def settings(self) -> dict:
        return {"n_ctx": self.n_ctx, "windows": len(self.windows), "context_per_window": self.first,
                "scored_per_window": self.scored_per_window, "bos": self.bos,
                "llama_perplexity": f"-c {self.n_ctx} --chunks {len(self.windows)}"}


def scored_positions(n_ctx: int, chunks: int) -> int:
    """Positions scored in `chunks` windows of `n_ctx` tokens (when the text is long enough)."""
    return chunks * (n_ctx - 1 - n_ctx // 2)


def make_windows(with_special: list[int], without_special: list[int], n_ctx: int, chunks: int) -> Windows:
    """llama-perplexity's chunks: tokens (with special tokens) cut every n_ctx, the first token
    of each replaced by the BOS when the tokenizer adds one."""
    if n_ctx < 8:
        raise QualityError(f"a window must hold at least 8 tokens (asked {n_ctx})")
    added = len(with_special) - len(without_special)
    bos = with_special[0] if added >= 1 and with_special[added:] == without_special else None
    count = min(chunks, len(with_special) // n_ctx)
    if count < 1:
        raise QualityError(f"the text has {len(with_special)} tokens: too short for one window of {n_ctx} "
                           "(use a longer text or a smaller window)")
    windows = []
    for i in range(count):
        w = list(with_special[i * n_ctx:(i + 1) * n_ctx])
        if bos is not None:
            w[0] = bos
        windows.append(w)
    return Windows(n_ctx, n_ctx // 2, windows, bos)


# ---------------------------------------------------------------------------------- scores
@dataclass
class Position:
    """One scored position: the actual next token's log-probability and the server's top-k
    (token id -> log-probability)."""

    token: int
    logprob: float
    top: dict[int, float] = field(default_factory=dict)


class Scorer:
    """One endpoint, as the quality step talks to it."""

    def __init__(self, client: httpx.AsyncClient, base_url: str, backend: str, model: str = "",
                 top_k: int = TOP_K_CEILING):
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.backend = backends.get(backend)
        self.model = model
        self.top_k = top_k
        self.requests = 0

    async def post(self, path: str, body: dict) -> dict:
        self.requests += 1
        resp = await self.client.post(self.base_url + path, json=body)
        if resp.status_code != 200:
            raise QualityError(f"POST {path}: HTTP {resp.status_code}: {resp.text[:300]}")
        try:
            return resp.json()
        except ValueError:
            raise QualityError(f"POST {path}: the answer is not JSON") from None

    async def resolve_model(self) -> None:
        if self.model:
            return
        resp = await self.client.get(self.base_url + "/v1/models")
        ids = [m.get("id") for m in (resp.json().get("data") or []) if isinstance(m, dict)]
        if not ids:
            raise QualityError("/v1/models lists no model")
        self.model = ids[0]

    async def allowed_top_k(self, wanted: int) -> int:
        """`wanted`, or the server's own smaller cap where it has one (said in its refusal of a
        small scoring request that asks for `wanted`)."""
        probe = self.backend.top_k_probe(self.model, wanted)
        if probe is None:
            return wanted
        path, body = probe
        self.requests += 1
        answer = await self.client.post(self.base_url + path, json=body)
        if answer.status_code == 200:
            return wanted
        cap = self.backend.read_top_k_cap(answer.text)
        if cap is None:
            raise QualityError(f"POST {path} asking a top-k of {wanted}: HTTP {answer.status_code}: {answer.text[:300]}")
        return max(1, min(cap, wanted))

    async def tokenize(self, text: str, special: bool) -> list[int]:
        for path, body in self.backend.tokenize_requests(self.model, text, special=special):
            try:
                tokens = self.backend.read_tokens(await self.post(path, body))
            except QualityError:
                continue
            if tokens:
                return tokens
        raise NotSupported(f"{self.backend.label}: no /tokenize answered, so the text cannot be cut into "
                           "windows of exact token counts")

    async def score(self, windows: Windows, progress=None) -> list[list[Position]]:
        method = self.backend.quality_method
        if method == "prompt_logprobs":
            streams = asyncio.Semaphore(MAX_STREAMS)

            async def window(w: list[int]) -> list[Position]:
                async with streams:
                    scored = await self._prompt_logprobs(w, windows.first)
                if progress is not None:
                    progress(len(scored))
                return scored
            return await _all_or_none(window(w) for w in windows.windows)
        if method == "teacher_forcing":
            return await self._teacher_forcing(windows, progress)
        raise NotSupported(f"{self.backend.label} returns no log-probabilities of given tokens: perplexity "
                           "cannot be measured through this server")

    async def _prompt_logprobs(self, window: list[int], first: int) -> list[Position]:
        answer = await self.post("/v1/completions", {
            "model": self.model, "prompt": window, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": self.top_k})
        try:
            entries = answer["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError):
            raise NotSupported("the server ignored prompt_logprobs (no prompt_logprobs in its answer)") from None
        if not isinstance(entries, list) or len(entries) != len(window):
            raise QualityError(f"prompt_logprobs has {len(entries) if isinstance(entries, list) else 'no'} "
                               f"entries for {len(window)} prompt tokens")
        out = []
        for i in range(first + 1, len(window)):
            entry = entries[i] or {}
            top = {int(k): float(v["logprob"]) for k, v in entry.items()
                   if isinstance(v, dict) and isinstance(v.get("rank"), int) and v["rank"] <= self.top_k}
            actual = entry.get(str(window[i]))
            if not isinstance(actual, dict):
                raise QualityError(f"prompt_logprobs lacks the actual token at position {i}")
            out.append(Position(window[i], float(actual["logprob"]), top))
        return out

    async def _teacher_forcing(self, windows: Windows, progress=None) -> list[list[Position]]:
        slots = await self._slots()
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(windows.windows)):
            queue.put_nowait(i)
        results: list[list[Position] | None] = [None] * len(windows.windows)

        async def worker(slot: int) -> None:
            while not queue.empty():
                i = queue.get_nowait()
                window, scored, in_flight = windows.windows[i], [], []
                try:
                    for j in range(windows.first, windows.n_ctx - 1):
                        # A window starts from an empty cache, as llama-perplexity clears it per chunk
                        # (a slot warm from another window gave 1 % off); its later steps reuse it.
                        # The server keeps a busy slot's next request until the slot is free (and
                        # scores it right even if it arrives first, from the prefix the two share);
                        # a window's first step is answered before its second is sent.
                        in_flight.append(asyncio.ensure_future(self._forced_step(
                            window[:j + 1], window[j + 1], slot, reuse=j > windows.first)))
                        while len(in_flight) >= PIPELINE or (in_flight and j in (windows.first, windows.n_ctx - 2)):
                            scored.append(await in_flight.pop(0))
                            if progress is not None:
                                progress(1)
                finally:
                    for left in in_flight:  # after a failure: the steps still out are not wanted
                        if left.done() and not left.cancelled():
                            left.exception()
                        left.cancel()
                results[i] = scored

        await _all_or_none(worker(s) for s in range(min(slots, MAX_STREAMS, len(windows.windows))))
        return [r or [] for r in results]

    async def _slots(self) -> int:
        try:
            props = (await self.client.get(self.base_url + "/props")).json()
            return max(1, int(props.get("total_slots") or 1))
        except (httpx.HTTPError, ValueError, TypeError, AttributeError):
            return 1

    async def _forced_step(self, prompt: list[int], actual: int, slot: int, reuse: bool = True) -> Position:
        answer = await self.post("/completion", {
            "prompt": prompt, "n_predict": 1, "n_probs": self.top_k, "temperature": 0.0,
            "cache_prompt": reuse, "id_slot": slot, "logit_bias": [[actual, 1000.0]]})
        try:
            prob = answer["completion_probabilities"][0]
            sampled, logprob = int(prob["id"]), float(prob["logprob"])
            top = {int(t["id"]): float(t["logprob"]) for t in prob.get("top_logprobs") or []}
        except (KeyError, IndexError, TypeError, ValueError):
            raise NotSupported("the server returned no completion_probabilities for n_probs") from None
        if sampled != actual:
            raise QualityError(f"teacher forcing failed: the server sampled token {sampled}, not {actual}")
        return Position(actual, logprob, top)


# ---------------------------------------------------------------------------------- figures
def perplexity(scored: list[list[Position]]) -> dict:
    """exp(mean negative log-likelihood) over every scored position, with llama-perplexity's
    uncertainty (the standard error of the mean NLL, carried through exp)."""
    nll = [-p.logprob for w in scored for p in w]
    if not nll:
        raise QualityError("no position was scored")
    n = len(nll)
    mean = sum(nll) / n
    var = sum((x - mean) ** 2 for x in nll) / (n - 1) if n > 1 else 0.0
    stderr = math.sqrt(var / n)
    ppl = math.exp(mean)
    return {"perplexity": ppl, "perplexity_stderr": ppl * stderr, "mean_nll": mean, "tokens_scored": n}


def _kl_position(ref: Position, test: Position) -> tuple[float, bool]:
    """KL(P||Q) over P's top-k plus a tail bucket; True when a top-k token of P was not in Q's list."""
    p = {t: math.exp(lp) for t, lp in ref.top.items()}
    p[ref.token] = math.exp(ref.logprob)  # exact even when outside the top-k
    q_listed = {t: math.exp(lp) for t, lp in test.top.items()}
    q_listed[test.token] = math.exp(test.logprob)
    missing = [t for t in p if t not in q_listed]
    if missing:
        k_th = min(q_listed.values())
        rest = max(0.0, 1.0 - sum(q_listed.values()))
        share = min(k_th, rest / len(missing)) if rest > 0 else k_th * 1e-3
        q = {t: q_listed.get(t, share) for t in p}
    else:
        q = {t: q_listed[t] for t in p}
    kl = sum(pv * math.log(pv / max(q[t], 1e-300)) for t, pv in p.items() if pv > 0)
    p_tail = max(0.0, 1.0 - sum(p.values()))
    q_tail = max(1e-12, 1.0 - sum(q.values()))
    if p_tail > 1e-12:
        kl += p_tail * math.log(p_tail / q_tail)
    return max(kl, 0.0), bool(missing)


def _top_only(p: Position, k: int) -> Position:
    """The position with only its `k` most likely listed tokens (the actual one's log-probability kept)."""
    if len(p.top) <= k:
        return p
    return Position(p.token, p.logprob, dict(sorted(p.top.items(), key=lambda kv: kv[1], reverse=True)[:k]))


def divergence(ref: list[list[Position]], test: list[list[Position]], top_k: int | None = None) -> dict:
    """Against the reference's top-`top_k` (all it listed by default): a server that lists fewer
    than the reference did is compared over as many as it lists."""
    pairs = [(a if top_k is None else _top_only(a, top_k), b) for wa, wb in zip(ref, test) for a, b in zip(wa, wb)]
    if not pairs or any(a.token != b.token for a, b in pairs):
        raise QualityError("the two endpoints scored different tokens: their tokenizers differ")
    kls, missing, same_top = [], 0, 0
    for a, b in pairs:
        kl, miss = _kl_position(a, b)
        kls.append(kl)
        missing += miss
        same_top += _top(a) == _top(b)
    ordered = sorted(kls)
    return {"kl_mean": sum(kls) / len(kls), "kl_p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "kl_max": ordered[-1], "same_top_share": same_top / len(pairs), "positions": len(pairs),
            "reference_top_k_missing_share": missing / len(pairs),
            **({"top_k": top_k} if top_k is not None else {})}


def _top(p: Position) -> int:
    candidates = dict(p.top)
    candidates[p.token] = p.logprob
    return max(candidates, key=candidates.get)


# ---------------------------------------------------------------------------------- agreement
async def greedy_tokens(scorer: Scorer, prompt: list[int], n: int) -> list[int]:
    """N tokens generated greedily from a token-id prompt, as ids (re-tokenized text where the
    server gives no ids)."""
    answer = await scorer.post(*scorer.backend.greedy_request(scorer.model, prompt, n))
    ids = scorer.backend.read_generated_ids(answer)
    if ids is not None:
        return ids[:n]
    text = ((answer.get("choices") or [{}])[0]).get("text") or ""
    return (await scorer.tokenize(text, special=False))[:n] if text else []


def agreement(a: list[list[int]], b: list[list[int]]) -> dict:
    same, total, parts = 0, 0, []
    for x, y in zip(a, b):
        n = min(len(x), len(y))
        same += sum(1 for i in range(n) if x[i] == y[i])
        total += max(len(x), len(y))
        parts.append(next((i for i in range(n) if x[i] != y[i]), None if len(x) == len(y) else n))
    parted = [p for p in parts if p is not None]
    return {"identical_token_share": same / total if total else None, "prompts": len(parts),
            "identical_continuations": parts.count(None),
            "first_difference_median": sorted(parted)[len(parted) // 2] if parted else None,
            "first_difference": parts}


# ---------------------------------------------------------------------------------- the step
# 2: the text's size is the whole text's tokens (1: the windows' tokens); the reference is named
# (1: its URL); a refused comparison says why (reference_refused).
RESULT_VERSION = 2


@dataclass
class QualityResult:
    text: dict  # name, sha256, chars, tokens (the whole text, by this server's tokenizer)
    settings: dict  # the windows (Windows.settings) and top_k
    backend: str
    method: str  # "prompt_logprobs" or "teacher_forcing"
    perplexity: float
    perplexity_stderr: float
    mean_nll: float
    tokens_scored: int
    seconds: float
    tokens_per_s: float
    requests: int
    reference: dict | None = None  # KL, same-top, agreement against the reference endpoint
    reference_refused: str = ""  # why it was not compared with the reference ("" when it was, or none asked)

    # The catalogue's quality figures (catalogue.METRICS with source "quality"), each read here.
    READERS = {
        "perplexity": lambda r: r.perplexity,
        "kl_mean": lambda r: (r.reference or {}).get("kl_mean"),
        "kl_p99": lambda r: (r.reference or {}).get("kl_p99"),
        "same_top_share": lambda r: (r.reference or {}).get("same_top_share"),
        "greedy_identical_share": lambda r: ((r.reference or {}).get("greedy") or {}).get("identical_token_share"),
        "quality_tok_s": lambda r: r.tokens_per_s,
    }

    def value(self, key: str) -> float | None:
        """The catalogue figure `key` of this result, in the catalogue's stored unit; None when
        it was not measured (no reference)."""
        try:
            reader = self.READERS[key]
        except KeyError:
            raise KeyError(f"{key!r} is not a quality figure of the catalogue") from None
        value = reader(self)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def to_dict(self) -> dict:
        """The one writer of the stored shape."""
        return {"version": RESULT_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, data: dict) -> "QualityResult":
        """The one reader: every stored version reads (unknown keys are ignored)."""
        data = dict(data)
        if data.get("version", 1) < 2:
            # Version 1 counted the windows' tokens as the text's size and named the reference by URL.
            data["text"] = {k: v for k, v in (data.get("text") or {}).items() if k != "tokens"}
            if data.get("reference"):
                ref = {k: v for k, v in data["reference"].items() if k != "url"}
                data["reference"] = {"name": "the reference", **ref}
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class ReferenceScores:
    """What the reference endpoint said, scored once and kept: every tested endpoint is compared
    with these (so the reference server need not be up any more). `result` is its own figures."""

    name: str  # how results name it (an endpoint's name; the URL on the command line)
    backend: str
    model: str
    probe: list[int]  # its /tokenize of PROBE_TEXT, to tell a tokenizer that differs
    windows: Windows
    scored: list[list[Position]]
    greedy: list[list[int]]  # its greedy continuation of each agreement prompt
    top_k: int
    result: QualityResult

    @property
    def prompts(self) -> list[list[int]]:
        """The greedy-agreement prompts its continuations answer."""
        return greedy_prompts(self.windows, len(self.greedy))


def greedy_prompts(windows: Windows, count: int) -> list[list[int]]:
    """The greedy-agreement prompts: the first tokens of the first `count` windows."""
    return [w[:AGREEMENT_PROMPT_TOKENS] for w in windows.windows[:count]]


async def _scorer(client: httpx.AsyncClient, url: str, backend: str, model: str, top_k: int | None,
                  at_most: int = TOP_K_CEILING) -> Scorer:
    """`top_k` None: as large as the server allows, at most `at_most`."""
    scorer = Scorer(client, url, backend, model, top_k or at_most)
    if scorer.backend.quality_method is None:
        raise NotSupported(f"{scorer.backend.label} returns no log-probabilities of given tokens: "
                           "perplexity cannot be measured through this server")
    await scorer.resolve_model()
    if top_k is None:
        scorer.top_k = await scorer.allowed_top_k(at_most)
    return scorer


async def _perplexity_pass(scorer: Scorer, text: EvalText, n_ctx: int, chunks: int,
                           progress) -> tuple[Windows, list[list[Position]], QualityResult]:
    """Tokenize `text` with the server, cut it into windows and score them: the endpoint's own figures."""
    with_special = await scorer.tokenize(text.text, special=True)
    windows = make_windows(with_special, await scorer.tokenize(text.text, special=False), n_ctx, chunks)
    t0 = time.perf_counter()
    scored = await scorer.score(windows, progress)
    seconds = time.perf_counter() - t0
    figures = perplexity(scored)
    result = QualityResult(text={**text.describe(), "tokens": len(with_special)},
                           settings={**windows.settings(), "top_k": scorer.top_k}, backend=scorer.backend.name,
                           method=scorer.backend.quality_method, seconds=seconds,
                           tokens_per_s=figures["tokens_scored"] / seconds if seconds > 0 else 0.0,
                           requests=scorer.requests, **figures)
    return windows, scored, result


async def measure_reference(client: httpx.AsyncClient, url: str, backend: str, text: EvalText, *,
                            model: str = "", name: str = "", n_ctx: int = DEFAULT_CTX,
                            chunks: int = DEFAULT_CHUNKS, top_k: int | None = None,
                            agreement_prompts: int = AGREEMENT_PROMPTS, progress=None) -> ReferenceScores:
    """Score `text` through the reference endpoint once: its figures, and everything an endpoint
    is compared with (its top-k at every position and its greedy continuations). `top_k` None:
    as large as the server allows (at most TOP_K_CEILING)."""
    scorer = await _scorer(client, url, backend, model, top_k)
    probe = await scorer.tokenize(PROBE_TEXT, special=False)
    windows, scored, result = await _perplexity_pass(scorer, text, n_ctx, chunks, progress)
    greedy = [await greedy_tokens(scorer, p, AGREEMENT_TOKENS) for p in greedy_prompts(windows, agreement_prompts)]
    result.requests = scorer.requests
    return ReferenceScores(name=name or url, backend=scorer.backend.name, model=scorer.model, probe=probe,
                           windows=windows, scored=scored, greedy=greedy, top_k=scorer.top_k, result=result)


def _comparable(ref: ReferenceScores, text: EvalText, windows: Windows, probe: list[int]) -> str:
    """Why the endpoint's scores cannot be compared with the reference's ("" when they can)."""
    if ref.result.text.get("sha256") != text.sha256:
        return f"the reference {ref.name} was scored on another text"
    if probe != ref.probe:
        if len(probe) != len(ref.probe):
            gave = f"{len(probe)} vs {len(ref.probe)} tokens"
        else:
            first = next(i for i, (a, b) in enumerate(zip(probe, ref.probe)) if a != b)
            gave = f"as many tokens, other ids from token {first + 1} on"
        return (f"the endpoint and the reference {ref.name} tokenize differently (a probe text gave {gave}): their "
                "figures cannot be compared")
    if (windows.n_ctx, windows.first) != (ref.windows.n_ctx, ref.windows.first):
        return f"the reference {ref.name} was scored in other windows ({ref.windows.settings()['llama_perplexity']})"
    if windows.windows != ref.windows.windows:
        return (f"the endpoint and the reference {ref.name} cut the text into different tokens: their "
                "tokenizers differ, so their figures cannot be compared")
    return ""


async def measure(client: httpx.AsyncClient, url: str, backend: str, text: EvalText, *, model: str = "",
                  n_ctx: int = DEFAULT_CTX, chunks: int = DEFAULT_CHUNKS, top_k: int | None = None,
                  reference: ReferenceScores | None = None, progress=None) -> QualityResult:
    """Score `text` through the endpoint at `url` (`top_k` None: as large as the server allows);
    with `reference` (from measure_reference, which scored it once), also compare with it: over
    the reference's top-k (or over fewer, as many as this server allows), on its agreement
    prompts. Perplexity is measured even when the comparison is refused (`reference_refused`
    says why)."""
    if reference is not None:
        scorer = await _scorer(client, url, backend, model, None, at_most=reference.top_k)
    else:
        scorer = await _scorer(client, url, backend, model, top_k)
    probe = await scorer.tokenize(PROBE_TEXT, special=False) if reference is not None else []
    windows, scored, out = await _perplexity_pass(scorer, text, n_ctx, chunks, progress)
    if reference is None:
        return out
    out.reference_refused = _comparable(reference, text, windows, probe)
    if out.reference_refused:
        return out
    mine = [await greedy_tokens(scorer, p, AGREEMENT_TOKENS) for p in reference.prompts]
    out.requests = scorer.requests
    out.reference = {"name": reference.name, "backend": reference.backend, "model": reference.model,
                     "perplexity": reference.result.perplexity,
                     **divergence(reference.scored, scored, scorer.top_k),
                     "greedy": {"tokens": AGREEMENT_TOKENS, "prompt_tokens": AGREEMENT_PROMPT_TOKENS,
                                **agreement(reference.greedy, mine)}}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.engine.quality", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("url", help="server root, e.g. http://127.0.0.1:8080")
    ap.add_argument("--backend", required=True, choices=backends.names())
    ap.add_argument("--model", default="", help="served model id (default: the first listed)")
    ap.add_argument("--text", help=f"UTF-8 text file to score (default: the built-in {BUILTIN_TEXT})")
    ap.add_argument("--ctx", type=int, default=DEFAULT_CTX, help="window size in tokens (llama-perplexity -c)")
    ap.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS, help="windows to score (llama-perplexity --chunks)")
    ap.add_argument("--top-k", type=int, default=None,
                    help=f"tokens listed per position (default: as many as the server allows, at most {TOP_K_CEILING})")
    ap.add_argument("--reference", help="a reference endpoint's root (same base model, higher precision)")
    ap.add_argument("--reference-backend")
    ap.add_argument("--reference-model", default="")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    a = ap.parse_args(argv)
    text = file_text(a.text) if a.text else builtin_text()

    async def go():
        async with httpx.AsyncClient(timeout=httpx.Timeout(300, connect=10)) as client:
            reference = None
            if a.reference:
                reference = await measure_reference(client, a.reference, a.reference_backend or a.backend, text,
                                                    model=a.reference_model, n_ctx=a.ctx, chunks=a.chunks,
                                                    top_k=a.top_k)
            return await measure(client, a.url, a.backend, text, model=a.model, n_ctx=a.ctx, chunks=a.chunks,
                                 top_k=a.top_k, reference=reference)
    try:
        result = asyncio.run(go())
    except (QualityError, httpx.HTTPError) as exc:
        print(f"quality: {exc}", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        print(f"perplexity {result.perplexity:.4f} ± {result.perplexity_stderr:.4f} over {result.tokens_scored} "
              f"tokens ({result.settings['llama_perplexity']}), {result.tokens_per_s:.1f} tokens/s")
        if result.reference_refused:
            print(f"not compared with the reference: {result.reference_refused}")
        if result.reference:
            r = result.reference
            print(f"vs reference: KL mean {r['kl_mean']:.5f}, p99 {r['kl_p99']:.5f}; same top token "
                  f"{100 * r['same_top_share']:.1f} %; greedy identical tokens "
                  f"{100 * (r['greedy']['identical_token_share'] or 0):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
