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
