"""One generation request relayed to trtllm-serve and its answer relayed back, driven by the two connections'
callbacks (no task): the client's (specdec.runtime.front_server) and trtllm-serve's (specdec.runtime.upstream).

The request is checked (an invalid one is answered at once) and sent in the read callback that completed it;
the answer's head is written to the client in the read callback that brought trtllm-serve's. A stream's
events are rewritten (specdec.runtime.chunk_rewriter) and written in the callbacks that read them: a token
costs one read, the rewrite and one write. While the client's connection is over its high-water mark,
trtllm-serve is not read. A client that goes away closes the backend request, so trtllm-serve stops
generating for it. The head (and a whole answer) must come within the request timeout; a stream breaks off
after as long without an event.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol

import orjson

from specdec.runtime.chunk_rewriter import DONE, ChunkRewriter
from specdec.runtime.drafter_capture import DrafterCapture, PendingSample
from specdec.runtime.exchange import Client
from specdec.runtime.metrics import RequestRecord, RuntimeMetrics
from specdec.runtime.openai_request import APIError, backend_client_error, error_body, parse_request
from specdec.runtime.route import CHAT, JSON_HEADERS, OWN_FAULT, FrontError, front_error
from specdec.runtime.upstream import Call, Response, Upstream, UpstreamError

log = logging.getLogger("specdec.runtime")
SERVER = "trtllm-serve"
P = ParamSpec("P")


class Relay(Protocol):
    """What an exchange needs of the route relaying it (specdec.runtime.openai_relay.OpenAIRelay)."""

    model: str
    metrics: RuntimeMetrics
    request_timeout: float
    drafter: DrafterCapture | None

    def backend_request(self, body: dict[str, Any]) -> tuple[bool, bool, bytes]: ...

    def record_usage(self, usage: Any) -> int | None: ...

    def connections(self) -> Upstream: ...


def guarded(step: Callable[Concatenate[RelayExchange, P], None]) -> Callable[Concatenate[RelayExchange, P], None]:
    """A step of the exchange, run from a connection's callback: a fault of the front's own in it ends the
    request (a 500, or an error event in a stream already started) and is logged without the request's body,
    rather than leaving the client waiting and the request counted in flight."""

    def run(exchange: RelayExchange, /, *args: P.args, **kwargs: P.kwargs) -> None:
        if exchange.faulted:  # a step called back from one that failed: the request is over
            return
        try:
            step(exchange, *args, **kwargs)
        except Exception:  # noqa: BLE001 - any fault: the request ends, the connections serve on
            exchange.broken(step.__name__)

    functools.update_wrapper(run, step)  # not its result: typed _Wrapped, it would hide run's signature from mypy
    return run


class RelayExchange:
    def __init__(self, relay: Relay, client: Client, endpoint: str, raw: bytes, fields: Mapping[bytes, bytes]):
        self.relay, self.client, self.endpoint, self.raw, self.fields = relay, client, endpoint, raw, fields
        self.sample: PendingSample | None = None  # spec.drafter.learning: this request's, when drawn
        self.record = RequestRecord(relay.metrics, endpoint)
        self.call: Call | None = None
        self.upstream: Response | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.rewriter: ChunkRewriter | None = None  # a stream's, once its head is written
        self.pieces: list[bytes] = []  # a whole answer's body, as it arrives
        self.first_token: float | None = None
        self.stream = self.client_usage = False  # what the client asked for
        self.head_written = False  # the client's, of an event stream
        self.finished = self.answering = False  # the client's answer is complete / being completed
        self.gone = False  # the client went away
        self.faulted = False  # the front failed at a step (`broken`)
        self.paused = False

    # --- the client's connection ------------------------------------------------------------------------------

    @guarded
    def start(self) -> None:
        relay = self.relay
        try:
            body = parse_request(self.raw, chat=self.endpoint == CHAT, served_model=relay.model, triton=False)
        except APIError as error:
            self._fail(error)
            return
        if relay.drafter is not None:
            self.sample = relay.drafter.drawn(self.endpoint, body, self.fields)
        self.stream, self.client_usage, data = relay.backend_request(body)
        self.timer = asyncio.get_running_loop().call_later(relay.request_timeout, self._timed_out)
        self.call = relay.connections().send("POST", self.endpoint, data, JSON_HEADERS, self._head, self._no_head)

    @guarded
    def pause(self) -> None:
        self.paused = True
        if self.upstream is not None:
            self.upstream.pause()

    @guarded
    def resume(self) -> None:
        self.paused = False
        if self.upstream is not None:
            self.upstream.resume()

    @guarded
    def client_gone(self) -> None:
        self.gone = True
        self._stop_timer()
        if self.call is not None:
            self.call.cancel()  # trtllm-serve stops generating for a client that left; a no-op after the end
        self.record.end(499)
        if self.rewriter is not None:
            self.relay.record_usage(self.rewriter.usage)

    # --- trtllm-serve's connection ------------------------------------------------------------------------------

    @guarded
    def _head(self, upstream: Response) -> None:
        self.upstream = upstream
        if upstream.status != 200 or not self.stream or upstream.content_type != "text/event-stream":
            upstream.stream(self.pieces.append, self._answered)
            return
        self._stop_timer()
        self.rewriter = ChunkRewriter(self.relay.model, self.client_usage)
        if self.paused:
            upstream.pause()
        self.head_written = False  # the first event that came with the head goes out with the client's
        upstream.stream(self._event, self._events_ended, self.relay.request_timeout)
        if not (self.head_written or self.faulted):
            self.client.start_events()
            self.head_written = True

    @guarded
    def _no_head(self, error: UpstreamError) -> None:
        self._fail(front_error(SERVER, self.relay.request_timeout, error))

    @guarded
    def _timed_out(self) -> None:
        assert self.call is not None
        self.call.cancel()
        self._fail(front_error(SERVER, self.relay.request_timeout, TimeoutError()))

    @guarded
    def _answered(self, error: Exception | None) -> None:
        """A whole answer (not a stream) has arrived, or could not."""
        self._stop_timer()
        if error is not None:
            self._fail(front_error(SERVER, self.relay.request_timeout, error))
            return
        assert self.upstream is not None
        raw, status = b"".join(self.pieces), self.upstream.status
        if 400 <= status < 500:  # the client's mistake: trtllm-serve's words, OpenAI's shape
            self._answer(status, backend_client_error(status, raw))
            self.record.end(status)
            return
        if status != 200:
            self._fail(FrontError(502, f"{SERVER} answered HTTP {status}: {raw[:500].decode(errors='replace')}"))
            return
        try:
            data = orjson.loads(raw)
        except ValueError:
            self._fail(FrontError(502, f"{SERVER}'s answer is not JSON"))
            return
        if isinstance(data, dict):
            data["model"] = self.relay.model
            completion = self.relay.record_usage(data.get("usage"))
            self.relay.metrics.token_time(time.monotonic() - self.record.started, completion)
        self._answer(200, orjson.dumps(data))
        self.record.end(200)
        if self.sample is not None:
            self.sample.answer(data)

    def _event(self, data: bytes) -> None:
        """A piece of the stream. Guarded as the other steps are (`guarded`), inline: it runs once a token, where
        the decorator's call costs 0.12 µs more."""
        if self.faulted:
            return
        try:
            out = self.rewriter.feed(data)  # type: ignore[union-attr]  # set before the stream starts
            if not out:
                return
            if self.first_token is None and out != DONE:
                self.first_token = time.monotonic() - self.record.started
                self.relay.metrics.first_token(self.first_token)
            if self.sample is not None:
                self.sample.chunk(out)
            if self.head_written:
                self.client.event(out)
            else:
                self.client.start_events(out)
                self.head_written = True
        except Exception:  # noqa: BLE001 - any fault: the request ends, the connections serve on
            self.broken("_event")

    @guarded
    def _events_ended(self, error: Exception | None) -> None:
        rewriter = self.rewriter
        assert rewriter is not None
        if not self.head_written:  # a stream that ended (or broke off) in the reads that brought its head
            self.client.start_events()
            self.head_written = True
        if error is None:
            last = rewriter.finish()
            self._finish(lambda: self.client.end_events(last))
            status = 200
            if self.sample is not None:
                self.sample.chunk(last)
                self.sample.ended()
        else:  # the client has had its head: the error goes in the stream, counted as the backend's failure
            message = f"{SERVER}'s stream broke off: {type(error).__name__}"
            log.warning("%s: %s", self.endpoint, message)
            self.relay.metrics.backend_error("stream_broken")
            self._end_with_error(message, "backend_error", 502)
            status = 502
        self.record.end(status)  # as the client saw it, whatever the counting below does
        completion = self.relay.record_usage(rewriter.usage)
        if self.first_token is not None:
            self.relay.metrics.token_time(time.monotonic() - self.record.started, completion, self.first_token)

    # --- either -------------------------------------------------------------------------------------------------

    def _fail(self, error: APIError) -> None:
        self._stop_timer()
        self._answer(error.status, error.body())
        self.record.failed(error)

    def _answer(self, status: int, body: bytes) -> None:
        self._finish(lambda: self.client.answer(status, body))

    def _end_with_error(self, message: str, kind: str, code: int) -> None:
        """End a stream whose head the client has had with an error event."""
        event = b"data: " + orjson.dumps(error_body(message, kind, None, code)) + b"\n\n"
        self._finish(lambda: self.client.end_events(event))

    def _finish(self, write: Callable[[], None]) -> None:
        """Write the end of the client's answer (`answering` while at it: a fault there leaves it half-written)."""
        self.finished = self.answering = True
        write()
        self.answering = False

    def broken(self, step: str) -> None:
        """The front failed at `step` (logged, with the exception, without the request's body): the backend
        request is abandoned, the client's answer ended (a 500, or an error event), the request counted as the
        front's 500. The client's connection is dropped when its answer was being completed, or when even the
        500 fails."""
        log.exception("%s: the front failed relaying a request (in %s)", self.endpoint, step)
        self.faulted = True
        self._stop_timer()
        if self.call is not None:
            self.call.cancel()
        try:
            if self.answering and not self.gone:
                self.client.abort()
            elif not (self.gone or self.finished):
                if self.head_written:
                    self._end_with_error(OWN_FAULT, "server_error", 500)
                else:
                    self._answer(500, APIError(500, OWN_FAULT, "server_error").body())
        except Exception:  # noqa: BLE001 - the answer could not be written: the connection ends instead
            log.exception("%s: the front could not answer a request it failed", self.endpoint)
            self.client.abort()
        self.record.end(500)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
