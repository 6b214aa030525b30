"""The SSE parser: spec-conformant lines pass, anything else is a MalformedStream."""

from __future__ import annotations

import pytest

from leakwatch.loadgen import sse


def feed_all(lines):
    parser = sse.EventParser()
    out = [parser.feed(line) for line in lines]
    return [e for e in out if e is not None], parser


def test_events_end_at_blank_lines_and_done_is_a_sentinel():
    events, parser = feed_all([b'data: {"a": 1}\n', b"\n", b"data: [DONE]\r\n", b"\r\n"])
    assert events == [{"a": 1}, sse.DONE]
    assert not parser.pending


def test_multi_line_data_comments_and_fields():
    events, _ = feed_all([b": ping\n", b"event: message\n", b"id: 7\n", b'data: {"a":\n', b"data: 2}\n", b"\n"])
    assert events == [{"a": 2}]


def test_a_last_event_without_blank_line_is_flushed():
    parser = sse.EventParser()
    assert parser.feed(b'data: {"x": 1}') is None
    assert parser.pending and parser.flush() == {"x": 1}
    assert parser.flush() is None


@pytest.mark.parametrize(
    "lines, match",
    [
        ([b"garbage\n"], "not an SSE line"),
        ([b"data: {broken\n", b"\n"], "not JSON"),
        ([b"data: 42\n", b"\n"], "not a JSON object"),
        ([b"<html>502 Bad Gateway</html>\n"], "not an SSE line"),
    ],
)
def test_malformed_input_raises(lines, match):
    with pytest.raises(sse.MalformedStream, match=match):
        feed_all(lines)


def test_which_chunks_carry_tokens():
    assert sse.chunk_has_token({"choices": [{"text": ""}]}, chat=False)
    assert not sse.chunk_has_token({"choices": [], "usage": {}}, chat=False)
    assert not sse.chunk_has_token({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, chat=True)
    assert sse.chunk_has_token({"choices": [{"delta": {"content": ""}}]}, chat=True)
    assert sse.chunk_has_token({"choices": [{"delta": {"reasoning_content": "hm"}}]}, chat=True)
    assert not sse.chunk_has_token({"choices": [{"delta": {}}]}, chat=True)
