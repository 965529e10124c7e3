"""A backend's event stream relayed to the front's client as it arrives.

Each piece of the backend's body is rewritten and written to the client's connection in the event loop's
callback that read it (specdec.runtime.upstream): a token costs one read, the rewrite and one write. The
handler's task wakes only at the end of the stream, or when the client is slow to take what was written
(its connection's buffer over the transport's high-water mark): the backend is then not read until the
client has drained it.
"""

from __future__ import annotations

import asyncio
from typing import Callable

from aiohttp import web

from specdec.runtime.upstream import Response


class StreamRelay:
    """`rewrite` turns the backend's body bytes into the client's (b"" while an event is incomplete);
    `first` is called with what the client gets until it returns True (the first token, for one)."""

    def __init__(self, upstream: Response, request: web.Request, rewrite: Callable[[bytes], bytes],
                 first: Callable[[bytes], bool]):
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("the client has gone")
        self.upstream, self.transport, self.writer = upstream, transport, request.writer
        self.rewrite, self.first = rewrite, first
        self.high_water = transport.get_write_buffer_limits()[1]
        # aiohttp's writer frames a response without a length in chunks on HTTP/1.1 (not on HTTP/1.0).
        self.chunked = bool(getattr(request.writer, "chunked", True))
        self.waiting_first = True
        self.error: Exception | None = None  # the backend's, when the stream broke off
        self.client_gone = False
        self._ended = False
        self._wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def run(self, quiet_seconds: float | None) -> None:
        """Relay until the backend's body ends, breaks off (`error`) or the client goes (`client_gone`)."""
        upstream = self.upstream
        upstream.stream(self._on_data, self._on_end, quiet_seconds)
        while not self._ended:
            await self._wake
            self._wake = asyncio.get_running_loop().create_future()
            if self._ended:
                break
            await self.writer.drain()  # the client's connection is over its high-water mark
            upstream.resume()

    def _on_data(self, data: bytes) -> None:
        out = self.rewrite(data)
        if not out:
            return
        if self.waiting_first and self.first(out):
            self.waiting_first = False
        transport = self.transport
        if transport.is_closing():
            self.client_gone = True
            self.upstream.close()  # the backend stops generating for a client that left
            self._end()
            return
        transport.write(b"%x\r\n%b\r\n" % (len(out), out) if self.chunked else out)
        if transport.get_write_buffer_size() > self.high_water:
            self.upstream.pause()
            self._wakeup()

    def _on_end(self, error: Exception | None) -> None:
        self.error = error
        self._end()

    def _end(self) -> None:
        self._ended = True
        self._wakeup()

    def _wakeup(self) -> None:
        if not self._wake.done():
            self._wake.set_result(None)
