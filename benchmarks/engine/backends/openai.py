"""Any other OpenAI-compatible server: nothing beyond the OpenAI API itself. No extra request
fields (so no `ignore_eos`: a request may stop before `max_tokens`, and the run flags it), no
/tokenize (prompts are text, their length calibrated from `usage.prompt_tokens`), no /metrics
names; its identity is what `/v1/models` lists."""
from __future__ import annotations

from .base import Backend, register, trim

# The request fields of OpenAI's own /v1/completions and /v1/chat/completions.
OPENAI_FIELDS = frozenset((
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
    "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
    "seed", "user", "best_of", "echo", "suffix", "response_format", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning_effort", "metadata", "store", "service_tier", "modalities", "prediction", "audio"))


@register
class OpenAICompatible(Backend):
    name = "openai"
    label = "OpenAI-compatible"
    choice_label = "other OpenAI-compatible"
    generic = True

    async def identity(self, get) -> dict:
        listing = await get("/v1/models")
        data = listing.get("data") if isinstance(listing, dict) else None
        return {"models": trim(data, max_items=8)} if isinstance(data, list) else {}

    # ------------------------------------------------------------------ simulator dialect
    # As strict as OpenAI itself: a field it does not know is refused, so a test proves the
    # client sends none.
    def sim_refuses(self, request: dict) -> str | None:
        unknown = sorted(set(request) - OPENAI_FIELDS)
        return f"Unrecognized request argument supplied: {', '.join(unknown)}" if unknown else None
