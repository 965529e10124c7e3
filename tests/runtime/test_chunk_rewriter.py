"""The trtllm-serve stream's rewriting (specdec.runtime.chunk_rewriter.ChunkRewriter): the bytes the client
gets, chunk by chunk, whether the byte path or the parsed path rewrote them."""

from __future__ import annotations

import json

import pytest

from specdec.runtime.chunk_rewriter import ChunkRewriter

SERVED = "llama-3.1-8b"


def sse(*chunks) -> bytes:
    return b"".join(b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks)


def events(data: bytes) -> list:
    out = []
    for event in data.decode().split("\n\n"):
        if event:
            assert event.startswith("data: "), event
            payload = event[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def content(text: str, **extra) -> dict:
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "/engines/llama",
        "choices": [{"index": 0, "text": text, "finish_reason": None}],
        **extra,
    }


USAGE = {
    "id": "cmpl-1",
    "object": "text_completion",
    "model": "/engines/llama",
    "choices": [],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


@pytest.mark.parametrize("client_usage", [False, True])
def test_chunks_get_the_served_model_and_usage_as_openai_streams_it(client_usage):
    rewriter = ChunkRewriter(SERVED, client_usage)
    out = rewriter.feed(sse(content("Hel"), content("lo")))
    out += rewriter.feed(sse(USAGE) + b"data: [DONE]\n\n") + rewriter.finish()
    null = {"usage": None} if client_usage else {}
    expected = [{**content("Hel"), "model": SERVED, **null}, {**content("lo"), "model": SERVED, **null}]
    if client_usage:
        expected.append({**USAGE, "model": SERVED})
    assert events(out) == [*expected, "[DONE]"]
    assert rewriter.usage == USAGE["usage"]  # counted whether or not the client sees it


def test_an_upstream_null_usage_goes_when_the_client_did_not_ask_and_stays_when_it_did():
    chunk = content("x", usage=None)
    assert events(ChunkRewriter(SERVED, False).feed(sse(chunk))) == [{**content("x"), "model": SERVED}]
    assert events(ChunkRewriter(SERVED, True).feed(sse(chunk))) == [{**chunk, "model": SERVED}]


def test_an_event_split_anywhere_comes_out_whole_and_crlf_lines_are_read():
    data = sse(content("a"), content("b")).replace(b"\n", b"\r\n") + b"data: [DONE]\r\n\r\n"
    for cut in range(1, len(data)):
        rewriter = ChunkRewriter(SERVED, False)
        out = rewriter.feed(data[:cut]) + rewriter.feed(data[cut:]) + rewriter.finish()
        assert events(out) == [{**content("a"), "model": SERVED}, {**content("b"), "model": SERVED}, "[DONE]"], cut


def test_generated_text_that_looks_like_a_field_is_left_alone():
    text = '"model": "other", "usage": {"x": 1}'
    out = ChunkRewriter(SERVED, False).feed(sse(content(text)))
    assert events(out) == [{**content(text), "model": SERVED}]


def test_compact_and_unusual_chunks_are_rewritten_too():
    compact = json.dumps(content("c"), separators=(",", ":")).encode()
    no_model = {"id": "x", "choices": [{"index": 0, "text": "d"}]}
    usage_first = {"usage": None, **content("e")}
    out = ChunkRewriter(SERVED, False).feed(sse(compact, no_model, usage_first))
    assert events(out) == [{**content("c"), "model": SERVED}, no_model, {**content("e"), "model": SERVED}]


def test_what_is_not_json_passes_as_it_is_and_other_fields_are_dropped():
    out = ChunkRewriter(SERVED, False).feed(b": keep-alive\n\nevent: x\ndata: not json\n\n")
    assert out == b"data: not json\n\n"


def test_a_last_event_without_a_blank_line_is_relayed_at_the_end():
    rewriter = ChunkRewriter(SERVED, False)
    assert rewriter.feed(b"data: [DONE]") == b""
    assert rewriter.finish() == b"data: [DONE]\n\n"


def test_content_chunks_pass_as_they_came_but_for_the_model():
    chunk = json.dumps(content("a")).encode()  # json.dumps spacing: a parse and dump would not keep it
    served = chunk.replace(b'"model": "/engines/llama"', b'"model":"llama-3.1-8b"')
    assert ChunkRewriter(SERVED, False).feed(sse(chunk)) == sse(served)
    assert ChunkRewriter(SERVED, True).feed(sse(chunk)) == sse(served[:-1] + b',"usage":null}')
