"""The front's listening server: one HTTP/1.1 server for the front's pages and both routes' generation
requests. The front serves its connections itself, in their callbacks: a generation request is read and
handed to its route's exchange in the read callback that completed it; the relaying route (trtllm-serve's)
checks and sends it on to the backend there, and writes the backend's answer back in the callbacks that read
it (specdec.runtime.relay_exchange). No task runs on that path, so no event loop iteration passes between a
request's arrival and its backend request, or between the backend's head and the client's. aiohttp's server
runs each request in a task that starts two loop iterations after its bytes arrive (one with Python 3.12's
eager tasks), and under load an iteration lasts as long as relaying a burst of tokens to every stream does
(docs/performance/runtime-front.md). The front's GET pages (health, metrics, models:
specdec.runtime.front_pages) and the Triton route's requests (answered whole) are answered by a task.

What this server reads is HTTP/1.1 (or 1.0) requests with bodies of a known Content-Length, their heads
parsed by llhttp (specdec.runtime.request_head): a body sent chunked is refused with 411 (send a
Content-Length), a head that does not parse with 400, one over the limits (FrontLimits) with 431, a body over
them with 413, a request that arrives too slowly with 408, each in OpenAI's error shape, counted by reason and
with the connection closed. Past the connection limit, a client gets a 503 as it connects; one that takes
nothing of its answer for the send timeout is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from specdec.api.runtime_config import FrontLimits
from specdec.runtime import http1
from specdec.runtime.exchange import Exchange
from specdec.runtime.front_pages import Answered, PageExchange
from specdec.runtime.openai_request import APIError
from specdec.runtime.request_head import HeadReader, Refused, RequestHead

if TYPE_CHECKING:
    from specdec.runtime.front import Front

log = logging.getLogger("specdec.runtime")

# Connections waiting to be accepted: past it, a burst of new clients waits for SYN retransmits (a second and
# more). aiohttp's default is 128; 2048 is uvicorn's, the server trtllm-serve runs.
LISTEN_BACKLOG = 2048
PIPELINED_MAX = 64 * 1024  # bytes held past a whole request waiting its turn before the connection stops being read
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class FrontServer:
    """Serves a Front on host:port until `stop`, within `limits` (the runtime config's, else FrontLimits')."""

    def __init__(self, front: Front, *, shutdown_timeout: float = 25.0, limits: FrontLimits | None = None):
        self.front = front
        self.shutdown_timeout = shutdown_timeout
        self.limits = limits or front.config.front_limits or FrontLimits()
        self.connections: set[FrontConnection] = set()
        self.buffered_bodies = 0  # bytes of request bodies being received or waiting their turn, all connections
        self._server: asyncio.Server | None = None
        self._sweep: asyncio.TimerHandle | None = None

    async def start(self, host: str, port: int, backlog: int = LISTEN_BACKLOG) -> None:
        """Listen (OSError when the address cannot be had); the front starts first."""
        await self.front.start()
        try:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: FrontConnection(self), host, port, backlog=backlog
            )
        except OSError:
            await self.front.stop()
            raise
        self._check_clocks()

    def _check_clocks(self) -> None:
        """Hold every connection to its time limits (within a quarter of the shortest, a second at most): a sweep
        rather than a timer per connection re-armed on every read."""
        now = time.monotonic()
        for connection in list(self.connections):
            connection.check_clocks(now)
        limits = self.limits
        shortest = min(
            limits.head_timeout_seconds,
            limits.body_timeout_seconds,
            limits.send_timeout_seconds,
            limits.keepalive_timeout_seconds,
        )
        self._sweep = asyncio.get_running_loop().call_later(min(shortest / 4, 1.0), self._check_clocks)

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening; the requests in flight get the shutdown timeout to finish, then their connections
        are closed. The front stops last. Once: a second call does nothing."""
        if self._server is None:
            return
        self._server.close()
        self._server = None
        if self._sweep is not None:
            self._sweep.cancel()
        for connection in list(self.connections):
            connection.close_when_idle()
        await self._drained()
        await self.front.stop()

    async def _drained(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while self.connections and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for connection in list(self.connections):
            connection.transport.abort()


class FrontConnection(asyncio.Protocol):
    """One client connection: requests read one at a time (a head, then its body), each answered by its
    Exchange (`answer`, or `start_events`, `event`, ..., `end_events`) before the next starts. The request
    after the one being answered is read meanwhile (so a client that sends it whole before reading its answers
    does not wait on the server, nor the server on it), and nothing past it while it waits its turn."""

    def __init__(self, server: FrontServer):
        self.server = server
        self.front = server.front
        self.limits = server.limits
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connection_made
        self.buffer = bytearray()  # appended to and taken from the front: both amortized O(1), a long body too
        self.reader = HeadReader(self.limits.max_header_fields, self.limits.max_head_bytes)
        self.head: RequestHead | None = None  # read; its body is being received
        self.reserved = 0  # its body's bytes, counted in the server's buffered_bodies until the request starts
        self.waiting: tuple[RequestHead, bytes] | Refused | None = None  # the next request, whole, or its refusal
        self.exchange: Exchange | None = None
        self.method = self.path = ""  # of the request being answered
        self.keep_alive = True
        self.chunked = True  # the answer's framing: chunks on HTTP/1.1, to the connection's end on 1.0
        self.closing = False  # the server stops: close once the request in flight is answered
        self.refused = False  # a refusal is pending or written: nothing more is read
        self.reading_paused = False  # a whole request waits its turn
        self.writing_paused = False  # the client is not taking its answers: no next request until it does
        now = time.monotonic()
        self.idle_since = now  # the end of the last answer (keep-alive)
        self.head_since: float | None = None  # the first byte of a head not yet whole arrived
        self.last_read = now  # of a body being received
        self.stalled_since = now  # the client stopped taking its answer (while writing_paused)
        self._reading = False

    # --- the transport's callbacks ---------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        if len(self.server.connections) >= self.limits.max_connections:
            self.refused = True
            self.front.metrics.refused("too_many_connections")
            self.keep_alive = False
            body = APIError(
                503, f"The front serves {self.limits.max_connections} connections at most; try again.", "server_busy"
            ).body()
            transport.write(
                self._status_head(503, "application/json") + b"Retry-After: 1\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
            )
            transport.close()
            return
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        self.last_read = time.monotonic()
        self.buffer += data
        self._read()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self.stalled_since = time.monotonic()
        if self.exchange is not None:
            self.exchange.pause()

    def resume_writing(self) -> None:
        self.writing_paused = False
        if self.exchange is not None:
            self.exchange.resume()
        else:
            self._read()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        self._release_body()
        self.buffer = bytearray()
        self.waiting = None
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            exchange.client_gone()

    def check_clocks(self, now: float) -> None:
        """Drop a client that has taken nothing of its answer for the send timeout; refuse (408) one whose
        request takes too long to arrive; close one kept alive and silent for the keep-alive timeout."""
        limits = self.limits
        if self.writing_paused or self.transport.is_closing():  # the latter: closed, its last answer unsent
            since = self.stalled_since if self.writing_paused else self.idle_since
            if now - since > limits.send_timeout_seconds:
                self.front.metrics.refused("send_timeout")
                self.transport.abort()
        elif self.exchange is not None or self.refused or self.waiting is not None:
            return
        elif self.head is not None:
            if now - self.last_read > limits.body_timeout_seconds:
                self._refuse_now(
                    Refused(
                        408,
                        "body_timeout",
                        f"The request's body did not come within {limits.body_timeout_seconds:g}s of a read.",
                    )
                )
        elif self.head_since is not None:
            if now - self.head_since > limits.head_timeout_seconds:
                self._refuse_now(
                    Refused(
                        408, "head_timeout", f"The request's head did not come within {limits.head_timeout_seconds:g}s."
                    )
                )
        elif now - self.idle_since > limits.keepalive_timeout_seconds:
            self.transport.close()

    # --- reading requests --------------------------------------------------------------------------------------

    def _read(self) -> None:
        """Read the next request while the one before it is answered, and start it once that one is done and the
        client takes its answers."""
        if self._reading:  # an answer done while its request starts: the loop below goes on
            return
        self._reading = True
        try:
            while not self.transport.is_closing():
                if self.waiting is None and not self.refused:
                    self.waiting = self._next_request()
                if self.waiting is None or self.exchange is not None or self.writing_paused:
                    break
                waiting, self.waiting = self.waiting, None
                self._release_body()  # its body is the exchange's now
                if isinstance(waiting, Refused):
                    self._refuse_now(waiting)
                    break
                self.exchange = exchange = self._exchange(*waiting)
                exchange.start()
            self._hold_reading(self.waiting is not None and len(self.buffer) > PIPELINED_MAX)
        finally:
            self._reading = False

    def _next_request(self) -> tuple[RequestHead, bytes] | Refused | None:
        """The request at the buffer's front when it is whole (its head and body taken from the buffer), its
        refusal, or None while more of it is to come."""
        try:
            if self.head is None:
                if not self.buffer:
                    return None
                if self.head_since is None:
                    self.head_since = time.monotonic()
                read = self.reader.read(self.buffer)
                if read is None:
                    return None
                head, size = read
                del self.buffer[:size]
                self.head_since, self.last_read = None, time.monotonic()
                self._check(head)
                self.head = head
            head = self.head
            if self.exchange is None and head.expects_continue and len(self.buffer) < head.length:
                self.transport.write(CONTINUE)  # its turn: the client may send the body
                head.expects_continue = False
            if len(self.buffer) < head.length:
                return None
        except Refused as refused:
            self.refused = True
            self.buffer = bytearray()
            return refused
        body = bytes(self.buffer[: head.length])
        del self.buffer[: head.length]
        self.head = None
        return head, body

    def _check(self, head: RequestHead) -> None:
        """The server's limits on a request head (Refused)."""
        if head.chunked or (head.method == "POST" and not head.has_length):
            raise Refused(
                411,
                "length_required",
                "Send the request body with a Content-Length header (a body sent chunked is not read here).",
            )
        if head.length > self.limits.max_body_bytes:
            raise Refused(413, "body_too_large", f"The request body is larger than {self.limits.max_body_bytes} bytes.")
        server = self.server
        if server.buffered_bodies + head.length > self.limits.max_buffered_body_bytes:
            raise Refused(
                503, "bodies_buffered", "The front is receiving as many request bodies as it holds; try again."
            )
        server.buffered_bodies += head.length
        self.reserved = head.length

    def _release_body(self) -> None:
        self.server.buffered_bodies -= self.reserved
        self.reserved = 0

    def _hold_reading(self, hold: bool) -> None:
        if hold != self.reading_paused and not self.transport.is_closing():
            self.reading_paused = hold
            if hold:
                self.transport.pause_reading()
            else:
                self.transport.resume_reading()

    def _exchange(self, head: RequestHead, body: bytes) -> Exchange:
        self.method, self.path, self.keep_alive, self.chunked = (
            head.method,
            head.path,
            head.keep_alive,
            head.version == "1.1",
        )
        method, path = self.method, self.path
        exchange = self.front.exchanges.get(path)
        if exchange is not None and method == "POST":
            return exchange(self, path, body, head.fields)
        if exchange is None and method in ("GET", "HEAD"):
            return PageExchange(self, path, self.front.page(path))
        allowed = "GET, HEAD" if exchange is None else "POST"
        return Answered(
            self,
            APIError(405, f"{method} is not allowed on {path} (only {allowed}).", "invalid_request_error"),
            b"Allow: %s\r\n" % allowed.encode(),
        )

    def _refuse_now(self, refused: Refused) -> None:
        """Answer a request that cannot be read, and close: what follows it cannot be told apart."""
        self.refused = True
        self._release_body()
        self.front.metrics.refused(refused.reason)
        self.keep_alive, self.method = False, ""
        self.answer(refused.status, APIError(refused.status, refused.message, "invalid_request_error").body())

    # --- writing the answer ------------------------------------------------------------------------------------

    def answer(self, status: int, body: bytes, content_type: str = "application/json", headers: bytes = b"") -> None:
        """A whole answer (its head only to a HEAD); the request is done."""
        head = self._status_head(status, content_type) + headers + b"Content-Length: %d\r\n\r\n" % len(body)
        self.transport.write(head if self.method == "HEAD" else head + body)
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

    def abort(self) -> None:
        self.transport.abort()

    def close_when_idle(self) -> None:
        self.closing = True
        if self.exchange is None:
            self.transport.close()

    def _status_head(self, status: int, content_type: str) -> bytes:
        return http1.answer_head(status, content_type, close=self.closing or not self.keep_alive)

    def _done(self) -> None:
        self.exchange = None
        self.idle_since = now = time.monotonic()
        if self.head_since is not None:  # the next request's time to arrive counts from its turn
            self.head_since = now
        self.last_read = max(self.last_read, now)
        if not self.keep_alive or self.closing:
            self.refused = True  # nothing more is read
            self.transport.close()
            return
        self._read()  # a request sent before this answer was done
