"""The trtllm-serve route: its own OpenAI API, relayed.

Streams pass through as bytes, as fast as they come: the served model's name goes into each chunk by a byte
substitution, and only the chunks that must change are parsed: the usage chunk (the front always asks
trtllm-serve for one, to count tokens; it reaches the client only when the client asked for it too) and
anything the byte path does not recognise. As OpenAI streams, every chunk says `usage: null` when the
client asked for usage, and no chunk names it otherwise. trtllm-serve's iteration statistics (GET /metrics,
`specDecodingStats`) are polled for the speculation counters.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from specdec.runtime.backend_stats import iteration_load, iteration_speculation
from specdec.runtime.openai_request import backend_client_error, error_body
from specdec.runtime.route import (JSON_HEADERS, SSE_HEADERS, ClientGone, FrontError, Route, StreamBroken,
                                   backend_errors, json_response, write)

log = logging.getLogger("specdec.runtime")

# A key can only be a JSON string followed by a colon: a string value never is, and quotes inside strings
# are escaped, so these match the chunk's own `model` and `usage` keys and nothing in generated text.
MODEL_FIELD = re.compile(rb'"model"\s*:\s*"(?:[^"\\]|\\.)*"')
USAGE_KEY = b'"usage"'
NULL_USAGE = re.compile(rb',\s*"usage"\s*:\s*null')
DONE = b"data: [DONE]\n\n"


class ChunkRewriter:
    """trtllm-serve's SSE bytes in, the client's SSE bytes out (pure: no I/O).

    `usage` is the usage chunk's, once it has passed. A chunk the byte path does not recognise is parsed and
    rewritten as a whole (or passed on as it is when it is not JSON)."""

    def __init__(self, model: str, client_usage: bool):
        self.model = model
        self.model_field = b'"model":' + orjson.dumps(model)
        self.client_usage = client_usage
        self.usage: Any = None
        self.pending = b""
        self.upstream_field = b""  # trtllm-serve's own `"model": "..."`, as the first chunk spelled it

    def feed(self, data: bytes) -> bytes:
        """The complete events of what arrived so far, rewritten; a partial event waits for its rest."""
        data = self.pending + data
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        end = data.rfind(b"\n\n")
        if end < 0:
            self.pending = data
            return b""
        self.pending = data[end + 2:]
        events = data[:end].split(b"\n\n")
        if len(events) == 1:  # what a token's read usually holds
            return self._event(events[0])
        return b"".join([self._event(event) for event in events])

    def finish(self) -> bytes:
        """The last event, when the stream ended without a blank line after it."""
        rest, self.pending = self.pending, b""
        return self._event(rest) if rest.strip() else b""

    def _event(self, event: bytes) -> bytes:
        if event.startswith(b"data: {") and b"\n" not in event:  # one JSON data line: most events
            chunk = self._fast(event[6:].rstrip())
            if chunk is not None:
                return b"data: " + chunk + b"\n\n"
        out = []
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue  # comments and other fields: trtllm-serve sends none, OpenAI's clients want none
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out.append(DONE)
                continue
            chunk = self._fast(payload)
            if chunk is None:
                chunk = self._parsed(payload)
            if chunk is not None:
                out.append(b"data: " + chunk + b"\n\n")
        return b"".join(out)

    def _fast(self, payload: bytes) -> bytes | None:
        """A content chunk rewritten without parsing; None when it needs parsing."""
        if not (payload.startswith(b"{") and payload.endswith(b"}")):
            return None
        # trtllm-serve names the same model in every chunk: a plain search for the field the first chunk had
        # finds it in the others (the regular expression costs a third of the rewrite when run on each).
        start = payload.find(self.upstream_field) if self.upstream_field else -1
        if start >= 0:
            end = start + len(self.upstream_field)
        else:
            match = MODEL_FIELD.search(payload)
            if match is None:
                return None
            start, end = match.span()
            self.upstream_field = match.group()
        payload = payload[:start] + self.model_field + payload[end:]
        if USAGE_KEY in payload:
            if self.client_usage:
                return None
            payload = NULL_USAGE.sub(b"", payload, count=1)
            return None if USAGE_KEY in payload else payload
        return payload[:-1] + b',"usage":null}' if self.client_usage else payload

    def _parsed(self, payload: bytes) -> bytes | None:
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return payload
        if not isinstance(chunk, dict):
            return payload
        if chunk.get("usage") and not chunk.get("choices"):
            self.usage = chunk["usage"]
            if not self.client_usage:
                return None
        elif not self.client_usage:
            chunk.pop("usage", None)
        elif "usage" not in chunk:
            chunk["usage"] = None  # OpenAI's chunks say usage: null until the usage chunk
        if "model" in chunk:
            chunk["model"] = self.model
        return orjson.dumps(chunk)


class QuietWatch:
    """Ends a backend stream that sends nothing for `seconds` while the relay waits on it.

    aiohttp's sock_read does this by re-arming a timer on every read, a cost per token; this looks at the bytes
    received a few times a period instead, so a stream goes after `seconds` to 1.25 x `seconds` of quiet.
    `waiting` is cleared while the relay writes to its client: a slow client is not a quiet backend."""

    CHECKS = 4

    def __init__(self, content: aiohttp.StreamReader, seconds: float):
        self.content, self.period = content, seconds / self.CHECKS
        self.waiting = True
        self._seen, self._quiet = -1, 0
        self._handle = asyncio.get_running_loop().call_later(self.period, self._check)

    def _check(self) -> None:
        if not self.waiting or self.content.total_bytes != self._seen:
            self._seen, self._quiet = self.content.total_bytes, 0
        else:
            self._quiet += 1
            if self._quiet > self.CHECKS:
                self.content.set_exception(aiohttp.ServerTimeoutError("the backend sent nothing in time"))
                return
        self._handle = asyncio.get_running_loop().call_later(self.period, self._check)

    def stop(self) -> None:
        self._handle.cancel()


class OpenAIRelay(Route):
    kind = "openai"

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

    async def _proxy(self, request: web.Request, path: str, body: dict[str, Any], started: float):
        assert self.session is not None
        body["model"] = self.model  # the served model (checked) or none named
        rd = self.config.redrafter
        if rd is not None and rd.temperature is not None and body.get("temperature") is None:
            body["temperature"] = rd.temperature
        stream = bool(body.get("stream"))
        options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
        client_usage = bool(options.get("include_usage"))
        if stream and not client_usage:
            body["stream_options"] = {**options, "include_usage": True}  # for the token counters
        # A stream's reads are watched by a QuietWatch, its headers by a deadline; an answer's by sock_read.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=None if stream else self.request_timeout)
        with backend_errors("trtllm-serve", self.request_timeout):
            async with asyncio.timeout(self.request_timeout if stream else None):
                upstream = await self.session.post(self.backend.url + path, data=orjson.dumps(body),
                                                   headers=JSON_HEADERS, timeout=timeout)
        quiet = QuietWatch(upstream.content, self.request_timeout) if stream else None
        try:
            if upstream.status != 200:
                raw = await upstream.read()
                if 400 <= upstream.status < 500:  # the client's mistake: trtllm-serve's words, OpenAI's shape
                    return backend_client_error(upstream.status, raw)
                raise FrontError(502, f"trtllm-serve answered HTTP {upstream.status}: "
                                      f"{raw[:500].decode(errors='replace')}")
            if not stream or not upstream.content_type.startswith("text/event-stream"):
                return await self._answer(upstream, started)
            return await self._relay_stream(request, upstream, quiet, client_usage, started)
        finally:
            if quiet is not None:
                quiet.stop()
            if upstream.content.at_eof():
                upstream.release()
            else:
                upstream.close()  # a client that left must not keep the backend generating

    async def _answer(self, upstream: aiohttp.ClientResponse, started: float) -> web.Response:
        try:
            data = orjson.loads(await upstream.read())
        except (aiohttp.ClientError, ValueError, asyncio.TimeoutError) as error:
            raise FrontError(502, f"trtllm-serve's answer could not be read: {type(error).__name__}") from None
        if isinstance(data, dict):
            data["model"] = self.model
            self.metrics.token_time(time.monotonic() - started, self._record_usage(data.get("usage")))
        return json_response(data)

    async def _relay_stream(self, request, upstream, quiet: QuietWatch, client_usage: bool,
                            started: float) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        first_token: float | None = None
        rewriter = ChunkRewriter(self.model, client_usage)
        read, feed, send = upstream.content.readany, rewriter.feed, response.write  # per token: no lookups
        try:
            while data := await read():  # all that has arrived, b"" at the end
                out = feed(data)
                if not out:
                    continue
                if first_token is None and out != DONE:
                    first_token = time.monotonic() - started
                    self.metrics.first_token(first_token)
                quiet.waiting = False
                try:
                    await send(out)
                except ConnectionResetError:
                    raise ClientGone(response) from None
                quiet.waiting = True
            out = rewriter.finish()
            if out:
                await write(response, out)
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, asyncio.TimeoutError) as error:
            # Headers are gone already: say it in the stream, and count it as a backend failure.
            message = f"trtllm-serve's stream broke off: {type(error).__name__}"
            log.warning("%s", message)
            self.metrics.backend_error("stream_broken")
            await write(response, b"data: " + orjson.dumps(error_body(message, "backend_error", None, 502)) + b"\n\n")
            await response.write_eof()
            raise StreamBroken(response) from None
        finally:
            completion = self._record_usage(rewriter.usage)
        await response.write_eof()
        if first_token is not None:
            self.metrics.token_time(time.monotonic() - started, completion, first_token)
        return response
