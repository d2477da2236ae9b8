"""The step-time model: how long an engine's decode step and prefill take on a GPU, from the bytes
a step reads and the operations it does against the datasheet, at efficiencies fitted to published
and measured figures (benchmarks/advisor/fit.py, benchmarks/advisor/fitted.json).

A decode step of B sequences, each holding c tokens of context:

    t_dec(B) = step + layers x per_layer + max(reads, ops / (peak x mma_eff)) + (B - 1) x per_sequence
    reads = weights / (bandwidth x bw_eff) + B x c x KV bytes per token / (bandwidth x kv_eff)
    ops   = B x 2 x parameters (at mma_eff) + B x 4 x layers x attention width x c (at attn_eff)

`step` and `per_layer` are the fixed costs (launches, synchronisation, the scheduler) that make a
small model on a fast GPU far slower than its bandwidth; `per_sequence` is what each further
sequence costs the server (llama-server's sampling and slot handling cap it far below its kernels).
A prompt of p tokens is prefilled in

    t_pf(p) = max(weights / (bandwidth x bw_eff),
                                2 x parameters x p / (peak x pf_eff)
                                + 2 x layers x attention width x p x (2 x depth + p) / (peak x attn_eff))

Serving B users in a closed loop (each sends its next request when the last one ends), one cycle
in which every user is served once takes o x t_dec(B) + B x t_pf(p): aggregate output is
B x o / cycle, and a stream's decode is slowed by the others' prefills, (o x t_dec + (B - 1) x t_pf) / o
per token. The time to first token is the request's own handling (per_request: HTTP and tokenisation, beside
the GPU's work), the prompt's prefill, half a step (the one running when it
arrives) and the prefills ahead of it, more often as prefill takes a larger share of the cycle;
beyond the engine's batch slots, users wait for a slot as well.

Several GPUs: tensor parallel divides the reads and the operations among the cards and adds two
all-reduces per layer (a ring of n - 1 steps, each step's latency over NVLink or PCIe fitted, plus their
bytes at the link's bandwidth); a layer split reads one card after another (one card's speed, plus a hop per card);
data-parallel replicas each serve their share of the users.

Written with arithmetic only, so the same functions run on floats (the advisor) and on numpy
arrays (the fit), and this module needs neither numpy nor Django.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Which parameters an engine's model has, and the physically plausible value each is pulled toward
# where the figures say little (a weak prior in the fit; the unit is in the name).
PARAMETERS = {
    "bw_eff_16": 0.8, "bw_eff_8": 0.7, "bw_eff_4": 0.6,  # share of datasheet bandwidth reading weights of
    # 16, 8 and 4 bits
    "kv_eff": 0.5,  # share of it the KV cache's reads reach
    "per_layer_us": 20.0,  # fixed time per layer and decode step (kernel launches)
    "step_ms": 0.5,  # fixed time per decode step (scheduler, one sequence's sampling)
    "per_sequence_ms": 0.1,  # each further sequence in the step
    "mma_eff": 0.3,  # share of the tensor peak batched decode reaches
    "pf_eff": 0.4,  # share of the tensor peak prefill's matrix products reach
    "attn_eff": 0.1,  # share of it attention's own products (over the context) reach
    "per_request_ms": 10.0,  # HTTP, tokenisation and scheduling of a request, before its prefill
    "allreduce_nvlink_us": 10.0, "allreduce_pcie_us": 30.0,  # one all-reduce ring step's latency
    "hop_us": 30.0,  # a layer split's hand-over from one card to the next
}
# Per GPU architecture, a factor on bw_eff and one on the matrix work (prefill's and batched decode's;
# 1 where the figures have none): kernels are tuned for some generations more than others.
ARCH_FACTORS = ("bw", "pf")
LINK_GBS = {"nvlink": 300.0, "pcie": 25.0}  # the bandwidth an all-reduce's bytes move at, GB/s per direction
# Time to first token: a closed loop's requests arrive bunched (they end together and come back
# together), so a new prompt finds others queued ahead: of the other users' prompts, the share of
# the cycle the GPU spends on prompts, of which the median request waits behind half and the 90th
# percentile behind 90 %.
TTFT_QUEUE = {"p50": 0.5, "p90": 0.9}
# llama.cpp's default batch and micro-batch (-b 2048, -ub 512): how deep a layer split's pipeline runs.
PIPELINE_BATCH, MICRO_BATCH = 2048, 512


@dataclass(frozen=True)
class Setup:
    """One serving setup and load: what a prediction (or a published figure) is of."""

    weight_bytes: float
    kv_bytes_per_token: float
    params_b: float
    layers: int
    attention_width: int  # attention heads x head size
    bits: int  # 16 | 8 | 4: the weights' storage, which sets how well their reads go
    bandwidth_gbs: float
    decode_tflops: float  # the tensor peak of the precision its decode's matrix products run at
    prefill_tflops: float
    arch: str
    users: float = 1
    prompt_tokens: float = 512
    output_tokens: float = 128
    depth: float = 0  # tokens already in the context before the prompt (a long conversation)
    gpus: int = 1
    split: str = ""  # "" | "tp" | "layer-split" | "dp"
    link: str = ""  # "nvlink" | "pcie"
    slots: float = 256  # sequences the engine batches at most (llama-server's --parallel, vLLM's max-num-seqs,
    # or fewer where its KV cache holds fewer at this context)
    arrival: str = "closed"  # "closed": each user sends its next request when the last ends;
    # "burst": every request sent at once (a benchmark's --request-rate inf without a concurrency cap)


@dataclass(frozen=True)
class Params:
    values: dict[str, float]
    arch: dict[str, dict[str, float]] = field(default_factory=dict)  # architecture -> {"bw": k, "pf": k}

    def __getitem__(self, name: str) -> float:
        return self.values[name]

    def factor(self, arch: str, which: str) -> float:
        return self.arch.get(arch, {}).get(which, 1.0)


def _max(a, b):
    return (a + b + abs(a - b)) / 2


def _min(a, b):
    return (a + b - abs(a - b)) / 2


def bw_eff(p: Params, bits, arch_bw):
    """The share of bandwidth weight reads reach: by storage width (16, 8 or 4 bits), per arch."""
    b16, b8, b4 = p["bw_eff_16"], p["bw_eff_8"], p["bw_eff_4"]
    # bits is 16, 8 or 4 (floats or an array): a Lagrange interpolation through the three points
    e = (b16 * (bits - 8) * (bits - 4) / 96 + b8 * (bits - 16) * (bits - 4) / -32
         + b4 * (bits - 16) * (bits - 8) / 48)
    return _min(e * arch_bw, 1.0)  # no read beats the datasheet


def decode_step_s(p: Params, s, users, context, arch_bw, arch_pf=1.0, server=True):
    """One decode step of `users` sequences at `context` tokens each, in seconds (see the module);
    `server=False` leaves out the server's per-sequence handling (a kernel benchmark's batch, such
    as llama-batched-bench's, samples greedily in the same process)."""
    cards = _tp_cards(s)
    # the KV cache's reads go at their own share of the bandwidth (attention's gathers, not one stream)
    memory = (s.weight_bytes / (s.bandwidth_gbs * 1e9 * bw_eff(p, s.bits, arch_bw))
              + users * context * s.kv_bytes_per_token / (s.bandwidth_gbs * 1e9 * p["kv_eff"])) / cards
    linear = users * 2 * s.params_b * 1e9 / cards
    attention = users * 4 * s.layers * s.attention_width * context / cards
    # the architecture's kernel factor (arch_pf) holds for batched decode too: the same matrix kernels
    compute = (linear / (s.decode_tflops * 1e12 * p["mma_eff"])
               + attention / (s.prefill_tflops * 1e12 * p["attn_eff"])) / arch_pf
    fixed = p["step_ms"] / 1e3 + s.layers * p["per_layer_us"] / 1e6
    per_sequence = (users - 1) * p["per_sequence_ms"] / 1e3 if server else 0.0
    return fixed + _max(memory, compute) + per_sequence + _comm_s(p, s, users)


def prefill_s(p: Params, s, tokens, depth, arch_bw, arch_pf):
    """Prefill of `tokens` prompt tokens after `depth` tokens of context, in seconds, without the
    request's own overhead."""
    cards = _tp_cards(s)
    linear = 2 * s.params_b * 1e9 * tokens / cards
    attention = 2 * s.layers * s.attention_width * tokens * (2 * depth + tokens) / cards
    compute = (linear / p["pf_eff"] + attention / p["attn_eff"]) / (s.prefill_tflops * 1e12 * arch_pf) \
        / _pipelined(s, tokens)
    weights = s.weight_bytes / cards / (s.bandwidth_gbs * 1e9 * bw_eff(p, s.bits, arch_bw))
    return _max(weights, compute) + _comm_s(p, s, tokens)


def _pipelined(s, tokens):
    """A layer split prefills a prompt's micro-batches as a pipeline: with m of them in flight
    (a batch of PIPELINE_BATCH tokens in micro-batches of MICRO_BATCH), n cards work m n / (m + n - 1)
    times as fast as one; one micro-batch gains nothing."""
    if s.split != "layer-split" or s.gpus <= 1:
        return 1.0
    m = _max(_min(tokens, PIPELINE_BATCH) / MICRO_BATCH, 1.0)
    return m * s.gpus / (m + s.gpus - 1)


def _tp_cards(s):
    return s.gpus if s.split == "tp" else 1


def _comm_s(p: Params, s, tokens):
    """Tensor parallel's two all-reduces per layer, each a ring of n - 1 steps whose latency adds up
    (a published 70B on 2, 4 and 8 A100s over PCIe barely sped up past two) and 2 (n-1)/n of the
    activations each way; a layer split's hand-overs; nothing on one card or for replicas."""
    if s.gpus <= 1 or s.split in ("", "dp"):
        return 0.0
    if s.split == "layer-split":
        return (s.gpus - 1) * p["hop_us"] / 1e6
    latency = (s.gpus - 1) * p["allreduce_nvlink_us" if s.link == "nvlink" else "allreduce_pcie_us"] / 1e6
    moved = 2 * (s.gpus - 1) / s.gpus * tokens * s.attention_width * 2  # 16-bit activations
    return 2 * s.layers * (latency + moved / (LINK_GBS.get(s.link, LINK_GBS["pcie"]) * 1e9))


@dataclass(frozen=True)
class Predicted:
    """Every figure the model gives for one setup and load (floats, or arrays in the fit)."""

    decode_tok_s: object  # one stream's decode speed while the others are served (tok/s)
    tpot_ms: object
    output_tok_s: object  # all users together
    ttft_p50_ms: object
    ttft_p90_ms: object
    prefill_tok_s: object  # one prompt alone
    batch_decode_tok_s: object  # all streams decoding with no prompt arriving (llama-batched-bench's S_TG)
    request_tok_s: object  # one request's output over its whole time, prefill included
    latency_s: object  # one batch of `users` prompts prefilled at once, then decoded together


def predict(p: Params, s: Setup) -> Predicted:
    arch_bw, arch_pf = p.factor(s.arch, "bw"), p.factor(s.arch, "pf")
    return predict_arrays(p, s, arch_bw, arch_pf)


def predict_arrays(p: Params, s, arch_bw, arch_pf) -> Predicted:
    """`s` may hold arrays (the fit's rows) as long as `split`, `link` and `gpus` are one value."""
    replicas = s.gpus if s.split == "dp" else 1
    users = s.users / replicas
    active = _max(_min(users, s.slots), 1.0)
    context = s.depth + s.prompt_tokens + s.output_tokens / 2
    step = decode_step_s(p, s, active, context, arch_bw, arch_pf)
    alone = decode_step_s(p, s, 1.0, s.depth + s.output_tokens / 2 + s.prompt_tokens, arch_bw, arch_pf)
    pf = prefill_s(p, s, s.prompt_tokens, s.depth, arch_bw, arch_pf)  # GPU time; the request's own
    # handling (HTTP, tokenisation) runs beside the GPU and delays only its own first token
    admit = p["per_request_ms"] / 1e3
    out = s.output_tokens
    cycle = out * step + active * pf  # every active sequence served once
    per_token = (out * step + (active - 1) * pf) / _max(out, 1)
    if s.arrival == "burst":  # the request at rank q waits for the prefills (and slots) ahead of it
        ttft = {}
        for q, rank in (("p50", 0.5), ("p90", 0.9)):
            ahead = users * rank
            ttft[q] = (admit + pf + _min(ahead, active) * pf + _max(ahead - active, 0) / active * cycle) * 1e3
        per_token = step + _min(users, active) / 2 * pf / _max(out, 1)
    else:
        waiting = _max(users / active - 1, 0) * cycle  # beyond the slots: a slot frees once per cycle each
        share = active * pf / cycle  # of the GPU's time, prompts; the larger, the longer the queue of them
        ttft = {q: (admit + pf + step / 2 * (1 if q == "p50" else 2) + k * (active - 1) * share * pf + waiting) * 1e3
                for q, k in TTFT_QUEUE.items()}
    batch_prefill = prefill_s(p, s, s.prompt_tokens * users, s.depth, arch_bw, arch_pf) + admit
    return Predicted(
        # (a prefill-only figure, no output, has no decode: kept finite)
        decode_tok_s=1 / _max(per_token, 1e-9), tpot_ms=per_token * 1e3, output_tok_s=replicas * active * out / cycle,
        ttft_p50_ms=ttft["p50"], ttft_p90_ms=ttft["p90"],
        prefill_tok_s=s.prompt_tokens / prefill_s(p, s, s.prompt_tokens, s.depth, arch_bw, arch_pf),
        batch_decode_tok_s=replicas * active / decode_step_s(p, s, active, context, arch_bw, arch_pf, server=False),
        request_tok_s=out / (admit + pf + out * alone),
        latency_s=batch_prefill + out * decode_step_s(p, s, users, context, arch_bw, arch_pf))
