"""Multi-turn conversations: at each level, that many sessions each send the history and a new
message, turn after turn (a closed loop; engine/conversations.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..client import Load
from ..conversations import MAX_TURNS, Conversation
from .base import EMPTY_COLUMNS, FieldSpec, LoadArguments, over_limit, register, shorter, span
from .concurrency import ConcurrencySweep


@register
@dataclass(frozen=True)
class Conversations(ConcurrencySweep):
    name = "conversation"
    label = "multi-turn conversations (closed loop)"
    fields = ("concurrency_levels", "conversation_turns", "think_time_s", "think_time")
    inputs = ("conversation_turns", "think_time_s", "think_time")
    own_fields = {
        "conversation_turns": FieldSpec(
            "int", "Turns per conversation", initial=3, min_value=2, max_value=MAX_TURNS,
            help_text="Each turn sends the history (earlier messages and the server's actual replies) and a new "
                      "message; the levels above are concurrent conversations, the requests per level count turns. "
                      "Prompt caching stays on."),
        "think_time_s": FieldSpec("float", "Think time (s)", initial=0.0, min_value=0.0, max_value=600.0,
                                  help_text="Between a reply and the next turn."),
        "think_time": FieldSpec("choice", "Think time drawn", initial="fixed", choices=(
            ("fixed", "fixed"), ("exponential", "exponential, of that mean (seeded)"))),
    }

    conversation: Conversation | None = None

    @classmethod
    def from_arguments(cls, arguments: LoadArguments) -> "Conversations":
        return cls(levels=arguments.concurrency_levels, conversation=arguments.conversation)

    @classmethod
    def clean(cls, data, inputs, problems, limits) -> None:
        super().clean(data, inputs, problems, limits)
        if data.get("api") != "chat" and not problems.has("api"):
            problems.add("api", "Conversations send their history as chat messages: choose /v1/chat/completions.")
        data["conversation"] = Conversation(turns=inputs.get("conversation_turns") or 3,
                                            think_s=inputs.get("think_time_s") or 0.0,
                                            think=inputs.get("think_time") or "fixed")

    def arguments(self) -> dict:
        return {**super().arguments(), "conversation": self.conversation}

    def columns(self) -> dict:
        return {**EMPTY_COLUMNS, "concurrency_levels": sorted(set(self.levels)),
                "conversation": self.conversation.to_dict() if self.conversation else {}}

    def loads(self, requests, duration_s) -> list[Load]:
        return [Load(concurrency=c, requests=requests, duration_s=duration_s, conversation=self.conversation)
                for c in self.levels]

    def describe(self) -> str:
        levels = super().describe()
        return f"{levels}, {self.conversation.label}" if self.conversation else levels

    def run_time_problem(self, requests, duration_s, trials, endpoints, limit_s):
        talk = self.conversation
        if not (talk and talk.think_s and self.levels and requests):
            return super().run_time_problem(requests, duration_s, trials, endpoints, limit_s)
        # A level's streams think (turns - 1) times per conversation, at least.
        per_level = [shorter(math.ceil(requests / talk.turns / c) * (talk.turns - 1) * talk.think_s, duration_s)
                     for c in self.levels]
        problem = over_limit(per_level, trials, endpoints, limit_s,
                             f"Each conversation thinks {span(talk.think_s)} between turns",
                             "Think less, send fewer requests per level or set a shorter duration.", at_least=True)
        return problem and ("think_time_s", problem)
