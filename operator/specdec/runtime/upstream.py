"""The front's HTTP/1.1 client to its backend on the token path: keep-alive connections (asyncio protocols)
kept in a pool, and a response whose head, then body, are handed to callbacks in the event loop's read
callback that brought them (`send`; `request` awaits the head instead).

A streamed token then costs the front one read, one write and the code between them: no reader buffer,
future or task wake-up per chunk (what a general-purpose client such as aiohttp's spends there). The wire
format is specdec.runtime.http1's. Errors: Unreachable (no connection), Disconnected (the connection ended
before the answer did), BackendQuiet (a stream sent nothing for its quiet timeout), UpstreamError (an answer
that is not HTTP/1.1).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from urllib.parse import urlsplit

from specdec.runtime.http1 import MAX_HEAD, Body, ProtocolError, body_framing, keeps_alive, parse_head, request_head


class UpstreamError(Exception):
    """The backend's answer could not be had."""


class Unreachable(UpstreamError):
    """No connection to the backend (refused, or not made in time)."""


class Disconnected(UpstreamError):
    """The backend closed the connection before its answer was complete."""


class BackendQuiet(UpstreamError):
    """A streamed answer sent nothing for longer than its quiet timeout."""


class Upstream:
    """Connections to one backend (`url`: http://host:port). A connection idle for `idle_seconds` is not
    reused (uvicorn, trtllm-serve's server, closes idle connections after 5 s); a reused one that closes
    before any byte of the answer is retried once on a new connection (it was closed while idle)."""

    def __init__(self, url: str, *, connect_timeout: float = 5.0, idle_seconds: float = 4.0, max_idle: int = 1024):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not an http:// URL: {url!r}")
        self.url = url
        self.host, self.port = parts.hostname, parts.port or 80
        self.authority = parts.netloc
        self.connect_timeout, self.idle_seconds, self.max_idle = connect_timeout, idle_seconds, max_idle
        self._idle: list[Connection] = []
        self.closed = False

    def send(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        on_head: Callable[[Response], None],
        on_fail: Callable[[UpstreamError], None],
    ) -> Call:
        """Send a request; `on_head` is called with the response once its head has arrived (in the read
        callback that completed it), or `on_fail` once with what prevented it. On a kept-alive connection the
        request is written before this returns; a new connection is made first by a task."""
        return Call(self, request_head(method, self.authority, path, headers, len(body)) + body, on_head, on_fail)

    async def request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """Send a request; returns once the response's head has arrived (its body is read from the response)."""
        head: asyncio.Future[Response] = asyncio.get_running_loop().create_future()

        def settle(outcome: Response | UpstreamError) -> None:
            if not head.done():
                head.set_exception(outcome) if isinstance(outcome, UpstreamError) else head.set_result(outcome)

        call = self.send(method, path, body, headers, settle, settle)
        try:
            return await head
        except BaseException:
            call.cancel()
            raise

    def release(self, connection: Connection) -> None:
        if not self.closed and len(self._idle) < self.max_idle:
            connection.idle_since = asyncio.get_running_loop().time()
            self._idle.append(connection)
        else:
            connection.transport.close()

    def close(self) -> None:
        """Close the idle connections, and each one in use once its answer has ended."""
        self.closed = True
        for connection in self._idle:
            connection.transport.close()
        self._idle.clear()

    def _reusable(self) -> Connection | None:
        now = asyncio.get_running_loop().time()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed and now - connection.idle_since < self.idle_seconds:
                connection.reused = True
                return connection
            connection.transport.close()
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(lambda: Connection(self), self.host, self.port)
        except (TimeoutError, OSError) as error:
            raise Unreachable(f"{self.authority}: {type(error).__name__}: {error}") from None
        return connection


class Call:
    """A request on its way to its head: its connection being made, or the request sent. A kept-alive
    connection that closes before any byte of the answer is replaced once by a new one (it was closed while
    idle)."""

    def __init__(
        self, pool: Upstream, data: bytes, on_head: Callable[[Response], None], on_fail: Callable[[UpstreamError], None]
    ):
        self.pool, self.data, self.on_head, self.on_fail = pool, data, on_head, on_fail
        self.response: Response | None = None
        self._connecting: asyncio.Task | None = None
        connection = pool._reusable()
        if connection is not None:
            self._send(connection)
        else:
            self._connect()

    def cancel(self) -> None:
        """Abandon the request (and its connection: the server sees the client go)."""
        if self._connecting is not None:
            self._connecting.cancel()
        if self.response is not None:
            self.response.close()

    def _connect(self) -> None:
        self._connecting = asyncio.get_running_loop().create_task(self._connected())

    async def _connected(self) -> None:
        try:
            connection = await self.pool._connect()
        except Unreachable as error:
            self.on_fail(error)
            return
        finally:
            self._connecting = None
        self._send(connection)

    def _send(self, connection: Connection) -> None:
        self.response = connection.send(self.data, self.on_head, self._no_head)

    def _no_head(self, error: UpstreamError) -> None:
        response = self.response
        if isinstance(error, Disconnected) and response is not None and response.reused and response.nothing_received:
            self.response = None
            self._connect()
        else:
            self.on_fail(error)


class Connection(asyncio.Protocol):
    """One keep-alive connection; one response at a time."""

    def __init__(self, pool: Upstream):
        self.pool = pool
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set on connection_made
        self.response: Response | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(
        self, data: bytes, on_head: Callable[[Response], None], on_fail: Callable[[UpstreamError], None]
    ) -> Response:
        self.response = response = Response(self, on_head, on_fail)
        self.transport.write(data)
        return response

    def data_received(self, data: bytes) -> None:
        if self.response is not None:
            self.response.data_received(data)
        else:  # nothing is asked: not HTTP/1.1 as a client speaks it
            self.transport.close()

    def eof_received(self) -> bool:
        return False  # the server ended the connection: close it

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.connection_lost()


class Response:
    """A response's head (`status`, `headers`, handed to `on_head` when it has arrived) and its body, read
    whole (`read`) or handed over as it arrives (`stream`). `close` abandons it and its connection (the server
    sees the client go); a response read to its end hands its connection back to the pool by itself."""

    def __init__(
        self, connection: Connection, on_head: Callable[[Response], None], on_fail: Callable[[UpstreamError], None]
    ):
        self._connection: Connection | None = connection
        self.reused = connection.reused
        self._on_head, self._on_head_fail = on_head, on_fail
        self.status = 0
        self.headers: dict[str, str] = {}
        self.nothing_received = True
        self.reads = 0  # of the body, so far
        self.paused = False
        self._head = b""
        self._body: Body | None = None
        self._feed: Callable[[bytes], bytes] = bytes  # the body's decoder, once the head is read
        self._early: list[bytes] = []  # what arrived before the body was asked for
        self._lost = False
        self._on_data: Callable[[bytes], None] | None = None
        self._on_end: Callable[[Exception | None], None] | None = None
        self._watch: QuietWatch | None = None
        self.ended = False

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").partition(";")[0].strip().lower()

    def stream(
        self,
        on_data: Callable[[bytes], None],
        on_end: Callable[[Exception | None], None],
        quiet_seconds: float | None = None,
    ) -> None:
        """Hand each piece of the body to `on_data` as it arrives, then call `on_end` once: with None at the
        end of the body, or with the UpstreamError that cut it short (not after `close`)."""
        self._on_data, self._on_end = on_data, on_end
        if quiet_seconds:
            self._watch = QuietWatch(self, quiet_seconds)
        early, self._early = self._early, []
        for data in early:
            self.data_received(data)
        if not self.ended:
            if self._body is not None and self._body.done:
                self._end(None)
            elif self._lost:
                self.connection_lost()

    async def read(self) -> bytes:
        """The whole body."""
        pieces: list[bytes] = []
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def on_end(error: Exception | None) -> None:
            if not done.done():
                done.set_exception(error) if error else done.set_result(b"".join(pieces))

        self.stream(pieces.append, on_end)
        return await done

    def pause(self) -> None:
        """Stop reading from the backend (the client is slow to take what was relayed)."""
        if self._connection is not None and not self.paused:
            self.paused = True
            self._connection.transport.pause_reading()

    def resume(self) -> None:
        if self._connection is not None and self.paused:
            self.paused = False
            self._connection.transport.resume_reading()

    def close(self) -> None:
        connection = self._detach()
        if connection is not None:
            connection.transport.close()

    def fail(self, error: UpstreamError) -> None:
        """End the body with `error` (and close the connection)."""
        self._end(error)

    # --- the connection's callbacks --------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        on_data = self._on_data
        if on_data is not None:
            self.reads += 1
            try:
                out = self._feed(data)
            except ProtocolError as error:
                self._end(UpstreamError(str(error)))
                return
            if out:
                on_data(out)
            if self._body.done and not self.ended:  # type: ignore[union-attr]  # the body is read after the head, which set it
                self._end(None)
        elif self._body is None:
            self.nothing_received = False
            self._read_head(data)
        else:
            self._early.append(data)

    def _read_head(self, data: bytes) -> None:
        self._head += data
        end = self._head.find(b"\r\n\r\n")
        if end < 0:
            if len(self._head) > MAX_HEAD:
                self._fail_head(UpstreamError("a response head too long"))
            return
        head, rest, self._head = self._head[:end], self._head[end + 4 :], b""
        try:
            status, headers = parse_head(head)
            if 100 <= status < 200:  # an interim response: the final one follows
                if rest:
                    self._read_head(rest)
                return
            self._body = body_framing(status, headers)
            self._feed = self._body.feed
        except ProtocolError as error:
            self._fail_head(UpstreamError(str(error)))
            return
        self.status, self.headers = status, headers
        if rest:
            self._early.append(rest)
        self._on_head(self)

    def _fail_head(self, error: UpstreamError) -> None:
        self.close()
        self._on_head_fail(error)

    def connection_lost(self) -> None:
        if self._body is None:
            if self._connection is not None:  # not after `close`
                self._connection = None
                self._on_head_fail(Disconnected("the connection closed before the answer's head"))
        elif self._on_data is None:
            self._lost = True  # said when the body is asked for
        elif not self.ended:
            self._end(None if self._body.eof() else Disconnected("the connection closed in the answer's body"))

    def _detach(self) -> Connection | None:
        """The response is over: its connection, when it still has one, is the caller's to keep or close."""
        if self._watch is not None:
            self._watch.stop()
        self.ended = True
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.response = None
        return connection

    def _end(self, error: Exception | None) -> None:
        if self.ended:
            return
        connection = self._detach()
        if connection is not None:
            if error is None and not connection.closed and keeps_alive(self.headers):
                if self.paused:
                    connection.transport.resume_reading()
                connection.pool.release(connection)
            else:
                connection.transport.close()
        if self._on_end is not None:
            self._on_end(error)


class QuietWatch:
    """Ends a streamed response that sends nothing for `seconds` while it is read.

    A timer re-armed on every read would cost a cancelled and a scheduled timer per token; this looks at the
    reads a few times a period instead, so a stream goes after `seconds` to 1.25 x `seconds` of
    quiet. Time paused for the client does not count: a slow client is not a quiet backend."""

    CHECKS = 4

    def __init__(self, response: Response, seconds: float):
        self.response, self.seconds = response, seconds
        self.period = seconds / self.CHECKS
        self._seen, self._quiet = -1, 0
        self._handle = asyncio.get_running_loop().call_later(self.period, self._check)

    def _check(self) -> None:
        response = self.response
        if response.paused or response.reads != self._seen:
            self._seen, self._quiet = response.reads, 0
        else:
            self._quiet += 1
            if self._quiet > self.CHECKS:
                response.fail(BackendQuiet(f"nothing received for {self.seconds:g}s"))
                return
        self._handle = asyncio.get_running_loop().call_later(self.period, self._check)

    def stop(self) -> None:
        self._handle.cancel()
