"""Reading one streamed OpenAI-compatible response chunk (vLLM and llama.cpp dialects).

SSE framing itself is done by httpx-sse; this module says what a decoded `data:` payload
means for the measurement: content or not, usage, llama.cpp timings, errors.
"""
from __future__ import annotations

import json
from dataclasses import dataclass


class StreamError(Exception):
    """The server sent something that is not a valid chunk, or an error object."""


@dataclass
class Chunk:
    content: str = ""  # generated text, reasoning or tool-call arguments
    is_content: bool = False  # carries generated content (counts for TTFT)
    reasoning: bool = False  # content was reasoning (DeepSeek-R1 style)
    usage: dict | None = None
    timings: dict | None = None
    finish_reason: str | None = None
    done: bool = False  # the [DONE] sentinel


def parse_chunk(data: str) -> Chunk:
    """Interpret one SSE `data:` payload."""
    if data.strip() == "[DONE]":
        return Chunk(done=True)
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise StreamError(f"malformed chunk (not JSON): {data[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise StreamError(f"malformed chunk (not an object): {data[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        message = err.get("message", err) if isinstance(err, dict) else err
        raise StreamError(f"server error in stream: {str(message)[:300]}")
    chunk = Chunk(usage=obj.get("usage") if isinstance(obj.get("usage"), dict) else None,
                  timings=obj.get("timings") if isinstance(obj.get("timings"), dict) else None)
    choices = obj.get("choices")
    if choices is None:
        choices = []
    if not isinstance(choices, list):
        raise StreamError(f"malformed chunk (choices is not a list): {data[:120]!r}")
    for choice in choices:
        if not isinstance(choice, dict):
            raise StreamError(f"malformed chunk (choice is not an object): {data[:120]!r}")
        chunk.finish_reason = choice.get("finish_reason") or chunk.finish_reason
        text = choice.get("text")  # /v1/completions
        delta = choice.get("delta")  # /v1/chat/completions
        if isinstance(text, str) and text:
            chunk.content += text
            chunk.is_content = True
        if isinstance(delta, dict):
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str) and delta[key]:
                    chunk.content += delta[key]
                    chunk.is_content = chunk.reasoning = True
            if isinstance(delta.get("content"), str) and delta["content"]:
                chunk.content += delta["content"]
                chunk.is_content = True
                chunk.reasoning = False
            if delta.get("tool_calls"):
                chunk.content += json.dumps(delta["tool_calls"])
                chunk.is_content = True
    return chunk
