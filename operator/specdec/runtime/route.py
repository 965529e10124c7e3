"""What the front asks of a backend route, and the failures every route answers the same way.

The front (specdec.runtime.front) routes /v1/completions and /v1/chat/completions to one Route, in one of
two ways:
- a route that relays answers each request on the client's connection itself, in the connection's callbacks
  (`relays`, `exchange`: the OpenAI relay to trtllm-serve, specdec.runtime.openai_relay);
- any other answers it in aiohttp's handlers (`completions`, `chat`: the translation to Triton's generate
  endpoint, specdec.runtime.triton_route), the front having checked the request and keeping its counts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
from aiohttp import web

from specdec.api.runtime_config import RuntimeConfig
from specdec.runtime.launch import Backend
from specdec.runtime.metrics import RuntimeMetrics
from specdec.runtime.openai_request import APIError
from specdec.runtime.upstream import Unreachable, UpstreamError

if TYPE_CHECKING:
    from specdec.runtime.front_server import Exchange, FrontConnection

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
JSON_HEADERS = {"Content-Type": "application/json"}


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, headers=JSON_HEADERS)


class ClientGone(Exception):
    """The client closed the connection while its response was being written."""

    def __init__(self, response: web.StreamResponse):
        super().__init__("client gone")
        self.response = response


async def write(response: web.StreamResponse, data: bytes) -> None:
    try:
        await response.write(data)
    except ConnectionResetError:
        raise ClientGone(response) from None


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
    relays = False  # answers generation requests on the client's connection (`exchange`)

    def __init__(self, config: RuntimeConfig, backend: Backend, metrics: RuntimeMetrics, *, request_timeout: float):
        self.config, self.backend, self.metrics = config, backend, metrics
        self.model = config.served_model_name
        self.request_timeout = request_timeout
        self.session: aiohttp.ClientSession | None = None

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

    def exchange(self, client: FrontConnection, endpoint: str, raw: bytes) -> Exchange:
        """A generation request (its body as received) to answer on the client's connection."""
        raise NotImplementedError

    async def completions(self, request: web.Request, body: dict[str, Any], started: float) -> web.StreamResponse:
        raise NotImplementedError

    async def chat(self, request: web.Request, body: dict[str, Any], started: float) -> web.StreamResponse:
        raise NotImplementedError

    async def fetch(self, url: str) -> str | None:
        """A backend statistics page; None when it cannot be had this time."""
        assert self.session is not None
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                return await resp.text() if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, UnicodeDecodeError):
            return None
