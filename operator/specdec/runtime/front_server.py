"""The front's listening server. On a route that relays (trtllm-serve's), the front serves its connections
itself, in their callbacks: a generation request is read, checked and sent on to the backend in the read
callback that completed it, and the backend's answer is written back in the callbacks that read it
(specdec.runtime.relay_exchange). No task runs on that path, so no event loop iteration passes between a
request's arrival and its backend request, or between the backend's head and the client's. aiohttp's server
runs each request in a task that starts two loop iterations after its bytes arrive (one with Python 3.12's
eager tasks), and under load an iteration lasts as long as relaying a burst of tokens to every stream does
(docs/performance/runtime-front.md). The front's GET pages (health, metrics, models) are answered by a task:
they are not on the token path. On the Triton route, aiohttp's server serves every connection.

What this server reads is HTTP/1.1 (or 1.0) requests with bodies of a known Content-Length: a body sent
chunked is refused with 411 (send a Content-Length), a head that does not parse with 400, one over 64 KiB
with 431, each in OpenAI's error shape and with the connection closed.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time
from collections.abc import Awaitable
from http import HTTPStatus
from typing import TYPE_CHECKING, Protocol
from urllib.parse import unquote

from aiohttp import web

from specdec.runtime.front import MAX_REQUEST_BYTES
from specdec.runtime.http1 import MAX_HEAD, ProtocolError, parse_request_head
from specdec.runtime.openai_request import APIError

if TYPE_CHECKING:
    from specdec.runtime.front import Front, Page

log = logging.getLogger("specdec.runtime")

# Connections waiting to be accepted: past it, a burst of new clients waits for SYN retransmits (a second and
# more). aiohttp's default is 128; 2048 is uvicorn's, the server trtllm-serve runs.
LISTEN_BACKLOG = 2048
PIPELINED_MAX = 64 * 1024  # requests sent ahead of their turn held before the connection stops being read
IDLE_SECONDS = 75.0  # a connection with no request in flight that sends nothing for this long is closed (aiohttp's)
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Exchange(Protocol):
    """One request answered on a FrontConnection: started once it is the connection's, told when the client's
    connection is over its write buffer's high-water mark and back under it, and when the client has gone."""

    def start(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def client_gone(self) -> None: ...


class FrontServer:
    """Serves a Front on host:port until `stop`."""

    def __init__(self, front: Front, *, shutdown_timeout: float = 25.0):
        self.front = front
        self.shutdown_timeout = shutdown_timeout
        self.runner = web.AppRunner(
            front.app, handler_cancellation=True, access_log=None, shutdown_timeout=shutdown_timeout
        )
        self.connections: set[FrontConnection] = set()
        self.idle_seconds = IDLE_SECONDS
        self._server: asyncio.Server | None = None
        self._sweep: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, backlog: int = LISTEN_BACKLOG) -> None:
        """Listen (OSError when the address cannot be had); the front's start-up hooks run first."""
        await self.runner.setup()  # the app's start-up hooks, and aiohttp's server
        protocol = (lambda: FrontConnection(self)) if self.front.exchanges else self.runner.server
        try:
            self._server = await asyncio.get_running_loop().create_server(
                protocol,  # type: ignore[arg-type]  # setup() above made runner.server
                host,
                port,
                backlog=backlog,
            )
        except OSError:
            await self.runner.cleanup()
            raise
        self._close_idle()

    def _close_idle(self) -> None:
        """Close the connections idle for `idle_seconds` (within a quarter of it): kept-alive clients gone quiet,
        and requests that stopped arriving half-way. A sweep rather than a timer per connection re-armed on
        every read."""
        quiet_since = time.monotonic() - self.idle_seconds
        for connection in list(self.connections):
            if connection.exchange is None and connection.last_read < quiet_since:
                connection.transport.close()
        self._sweep = asyncio.get_running_loop().call_later(self.idle_seconds / 4, self._close_idle)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening; the requests in flight get the shutdown timeout to finish, then their connections
        are closed. The front's clean-up hooks run last. Once: a second call does nothing."""
        if self._server is None:
            return
        self._server.close()
        self._server = None
        if self._sweep is not None:
            self._sweep.cancel()
        for connection in list(self.connections):
            connection.close_when_idle()
        await self._drained()
        await self.runner.cleanup()  # aiohttp's connections (drained alike) and the app's clean-up hooks

    async def _drained(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.transport.abort()


class FrontConnection(asyncio.Protocol):
    """One client connection: a request head read, its body, then its answer written by the request's
    Exchange (`answer`, or `start_events`, `event`, ..., `end_events`); then the next request."""

    def __init__(self, server: FrontServer):
        self.server = server
        self.front = server.front
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connection_made
        self.buffer = bytearray()  # appended to and taken from the front: both amortized O(1), a long body too
        self.exchange: Exchange | None = None
        self.length = -1  # of the body being read; -1 while reading a head
        self.method = self.path = ""
        self.keep_alive = True
        self.chunked = True  # the answer's framing: chunks on HTTP/1.1, to the connection's end on 1.0
        self.closing = False  # the server stops: close once the request in flight is answered
        self.reading_paused = False  # requests sent ahead of their turn fill the buffer
        self.writing_paused = False  # the client is not taking its answers: no next request until it does
        self.last_read = time.monotonic()
        self._reading = False

    # --- the transport's callbacks ---------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.last_read = time.monotonic()
        self.buffer += data
        if self.exchange is None and not self.writing_paused:
            self._read()
        elif len(self.buffer) > PIPELINED_MAX and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self.exchange is not None:
            self.exchange.pause()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.exchange is not None:
            self.exchange.resume()
        elif self.buffer:
            self._read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.client_gone()

    # --- reading requests --------------------------------------------------------------------------------------

    def _read(self) -> None:
        """Take the requests in the buffer, one at a time: each is answered before the next is read, and none
        while the client's connection holds more answers than its high-water mark."""
        if self._reading:  # an answer done while its request starts: the loop below goes on
            return
        self._reading = True
        try:
            while self.exchange is None and self.buffer and not self.writing_paused and not self.transport.is_closing():
                if self.length < 0:
                    end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEAD + 4)
                    if end < 0:
                        if len(self.buffer) >= MAX_HEAD + 4:
                            self._refuse(431, f"The request's head is longer than {MAX_HEAD} bytes.")
                        return
                    head = bytes(self.buffer[:end])
                    del self.buffer[: end + 4]
                    if not self._head(head):
                        return
                if len(self.buffer) < self.length:
                    return
                body = bytes(self.buffer[: self.length])
                del self.buffer[: self.length]
                self.length = -1
                self.exchange = exchange = self._exchange(body)
                exchange.start()
        finally:
            self._reading = False

    def _head(self, head: bytes) -> bool:
        """Take a request head: False when the request was refused (and the connection is closing)."""
        try:
            self.method, target, version, headers = parse_request_head(head)
        except ProtocolError as error:
            return self._refuse(400, f"{error}.")
        self.path = unquote(target.partition("?")[0])
        self.chunked = version == "HTTP/1.1"
        self.keep_alive = self.chunked and "close" not in headers.get("connection", "").lower()
        length = headers.get("content-length", "0")
        if "transfer-encoding" in headers or (self.method == "POST" and "content-length" not in headers):
            return self._refuse(
                411, "Send the request body with a Content-Length header (a body sent chunked is not read here)."
            )
        if not length.isdigit():
            return self._refuse(400, f"Content-Length is not a length: {length[:40]!r}.")
        if int(length) > MAX_REQUEST_BYTES:
            return self._refuse(413, f"The request body is larger than {MAX_REQUEST_BYTES} bytes.")
        self.length = int(length)
        if headers.get("expect", "").lower() == "100-continue" and len(self.buffer) < self.length:
            self.transport.write(CONTINUE)
        return True

    def _exchange(self, body: bytes) -> Exchange:
        method, path = self.method, self.path
        exchange = self.front.exchanges.get(path)
        if exchange is not None and method == "POST":
            return exchange(self, path, body)
        if exchange is None and method == "GET":
            return PageExchange(self, self.front.page(path))
        allowed = "GET" if exchange is None else "POST"
        if method == "HEAD":
            self.keep_alive = False  # the client reads no body after a HEAD's head: the connection ends it
        return Answered(
            self, APIError(405, f"{method} is not allowed on {path} (only {allowed}).", "invalid_request_error")
        )

    def _refuse(self, status: int, message: str) -> bool:
        """Answer a request that cannot be read, and close: what follows it cannot be told apart."""
        self.keep_alive = False
        self.answer(status, APIError(status, message, "invalid_request_error").body())
        return False

    # --- writing the answer ------------------------------------------------------------------------------------

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        """A whole answer; the request is done."""
        self.transport.write(
            self._status_head(status, content_type) + b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
        )
        self._done()

    def start_events(self, first: bytes = b"") -> None:
        """The head of an event stream (200), and its first bytes when they are there: one write."""
        head = self._status_head(200, "text/event-stream") + b"Cache-Control: no-cache\r\n"
        if not self.chunked:
            self.transport.write(head + b"\r\n" + first)
        elif first:
            self.transport.write(head + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%b\r\n" % (len(first), first))
        else:
            self.transport.write(head + b"Transfer-Encoding: chunked\r\n\r\n")

    def event(self, data: bytes) -> None:
        self.transport.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)

    def end_events(self, last: bytes) -> None:
        """The stream's last bytes; the request is done."""
        if self.chunked:
            self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(last), last) if last else b"0\r\n\r\n")
        else:
            self.transport.write(last)  # and the connection's end ends the stream (keep_alive is False)
        self._done()

    def close_when_idle(self) -> None:
        self.closing = True
        if self.exchange is None:
            self.transport.close()

    def _status_head(self, status: int, content_type: str) -> bytes:
        connection = b"" if self.keep_alive and not self.closing else b"Connection: close\r\n"
        return b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nDate: %s\r\nServer: specdec-runtime\r\n%b" % (
            status,
            HTTPStatus(status).phrase.encode(),
            content_type.encode(),
            http_date(),
            connection,
        )

    def _done(self) -> None:
        self.exchange = None
        if not self.keep_alive or self.closing:
            self.transport.close()
            return
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        if self.buffer:
            self._read()  # a request sent before this answer was done


class Answered:
    """An error answered at once (a method a path does not take)."""

    def __init__(self, client: FrontConnection, error: APIError):
        self.client, self.error = client, error

    def start(self) -> None:
        self.client.answer(self.error.status, self.error.body())

    def pause(self) -> None:
        pass

    resume = pause
    client_gone = pause


class PageExchange:
    """A GET answered by the front's page (Front.page) in a task; 404 when there is no such page."""

    def __init__(self, client: FrontConnection, page: Awaitable[Page | None]):
        self.client, self.page = client, page
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        client = self.client
        try:
            page = await self.page
        except Exception:  # noqa: BLE001 - the client gets a 500, the log the reason
            log.exception("GET %s failed", client.path)
            client.answer(500, APIError(500, "The page failed; the front's log says why.", "server_error").body())
            return
        if page is None:
            client.answer(404, APIError(404, f"There is no {client.path} here.", "invalid_request_error").body())
        else:
            client.answer(page.status, page.body, page.content_type)

    def pause(self) -> None:
        pass

    resume = pause

    def client_gone(self) -> None:
        if self.task is not None:
            self.task.cancel()


_date = (0, b"")


def http_date() -> bytes:
    """The Date header's value (RFC 9110 6.6.1), made once a second."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, email.utils.formatdate(now, usegmt=True).encode())
    return _date[1]
