"""The contract between the front's server (specdec.runtime.front_server) and what answers its requests (the
routes, specdec.runtime.route, and the front's pages): an Exchange answers one request on a Client, the
client's connection. Below both, so that neither imports the other."""

from __future__ import annotations

from typing import NamedTuple, Protocol

import orjson


class Client(Protocol):
    """A client's connection, as an exchange answers on it: a whole answer (`answer`), or an event stream
    (`start_events`, `event`, ..., `end_events`). The answer's end is the request's end."""

    def answer(
        self, status: int, body: bytes, content_type: str = "application/json", headers: bytes = b""
    ) -> None: ...

    def start_events(self, first: bytes = b"") -> None: ...

    def event(self, data: bytes) -> None: ...

    def end_events(self, last: bytes) -> None: ...

    def abort(self) -> None:
        """End the connection at once (an answer that cannot be completed)."""


class Exchange(Protocol):
    """One request answered on a Client: started once it is the connection's turn, told when the client's
    connection is over its write buffer's high-water mark and back under it, and when the client has gone."""

    def start(self) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def client_gone(self) -> None: ...


class Page(NamedTuple):
    """A whole answer: a GET's, or a route's that is not streamed."""

    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, data: object, status: int = 200) -> Page:
        return cls(status, orjson.dumps(data))
