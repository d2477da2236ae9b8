import json

import pytest

from benchmarks.engine.stream import StreamError, parse_chunk


def test_completion_text_is_content():
    c = parse_chunk(json.dumps({"choices": [{"index": 0, "text": " hello", "finish_reason": None}]}))
    assert c.is_content and c.content == " hello"


def test_chat_role_only_chunk_is_not_content():
    c = parse_chunk(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
    assert not c.is_content


def test_usage_only_chunk_is_not_content():
    c = parse_chunk(json.dumps({"choices": [], "usage": {"prompt_tokens": 512, "completion_tokens": 100}}))
    assert not c.is_content and c.usage["completion_tokens"] == 100


def test_reasoning_counts_as_content():
    c = parse_chunk(json.dumps({"choices": [{"delta": {"reasoning_content": "think"}}]}))
    assert c.is_content and c.reasoning


def test_tool_call_counts_as_content():
    c = parse_chunk(json.dumps({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}}]}))
    assert c.is_content


def test_llamacpp_final_chunk_carries_timings_and_finish_reason():
    c = parse_chunk(json.dumps({"choices": [{"text": "", "finish_reason": "length"}],
                                "usage": {"prompt_tokens": 513, "completion_tokens": 100},
                                "timings": {"predicted_per_second": 72.1}}))
    assert not c.is_content and c.finish_reason == "length" and c.timings["predicted_per_second"] == 72.1


def test_done_sentinel():
    assert parse_chunk("[DONE]").done


@pytest.mark.parametrize("data, message", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not an object"),
    ('{"choices": 3}', "choices is not a list"),
    ('{"choices": [7]}', "choice is not an object"),
    ('{"error": {"message": "out of memory"}}', "out of memory"),
])
def test_bad_chunks_raise_stream_error_with_the_cause(data, message):
    with pytest.raises(StreamError, match=message):
        parse_chunk(data)


def test_an_empty_text_token_mid_stream_is_still_a_token():
    # vLLM: a token that ends inside a multi-byte UTF-8 character arrives with empty text.
    c = parse_chunk(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": None}]}))
    assert c.is_content and c.content == ""


def test_an_empty_final_chunk_is_not_a_token():
    c = parse_chunk(json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}))
    assert not c.is_content


# ---------------------------------------------------------------- SSE framing (sse_data)
import asyncio  # noqa: E402
import time  # noqa: E402

import httpx  # noqa: E402
from hypothesis import given, settings, strategies as st  # noqa: E402

from benchmarks.engine.stream import sse_data  # noqa: E402


def _events(pieces, **kwargs) -> list[str]:
    async def body():
        for p in pieces:
            yield p

    async def go():
        resp = httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body())
        return [e async for e in sse_data(resp, **kwargs)]
    return asyncio.run(go())


def _reference(stream: bytes) -> list[str]:
    """The SSE spec's algorithm, line by line (html.spec.whatwg.org, 9.2.6), for data only."""
    out, data = [], []
    for line in stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")[:-1]:
        if not line:
            if data:
                out.append(b"\n".join(data).decode("utf-8", "replace"))
            data = []
        elif line.startswith(b"data:"):
            value = line[5:]
            data.append(value[1:] if value[:1] == b" " else value)
    return out


_line = st.sampled_from([b"data: {\"a\": 1}", b"data:x", b"data: two words", b": comment", b"event: e",
                         b"data:", b"id: 7", b"data: \xc3\xa9"])
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_line, _eol, st.booleans()), max_size=12), st.data())
def test_sse_framing_matches_the_spec_however_the_bytes_are_split(lines, data):
    stream = b"".join(line + eol + (eol if blank else b"") for line, eol, blank in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)])]
    got = _events(pieces)
    # A CR at the very end may still be the first half of a CRLF: the reader waits for more.
    assert got == _reference(stream if not stream.endswith(b"\r") else stream[:-1])


def test_an_event_that_never_ends_is_refused_past_the_cap_with_the_cause():
    with pytest.raises(StreamError, match="grew past 65536 bytes without ending"):
        _events([b"data: " + b"x" * 1000] * 100, max_event_bytes=65536)


def test_one_huge_read_without_an_end_is_refused_too():
    with pytest.raises(StreamError, match="without ending"):
        _events([b"data: ok\n\n" + b"y" * 70000], max_event_bytes=65536)


def test_reading_a_long_event_in_small_pieces_is_linear():
    # 4 MiB in 1 KiB reads: copying the whole buffer on every read (quadratic) moves ~8 GB and
    # takes minutes; growing it in place takes well under a second.
    piece = b"z" * 1024
    t = time.perf_counter()
    got = _events([b"data: "] + [piece] * 4096 + [b"\n\n"], max_event_bytes=8 << 20)
    assert len(got) == 1 and len(got[0]) == 4 << 20
    assert time.perf_counter() - t < 10
