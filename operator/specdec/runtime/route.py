"""What the front asks of a backend route, and the failures every route answers the same way.

The front (specdec.runtime.front) hands /v1/completions and /v1/chat/completions to one Route, whose
`exchange` answers each request on the client's connection (specdec.runtime.exchange), in one of two ways:
- a route that relays answers in the connections' callbacks, no task on the token path (the OpenAI relay to
  trtllm-serve, specdec.runtime.openai_relay);
- any other answers whole, in a task (RouteExchange): the request checked, `reply` awaited, its answer written
  and counted (the translation to Triton's generate endpoint, specdec.runtime.triton_route, whose BLS does not
  stream while speculating).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, NamedTuple

import aiohttp

from specdec.api.runtime_config import RuntimeConfig
from specdec.runtime.drafter_capture import DrafterCapture
from specdec.runtime.exchange import Client, Exchange, Page
from specdec.runtime.launch import Backend
from specdec.runtime.metrics import RequestRecord, RuntimeMetrics
from specdec.runtime.openai_request import APIError, parse_request
from specdec.runtime.upstream import Unreachable, UpstreamError

log = logging.getLogger("specdec.runtime")
JSON_HEADERS = {"Content-Type": "application/json"}
CHAT = "/v1/chat/completions"
OWN_FAULT = "The front failed on this request; its log says why."


class Events(NamedTuple):
    """A whole answer sent as an event stream (200): each item one event's bytes."""

    events: list[bytes]


class FrontError(APIError):
    """A backend failure: 5xx, `code` the HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "backend_error"):
        super().__init__(status, message, kind, None, status)


def front_error(server: str, timeout: float, error: BaseException) -> FrontError:
    """What reaching the server went wrong with, as the front's 503/504/502 answer."""
    if isinstance(error, (aiohttp.ClientConnectorError, Unreachable)):
        return FrontError(503, f"{server} is not reachable (starting or stopped)", "backend_unavailable")
    if isinstance(error, asyncio.TimeoutError):
        return FrontError(504, f"{server} did not answer within {timeout:g}s", "backend_timeout")
    return FrontError(502, f"the connection to {server} failed: {type(error).__name__}: {error}")


@contextlib.contextmanager
def backend_errors(server: str, timeout: float) -> Iterator[None]:
    """The failures of reaching the server raised as front_error's answers."""
    try:
        yield
    except (TimeoutError, aiohttp.ClientError, UpstreamError) as error:
        raise front_error(server, timeout, error) from None


class Route:
    """One backend behind the front. `session` is set when the front starts (before any request)."""

    kind = ""
    text_prompts_only = False  # the request checks' `triton` rules: one choice, text prompts

    def __init__(self, config: RuntimeConfig, backend: Backend, metrics: RuntimeMetrics, *, request_timeout: float):
        self.config, self.backend, self.metrics = config, backend, metrics
        self.model = config.served_model_name
        self.request_timeout = request_timeout
        self.session: aiohttp.ClientSession | None = None
        self.drafter: DrafterCapture | None = None  # spec.drafter.learning's capture (the trtllm-serve route)

    def known_draft_len(self) -> int | None:
        """The draft length in effect from the start, when the route knows it."""
        return None

    def start(self) -> None:
        """Anything to do once, before the first request."""

    def stop(self) -> None:
        """Anything to let go of when the front stops."""

    def polls(self) -> list[Callable[[], Awaitable[None]]]:
        """What to poll every stats interval (backend statistics, live settings)."""
        return []

    def scrape_polls(self) -> list[Callable[[], Awaitable[None]]]:
        """Of polls(), those a scrape of /metrics runs first: counters the front learns only by polling the
        backend, so a scrape reads them up to now rather than up to the last stats interval."""
        return []

    def exchange(self, client: Client, endpoint: str, raw: bytes, fields: Mapping[bytes, bytes]) -> Exchange:
        """A generation request (its body as received, its header fields by lower-case name) to answer on the
        client's connection."""
        return RouteExchange(self, client, endpoint, raw, fields)

    async def reply(
        self, body: dict[str, Any], *, chat: bool, started: float, fields: Mapping[bytes, bytes]
    ) -> Page | Events:
        """The whole answer to a checked request (RouteExchange's); APIError for a failure to answer."""
        raise NotImplementedError

    async def fetch(self, url: str) -> str | None:
        """A backend statistics page; None when it cannot be had this time."""
        assert self.session is not None
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                return await resp.text() if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None


class RouteExchange:
    """A generation request a route answers whole (Route.reply), in a task: checked, answered, counted. A
    client that goes away cancels it (and with it the backend request)."""

    def __init__(self, route: Route, client: Client, endpoint: str, raw: bytes, fields: Mapping[bytes, bytes]):
        self.route, self.client, self.endpoint, self.raw, self.fields = route, client, endpoint, raw, fields
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        route, client, chat = self.route, self.client, self.endpoint == CHAT
        record = RequestRecord(route.metrics, self.endpoint)
        try:
            body = parse_request(self.raw, chat=chat, served_model=route.model, triton=route.text_prompts_only)
            reply = await route.reply(body, chat=chat, started=record.started, fields=self.fields)
        except APIError as error:
            record.failed(error)
            client.answer(error.status, error.body())
            return
        except asyncio.CancelledError:
            record.end(499)  # the client went away; its backend request was cancelled with it
            raise
        except Exception:  # noqa: BLE001 - the front's own fault: a 500 and the reason in the log, not a hang
            log.exception("%s: the front failed on a request", self.endpoint)
            record.end(500)
            client.answer(500, APIError(500, OWN_FAULT, "server_error").body())
            return
        if isinstance(reply, Events):
            first, *rest = reply.events
            client.start_events(first)
            for event in rest:
                client.event(event)
            client.end_events(b"")
            record.end(200)
        else:
            client.answer(reply.status, reply.body, reply.content_type)
            record.end(reply.status)

    def pause(self) -> None:
        """The answer is written whole: the transport holds what the client has not taken."""

    def resume(self) -> None:
        pass

    def client_gone(self) -> None:
        if self.task is not None:
            self.task.cancel()
