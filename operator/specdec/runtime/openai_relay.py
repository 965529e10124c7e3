"""The trtllm-serve route: its own OpenAI API, relayed.

Generation requests go over the front's own HTTP/1.1 connections to trtllm-serve (specdec.runtime.upstream).
Streams pass through as bytes, as fast as they come (specdec.runtime.stream_relay), rewritten by
specdec.runtime.chunk_rewriter: the served model's name in each chunk, the usage chunk counted (the front
always asks for one) and passed on only when the client asked for it too. trtllm-serve's iteration
statistics (GET /metrics, `specDecodingStats`) are polled for the speculation counters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import orjson
from aiohttp import web

from specdec.runtime.backend_stats import iteration_load, iteration_speculation
from specdec.runtime.chunk_rewriter import DONE, ChunkRewriter
from specdec.runtime.openai_request import backend_client_error, error_body
from specdec.runtime.route import (JSON_HEADERS, SSE_HEADERS, ClientGone, FrontError, Route, StreamBroken,
                                   backend_errors, json_response)
from specdec.runtime.stream_relay import StreamRelay
from specdec.runtime.upstream import Response, Upstream

log = logging.getLogger("specdec.runtime")


class OpenAIRelay(Route):
    kind = "openai"
    _connections: Upstream | None = None

    def known_draft_len(self) -> int | None:
        value = (self.config.speculative_config or {}).get("max_draft_len")
        return value if isinstance(value, int) else None

    def polls(self):
        return [self._poll_iteration_stats]

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

    async def completions(self, request, body, started):
        return await self._proxy(request, "/v1/completions", body, started)

    async def chat(self, request, body, started):
        return await self._proxy(request, "/v1/chat/completions", body, started)

    def _record_usage(self, usage: Any) -> int | None:
        """Count trtllm-serve's usage; its completion tokens, when it has them."""
        if not isinstance(usage, dict):
            return None
        completion = int(usage.get("completion_tokens") or 0)
        self.metrics.tokens(int(usage.get("prompt_tokens") or 0), completion)
        return completion

    def _upstream(self) -> Upstream:
        """The connections to trtllm-serve (anew when its URL changed)."""
        if self._connections is None or self._connections.url != self.backend.url:
            if self._connections is not None:
                self._connections.close()
            self._connections = Upstream(self.backend.url)
        return self._connections

    def stop(self) -> None:
        if self._connections is not None:
            self._connections.close()

    async def _proxy(self, request: web.Request, path: str, body: dict[str, Any], started: float):
        body["model"] = self.model  # the served model (checked) or none named
        rd = self.config.redrafter
        if rd is not None and rd.temperature is not None and body.get("temperature") is None:
            body["temperature"] = rd.temperature
        stream = bool(body.get("stream"))
        options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        client_usage = bool(options.get("include_usage"))
        if stream and not client_usage:
            body["stream_options"] = {**options, "include_usage": True}  # for the token counters
        # The head (and a whole answer) within the request timeout; a stream's quiet spells after it.
        with backend_errors("trtllm-serve", self.request_timeout):
            async with asyncio.timeout(self.request_timeout):
                upstream = await self._upstream().request("POST", path, orjson.dumps(body), JSON_HEADERS)
                try:
                    if upstream.status != 200:
                        raw = await upstream.read()
                        if 400 <= upstream.status < 500:  # the client's mistake: trtllm-serve's words, OpenAI's shape
                            return backend_client_error(upstream.status, raw)
                        raise FrontError(502, f"trtllm-serve answered HTTP {upstream.status}: "
                                              f"{raw[:500].decode(errors='replace')}")
                    if not stream or upstream.content_type != "text/event-stream":
                        return self._answer(await upstream.read(), started)
                except BaseException:
                    upstream.close()
                    raise
        try:
            return await self._relay_stream(request, upstream, client_usage, started)
        finally:
            upstream.close()  # a client that left must not keep the backend generating; no-op after the end

    def _answer(self, raw: bytes, started: float) -> web.Response:
        try:
            data = orjson.loads(raw)
        except ValueError:
            raise FrontError(502, "trtllm-serve's answer is not JSON") from None
        if isinstance(data, dict):
            data["model"] = self.model
            self.metrics.token_time(time.monotonic() - started, self._record_usage(data.get("usage")))
        return json_response(data)

    async def _relay_stream(self, request: web.Request, upstream: Response, client_usage: bool,
                            started: float) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        await response.write(b"")  # the head now, if aiohttp held it back (a web.Response's would be)
        rewriter = ChunkRewriter(self.model, client_usage)
        first_token: float | None = None

        def first(out: bytes) -> bool:
            nonlocal first_token
            if out == DONE:
                return False
            first_token = time.monotonic() - started
            self.metrics.first_token(first_token)
            return True

        relay = StreamRelay(upstream, request, rewriter.feed, first)
        try:
            await relay.run(self.request_timeout)
            if relay.client_gone:
                raise ClientGone(response)
            if relay.error is not None:
                # Headers are gone already: say it in the stream, and count it as a backend failure.
                message = f"trtllm-serve's stream broke off: {type(relay.error).__name__}"
                log.warning("%s", message)
                self.metrics.backend_error("stream_broken")
                error = b"data: " + orjson.dumps(error_body(message, "backend_error", None, 502)) + b"\n\n"
                await self._end(response, error)
                raise StreamBroken(response)
            await self._end(response, rewriter.finish())
        finally:
            completion = self._record_usage(rewriter.usage)
        if first_token is not None:
            self.metrics.token_time(time.monotonic() - started, completion, first_token)
        return response

    @staticmethod
    async def _end(response: web.StreamResponse, last: bytes) -> None:
        try:
            await response.write_eof(last)
        except ConnectionResetError:
            raise ClientGone(response) from None
