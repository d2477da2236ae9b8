"""Multi-turn conversations: the shape of a conversation load level (client.Session runs them)."""
from __future__ import annotations

import random
from dataclasses import dataclass

THINK_KINDS = ("fixed", "exponential")
MAX_TURNS = 20


@dataclass(frozen=True)
class Conversation:
    """Multi-turn sessions: each of `turns` turns sends the history (the earlier user messages and
    the server's actual replies) and a new user message; between two turns the session thinks for
    `think_s` seconds (fixed) or a time drawn from an exponential of that mean, seeded."""

    turns: int = 2
    think_s: float = 0.0
    think: str = "fixed"  # or "exponential"

    def think_time(self, seed, session: int, turn: int) -> float:
        if self.think == "exponential" and self.think_s > 0:
            return random.Random(f"{seed}:think:{session}:{turn}").expovariate(1.0 / self.think_s)
        return self.think_s

    def to_dict(self) -> dict:
        return {"turns": self.turns, "think_s": self.think_s, "think": self.think}

    @classmethod
    def from_dict(cls, data) -> "Conversation | None":
        if not isinstance(data, dict) or not data.get("turns"):
            return None
        return cls(turns=int(data["turns"]), think_s=float(data.get("think_s") or 0.0),
                   think=str(data.get("think") or "fixed"))

    @property
    def label(self) -> str:
        think = (f", {'exponential think time of mean' if self.think == 'exponential' else 'think time'} "
                 f"{self.think_s:g} s" if self.think_s else "")
        return f"{self.turns}-turn conversations{think}"
