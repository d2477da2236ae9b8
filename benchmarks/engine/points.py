"""A comparison and advisor point: one load level's headline figures (`catalogue.POINT_FIGURES`),
whether they were measured here or read from an imported report; and a quality point: one
series' quality figures, with the text, windows and reference that say which of them compare.
Django-free.

Charts, the comparison page (its table and sentences) and the advisor's evidence all read
points; they are built only by the two readers below, one per stored shape they come from (a
measured level's summaries, an imported report's level).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Sequence

from .catalogue import METRICS, POINT_FIGURES, Figure
from .gpu import GpuSummary
from .metrics import LevelSummary
from .quality import QualityResult

NAMES = tuple(f.name for f in POINT_FIGURES)
QUALITY_NAMES = tuple(m.key for m in METRICS.values() if m.source == "quality")


@dataclass(frozen=True)
class Point:
    label: str
    concurrency: float | None = None  # streams; None in rate mode
    rate: float | None = None  # requests/s in rate mode
    id: str | None = None  # a measured level's public id
    completed: int | None = None
    failed: int | None = None
    flags: tuple[str, ...] = ()
    figures: dict = field(default_factory=dict)  # Figure.name -> value (None: not measured or stated)
    # A level measured in several trials: Figure.name -> each trial's value (its figure is their
    # mean); {} for one trial or a stated level.
    samples: dict = field(default_factory=dict)
    # A level of one trial: Figure.name -> the 95 % interval of its percentile over the level's
    # requests, where there were enough requests for one (metrics.percentile_interval).
    intervals: dict = field(default_factory=dict)
    # Figure.name -> differences.Noise: how much its endpoint's earlier comparable runs varied
    # at this level (a measured level with enough history); the stated default otherwise.
    noise: dict = field(default_factory=dict)

    def __post_init__(self):
        unknown = set(self.figures) - set(NAMES)
        if unknown:
            raise ValueError(f"not point figures: {', '.join(sorted(unknown))}; see catalogue.POINT_FIGURES")

    def get(self, f: Figure | str) -> float | None:
        return self.figures.get(f if isinstance(f, str) else f.name)

    @classmethod
    def measured(cls, summary: LevelSummary | Sequence[LevelSummary], *, label: str, concurrency: int | None,
                 rate: float | None, id: str | None = None, flags=(), gpu: GpuSummary | None = None,
                 gpu_indices=None, trial_gpus: Sequence[GpuSummary] | None = None) -> "Point":
        """A level measured here: its figures from its stored summary (or its trials' summaries:
        each figure their mean, each trial's value in `samples`), peak memory from its GPU
        telemetry (the endpoint's own GPUs, `gpu_indices`, when known), energy per token from each
        trial's GPU telemetry (`trial_gpus`, beside the summaries; `gpu` alone for one trial)."""
        summaries = [summary] if isinstance(summary, LevelSummary) else list(summary)
        per_trial = {f.name: [v for s in summaries if (v := s.figure(f)) is not None]
                     for f in POINT_FIGURES if f.metric.source == "requests"}
        gpus = list(trial_gpus) if trial_gpus is not None else [gpu] * (len(summaries) == 1)
        energy = [v for s, g in zip(summaries, gpus) if g is not None
                  and (v := g.joules_per_token(s.output_tokens)) is not None]
        per_trial["energy_per_token_j"] = energy
        per_trial["tokens_per_joule"] = [1.0 / v for v in energy if v > 0]
        figures = {name: (statistics.fmean(values) if values else None) for name, values in per_trial.items()}
        figures["peak_memory_gib"] = gpu.peak_memory_gib(gpu_indices) if gpu is not None else None
        samples = {name: tuple(values) for name, values in per_trial.items()} if len(summaries) > 1 else {}
        intervals = {f.name: i for f in POINT_FIGURES if f.metric.source == "requests"
                     and (i := summaries[0].interval(f)) is not None} if len(summaries) == 1 else {}
        return cls(label=label, concurrency=concurrency, rate=rate, id=id,
                   completed=sum(s.completed for s in summaries), failed=sum(s.failed for s in summaries),
                   flags=tuple(flags), figures=figures, samples=samples, intervals=intervals)

    @property
    def trials(self) -> int:
        """How many trials its figures are the mean of (1: one, or a stated level)."""
        return max((len(v) for v in self.samples.values()), default=1)

    @classmethod
    def stated(cls, values: dict, *, label: str, concurrency: float | None, rate: float | None,
               completed: int | None = None, failed: int | None = None) -> "Point":
        """A level of an imported report: `values` in the summary's shape, holding only what the
        file states (see `stated`)."""
        figures = {f.name: stated(values, f) for f in POINT_FIGURES}
        if figures["tokens_per_joule"] is None and figures["energy_per_token_j"]:
            figures["tokens_per_joule"] = 1.0 / figures["energy_per_token_j"]  # the same figure, inverted
        return cls(label=label, concurrency=concurrency, rate=rate, completed=completed, failed=failed,
                   figures=figures)


def stated(values: dict, f: Figure) -> float | None:
    """A figure of an imported level: its stated statistic. Where a file states a metric as one
    mean and nothing else (llama-bench's avg_ts, a write-up's "56 tok/s"), its p50 figure is that
    mean, the only figure there is."""
    value = f.read(values)
    if value is None and f.stat == "p50" and set(values.get(f.key) or ()) == {"mean"}:
        value = Figure(f.key, "mean").read(values)
    return value


# Quality figures measured against a reference endpoint: comparable only against the same one.
AGAINST_REFERENCE = ("kl_mean", "kl_p99", "same_top_share", "greedy_identical_share")


@dataclass(frozen=True)
class QualityPoint:
    """The quality figures of one series (an endpoint's quality step in a run, or what a report
    states) with what they are figures of: the base model, the evaluation text, the windows and
    the reference. Built by the two readers below, as `Point` is."""

    label: str
    kind: str = "measured"  # "measured" | "published" | "imported"
    figures: dict = field(default_factory=dict)  # catalogue key (source "quality") -> value, None: not there
    perplexity_stderr: float | None = None
    model: str | None = None  # the base model; None: not known
    text: dict | None = None  # {"name", "sha256", "tokens"}; None: not stated
    windows: dict | None = None  # {"n_ctx", "windows"}; None: not stated
    top_k: int | None = None
    reference: str | None = None  # what the KL and agreement figures are against
    note: str = ""

    def __post_init__(self):
        unknown = set(self.figures) - set(QUALITY_NAMES)
        if unknown:
            raise ValueError(f"not quality figures: {', '.join(sorted(unknown))}; see the catalogue's quality metrics")

    def get(self, f: Figure | str) -> float | None:
        value = self.figures.get(f if isinstance(f, str) else f.name)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    @property
    def text_words(self) -> str:
        if not self.text:
            return "not stated"
        tokens = f", {self.text['tokens']:,} tokens" if self.text.get("tokens") else ""
        return f"{self.text['name']} (sha256 {self.text['sha256'][:12]}{tokens})"

    @property
    def windows_words(self) -> str:
        """As llama-perplexity takes them: "-c 512 --chunks 16"."""
        return f"-c {self.windows['n_ctx']} --chunks {self.windows['windows']}" if self.windows else "not stated"

    @classmethod
    def measured(cls, result: QualityResult, *, label: str, model: str | None = None,
                 reference: str | None = None) -> "QualityPoint":
        """An endpoint's quality step, read from its stored result (QualityResult.value, the one
        reader of each figure); `reference` names what its KL and agreement figures are against
        (by default the name the result gives it)."""
        settings = result.settings or {}
        if result.reference:
            reference = reference or result.reference.get("name")
        return cls(label=label, kind="measured", figures={k: result.value(k) for k in QUALITY_NAMES},
                   perplexity_stderr=result.perplexity_stderr, model=model,
                   text={k: result.text.get(k) for k in ("name", "sha256", "tokens")},
                   windows={"n_ctx": settings.get("n_ctx"), "windows": settings.get("windows")},
                   top_k=settings.get("top_k"), reference=reference if result.reference else None,
                   note=f"Not compared with the reference: {result.reference_refused}."
                   if result.reference_refused else "")

    @classmethod
    def stated(cls, values: dict, *, label: str, kind: str, model: str | None = None, text: dict | None = None,
               windows: dict | None = None, reference: str | None = None, note: str = "") -> "QualityPoint":
        """What a report states: `values` by catalogue key, holding only what it states; its
        text and windows None where it does not say them."""
        return cls(label=label, kind=kind, figures={k: values.get(k) for k in QUALITY_NAMES}, model=model,
                   text=text, windows=windows, reference=reference, note=note)


def not_comparable(a: QualityPoint, b: QualityPoint, key: str) -> str:
    """Why quality figure `key` of `a` and `b` cannot be compared, in words; "" when it can. Only
    on the same evaluation text (its sha256) in the same windows, of the same base model (one
    tokenizer), and a figure against a reference only against the same one, the KL divergence
    over the same top-k."""
    unstated = [p.label for p in (a, b) if not p.text]
    if unstated:
        return f"the evaluation text of {' and of '.join(unstated)} is not stated"
    if a.text["sha256"] != b.text["sha256"]:
        return f"they were measured on different texts ({a.text_words} vs {b.text_words})"
    unstated = [p.label for p in (a, b) if not p.windows]
    if unstated:
        return f"the windows of {' and of '.join(unstated)} are not stated"
    if a.windows != b.windows:
        return f"they were scored in different windows ({a.windows_words} vs {b.windows_words})"
    if a.model and b.model and a.model.strip().lower() != b.model.strip().lower():
        return (f"they are different base models ({a.model} vs {b.model}), whose tokenizers cut the text "
                "differently")
    if key in AGAINST_REFERENCE:
        if a.reference != b.reference:
            return f"they are against different references ({a.reference or 'none'} vs {b.reference or 'none'})"
        if key.startswith("kl_") and a.top_k != b.top_k:
            return f"their KL divergences are over different top-k ({a.top_k} vs {b.top_k} tokens)"
    return ""
