"""The trtllm-serve route: its own OpenAI API, relayed.

Generation requests are answered on the client's connection (specdec.runtime.relay_exchange) over the front's
own HTTP/1.1 connections to trtllm-serve (specdec.runtime.upstream). Streams pass through as bytes, as fast as
they come, rewritten by specdec.runtime.chunk_rewriter: the served model's name in each chunk, the usage
chunk counted (the front always asks for one) and passed on only when the client asked for it too.
trtllm-serve's iteration statistics (GET /metrics, `specDecodingStats`) are polled for the speculation
counters.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from specdec.runtime.backend_stats import iteration_load, iteration_speculation
from specdec.runtime.config import request_defaults
from specdec.runtime.exchange import Client
from specdec.runtime.relay_exchange import RelayExchange
from specdec.runtime.route import Route
from specdec.runtime.upstream import Upstream


class OpenAIRelay(Route):
    kind = "openai"
    _connections: Upstream | None = None

    def known_draft_len(self) -> int | None:
        value = (self.config.speculative_config or {}).get("max_draft_len")
        return value if isinstance(value, int) else None

    def polls(self):
        return [self._poll_iteration_stats]

    def scrape_polls(self):
        return [self._poll_iteration_stats]  # the speculation counters

    async def _poll_iteration_stats(self) -> None:
        """trtllm-serve's GET /metrics hands out (and forgets) the iteration statistics since the last call."""
        text = await self.fetch(self.backend.url + "/metrics")
        try:
            stats = json.loads(text) if text else []
        except ValueError:
            return
        for item in stats if isinstance(stats, list) else []:
            load = iteration_load(item)
            if load is not None:  # the target's iterations under load, for the load model
                self.metrics.target_iterations(1, load.seconds, load.sequences, load.draft_tokens)
            it = iteration_speculation(item)
            if it is None:
                continue
            self.metrics.speculation(it.draft, it.accepted, it.steps)
            if it.draft_seconds is not None and it.target_seconds is not None:
                self.metrics.compute_time(it.draft_seconds, it.target_seconds)

    def exchange(self, client: Client, endpoint: str, raw: bytes, fields: Mapping[bytes, bytes]) -> RelayExchange:
        return RelayExchange(self, client, endpoint, raw, fields)

    def backend_request(self, body: dict[str, Any]) -> tuple[bool, bool, bytes]:
        """(streamed, the client asked for usage, the body trtllm-serve gets) of a checked request."""
        body["model"] = self.model  # the served model (checked) or none named
        for field, value in request_defaults(self.config).items():
            if body.get(field) is None:
                body[field] = value
        stream = bool(body.get("stream"))
        asked = body.get("stream_options")
        options: dict[str, Any] = asked if isinstance(asked, dict) else {}
        client_usage = bool(options.get("include_usage"))
        if stream and not client_usage:
            body["stream_options"] = {**options, "include_usage": True}  # for the token counters
        return stream, client_usage, orjson.dumps(body)

    def record_usage(self, usage: Any) -> int | None:
        """Count trtllm-serve's usage; its completion tokens, when it has them."""
        if not isinstance(usage, dict):
            return None
        completion = _count(usage.get("completion_tokens"))
        self.metrics.tokens(_count(usage.get("prompt_tokens")), completion)
        return completion

    def connections(self) -> Upstream:
        """The connections to trtllm-serve (anew when its URL changed)."""
        if self._connections is None or self._connections.url != self.backend.url:
            if self._connections is not None:
                self._connections.close()
            self._connections = Upstream(self.backend.url)
        return self._connections

    def stop(self) -> None:
        if self._connections is not None:
            self._connections.close()


def _count(value: Any) -> int:
    """A token count as trtllm-serve reports it; 0 for anything that is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0
