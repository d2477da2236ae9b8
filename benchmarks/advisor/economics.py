"""Energy per output token and cost per million output tokens of a candidate at the workload's
load, and the team's GPU against a rented one. Django-free.

Read from the evidence where a run measured (or a report published) the figure at this load, or
between two measured levels: energy per token as the run measured it (NVML), the cost at the stated
price by engine/cost.py's one definition (`HourlyPrice.per_million_at`) from its aggregate
throughput and the power it drew (energy per token × aggregate tok/s).

Otherwise estimated, and labelled so with its band: the GPUs' maximum board power (gpus.py, as the
datasheets give it) drawn at between POWER_SHARE[0] of it and all of it, over the candidate's
predicted aggregate throughput (its own band where that is an estimate too). A GPU without a board
power in the table gets no energy estimate, and says so. A cost needs a stated price: none is ever
assumed. A rented GPU's rate includes its electricity, so its cost rests on the throughput alone.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Mapping

from ..engine.cost import OWNED, HourlyPrice
from .facts import fmt, users_str
from .gpus import peak_of
from .performance import Predicted
from .specs import GpuSpec

ENERGY, COST = "lowest_energy", "lowest_cost"  # the priorities ranked on these reads (specs.PRIORITY)
ECONOMY = (ENERGY, COST)
READ = ("measured", "published", "interpolated")  # read from data at this load, not estimated
# The share of its maximum board power a GPU draws while it serves: the estimate's band. A GPU
# serving an LLM draws less than its board power: this project's H200 drew at most 446 W of its
# 700 W serving llama.cpp at 1 and 8 users (benchmarks/engine/results/gpu_check_h200.json), and on
# average 393 W at 1 user and 347 W at 8 by its energy counter (energy_h200.json): 50 % to 56 %.
POWER_SHARE = (0.4, 1.0)
NEEDS_PRICE = ("ranking on cost per million output tokens needs a price: state your GPU's price per hour (owned: "
               "amortisation, with electricity per kWh; rented: the provider's rate); none is assumed")


@dataclass(frozen=True)
class EconomyRead:
    """A candidate's energy per output token (J/token) or cost per million output tokens (in the
    price's currency) at the workload's load. Lower is better."""

    figure: str  # "energy_per_token_j" | "cost_per_mtok" (the catalogue's metrics)
    value: float | None  # an estimate's geometric middle
    how: str  # "measured" | "published" | "interpolated" | "estimated" | "none"
    text: str  # the value in words, with how it was read (or why there is none)
    band: tuple[float, float] | None = None  # "estimated": (low, high)
    tok_s: float | None = None  # the aggregate throughput it rests on (an estimate's middle)
    tok_s_how: str = ""
    power: str = ""  # the power it rests on, in words ("" when the price does not need it)
    currency: str = ""

    @property
    def low_high(self) -> tuple[float, float] | None:
        """Its band, a read figure as a band of one value; None without a value."""
        if self.value is None:
            return None
        return self.band or (self.value, self.value)


def _three(x: float) -> str:
    """Three significant figures, never an exponent: 1250 / 12.5 / 0.0774."""
    if x <= 0:
        return "0"
    if float(f"{x:.3g}") >= 100:  # whole units from 100 (99.96 too: not "100.0")
        return f"{x:.0f}"
    x = float(f"{x:.3g}")
    text = f"{x:.{2 - math.floor(math.log10(x))}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def money(x: float) -> str:
    """A price: two decimals, three significant figures below 0.1."""
    return f"{x:.2f}" if x >= 0.1 or x == 0 else _three(x)


def joules(x: float) -> str:
    """Energy per token: three significant figures."""
    return _three(x)


def _none(figure: str, why: str, currency: str = "") -> EconomyRead:
    return EconomyRead(figure, None, "none", why, currency=currency)


def _throughput(m: Mapping[str, Predicted]) -> tuple[float, float, float, str, str] | str:
    """(middle, low, high, how, words) of the aggregate throughput at this load, or why it is not
    known well enough to price a token on."""
    p = m.get("aggregate_tok_s")
    if p is None or p.value is None:
        return "its aggregate throughput at this load is not known"
    if p.how == "estimated":
        low, high = p.band or (p.value, p.value)
        return p.value, low, high, p.how, f"{fmt(low)} to {fmt(high)} tok/s (estimated)"
    if p.how in READ:
        return p.value, p.value, p.value, p.how, f"{fmt(p.value)} tok/s ({p.how})"
    if p.how == "derived":
        return "only an upper bound of its aggregate throughput is known at this load (users × per-stream decode)"
    return f"its aggregate throughput was read only at {users_str(p.levels[0])}, not at this load"


def _power(m: Mapping[str, Predicted], gpu: GpuSpec, gpus: int) -> tuple[float, float, str, str] | str:
    """(low W, high W, how, words) the GPUs draw at this load, or why it is not known."""
    e, agg = m.get("energy_per_token_j"), m.get("aggregate_tok_s")
    if e is not None and e.value is not None and e.how in READ and agg is not None and agg.value is not None \
            and agg.how in READ:
        w = e.value * agg.value
        return w, w, e.how, f"{fmt(w)} W ({e.how}: {joules(e.value)} J/token × {fmt(agg.value)} tok/s)"
    peak = peak_of(gpu.name)
    if peak is None:
        return f"{gpu.name} is not in the datasheet table, so there is no board power to estimate its energy from"
    if peak.power_w is None:
        why = f" ({peak.note})" if peak.note else ""
        return f"the datasheet table has no maximum board power for the {peak.name}{why}, so no energy estimate"
    high = peak.power_w * gpus
    low = POWER_SHARE[0] * high
    cards = f"{gpus} × " if gpus > 1 else ""
    source = re.sub(r" \([^)]*\)", "", peak.source)  # "NVIDIA product datasheets"
    return low, high, "estimated", (f"{fmt(low)} to {fmt(high)} W (estimated: {POWER_SHARE[0] * 100:.0f} % to "
                                    f"{POWER_SHARE[1] * 100:.0f} % of {cards}the {peak.name}'s {fmt(peak.power_w)} W "
                                    f"maximum board power, {source})")


def energy_read(m: Mapping[str, Predicted], gpu: GpuSpec, gpus: int) -> EconomyRead:
    """Energy per output token at this load: read from the evidence, else the board power's band
    over the predicted throughput's."""
    figure = "energy_per_token_j"
    e = m.get(figure)
    if e is not None and e.value is not None and e.how in READ:
        return EconomyRead(figure, e.value, e.how, f"{joules(e.value)} J/token ({e.how}: {e.note})")
    throughput = _throughput(m)
    if isinstance(throughput, str):
        return _none(figure, f"Not known: {throughput}.")
    power = _power(m, gpu, gpus)
    if isinstance(power, str):
        return _none(figure, f"Not known: {power}.")
    mid, low_t, high_t, how_t, words_t = throughput
    low_w, high_w, _, words_w = power
    low, high = low_w / high_t, high_w / low_t
    text = (f"{joules(low)} to {joules(high)} J/token, estimated, not measured: the GPUs drawing {words_w} over "
            f"{words_t}")
    return EconomyRead(figure, math.sqrt(low * high), "estimated", text, (low, high), mid, how_t, words_w)


def cost_read(price: HourlyPrice | None, m: Mapping[str, Predicted], gpu: GpuSpec, gpus: int) -> EconomyRead:
    """Cost per million output tokens at this load and price (engine/cost.py): read where the
    throughput (and, for an owned GPU whose electricity is priced, the power) is read from data,
    else estimated with its band."""
    figure = "cost_per_mtok"
    if price is None:
        return _none(figure, f"Not known: {NEEDS_PRICE}.")
    cur = price.currency
    throughput = _throughput(m)
    if isinstance(throughput, str):
        return _none(figure, f"Not known: {throughput}.", cur)
    mid, low_t, high_t, how_t, words_t = throughput
    low_w = high_w = None
    how_w, words_w = "", ""
    if price.ownership == OWNED and price.per_kwh:
        power = _power(m, gpu, gpus)
        if isinstance(power, str):
            return _none(figure, f"Not known: electricity is priced but {power}.", cur)
        low_w, high_w, how_w, words_w = power
    low, high = price.per_million_at(high_t, low_w), price.per_million_at(low_t, high_w)
    if low is None or high is None:
        return _none(figure, "Not known: no throughput to spread the price over.", cur)
    drawing = f", drawing {words_w}" if words_w else ""
    if "estimated" in (how_t, how_w):
        text = (f"{money(low)} to {money(high)} {cur} per million output tokens, estimated, not measured: at "
                f"{words_t}{drawing}; {price.said()}")
        return EconomyRead(figure, math.sqrt(low * high), "estimated", text, (low, high), mid, how_t, words_w, cur)
    how = next((h for h in ("interpolated", "published") if h in (how_t, how_w)), "measured")
    text = f"{money(low)} {cur} per million output tokens ({how}): at {words_t}{drawing}; {price.said()}"
    return EconomyRead(figure, low, how, text, None, mid, how_t, words_w, cur)


def economy_priority(read: EconomyRead) -> tuple[float | None, str, str]:
    """(the value ranked on, higher is better: its inverse), its words, how it was read."""
    if read.value is None:
        return None, "", "none"
    return 1.0 / max(read.value, 1e-12), read.text, read.how  # free (0) ranks first, finitely


# --- your GPU against a rented one ----------------------------------------------------------------

@dataclass(frozen=True)
class PriceSide:
    """One GPU's cheapest candidate for the workload at its price."""

    role: str  # "yours" | "rented"
    gpu: str
    count: int
    price: str  # HourlyPrice.said()
    candidate: str | None  # Candidate.key; None when no candidate has a cost here
    label: str
    recommended: bool  # the advisor recommends it outright (else: ranked first, said why)
    cost: EconomyRead | None
    text: str


@dataclass(frozen=True)
class PriceComparison:
    sides: tuple[PriceSide, PriceSide]
    cheaper: str | None  # "yours" | "rented" | None: none is claimed while the bands overlap
    verdict: str
    text: str  # the whole answer in one paragraph

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def rented_gpu(name: str, count: int = 1) -> GpuSpec | None:
    """A GPU of the datasheet table as a rented machine states it (its nominal memory); None when
    the table does not know it."""
    peak = peak_of(name)
    if peak is None:
        return None
    linked = count > 1 and any(w in peak.name.lower() for w in ("sxm", "nvl"))
    return GpuSpec(peak.name, peak.compute_capability, float(peak.memory_gib), count=count,
                   interconnect="nvlink" if linked else "pcie")


def _gpu_words(role: str, gpu: GpuSpec) -> str:
    what = f"{gpu.count} × {gpu.name}" if gpu.count > 1 else gpu.name
    return f"your {what}" if role == "yours" else f"a rented {what}"


def _side(role: str, rec, price: HourlyPrice) -> PriceSide:
    """The best candidate on cost of a recommendation ranked on cost: the one it recommends, else
    the first ranked with a cost."""
    where = _gpu_words(role, rec.gpu)
    chosen = next((r for r in rec.ranked if r.key == rec.recommended), None) or next(
        (r for r in rec.ranked if r.recommendable and r.cost is not None and r.cost.value is not None), None)
    if chosen is None or chosen.cost is None or chosen.cost.value is None:
        why = next((r.cost.text for r in rec.ranked if r.recommendable and r.cost is not None), "") or \
            "no candidate can start and fit there"
        return PriceSide(role, rec.gpu.name, rec.gpu.count, price.said(), None, "", False, None,
                         f"{where}: no cost known ({why[0].lower() + why[1:].rstrip('.')})")
    first = "" if chosen.key == rec.recommended else " (ranked first; not recommended outright: see its answer)"
    return PriceSide(role, rec.gpu.name, rec.gpu.count, price.said(), chosen.key, chosen.label,
                     chosen.key == rec.recommended, chosen.cost, f"{where}: {chosen.label}{first}, {chosen.cost.text}")


def _range(read: EconomyRead) -> str:
    low, high = read.low_high
    return money(low) if low == high else f"{money(low)} to {money(high)}"


def price_comparison(yours, rented) -> PriceComparison:
    """The workload on the team's GPU at its price against a rented GPU at its rate: each one's
    best candidate on cost, and which is cheaper, claimed only when their bands do not overlap.
    `yours` and `rented` are Recommendations ranked on cost (priority "lowest_cost")."""
    a, b = _side("yours", yours, yours.price), _side("rented", rented, rented.price)
    cheaper = None
    if a.cost is None or b.cost is None:
        missing = [s for s in (a, b) if s.cost is None]
        verdict = "Not compared: " + " and ".join(f"the cost on {s.gpu} is not known" for s in missing) + "."
    elif a.cost.currency != b.cost.currency:
        verdict = f"Not compared: the prices are in different currencies ({a.cost.currency}, {b.cost.currency})."
    else:
        (a_low, a_high), (b_low, b_high) = a.cost.low_high, b.cost.low_high
        unit = f"{a.cost.currency} per million output tokens"
        if a_low <= b_high and b_low <= a_high:
            verdict = (f"Neither is cheaper: {_range(a.cost)} and {_range(b.cost)} {unit} are within each other's "
                       f"band; measure the estimated one before choosing.")
        else:
            win, lose = (a, b) if a_high < b_low else (b, a)
            cheaper = win.role
            whose = "your" if win.role == "yours" else "the rented"
            verdict = (f"Cheaper on {whose} {win.gpu}: {_range(win.cost)} against {_range(lose.cost)} {unit}"
                       + (" (their bands do not overlap)." if "estimated" in (a.cost.how, b.cost.how) else "."))
    w = yours.workload
    text = f"{users_str(w.users)} of {yours.model.name}: on {a.text}. Against {b.text}. {verdict}"
    return PriceComparison((a, b), cheaper, verdict, text)
