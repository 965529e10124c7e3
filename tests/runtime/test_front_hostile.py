"""The front's server as a hostile or careless client meets it, over raw sockets: heads llhttp and h11 refuse
are refused (400, in OpenAI's shape, the connection closed), HTTP's rules on Host, HEAD, Allow, 100 Continue
and bare LF, a backend answer the front cannot name or count, and a pipelined body behind an answer the
client has not read yet."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.runtime.helpers import metric
from tests.runtime.standins import OpenAIState
from tests.runtime.test_front_openai import data_lines, run, stack
from tests.runtime.test_front_server import connection, get, own_server, post, response

BODY = b'{"prompt": "Hi"}'


def with_fields(fields: bytes, body: bytes = BODY, target: bytes = b"/v1/completions") -> bytes:
    """A completion request with the given header field lines (CRLF-ended) before its Content-Length."""
    return b"POST %s HTTP/1.1\r\nHost: x\r\n%bContent-Length: %d\r\n\r\n%b" % (target, fields, len(body), body)


REFUSED = {
    "unicode-digit-length": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: \xb2\r\n\r\n",
        "Content-Length",
    ),  # latin-1's superscript two
    "4301-digit-length": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + b"1" * 4301 + b"\r\n\r\n" + BODY,
        "Content-Length",
    ),  # past what int() takes from a string
    **{
        f"length-padded-{pad.hex()}": (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %b%d%b\r\n"
            b"\r\n%b" % (pad, len(BODY), pad, BODY),
            "Content-Length",
        )
        for pad in (b"\x0b", b"\x0c", b"\x85", b"\xa0")
    },
    "nul-before-colon": (with_fields(b"Transfer-Encoding\x00: chunked\r\n"), "header"),
    "bare-lf-hides-a-field": (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX: a\nContent-Length: 3\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY),
        "CR",
    ),
    "control-in-name": (with_fields(b"X-A\x01b: c\r\n"), "header"),
    "control-in-value": (with_fields(b"X-A: b\x01c\r\n"), "header value"),
    "del-in-value": (with_fields(b"X-A: b\x7fc\r\n"), "header value"),
    "control-in-target": (with_fields(b"", target=b"/v1/completions\x01"), "url"),
    "http-1.1-without-host": (
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(BODY), BODY),
        "one Host",
    ),
    "two-hosts": (with_fields(b"Host: y\r\n"), "one Host"),
    "bad-host": (b"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n", "Host"),
    "bare-lf-request": (b"GET /health HTTP/1.1\nHost: x\n\n", "not HTTP/1.1"),
    "http-2-version": (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/2.0"),
    "asterisk-target": (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", "target"),
    # Taken by llhttp, refused by h11 (found by tests/runtime/test_request_head_differential.py).
    "two-spaces-in-request-line": (b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n", "one space"),
    "bare-lf-before-request-line": (b"\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n", "one space"),
}


@pytest.mark.parametrize("request_bytes, says", REFUSED.values(), ids=REFUSED.keys())
def test_a_head_llhttp_and_h11_refuse_is_refused_at_once_and_the_connection_closed(request_bytes, says):
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(request_bytes + get("/health"))  # the request after it is not read
            answer = await asyncio.wait_for(response(reader), 2)
            return front, answer, await asyncio.wait_for(reader.read(), 2)

    front, (status, headers, body), after = run(scenario())
    assert status in (400, 505) and headers["connection"] == "close" and after == b""
    error = json.loads(body)["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error" and not state.requests
    reason = "version" if status == 505 else "bad_request"
    assert metric(front, "specdec_front_refusals_total", reason=reason) == 1


def test_more_header_fields_than_the_limit_is_431_and_as_many_as_it_is_served():
    state = OpenAIState()

    async def scenario():
        async with own_server(state, max_header_fields=100, max_head_bytes=256 * 1024) as (server, url):
            answers = []
            for count in (99, 101, 16000):  # with Host: 100, 102, 16001 fields
                async with connection(url) as (reader, writer):
                    writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * count + b"\r\n")
                    answers.append(await asyncio.wait_for(response(reader), 5))
            return server.front, answers

    front, answers = run(scenario())
    assert [status for status, _, _ in answers] == [200, 431, 431]
    assert "more than 100 header fields" in json.loads(answers[1][2])["error"]["message"]
    assert metric(front, "specdec_front_refusals_total", reason="too_many_fields") == 2


def test_head_is_answered_with_the_head_of_get_and_no_body_on_a_connection_kept_alive():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(
                b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n" + b"HEAD /v1/completions HTTP/1.1\r\n"
                b"Host: x\r\n\r\n" + get("/v1/models")
            )
            heads = [await reader.readuntil(b"\r\n\r\n") for _ in range(2)]
            return heads, await response(reader)

    (models_head, completions_head), (status, headers, body) = run(scenario())
    assert models_head.startswith(b"HTTP/1.1 200 ") and b"Connection: close" not in models_head
    assert f"Content-Length: {len(body)}\r\n".encode() in models_head  # what GET sends, the body left out
    assert completions_head.startswith(b"HTTP/1.1 405 ") and b"Allow: POST\r\n" in completions_head
    assert status == 200 and json.loads(body)["object"] == "list"  # the next answer starts right after


def test_expect_100_continue_gets_no_interim_answer_on_http_1_0():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            whole = post("/v1/completions", {"prompt": "Hi"}, version="1.0", extra="Expect: 100-continue\r\n")
            head, _, payload = whole.partition(b"\r\n\r\n")
            writer.write(head + b"\r\n\r\n")
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 0.3)
            writer.write(payload)
            return await asyncio.wait_for(response(reader), 2)

    status, _, body = run(scenario())
    assert status == 200 and json.loads(body)["choices"][0]["text"] == "Hello, world"


def test_an_absolute_form_target_is_served_by_its_path():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(b"GET http://elsewhere:1/v1/models?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
            return await response(reader)

    status, _, body = run(scenario())
    assert status == 200 and json.loads(body)["object"] == "list"


def test_a_backend_status_python_does_not_name_is_relayed_and_the_gauges_restored():
    fail_status = 499
    state = OpenAIState(fail_status=fail_status)

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": "Hi"}) + get("/health"))
            return front, [await asyncio.wait_for(response(reader), 5) for _ in range(2)]

    front, ((status, _, body), (health, _, _)) = run(scenario())
    assert status == fail_status and "engine failure" in json.loads(body)["error"]["message"] and health == 200
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status=str(fail_status)) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_usage_counts_of_the_wrong_type_are_not_counted_and_the_answer_and_gauges_are_whole(stream):
    state = OpenAIState(usage=([5], [3]))  # type: ignore[arg-type]  # lists where counts go

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": "Hi", "stream": stream}))
            return front, await asyncio.wait_for(response(reader), 5)

    front, (status, _, body) = run(scenario())
    text = (
        "".join(e["choices"][0]["text"] for e in data_lines(body.decode())[:-1])
        if stream
        else json.loads(body)["choices"][0]["text"]
    )
    assert status == 200 and text == "Hello, world"
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="200") == 1
    assert metric(front, "specdec_prompt_tokens_total") == 0


def test_a_pipelined_body_behind_an_answer_the_client_has_not_read_is_taken_whole():
    """The client writes its second request, body and all, before it reads the first answer (a large one): the
    server reads that request while the answer waits, so neither waits on the other."""
    state = OpenAIState(pieces=("x" * (4 * 1024 * 1024),))

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url, receive_buffer=4096) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": "Hi"}))
            await asyncio.sleep(0.3)  # the large answer fills the socket's buffers
            writer.write(post("/v1/completions", {"prompt": "y" * (900 * 1024)}))  # the stand-in takes 1 MiB
            await asyncio.wait_for(writer.drain(), 5)  # all of it sent: the server read it
            return [await asyncio.wait_for(response(reader), 10) for _ in range(2)]

    (first, _, large), (second, _, _) = run(scenario())
    assert first == 200 and len(json.loads(large)["choices"][0]["text"]) == 4 * 1024 * 1024 and second == 200
