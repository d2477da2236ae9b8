"""A physical estimate for what nothing measured: the step-time model (steptime.py) with the
parameters fitted to the figure table (fit.py, fitted.json), its band the spread of the model's
errors on figures it was not fitted to.

Every decode step reads the weights once (shared by the batch) and each sequence's KV cache, does
its matrix work, and pays the engine's fixed and per-sequence costs; each prompt's prefill is
compute; a closed loop of users shares the GPU between them. Where a host has several GPUs, each
way to use them (one card, the engine's split over the cards it needs, data-parallel replicas,
tensor parallel over more cards) is estimated and the one that answers the workload best is used,
and said. It is labelled "estimated, not measured", says what it rests on and how far off it was
where it was never fitted, and never passes a target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache

from ..engine import backends
from .backends import Launch, engine_of
from .correction import Correction, correct, ledger_record
from .facts import Candidate, fact, fmt, users_str
from .gpus import peak_of
from .memory import kv_bytes_per_token
from .performance import Predicted
from .performance import Performance
from .specs import GpuSpec, ModelSpec, Workload
from .steptime import Setup, predict

ESTIMATED = "estimated, not measured"
SPLIT_OF = {"one GPU": "", "tensor parallel": "tp", "layer split": "layer-split"}
# The metrics an estimate gives, and which fitted band (fit.FAMILIES) each carries.
BAND_OF = {"decode_tok_s_p50": "speed", "aggregate_tok_s": "speed", "tpot_ms_p50": "time",
           "ttft_ms_p50": "ttft", "ttft_ms_p90": "ttft"}  # fit.FAMILIES: "-many" appended beyond one user


@lru_cache(maxsize=1)
def fitted() -> dict:
    """fitted.json, read once (imported here, not at the top: `python -m benchmarks.advisor.fit`
    runs fit.py as a script, and the package must not have imported it first)."""
    from .fit import load_fitted
    return load_fitted()


@dataclass
class Prior:
    metrics: dict[str, Predicted]  # decode, aggregate, TPOT, TTFT p50 and p90: "estimated" with a band, or none
    sentence: str  # how it was derived, in words
    sources: list[str] = field(default_factory=list)  # what the fit rests on and how far off it was, one line each
    layout: str = ""  # how the host's GPUs serve it, in words ("" = as the memory fit sized it)
    chosen: "Layout | None" = None  # the layout the estimate is of


@dataclass(frozen=True)
class Layout:
    """One way to serve the workload on the host's GPUs."""

    gpus: int  # per replica
    split: str  # steptime's: "" | "tp" | "layer-split"
    replicas: int = 1

    def words(self) -> str:
        one = ("one GPU" if self.gpus == 1 else
               f"{self.gpus} GPUs in {'tensor parallel' if self.split == 'tp' else 'a layer split'}")
        return one if self.replicas == 1 else f"{self.replicas} replicas of {one} (data parallel)"


def _none(why: str) -> dict[str, Predicted]:
    return {m: Predicted(m, None, "none", (), (), why) for m in BAND_OF}


def layouts(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, gpus: int, split: str, users: int) -> list[Layout]:
    """The memory fit's own layout, then replicas of it where the host has room for two or more
    (at most one per user), then wider tensor parallel where the engine splits that way and starts
    on that count."""
    base = Layout(gpus, SPLIT_OF.get(split, "") if gpus > 1 else "")
    out = [base]
    replicas = min(gpu.count // gpus, users)
    if replicas >= 2:
        out.append(Layout(gpus, base.split, replicas))
    engine = engine_of(candidate.backend)
    counts, _ = engine.gpu_counts(candidate, gpu, model)
    for n in counts:
        if n > gpus and engine.split(n) == "tensor parallel":
            out.append(Layout(n, "tp"))
    return out


def setup_of(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: Workload, weights: float,
             layout: Layout) -> Setup | None:
    """What the step-time model is asked, for a candidate serving the workload in this layout."""
    engine = engine_of(candidate.backend)
    fmt_ = engine.formats.get(candidate.quantization)
    peak = peak_of(gpu.name)
    if fmt_ is None or peak is None:
        return None
    decode_tflops, prefill_tflops = fmt_.tflops(peak)
    width = model.attention_heads * model.head_dim or round(math.sqrt(model.params_b * 1e9 / (12 * model.layers)))
    users = workload.users / layout.replicas
    return Setup(
        weight_bytes=weights, kv_bytes_per_token=kv_bytes_per_token(model, candidate.kv_cache_bytes),
        params_b=model.params_b, layers=model.layers, attention_width=width, bits=fmt_.bits,
        bandwidth_gbs=peak.bandwidth_gbs, decode_tflops=decode_tflops, prefill_tflops=prefill_tflops,
        arch=peak.architecture,
        users=users, prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens,
        gpus=layout.gpus, split=layout.split,
        link="nvlink" if (gpu.topology or gpu.interconnect) == "nvlink" else "pcie",
        slots=engine.slots(math.ceil(users)))


def _band(value: float, band: tuple[float, float]) -> tuple[float, float]:
    return value * math.exp(band[0]), value * math.exp(band[1])


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def estimate(candidate: Candidate, model: ModelSpec, gpu: GpuSpec, workload: Workload, weights: float,
             gpus: int, split: str) -> Prior:
    if not candidate.estimable:
        f = fact("vllm-gguf-min-cc")
        return Prior(_none("no figure in the evidence"),
                     f"No published or measured figure of {candidate.label}'s kernels to fit an estimate on "
                     f"({f.statement}; {f.source}): not estimated, measure it.")
    peak = peak_of(gpu.name)
    if peak is None:
        return Prior(_none("no figure in the evidence"), f"No datasheet row for {gpu.name}: no physical estimate.")
    engine = engine_of(candidate.backend)
    fitted_as = engine.fitted_as or candidate.backend
    data = fitted()["engines"].get(fitted_as)
    from .fit import params_of
    params = params_of(fitted_as, fitted())
    if params is None or candidate.quantization not in engine_of(candidate.backend).formats:
        return Prior(_none("no figure in the evidence"),
                     f"No fitted step-time model for {candidate.label}: not estimated, measure it.")
    options = []
    for layout in layouts(candidate, model, gpu, gpus, split, workload.users):
        s = setup_of(candidate, model, gpu, workload, weights, layout)
        if s is not None:
            options.append((layout, s, predict(params, s)))
    throughput = workload.priority == "throughput"

    def merit(o):
        layout, _, p = o
        return p.output_tok_s * layout.replicas if throughput else p.decode_tok_s

    layout, s, p = max(options, key=merit)
    bands = {k: tuple(v) for k, v in data["bands"].items()}
    many = "-many" if workload.users > 1 else ""
    aggregate = p.output_tok_s * layout.replicas
    values = {"decode_tok_s_p50": p.decode_tok_s, "aggregate_tok_s": aggregate, "tpot_ms_p50": p.tpot_ms,
              "ttft_ms_p50": p.ttft_p50_ms, "ttft_ms_p90": p.ttft_p90_ms}
    regime = "several users" if many else "one user"
    loo = data["by_regime"][regime]["leave_one_gpu_out"]
    short = (f"{ESTIMATED}: the step-time model, fitted to {data['rows']} published figures on {len(data['gpus'])} "
             f"GPUs; for {regime}, on GPUs left out of its fit it was off by a median {_pct(loo['median_abs_error'])}")
    metrics = {}
    for name, value in values.items():
        lo, hi = _band(value, bands[BAND_OF[name] + many])
        metrics[name] = Predicted(name, value, "estimated", (workload.users,), (), f"{short}: {fmt(lo)} to {fmt(hi)}",
                                  (lo, hi))
    users = s.users
    read_gb = (s.weight_bytes + users * (s.prompt_tokens + s.output_tokens / 2) * s.kv_bytes_per_token) / 1e9
    where = f" on {layout.words()}" if layout.gpus > 1 or layout.replicas > 1 else ""
    how = (f"at {users_str(round(users)) if users == round(users) else fmt(users) + ' users'} each decode step reads "
           f"{fmt(read_gb)} GB (weights + KV cache at {fmt(s.prompt_tokens + s.output_tokens / 2)} tokens each) at "
           f"{fmt(peak.bandwidth_gbs)} GB/s ({peak.name}, {peak.source}){where}, and a {workload.prompt_tokens}-token "
           f"prompt is prefilled between steps")
    band = bands["speed" + many]
    sentence = (f"{ESTIMATED[0].upper() + ESTIMATED[1:]}: {how}. {fmt(p.decode_tok_s)} tok/s per stream, "
                f"{fmt(aggregate)} tok/s in all, time to first token {fmt(p.ttft_p50_ms)} ms (p90 "
                f"{fmt(p.ttft_p90_ms)}). The model's fixed, per-layer, per-sequence and efficiency terms are fitted to "
                f"{data['rows']} published figures of {backends.label(fitted_as)} on {len(data['gpus'])} GPUs"
                + (f" (no figure of {backends.label(candidate.backend)} in it yet: its steps are taken as "
                   f"{backends.label(fitted_as)}'s)" if fitted_as != candidate.backend else "") + " "
                f"(benchmarks/advisor/figures.csv); left out of the fit, a GPU's figures for {regime} were off by a "
                f"median {_pct(loo['median_abs_error'])}. The band ({_pct(math.exp(band[0]))} to "
                f"{_pct(math.exp(band[1]))} of the estimate) is the 10th to 90th percentile of "
                + BAND_BASIS_WORDS[data["band_basis"]["speed" + many]])
    layout_words = ""
    if len(options) > 1:
        parts = [f"{o[0].words()}: {fmt(o[2].decode_tok_s)} tok/s per stream, "
                 f"{fmt(o[2].output_tok_s * o[0].replicas)} in all" for o in options]
        layout_words = (f"On this host's {gpu.count} GPUs, estimated: " + "; ".join(parts)
                        + f". The estimate uses {layout.words()}, "
                        + ("the most tokens in all." if throughput else "the fastest stream."))
    sources = [f"{name} ({src['url']}): {src['rows']} figures on {', '.join(src['gpus'])}; left out of the fit, "
               f"off by a median {_pct(src['median_abs_error'])}"
               for name, src in data["leave_one_source_out"]["per_source"].items()]
    return Prior(metrics, sentence, sources, layout_words, layout)


# What a band's residuals were (fit.bands_of's band_basis), in the decision page's words.
BAND_BASIS_WORDS = {
    "held-out": "the errors on GPUs left out.",
    "held-out by source": "the errors on sources left out: most figures of this kind come from one GPU, so "
                          "they were checked one publication at a time instead.",
    "in-sample": "the fit's own errors: most figures of this kind come from one GPU and one source, so none is "
                 "left to check it on.",
}


def corrected(prior: Prior | None, correction: Correction | None) -> tuple[Prior | None, dict]:
    """The estimate with what the team's runs on this host taught it (correction.py), said in its
    sentence; and what the prediction ledger stores of it (its figures as said, and before any
    correction, with how many GPUs the layout it is of uses)."""
    if prior is None:
        return None, {}
    metrics = correct(prior.metrics, correction)
    record = {"metrics": ledger_record(metrics, prior.metrics),
              "correction": correction.words() if correction else "",
              "gpus": prior.chosen.gpus * prior.chosen.replicas if prior.chosen else None}
    if correction is None or not record["metrics"]:
        return prior, record
    return replace(prior, metrics=metrics, sentence=f"{prior.sentence} {correction.words()}"), record


def stand_in(perf: Performance, prior: Prior) -> list[str]:
    """Where figures were read, the estimate takes the metrics they were carried past their last
    level for (a figure at 8 users says nothing at 64), said in a note; the metrics it took."""
    beyond = [m for m, p in prior.metrics.items() if p.value is not None and m in perf.metrics
              and perf.metrics[m].how == "extrapolated"]
    for m in beyond:
        perf.metrics[m] = prior.metrics[m]
    if beyond:
        perf.notes.append("Beyond the levels its figures cover, the estimate stands in for them: " + prior.sentence)
    return beyond


def with_replicas(launch: Launch | None, prior: Prior | None, workload: Workload) -> Launch | None:
    """The engine's command as sized; where the estimate serves the users from replicas, one per
    group of GPUs, said beside it."""
    chosen = prior.chosen if prior is not None else None
    if launch is None or chosen is None or chosen.replicas == 1:
        return launch
    groups = [",".join(str(g * chosen.gpus + i) for i in range(chosen.gpus)) for g in range(chosen.replicas)]
    return Launch(launch.command, launch.build, launch.why + (
        f"{chosen.replicas} replicas: start this once per group of GPUs (CUDA_VISIBLE_DEVICES={'; '.join(groups)}), "
        f"each on its own port, behind a load balancer; each serves about {fmt(workload.users / chosen.replicas)} "
        f"users.",))
