"""One card or two? Read from runs measured here that served the same model on one GPU and on
several (llama.cpp --split-mode none|layer|row, vLLM tensor or pipeline parallel), and from the
path between the host's GPUs (NVLink, one PCIe switch, the CPU's host bridge, across sockets).
Where nothing was measured it says it has only the write-up's anecdote (two PCIe V100s without
NVLink: 24 tok/s with --tensor-parallel-size 2 against 32 on one), and what to measure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..engine.catalogue import figure
from .facts import fact, fmt, users_str
from .performance import gpu_key
from .specs import Evidence, GpuSpec, ModelSpec, Workload

QUESTION = "One card or two?"
# How far apart two GPUs are, in words, for each path the probe names (engine.gpu.GpuPair.kind).
PATHS = {
    "nvlink": ("NVLink", "NVLink carries the all-reduce of tensor parallel (and row split) far faster than PCIe, so "
                         "the write-up's PCIe anecdote does not carry over to this host"),
    "internal": ("PCIe, on one board", "both GPUs sit on one board behind its own PCIe switch: still PCIe, as in the "
                                       "write-up"),
    "single": ("PCIe, under one switch (PIX)", "peer-to-peer traffic stays under one PCIe switch, the best PCIe "
                                               "can do, but still PCIe, as in the write-up"),
    "multiple": ("PCIe, across several switches (PXB)", "peer-to-peer traffic crosses several PCIe switches: PCIe, "
                                                        "as in the write-up"),
    "hostbridge": ("PCIe, through the CPU's host bridge (PHB)",
                   "every transfer between the GPUs goes through the CPU's host bridge: as slow as the write-up's "
                   "or slower"),
    "node": ("PCIe, across host bridges of one CPU (NODE)", "transfers cross host bridges within the CPU: as slow as "
                                                            "the write-up's or slower"),
    "system": ("PCIe, across CPU sockets (SYS)", "transfers cross the link between the CPU sockets, the slowest path "
                                                 "there is: splitting pays it at every layer (row split, tensor "
                                                 "parallel) or at each split point (layer split)"),
}
MEASURE = ('Measure it: a recipe swept over "gpus": ["0", "0,1"] (and llama.cpp\'s --split-mode none, layer, row) '
           "for the same model and variant, at the workload's number of users.")


@dataclass(frozen=True)
class CardsRow:
    """One measured series (a candidate on some GPUs, split some way) at the level compared."""

    candidate: str
    label: str
    gpus: int
    split: str  # "one GPU", "layer split", "row split", "tensor parallel", ...
    concurrency: int
    decode_tok_s_p50: float | None
    aggregate_tok_s: float | None
    evidence_id: str
    url: str | None = None


@dataclass(frozen=True)
class CardsAnswer:
    question: str
    answer: str  # "one card" | "two cards" | "open"
    basis: str  # "measured" (runs here) | "anecdote" (the write-up's only)
    summary: str
    reasons: list[str] = field(default_factory=list)
    rows: list[CardsRow] = field(default_factory=list)
    path: str = ""  # the path between the GPUs, in words; "" when the probe did not say
    source: str = ""
    note: str = ""  # the GPU's hardware note, "" for none
    note_fact: str = ""  # the fact it rests on ("tp-over-pcie": the anecdote)


def _path(gpu: GpuSpec) -> tuple[str, str]:
    key = gpu.topology or ("nvlink" if gpu.interconnect == "nvlink" else "")
    if key in PATHS:
        return PATHS[key]
    return ("PCIe (which path was not probed)", "PCIe, as in the write-up") if key == "" else (key, "")


def _same_setup(ev: Evidence, gpu: GpuSpec, model: ModelSpec) -> bool:
    if ev.kind != "measured" or ev.model != model.name:
        return False
    if gpu.host_id is not None:
        return ev.host_id == gpu.host_id
    return gpu_key(ev.gpu_name) == gpu_key(gpu.name)


def _series(evidence: Sequence[Evidence], gpu, model) -> dict[str, dict[tuple[int, str], dict[int, Evidence]]]:
    """candidate -> (GPUs, split) -> concurrency -> the newest row."""
    out: dict = {}
    for ev in evidence:
        if _same_setup(ev, gpu, model):
            split = ev.split or ("one GPU" if ev.gpu_count == 1 else "split")
            out.setdefault(ev.candidate, {}).setdefault((ev.gpu_count, split), {}).setdefault(ev.concurrency, ev)
    return out


def _row(ev: Evidence, gpus: int, split: str) -> CardsRow:
    return CardsRow(ev.candidate, ev.label, gpus, split, ev.concurrency, ev.decode_tok_s_p50, ev.aggregate_tok_s,
                    ev.id, ev.url)


def _on(row: CardsRow) -> str:
    return "one GPU" if row.gpus == 1 else f"{row.gpus} GPUs, {row.split}"


def _compare(label: str, series: dict, users: int, metric: str, needs_two: bool) -> tuple[str, str, list[CardsRow]]:
    """(verdict, sentence, rows) for one candidate measured on one GPU and on several."""
    levels = set.intersection(*(set(s) for s in series.values())) or set().union(*(set(s) for s in series.values()))
    level = min(levels, key=lambda c: (abs(c - users), c))
    rows = [_row(s[level], gpus, split) for (gpus, split), s in sorted(series.items()) if level in s]
    unit = figure(metric).metric.unit
    said = "; ".join(f"{fmt(v)} {unit} on {_on(r)}" if (v := getattr(r, metric)) is not None
                     else f"no figure on {_on(r)}" for r in rows)
    at = users_str(level) + ("" if level == users else f", the measured level nearest {users_str(users)}")
    name = figure(metric).metric.label.lower()
    one = [r for r in rows if r.gpus == 1 and getattr(r, metric) is not None]
    many = [r for r in rows if r.gpus > 1 and getattr(r, metric) is not None]
    if not one or not many:
        return "open", f"{label} at {at}: {said}.", rows
    best_one = max(one, key=lambda r: getattr(r, metric))
    best_many = max(many, key=lambda r: getattr(r, metric))
    ratio = getattr(best_many, metric) / getattr(best_one, metric) if getattr(best_one, metric) else None
    if needs_two:
        verdict = "two cards"
        why = f"it does not fit on one GPU at this load, so {best_many.split} is the way to serve it"
    elif getattr(best_one, metric) >= getattr(best_many, metric):
        verdict, why = "one card", (f"one GPU is {'as fast as' if ratio == 1 else 'faster than'} the best split "
                                    f"({best_many.split}, {fmt(ratio * 100)} % of it)")
    else:
        verdict, why = "two cards", f"{best_many.split} on {best_many.gpus} GPUs gives {fmt(ratio)}x the {name}"
    return verdict, f"{label} at {at}, {name}: {said} (measured): {why}.", rows


def answer(gpu: GpuSpec, model: ModelSpec, workload: Workload, evidence: Sequence[Evidence], results,
           recommended: str | None) -> CardsAnswer | None:
    """The answer for a host of several GPUs (None for one GPU: nothing to split). `results`:
    the candidates' CandidateResults (their memory fit says whether one GPU holds the model)."""
    if gpu.count < 2:
        return None
    path, path_why = _path(gpu)
    metric = "aggregate_tok_s" if workload.priority == "throughput" else "decode_tok_s_p50"
    labels = {r.key: r.label for r in results}
    needs_two = {r.key for r in results if r.recommendable and r.fit.gpus_used > 1}
    comparisons = {}
    for key, series in _series(evidence, gpu, model).items():
        if key in labels and any(g == 1 for g, _ in series) and any(g > 1 for g, _ in series):
            comparisons[key] = _compare(labels[key], series, workload.users, metric, key in needs_two)
    where = "on this host" if gpu.host_id is not None else f"on a {gpu.name} like this one"
    if comparisons:
        order = [recommended] + [k for k in comparisons if k != recommended]
        lead = next(k for k in order if k in comparisons)
        verdict = comparisons[lead][0]
        rows = [row for k in order if k in comparisons for row in comparisons[k][2]]
        reasons = [comparisons[k][1] for k in order if k in comparisons]
        reasons.append(f"The GPUs {where}: {path}.")
        head = {"one card": "One card", "two cards": "Two cards", "open": "Not settled"}[verdict]
        summary = f"{head} for {model.name}, measured {where}: {reasons[0]}"
        return CardsAnswer(QUESTION, verdict, "measured", summary, reasons[1:], rows, path,
                           "runs measured here (see each row)", note=summary)
    anecdote = fact("tp-over-pcie")
    linked = (gpu.topology or gpu.interconnect) == "nvlink"
    # The answer is about what is recommended (about every candidate only when nothing is).
    split = [labels[k] for k in needs_two if recommended in (None, k)]
    if split:
        lead = "Layer split (llama.cpp --split-mode layer) crosses PCIe with activations only; "
        verdict = "two cards"
        first = (f"{', '.join(split)} does not fit on one GPU at this load: two cards. "
                 if len(split) == 1 else f"{', '.join(split)} do not fit on one GPU at this load: two cards. ")
    else:
        lead, verdict, first = "Serve from one GPU when the model fits on one: ", "open" if linked else "one card", ""
    note = lead + anecdote.statement + "."
    summary = (f"{first}Not measured here: only the write-up's anecdote (published, not measured here) — "
               f"{anecdote.statement}.")
    reasons = [f"The GPUs {where}: {path}" + (f"; {path_why}." if path_why else "."), MEASURE]
    return CardsAnswer(QUESTION, verdict, "anecdote", summary, reasons, [], path, anecdote.source,
                       note="" if linked else note, note_fact="" if linked else anecdote.id)
