"""The front's HTTP/1.1 client to its backend (specdec.runtime.upstream) against real servers: pooled
connections, answers read whole or streamed, and every way the backend can fail."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from aiohttp import web

from specdec.runtime.upstream import BackendQuiet, Disconnected, Unreachable, Upstream, UpstreamError
from tests.runtime.helpers import free_port, serving


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


@contextlib.asynccontextmanager
async def raw_server(answer):
    """A server that answers each connection with `answer(reader, writer)`; yields its URL."""
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


def stream_into(response, quiet: float | None = None):
    """(pieces, a future of the error or None) of a streamed body."""
    pieces: list[bytes] = []
    ended: asyncio.Future = asyncio.get_running_loop().create_future()
    response.stream(pieces.append, ended.set_result, quiet)
    return pieces, ended


def test_answers_are_read_over_one_kept_alive_connection():
    peers = []

    async def echo(request):
        peers.append(request.transport.get_extra_info("peername"))
        return web.Response(body=await request.read(), content_type="application/json")

    async def scenario():
        app = web.Application()
        app.router.add_post("/echo", echo)
        async with serving(app) as url:
            upstream = Upstream(url)
            answers = []
            for body in (b'{"a": 1}', b'{"b": 2}'):
                response = await upstream.request("POST", "/echo", body, {"Content-Type": "application/json"})
                answers.append((response.status, response.content_type, await response.read()))
            upstream.close()
            return answers

    assert run(scenario()) == [(200, "application/json", b'{"a": 1}'), (200, "application/json", b'{"b": 2}')]
    assert len(peers) == 2 and peers[0] == peers[1]  # the second request reused the first's connection


def test_a_stream_is_handed_over_as_it_arrives_and_a_client_that_leaves_closes_it():
    sent, cancelled = [], []

    async def tokens(request):
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for i in range(50):
                await response.write(b"data: %d\n\n" % i)
                sent.append(i)
                await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return response

    async def scenario():
        app = web.Application()
        app.router.add_post("/", tokens)
        async with serving(app, handler_cancellation=True) as url:
            upstream = Upstream(url)
            response = await upstream.request("POST", "/", b"{}", {})
            pieces, ended = stream_into(response)
            while len(pieces) < 3:
                await asyncio.sleep(0.01)
            assert pieces[:3] == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n"] and not ended.done()
            response.close()  # the client left
            for _ in range(100):
                if cancelled:
                    break
                await asyncio.sleep(0.02)
            return len(sent), cancelled, ended.done()

    count, cancelled, ended = run(scenario())
    assert cancelled and count < 50 and not ended  # no end is reported after close


def test_no_server_is_unreachable_and_a_head_cut_short_is_disconnected():
    async def hang_up(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-")
        writer.close()

    async def scenario():
        with pytest.raises(Unreachable):
            await Upstream(f"http://127.0.0.1:{free_port()}").request("POST", "/", b"", {})
        async with raw_server(hang_up) as url:
            with pytest.raises(Disconnected):
                await Upstream(url).request("POST", "/", b"", {})

    run(scenario())


def test_a_kept_connection_the_server_closed_meanwhile_is_replaced_once():
    connections = []

    async def one_answer_then_close(reader, writer):
        connections.append(writer)
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.read(1)  # the next request (on a reused connection) ...
        writer.close()  # ... meets a server that closed it, with no answer

    async def scenario():
        async with raw_server(one_answer_then_close) as url:
            upstream = Upstream(url)
            first = await upstream.request("POST", "/", b"{}", {})
            assert await first.read() == b"ok"
            second = await upstream.request("POST", "/", b"{}", {})
            return first.status, second.status, await second.read(), len(connections)

    assert run(scenario()) == (200, 200, b"ok", 2)


def test_a_body_cut_short_ends_with_disconnected_and_a_broken_one_with_an_error():
    async def cut(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nab")
        await writer.drain()
        writer.close()

    async def broken(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        await writer.drain()

    async def scenario():
        async with raw_server(cut) as url:
            response = await Upstream(url).request("POST", "/", b"", {})
            pieces, ended = stream_into(response)
            assert isinstance(await ended, Disconnected) and b"".join(pieces) == b"helloab"
        async with raw_server(broken) as url:
            response = await Upstream(url).request("POST", "/", b"", {})
            with pytest.raises(UpstreamError, match="chunk size"):
                await response.read()

    run(scenario())


def test_the_quiet_watch_ends_a_stream_that_sends_nothing_and_not_one_paused_for_its_client():
    async def one_chunk_then_quiet(request):
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(b"data: x\n\n")
        await asyncio.sleep(5)
        return response

    async def scenario():
        app = web.Application()
        app.router.add_post("/", one_chunk_then_quiet)
        async with serving(app, handler_cancellation=True) as url:
            loop = asyncio.get_running_loop()
            response = await Upstream(url).request("POST", "/", b"", {})
            pieces, ended = stream_into(response, quiet=0.2)
            while not pieces:
                await asyncio.sleep(0.01)
            response.pause()  # a client slow to take what was relayed: nothing is read meanwhile
            await asyncio.sleep(0.4)
            assert not ended.done()
            response.resume()
            started = loop.time()
            error = await ended
            return error, loop.time() - started

    error, quiet = run(scenario())
    assert isinstance(error, BackendQuiet)
    assert 0.2 <= quiet < 0.2 * 1.25 + 0.15  # checked every 50 ms: a quiet of 0.2 s to 0.25 s, and the loop's delay
