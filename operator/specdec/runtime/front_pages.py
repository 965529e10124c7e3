"""The exchanges of the answers the front's server gives itself rather than a route: a GET answered by the
front's page (health, metrics, models) in a task, and an error answered at once (a method a path does not
take). Each answers on the client's connection (specdec.runtime.exchange), like the routes' exchanges.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from specdec.runtime.exchange import Client, Page
from specdec.runtime.openai_request import APIError

log = logging.getLogger("specdec.runtime")


class Answered:
    """An error answered at once (a method a path does not take, with its `Allow` header)."""

    def __init__(self, client: Client, error: APIError, headers: bytes = b""):
        self.client, self.error, self.headers = client, error, headers

    def start(self) -> None:
        self.client.answer(self.error.status, self.error.body(), headers=self.headers)

    def pause(self) -> None:
        pass

    resume = pause
    client_gone = pause


class PageExchange:
    """A GET of `path` answered by the front's page (Front.page) in a task; 404 when there is no such page."""

    def __init__(self, client: Client, path: str, page: Awaitable[Page | None]):
        self.client, self.path, self.page = client, path, page
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        client = self.client
        try:
            page = await self.page
        except Exception:  # noqa: BLE001 - the client gets a 500, the log the reason
            log.exception("GET %s failed", self.path)
            client.answer(500, APIError(500, "The page failed; the front's log says why.", "server_error").body())
            return
        if page is None:
            client.answer(404, APIError(404, f"There is no {self.path} here.", "invalid_request_error").body())
        else:
            client.answer(page.status, page.body, page.content_type)

    def pause(self) -> None:
        pass

    resume = pause

    def client_gone(self) -> None:
        if self.task is not None:
            self.task.cancel()
