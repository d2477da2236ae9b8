"""What each candidate costs in quality: its measured figures (or the published ones, labelled),
and the basis "least quality loss" ranks on.

Quality is a property of a variant of a base model, not of a GPU: evidence is read only for the
decision's model, whatever GPU it was measured on. Two figures rank against each other only when
engine.points.not_comparable finds nothing between them (the same text and windows, and for the
KL divergence the same reference and top-k); published figures, whose text is not stated, never
rank. The basis is the comparable group that covers the most candidates: the KL divergence from
one reference when it covers as many as perplexity on one text does, else that perplexity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from ..engine.catalogue import figure
from ..engine.points import not_comparable
from .facts import Candidate
from .specs import ModelSpec, QualityEvidence

BASIS_FIGURES = ("kl_mean", "perplexity")  # what "least quality loss" may rank on, preferred first
SHOWN = ("perplexity", "kl_mean", "kl_p99", "same_top_share", "greedy_identical_share")


@dataclass(frozen=True)
class QualityRead:
    """A candidate's quality row: the figures of one evidence row, and what they are figures of."""

    how: str  # "measured" | "published" | "not measured"
    evidence_id: str | None = None
    label: str = ""  # where it comes from: the run and endpoint, or the publication
    url: str | None = None
    figures: dict = field(default_factory=dict)  # catalogue key -> value, only those there
    perplexity_stderr: float | None = None
    text: str = ""  # the evaluation text in words ("not stated" for a publication)
    windows: str = ""
    reference: str | None = None  # what KL and agreement are against
    note: str = ""


@dataclass(frozen=True)
class QualityBasis:
    """What "least quality loss" ranks on: one figure, on one text in one window setting (and
    against one reference), for the candidates that have it; `figure` None when nothing compares."""

    figure: str | None
    words: str  # "KL divergence from fp16 (FP16), on greek (sha256 …) in windows -c 512 --chunks 16"
    where: str = ""  # the same without the figure's name: "from fp16 (FP16), on greek (…) in windows …"
    candidates: tuple[str, ...] = ()
    evidence_ids: tuple[str, ...] = ()


def words(key: str) -> str:
    """A figure's label inside a sentence: "perplexity", "KL divergence"."""
    label = figure(key).metric.label
    return label if label[:2].isupper() else label[0].lower() + label[1:]


def same_model(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()


def _groups(rows: list[QualityEvidence], key: str) -> list[dict[str, QualityEvidence]]:
    """The measured rows that have figure `key`, in groups of mutually comparable ones (its first
    row the anchor), each holding the newest row per candidate; in the order first met."""
    groups: list[dict[str, QualityEvidence]] = []
    for ev in rows:
        if ev.kind != "measured" or ev.point.get(key) is None:
            continue
        group = next((g for g in groups if not not_comparable(ev.point, next(iter(g.values())).point, key)), None)
        if group is None:
            groups.append({ev.candidate: ev})
        else:
            group.setdefault(ev.candidate, ev)
    return groups


def _where(key: str, anchor: QualityEvidence) -> str:
    p = anchor.point
    against = f"from {p.reference}, " if key != "perplexity" and p.reference else ""
    return f"{against}on {p.text_words} in windows {p.windows_words}"


def basis(rows: list[QualityEvidence]) -> tuple[QualityBasis, dict[str, QualityEvidence]]:
    """The basis and, per candidate in it, the evidence row it ranks on."""
    best = None
    for key in BASIS_FIGURES:
        groups = _groups(rows, key)
        if groups:
            group = max(groups, key=len)  # the first of the largest: the newest
            if best is None or len(group) > len(best[1]):
                best = (key, group)
    if best is None:
        return QualityBasis(None, "no measured quality figures compare"), {}
    key, group = best
    where = _where(key, next(iter(group.values())))
    sep = " " if where.startswith("from") else ", "
    return QualityBasis(key, f"{words(key)}{sep}{where}", where, tuple(group),
                        tuple(ev.id for ev in group.values())), group


def _read(ev: QualityEvidence | None) -> QualityRead:
    if ev is None:
        return QualityRead("not measured", note="no quality figures for this variant of the model")
    p = ev.point
    return QualityRead(ev.kind, ev.id, ev.label, ev.url, {k: v for k in SHOWN if (v := p.get(k)) is not None},
                       p.perplexity_stderr, p.text_words, p.windows_words, p.reference, p.note)


@dataclass
class QualityReading:
    """The quality evidence of a decision, read: per candidate its rows (this model's only, newest
    first) and its quality row, the basis, and the row each candidate in the basis ranks on."""

    rows: dict[str, list[QualityEvidence]]
    reads: dict[str, QualityRead]
    basis: QualityBasis
    ranked_on: dict[str, QualityEvidence]

    def priority_value(self, key: str) -> tuple[float | None, str, str]:
        """(value, in words, how) for "least quality loss": higher is better, so the basis
        figure's negative (both basis figures are better lower)."""
        ev = self.ranked_on.get(key)
        if ev is None or self.basis.figure is None:
            return None, "", "none"
        f = figure(self.basis.figure)
        value = ev.point.get(f)
        unit = f" {f.metric.unit}" if f.metric.unit else ""
        return (-value, f"{words(f.key)} {value * f.metric.scale:,.{f.metric.digits}f}{unit} ({self.basis.where})",
                "measured")

    def not_ranked_why(self, key: str) -> str:
        """Why a candidate outside the basis has no quality loss to rank on, in a sentence."""
        rows = self.rows[key]
        measured = [ev for ev in rows if ev.kind == "measured"]
        ev = (measured or rows or [None])[0]
        if ev is None:
            return "Its quality was not measured for this model."
        if self.basis.figure is None:
            if ev.kind == "published":
                return "Its published quality figures compare with nothing: their evaluation text is not stated."
            return "Its measured quality figures compare with no other candidate's."
        f = figure(self.basis.figure)
        if ev.point.get(f) is None:
            return f"Its {ev.kind} quality has no {words(f.key)}, which ranks here ({self.basis.words})."
        anchor = next(iter(self.ranked_on.values()))
        return (f"Its {ev.kind} {words(f.key)} does not rank against the others': "
                f"{not_comparable(ev.point, anchor.point, f.key)}.")


def read_quality(candidates: Sequence[Candidate], model: ModelSpec,
                 evidence: Sequence[QualityEvidence]) -> QualityReading:
    """Each candidate's quality row (the evidence it ranks on, else its newest measured row, else
    the published one) and the basis. Evidence of another base model is never read."""
    rows = {c.key: [ev for ev in evidence if ev.candidate == c.key and same_model(ev.model, model.name)]
            for c in candidates}
    chosen, ranked_on = basis([ev for mine in rows.values() for ev in mine])
    reads = {}
    for key, mine in rows.items():
        measured = [ev for ev in mine if ev.kind == "measured"]
        reads[key] = _read(ranked_on.get(key) or (measured or mine or [None])[0])
    return QualityReading(rows, reads, chosen, ranked_on)


def quality_sentence(c: Candidate, read: QualityRead) -> str:
    """The candidate's quality in one sentence, its source said."""
    if read.how == "not measured":
        return f"Quality of {c.label}: not measured for this model."
    parts = []
    for key, value in read.figures.items():
        f = figure(key)
        shown = f"{value * f.metric.scale:,.{f.metric.digits}f}"
        if key == "perplexity" and read.perplexity_stderr is not None:
            shown += f" ± {read.perplexity_stderr:,.{f.metric.digits}f}"
        unit = f" {f.metric.unit}" if f.metric.unit else ""
        parts.append(f"{words(key)} {shown}{unit}")
    if read.how == "published":
        return f"Quality of {c.label}: {', '.join(parts)} ({read.label}; evaluation text not stated)."
    against = f" against {read.reference}" if read.reference and set(read.figures) - {"perplexity"} else ""
    return (f"Quality of {c.label}: {', '.join(parts)}{against}, measured here on {read.text} in windows "
            f"{read.windows}.")
