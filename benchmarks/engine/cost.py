"""What serving costs: a host's stated hourly price and the one definition of cost per million
output tokens (catalogue `cost_per_mtok`). Django-free: the inventory stores a host's price, the
run page, exports and the advisor read it through `HourlyPrice`.

Owned: the cards' amortisation per hour of wall time, plus electricity for the energy the GPUs
used (NVML, measured per level). Rented: the provider's hourly rate, electricity included.
"""
from __future__ import annotations

from dataclasses import dataclass

OWNED, RENTED = "owned", "rented"
OWNERSHIP = ((OWNED, "owned (amortisation per hour + electricity)"), (RENTED, "rented (the provider's hourly rate)"))
JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class HourlyPrice:
    ownership: str  # OWNED | RENTED
    per_hour: float  # owned: the cards' amortisation per hour; rented: the provider's rate for the host
    currency: str  # "USD", "EUR"...
    per_kwh: float | None = None  # owned: electricity; ignored for rented hosts

    def level_cost(self, wall_s: float, energy_j: float | None) -> float | None:
        """What `wall_s` of serving cost, its GPUs using `energy_j`. None where an owned host's
        electricity price is given but its energy was not measured: its cost is then unknown."""
        if wall_s is None or wall_s <= 0:
            return None
        cost = self.per_hour * wall_s / 3600.0
        if self.ownership == OWNED and self.per_kwh:
            if energy_j is None:
                return None
            cost += self.per_kwh * energy_j / JOULES_PER_KWH
        return cost

    def per_million_tokens(self, wall_s: float, energy_j: float | None, output_tokens: float) -> float | None:
        """catalogue cost_per_mtok: the level's cost over its output tokens, times a million."""
        cost = self.level_cost(wall_s, energy_j)
        return cost / output_tokens * 1e6 if cost is not None and output_tokens else None

    def per_million_at(self, tok_s: float | None, power_w: float | None) -> float | None:
        """The same at a steady `tok_s` of output drawing `power_w` (an estimate's inputs)."""
        if not tok_s or tok_s <= 0:
            return None
        return self.per_million_tokens(1.0, power_w, tok_s)

    def said(self) -> str:
        """ "rented at 2.50 USD/h", "owned: 0.40 USD/h amortisation, 0.30 USD/kWh"."""
        if self.ownership == RENTED:
            return f"rented at {self.per_hour:,.2f} {self.currency}/h"
        power = f", {self.per_kwh:,.2f} {self.currency}/kWh" if self.per_kwh else ", electricity not priced"
        return f"owned: {self.per_hour:,.2f} {self.currency}/h amortisation{power}"

    def to_dict(self) -> dict:
        return {"ownership": self.ownership, "per_hour": self.per_hour, "currency": self.currency,
                "per_kwh": self.per_kwh}
