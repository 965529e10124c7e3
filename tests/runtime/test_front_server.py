"""The front's own HTTP/1.1 server on the trtllm-serve route (specdec.runtime.front_server), spoken to over raw
sockets: requests in turn on one connection, HTTP/1.0, Expect: 100-continue, what it refuses and how, and a
graceful stop."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import socket

import pytest

from specdec.api.runtime_config import FrontLimits
from specdec.runtime import launch
from specdec.runtime.front import Front
from specdec.runtime.front_server import FrontServer
from specdec.runtime.http1 import Chunked, parse_head
from tests.runtime.helpers import metric, serving
from tests.runtime.standins import OpenAIState
from tests.runtime.test_front_openai import PYTORCH, data_lines, run, stack


def post(path: str, body: dict, *, version: str = "1.1", extra: str = "") -> bytes:
    raw = json.dumps(body).encode()
    return (
        f"POST {path} HTTP/{version}\r\nHost: x\r\nContent-Type: application/json\r\n{extra}"
        f"Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode()


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response off the connection, and not a byte of the next: (status, headers, its body unframed)."""
    status, headers = parse_head((await reader.readuntil(b"\r\n\r\n"))[:-4])
    if "chunked" in headers.get("transfer-encoding", ""):
        body = []
        while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
            body.append((await reader.readexactly(size + 2))[:-2])
        await reader.readexactly(2)
        return status, headers, b"".join(body)
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    return status, headers, await reader.read()  # to the connection's end


@contextlib.asynccontextmanager
async def connection(url: str, receive_buffer: int | None = None):
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    if receive_buffer:  # before connecting: the window the server sees
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    reader, writer = await asyncio.open_connection(sock=sock)
    try:
        yield reader, writer
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def own_server(state: OpenAIState, *, shutdown_timeout: float = 1.0, **limits):
    """A FrontServer of the test's own on the trtllm-serve stand-in, within FrontLimits but for `limits`, stopped
    at the end (if the test did not)."""
    async with serving(state.app(), handler_cancellation=True) as backend_url:
        backend = dataclasses.replace(launch.plan_launch(PYTORCH).backend, url=backend_url)
        server = FrontServer(
            Front(PYTORCH, backend, stats_interval=0), shutdown_timeout=shutdown_timeout, limits=FrontLimits(**limits)
        )
        await server.start("127.0.0.1", 0)
        try:
            yield server, f"http://127.0.0.1:{server.port}"
        finally:
            await server.stop()


def test_one_connection_takes_pages_and_generation_requests_in_turn_even_sent_all_at_once():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(
                get("/health")
                + post("/v1/completions", {"prompt": "Hi"})
                + get("/v1/models")
                + post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "stream": True})
                + get("/metrics")
            )
            answers = [await response(reader) for _ in range(5)]
            return front, answers

    front, answers = run(scenario())
    assert [status for status, _, _ in answers] == [200, 200, 200, 200, 200]
    (_, _, health), (_, _, completion), (_, _, models), (_, stream_headers, stream), (_, metrics_headers, _) = answers
    assert json.loads(health)["status"] == "ok"
    assert json.loads(completion)["model"] == front.model
    assert [m["id"] for m in json.loads(models)["data"]] == [front.model]
    assert stream_headers["content-type"] == "text/event-stream"
    assert data_lines(stream.decode())[-1] == "[DONE]"
    assert metrics_headers["content-type"].startswith("text/plain")
    assert metric(front, "specdec_requests_total", endpoint="/v1/chat/completions", status="200") == 1


def test_http_1_0_gets_the_stream_to_the_connections_end_and_expect_100_continue_gets_its_interim_answer():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, _client):
            async with connection(url) as (reader, writer):
                writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}, version="1.0"))
                status, headers, body = await response(reader)  # read to the connection's end
                old = status, headers, data_lines(body.decode()), await reader.read()
            async with connection(url) as (reader, writer):
                whole = post("/v1/completions", {"prompt": "Hi"}, extra="Expect: 100-continue\r\n")
                head, _, payload = whole.partition(b"\r\n\r\n")
                writer.write(head + b"\r\n\r\n")
                interim = await reader.readuntil(b"\r\n\r\n")
                writer.write(payload)
                final = await response(reader)
            return old, interim, final

    (status, headers, events, after), interim, (final_status, _, final_body) = run(scenario())
    assert status == 200 and "transfer-encoding" not in headers and headers["connection"] == "close"
    assert [e["choices"][0]["text"] for e in events[:-1]] == ["Hello", ",", " world"] and after == b""
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert final_status == 200 and json.loads(final_body)["choices"][0]["text"] == "Hello, world"


@pytest.mark.parametrize(
    "request_bytes, status, says",
    [
        (
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
            411,
            "Content-Length",
        ),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1e3\r\n\r\n", 400, "Content-Length"),
        (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n", 413, "larger than"),
        (b"this is not HTTP\r\n\r\n", 400, "not HTTP/1.1"),
        (b"GET /health HTTP/1.1\r\nX: " + b"y" * 70000 + b"\r\n\r\n", 431, "longer than"),
    ],
    ids=["chunked", "no-length", "bad-length", "too-large", "not-http", "head-too-long"],
)
def test_a_request_that_cannot_be_read_is_refused_in_openais_shape_and_the_connection_closed(
    request_bytes, status, says
):
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(request_bytes + get("/health"))  # the request after it is not read
            answer = await response(reader)
            return answer, await reader.read()

    (got, headers, body), after = run(scenario())
    assert got == status and headers["connection"] == "close" and after == b""
    assert says in json.loads(body)["error"]["message"] and not state.requests


def test_a_method_a_path_does_not_take_is_405_with_allow_and_a_path_there_is_not_404_on_a_connection_kept_alive():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(get("/v1/completions") + post("/health", {}) + get("/v2/nothing") + get("/health"))
            return [await response(reader) for _ in range(4)]

    answers = run(scenario())
    assert [status for status, _, _ in answers] == [405, 405, 404, 200]
    assert answers[0][1]["allow"] == "POST" and answers[1][1]["allow"] == "GET, HEAD"
    assert "only POST" in json.loads(answers[0][2])["error"]["message"]
    assert "/v2/nothing" in json.loads(answers[2][2])["error"]["message"]


def test_stop_lets_a_stream_in_flight_finish_and_closes_idle_connections():
    state = OpenAIState(pieces=tuple("abcde"), chunk_delay=0.1)

    async def scenario():
        async with own_server(state, shutdown_timeout=5.0) as (server, url):
            async with connection(url) as (reader, writer), connection(url) as (idle_reader, _):
                writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}))
                await reader.readuntil(b"\r\n\r\n")
                stopping = asyncio.create_task(server.stop())
                idle_end = await asyncio.wait_for(idle_reader.read(), 2)
                writer.write(get("/health"))  # after the stop: not answered
                rest = await reader.read()  # to the end: the stream, then the connection closed
                await stopping
            return idle_end, rest

    idle_end, rest = run(scenario())
    assert idle_end == b""
    chunked = Chunked()
    assert "".join(e["choices"][0]["text"] for e in data_lines(chunked.feed(rest).decode())[:-1]) == "abcde"
    assert chunked.done


def test_a_generation_request_starts_no_task_of_the_front_once_its_backend_connection_is_kept():
    """The token path runs in the connections' callbacks: no event loop iteration waits for a task."""
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}))
            await response(reader)  # the first opens trtllm-serve's connection (a task), kept for the next
            started = []
            loop = asyncio.get_running_loop()

            def counting(loop, coro, **kwargs):
                if "specdec/runtime" in coro.cr_code.co_filename:
                    started.append(coro.cr_code.co_name)
                return asyncio.Task(coro, loop=loop, **kwargs)

            loop.set_task_factory(counting)
            writer.write(
                post("/v1/completions", {"prompt": "Hi", "stream": True})
                + post("/v1/completions", {"prompt": "Hi"})
                + get("/health")
            )
            answers = [await response(reader) for _ in range(3)]
            loop.set_task_factory(None)
            return started, answers

    front_tasks, answers = run(scenario())
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert front_tasks == ["_answer"]  # the page's (GET /health): the count counts; the two generations started none


def test_a_connection_kept_alive_is_closed_after_the_keepalive_timeout_counted_from_the_end_of_its_answer():
    """A stream longer than the keep-alive timeout, during which the client sends nothing, leaves its connection
    open for the next request; then the silent connection is closed."""
    state = OpenAIState(pieces=tuple("abc"), chunk_delay=0.4)

    async def scenario():
        async with own_server(state, keepalive_timeout_seconds=0.5) as (_server, url):
            async with connection(url) as (reader, writer):
                writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}))
                status, _, body = await asyncio.wait_for(response(reader), 5)  # 1.2 s without a read
                await asyncio.sleep(0.1)
                writer.write(get("/health"))
                health = await asyncio.wait_for(response(reader), 2)
                closed = await asyncio.wait_for(reader.read(), 3)
                return status, data_lines(body.decode()), health[0], closed

    status, events, health, closed = run(scenario())
    assert status == 200 and events[-1] == "[DONE]" and health == 200 and closed == b""


def test_a_client_that_sends_requests_and_takes_no_answers_is_not_read_further():
    """Answers wait in the server's buffer only up to its high-water mark: past it, no request is read."""
    state = OpenAIState()
    count = 20000  # 1.4 MB of requests, 5 MB of answers

    async def scenario():
        async with own_server(state) as (server, url), connection(url, 4096) as (reader, writer):
            writer.write(get("/v1/completions") * count)  # 405 each, answered at once
            await asyncio.sleep(0.5)
            (held,) = server.connections
            held_bytes = held.transport.get_write_buffer_size() + len(held.buffer)
            statuses = [(await response(reader))[0] for _ in range(count)]
            return held_bytes, statuses

    held_bytes, statuses = run(scenario())
    assert held_bytes < 512 * 1024 and statuses == [405] * count


def test_a_fault_of_the_fronts_own_is_a_500_in_openais_shape_and_the_connection_serves_on(monkeypatch, caplog):
    from specdec.runtime.openai_relay import OpenAIRelay

    state = OpenAIState()

    def broken(self, body):
        raise KeyError("a bug")

    monkeypatch.setattr(OpenAIRelay, "backend_request", broken)

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": "Hi"}) + get("/health"))
            return front, [await response(reader) for _ in range(2)]

    front, ((status, _, body), (health, _, _)) = run(scenario())
    assert status == 500 and json.loads(body)["error"]["type"] == "server_error" and health == 200
    assert "failed relaying a request (in start)" in caplog.text and not state.requests
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="500") == 1
    assert metric(front, "specdec_backend_errors_total", kind="server_error") == 0  # not trtllm-serve's


def test_a_body_of_many_reads_is_read_whole():
    state = OpenAIState()
    prompt = "x" * (48 * 1024 * 1024)  # some 200 reads of the socket

    async def scenario():
        async with stack(state) as (_front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": prompt, "max_tokens": 0}) + get("/health"))
            return [await response(reader) for _ in range(2)]

    (status, _, body), (health, _, _) = run(scenario())
    assert status == 400 and json.loads(body)["error"]["param"] == "max_tokens" and health == 200
