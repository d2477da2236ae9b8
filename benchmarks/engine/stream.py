"""Reading a streamed OpenAI-compatible response (vLLM and llama.cpp dialects): the SSE
framing (`sse_data`) and what each decoded `data:` payload means for the measurement
(`parse_chunk`): content or not, usage, llama.cpp timings, errors.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import httpx


class StreamError(Exception):
    """The server sent something that is not a valid chunk, or an error object."""


@dataclass(slots=True)
class Chunk:
    content: str = ""  # generated text, reasoning or tool-call arguments
    is_content: bool = False  # carries generated content (counts for TTFT)
    reasoning: bool = False  # content was reasoning (DeepSeek-R1 style)
    usage: dict | None = None
    timings: dict | None = None
    finish_reason: str | None = None
    done: bool = False  # the [DONE] sentinel


DONE = b"[DONE]"
_scan = json.JSONDecoder().scan_once  # json.loads without its checks, for the usual payload


def _loads(data: str | bytes):
    """json.loads for one payload, about twice as fast on the usual one (UTF-8 bytes of one
    object): decoded as UTF-8 (SSE's encoding; undecodable bytes replaced, as the text path
    reads them) and scanned directly; anything else (whitespace around it, an error) goes
    through json.loads itself, with its answer or its error."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            data = data.decode("utf-8", "replace")
    try:
        obj, end = _scan(data, 0)
    except (StopIteration, ValueError):
        end = -1
    return obj if end == len(data) else json.loads(data)


def parse_chunk(data: str | bytes) -> Chunk:
    """Interpret one SSE `data:` payload (text, or its UTF-8 bytes)."""
    if data.strip() == (DONE if isinstance(data, bytes) else "[DONE]"):
        return Chunk(done=True)
    try:
        obj = _loads(data)
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
        elif text == "" and choice.get("finish_reason") is None and chunk.usage is None and chunk.timings is None:
            # vLLM streams one chunk per token; a token that ends inside a multi-byte UTF-8
            # character comes with empty text. It is still a generated token.
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


# An event bigger than this without its blank line is not a token chunk: a server streaming
# without delimiters would otherwise grow the buffer until memory runs out.
MAX_EVENT_BYTES = 1 << 20


class SSEFramer:
    """The `data` of each server-sent event, fed the stream's bytes piece by piece (the SSE
    format: lines end with CRLF, LF or CR; an event ends with a blank line; its `data:` lines
    are joined with newlines; other fields and comments are ignored; events without data are
    skipped; an event not ended by a blank line when the stream ends is dropped). `feed`
    returns the data (bytes, undecoded) of the events its piece completed. Works on the bytes,
    one split per piece: httpx-sse's line-by-line text decoding cost about a fifth of each
    chunk's handling, which counts at hundreds of streams. Linear in the bytes fed: an
    unfinished event waits in a bytearray that grows in place and is searched only where it
    grew; past `max_event_bytes` without an end `feed` raises StreamError."""

    __slots__ = ("max_event_bytes", "tail", "held_cr")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES):
        self.max_event_bytes = max_event_bytes
        self.tail = bytearray()  # the start of an event whose blank line has not arrived yet
        self.held_cr = False  # a piece ended in CR: maybe the first half of a CRLF

    def feed(self, raw: bytes) -> list[bytes]:
        tail = self.tail
        if (not tail and raw.startswith(b"data:") and raw.find(b"\n") == len(raw) - 2 and raw.endswith(b"\n\n")
                and not self.held_cr and b"\r" not in raw):
            # The usual piece: exactly one one-line event (a token's chunk).
            return [raw[6:-2] if raw[5:6] == b" " else raw[5:-2]]
        if self.held_cr or b"\r" in raw:
            if self.held_cr:
                raw = b"\r" + raw
            self.held_cr = raw.endswith(b"\r")
            if self.held_cr:
                raw = raw[:-1]
            raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if tail:
            searched = len(tail)
            tail += raw
            end = tail.rfind(b"\n\n", max(0, searched - 1))
            if end < 0:
                self._check(tail)
                return []
            block = bytes(tail[:end])
            del tail[:end + 2]
        else:
            end = raw.rfind(b"\n\n")
            if end < 0:
                if raw:
                    tail += raw
                    self._check(tail)
                return []
            block = raw[:end]
            if end + 2 < len(raw):
                tail += raw[end + 2:]
        self._check(tail)
        out = []
        for event in block.split(b"\n\n"):
            if event.startswith(b"data:") and b"\n" not in event:  # the usual one-line event
                out.append(event[6:] if event[5:6] == b" " else event[5:])
                continue
            data = [line[6:] if line[5:6] == b" " else line[5:]
                    for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data))
        return out

    def _check(self, tail: bytearray) -> None:
        if len(tail) > self.max_event_bytes:
            raise StreamError(f"an event grew past {self.max_event_bytes} bytes without ending "
                              f"(no blank line): not a valid stream; it began {bytes(tail[:80])!r}")


def event_stream_problem(content_type: str) -> str:
    """Why a response with this Content-Type is not an event stream ('' when it is one)."""
    kind = content_type.partition(";")[0]
    if "text/event-stream" in kind:
        return ""
    return f"Expected response header Content-Type to contain 'text/event-stream', got {kind!r}"


async def sse_data(resp: httpx.Response, max_event_bytes: int = MAX_EVENT_BYTES, as_bytes: bool = False):
    """The `data` of each server-sent event of a streamed httpx response (SSEFramer), as text
    (or its bytes undecoded, `as_bytes`: the measuring loop leaves decoding to parse_chunk), as
    soon as the event is complete."""
    problem = event_stream_problem(resp.headers.get("content-type", ""))
    if problem:
        raise StreamError(problem)
    framer = SSEFramer(max_event_bytes)
    async for raw in resp.aiter_bytes():
        for data in framer.feed(raw):
            yield data if as_bytes else data.decode("utf-8", "replace")
