"""The OpenAI-compatible front on the runtime's port: /v1/completions, /v1/chat/completions, /v1/models,
/health and Prometheus /metrics.

Two backends:
- triton: Triton's generate endpoint of the tensorrt_llm_bls model. Every request gets
  `num_draft_tokens` (the draft length) and `use_draft_logits` (logit acceptance), which is what makes the
  BLS speculate, and `return_perf_metrics`, whose `acceptance_rate`, `total_accepted_draft_tokens` and
  `total_draft_tokens` feed the metrics. The BLS does not stream while speculating, so a streamed request
  gets the whole answer as one SSE chunk (and the usage chunk after it, when asked for). One choice (n = 1)
  and text prompts only. The draft length follows the operator's draft_len file (next to
  runtime.json) while serving; Triton's own metrics are polled for the draft and target compute time.
- openai: trtllm-serve's own OpenAI API, proxied (streaming passes through chunk by chunk, as OpenAI streams:
  `usage` null in each chunk and a usage chunk last when the client asks for it); its iteration
  statistics (GET /metrics, `specDecodingStats`) are polled for the speculation counters.

Requests are checked before a backend sees them (specdec.runtime.openai_request): an unknown model is 404
model_not_found, a bad parameter 400 naming it, in OpenAI's error shape. Backend failures become clear 5xx
answers (503 not reachable, 504 timed out, 502 anything else) rather than hangs; a client that goes away
cancels its backend request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from specdec.api.runtime_config import RuntimeConfig
from specdec.runtime import triton
from specdec.runtime.backend_stats import Increases, iteration_speculation, triton_compute_us
from specdec.runtime.chat import Tokenizer
from specdec.runtime.launch import Backend
from specdec.runtime.metrics import RuntimeMetrics
from specdec.runtime.openai_request import (APIError, backend_client_error, check_request, error_body, invalid,
                                             model_not_found)

log = logging.getLogger("specdec.runtime")

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI default for /v1/completions
CHAT_DEFAULT_MAX_TOKENS = 512
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class StreamBroken(Exception):
    """The backend's stream failed after the response had started; the response is complete."""

    def __init__(self, response: web.StreamResponse):
        super().__init__("stream broken")
        self.response = response


class ClientGone(Exception):
    """The client closed the connection while its response was being written."""

    def __init__(self, response: web.StreamResponse):
        super().__init__("client gone")
        self.response = response


async def _write(response: web.StreamResponse, data: bytes) -> None:
    try:
        await response.write(data)
    except ConnectionResetError:
        raise ClientGone(response) from None


class FrontError(APIError):
    """A backend failure: 5xx, `code` the HTTP status."""

    def __init__(self, status: int, message: str, kind: str = "backend_error"):
        super().__init__(status, message, kind, None, status)


@contextlib.contextmanager
def backend_errors(server: str, timeout: float) -> Iterator[None]:
    """What reaching the server can go wrong with, as the front's 503/504/502 answers."""
    try:
        yield
    except aiohttp.ClientConnectorError:
        raise FrontError(503, f"{server} is not reachable (starting or stopped)", "backend_unavailable") from None
    except asyncio.TimeoutError:
        raise FrontError(504, f"{server} did not answer within {timeout:g}s", "backend_timeout") from None
    except aiohttp.ClientError as error:
        raise FrontError(502, f"the connection to {server} failed: {type(error).__name__}: {error}") from None


def strip_prompt(text: str, prompt: str) -> str:
    """The BLS answers a speculative request with prompt + completion (it merges the target's outputs)."""
    if prompt and text.startswith(prompt):
        return text[len(prompt):]
    stripped = prompt.strip()
    if stripped and text.lstrip().startswith(stripped):
        return text.lstrip()[len(stripped):]
    return text


def _scalar(value: Any) -> Any:
    while isinstance(value, list) and value:
        value = value[0]
    return value


def _number(value: Any) -> float | None:
    value = _scalar(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _parse_draft_len(text: str, limit: int) -> int | None:
    value = int(text) if text.isascii() and text.isdigit() else 0
    return value if 1 <= value <= limit else None


def _known_draft_len(config: RuntimeConfig, backend: Backend) -> int | None:
    """What the front sends (Triton), or what trtllm-serve was configured with."""
    if backend.kind == "triton":
        return backend.draft_len
    value = (config.speculative_config or {}).get("max_draft_len")
    return value if isinstance(value, int) else None


class Front:
    def __init__(self, config: RuntimeConfig, backend: Backend, *, supervisor=None, tokenizer: Tokenizer | None = None,
                 request_timeout: float = 600.0, health_timeout: float = 3.0, stats_interval: float = 5.0,
                 route: str = "", draft_len_file: Path | None = None):
        self.config = config
        self.backend = backend
        self.draft_len = backend.draft_len  # num_draft_tokens for the next Triton requests
        self.draft_len_file = draft_len_file
        self._draft_len_text: str | None = None  # the file's content last applied (None: no file)
        self.supervisor = supervisor
        self.tokenizer = tokenizer or Tokenizer(None)
        self.request_timeout = request_timeout
        self.health_timeout = health_timeout
        self.stats_interval = stats_interval
        self.model = config.served_model_name
        self.metrics = RuntimeMetrics(mode=config.mode, backend=config.backend, model=self.model,
                                      route=route or backend.kind)
        known = _known_draft_len(config, backend)
        if known is not None:
            self.metrics.draft_length(known)
        self.session: aiohttp.ClientSession | None = None
        self.ready_announced = False
        self.created = int(time.time())
        self._compute_us = Increases()
        self._tasks: list[asyncio.Task] = []
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_post("/v1/completions", self.completions)
        self.app.router.add_post("/v1/chat/completions", self.chat_completions)
        self.app.router.add_get("/v1/models", self.models)
        self.app.router.add_get("/v1/models/{model:.+}", self.retrieve_model)
        self.app.router.add_get("/health", self.health)
        self.app.router.add_get("/metrics", self.prometheus)
        self.app.on_startup.append(self._startup)
        self.app.on_cleanup.append(self._cleanup)

    # --- lifecycle -------------------------------------------------------------------------------

    async def _startup(self, _app) -> None:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                             auto_decompress=True)
        if self.backend.kind == "triton" and self.draft_len_file:
            self._read_draft_len()  # before the first request
        if self.stats_interval > 0:
            loop = asyncio.get_running_loop()
            self._tasks = [loop.create_task(self._every(poll)) for poll in self._polls()]

    def _polls(self) -> list[Callable[[], Awaitable[None]]]:
        if self.backend.kind == "openai":
            return [self._poll_iteration_stats]
        polls = [self._poll_triton_metrics] if self.backend.metrics_url else []
        return polls + ([self._poll_draft_len] if self.draft_len_file else [])

    async def _every(self, poll: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(self.stats_interval)
            try:
                await poll()
            except Exception:  # noqa: BLE001 - one bad page must not end the polling for good
                log.exception("%s failed", poll.__name__)

    async def _cleanup(self, _app) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.session:
            await self.session.close()

    # --- health and metrics ------------------------------------------------------------------------

    async def backend_ready(self) -> tuple[bool, str]:
        if self.supervisor is not None and self.supervisor.exited:
            return False, "the server process has exited"
        assert self.session is not None
        url = self.backend.url + self.backend.health_path
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=self.health_timeout)) as resp:
                await resp.read()
                if resp.status == 200:
                    return True, "ok"
                return False, f"{url} answered HTTP {resp.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            return False, f"{url} not reachable: {type(error).__name__}"

    def mark_ready(self) -> None:
        """Log (once) that the backend answers: the end of start-up."""
        if not self.ready_announced:
            self.ready_announced = True
            since = f" after {time.monotonic() - self.supervisor.started_at:.1f}s" if self.supervisor else ""
            log.info("backend ready%s; serving %r on port %d", since, self.model, self.config.port)

    async def health(self, _request: web.Request) -> web.Response:
        ok, detail = await self.backend_ready()
        self.metrics.backend_up.set(1 if ok else 0)
        if ok:
            self.mark_ready()
            return web.json_response({"status": "ok", "model": self.model})
        return web.json_response({"status": "unavailable", "detail": detail}, status=503)

    async def prometheus(self, _request: web.Request) -> web.Response:
        return web.Response(body=self.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "specdec"}

    async def models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card()]})

    async def retrieve_model(self, request: web.Request) -> web.Response:
        """GET /v1/models/{model} (the openai client's models.retrieve)."""
        requested = request.match_info["model"]
        if requested != self.model:
            return model_not_found(requested, self.model).response()
        return web.json_response(self._model_card())

    async def _fetch(self, url: str) -> str | None:
        """A backend statistics page; None when it cannot be had this time."""
        assert self.session is not None
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=30)) as resp:
                return await resp.text() if resp.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, UnicodeDecodeError):
            return None

    async def _poll_iteration_stats(self) -> None:
        """trtllm-serve's GET /metrics hands out (and forgets) the iteration statistics since the last call."""
        text = await self._fetch(self.backend.url + "/metrics")
        try:
            stats = json.loads(text) if text else []
        except ValueError:
            return
        for item in stats if isinstance(stats, list) else []:
            it = iteration_speculation(item)
            if it is None:
                continue
            self.metrics.speculation(it.draft, it.accepted, it.steps)
            if it.draft_seconds is not None and it.target_seconds is not None:
                self.metrics.compute_time(it.draft_seconds, it.target_seconds)

    async def _poll_triton_metrics(self) -> None:
        """Triton's cumulative compute time of the draft and target models, counted as it grows."""
        assert self.backend.metrics_url is not None
        text = await self._fetch(self.backend.metrics_url)
        totals = triton_compute_us(text) if text else {}
        # A model missing from this page was not reset: skipped, so its next value is not counted twice.
        seconds = {m: self._compute_us(m, totals[m]) / 1e6
                   for m in (triton.DRAFT_MODEL, triton.TARGET_MODEL) if m in totals}
        self.metrics.compute_time(seconds.get(triton.DRAFT_MODEL, 0.0), seconds.get(triton.TARGET_MODEL, 0.0))

    async def _poll_draft_len(self) -> None:
        self._read_draft_len()

    def _read_draft_len(self) -> None:
        """The operator's live draft length: the file's value when it is one, the configured length without
        the file. A value out of 1..max_draft_len is logged once and ignored."""
        assert self.draft_len_file is not None and self.config.draft_target is not None
        try:
            text: str | None = self.draft_len_file.read_text().strip()
        except OSError:
            text = None  # no file (the operator has not set one): the configured length
        if text == self._draft_len_text:
            return
        self._draft_len_text = text
        limit = self.config.draft_target.max_draft_len
        value = self.backend.draft_len if text is None else _parse_draft_len(text, limit)
        if value is None:
            log.warning("ignoring %s: %r is not a draft length in 1..%d", self.draft_len_file, text, limit)
            return
        if value != self.draft_len:
            log.info("draft length %s -> %d (%s)", self.draft_len, value,
                     self.draft_len_file if text is not None else "configured")
            self.draft_len = value
            self.metrics.draft_length(value)

    # --- request plumbing ---------------------------------------------------------------------------

    async def _body(self, request: web.Request, chat: bool) -> dict[str, Any]:
        """The request, checked before any backend sees it."""
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise invalid("The request body is not valid JSON.", None, None) from None
        if not isinstance(body, dict):
            raise invalid("The request body must be a JSON object.", None, None)
        check_request(body, chat=chat, served_model=self.model, triton=self.backend.kind == "triton")
        return body

    async def _observed(self, request: web.Request, endpoint: str, handler) -> web.StreamResponse:
        started = time.monotonic()
        self.metrics.in_flight.inc()
        status = "500"
        try:
            response = await handler(request, started)
            status = str(response.status)
            return response
        except StreamBroken as broken:
            status = "502"  # the client saw 200 and then an error event
            return broken.response
        except ClientGone as gone:
            status = "499"
            return gone.response
        except APIError as error:
            status = str(error.status)
            if error.status >= 500:
                self.metrics.backend_error(error.kind)
                log.warning("%s: %s", endpoint, error.message)
            return error.response()
        except (asyncio.CancelledError, ConnectionResetError):
            status = "499"  # the client went away; its backend request was cancelled with it
            raise
        finally:
            self.metrics.in_flight.dec()
            self.metrics.request(endpoint, status, time.monotonic() - started)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._observed(request, "/v1/completions", self._completions)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._observed(request, "/v1/chat/completions", self._chat)

    async def _completions(self, request: web.Request, started: float) -> web.StreamResponse:
        body = await self._body(request, chat=False)
        if self.backend.kind == "openai":
            return await self._proxy(request, "/v1/completions", body, started)
        return await self._triton_completions(request, body, started)

    async def _chat(self, request: web.Request, started: float) -> web.StreamResponse:
        body = await self._body(request, chat=True)
        if self.backend.kind == "openai":
            return await self._proxy(request, "/v1/chat/completions", body, started)
        return await self._triton_chat(request, body, started)

    # --- Triton (BLS generate) ----------------------------------------------------------------------

    def _sampling(self, body: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty",
                    "repetition_penalty"):
            if body.get(key) is not None:
                out[key] = body[key]
        stop = body.get("stop")
        if isinstance(stop, str):
            out["stop_words"] = [stop]
        elif isinstance(stop, list) and stop:
            out["stop_words"] = stop
        return out

    async def _generate(self, prompt: str, max_tokens: int, sampling: dict[str, Any],
                        draft_len: int) -> dict[str, Any]:
        assert self.session is not None
        payload = {"text_input": prompt, "max_tokens": max_tokens, "stream": False,
                   "num_draft_tokens": draft_len, "use_draft_logits": self.backend.use_draft_logits,
                   "return_perf_metrics": True, **sampling}
        url = f"{self.backend.url}/v2/models/{triton.BLS_MODEL}/generate"
        with backend_errors("the Triton server", self.request_timeout):
            async with self.session.post(url, json=payload,
                                         timeout=aiohttp.ClientTimeout(total=self.request_timeout)) as resp:
                raw = await resp.read()
                status = resp.status
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if status != 200 or not isinstance(data, dict) or "error" in data:
            message = data.get("error") if isinstance(data, dict) else raw[:500].decode(errors="replace")
            raise FrontError(502, f"Triton answered HTTP {status}: {message}")
        if "text_output" not in data:
            raise FrontError(502, "Triton's answer has no text_output")
        return data

    def _usage(self, prompt: str, text: str) -> dict[str, int] | None:
        prompt_tokens = self.tokenizer.count(prompt)
        completion_tokens = self.tokenizer.count(text)
        if prompt_tokens is None or completion_tokens is None:
            return None
        return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens}

    async def _triton_one(self, prompt: str, body: dict[str, Any], max_tokens: int) -> dict[str, Any]:
        sampling, draft_len, started = self._sampling(body), self.draft_len, time.monotonic()
        assert draft_len is not None  # the Triton route always has one
        data = await self._generate(prompt, max_tokens, sampling, draft_len)
        seconds = time.monotonic() - started
        text = strip_prompt(str(_scalar(data["text_output"]) or ""), prompt)
        usage = self._usage(prompt, text)
        draft = int(_number(data.get("total_draft_tokens")) or 0)
        accepted = int(_number(data.get("total_accepted_draft_tokens")) or 0)
        rate = _number(data.get("acceptance_rate"))
        # The BLS proposes draft_len tokens a step (fewer only on the last), so this counts its steps. Today's
        # BLS answers with its last target request's perf metrics only (tensorrt_llm_bls/1/lib/decode.py,
        # _spec_generate): one step per response, a sample of the request rather than its total.
        self.metrics.speculative_response(draft, accepted, math.ceil(draft / draft_len), rate)
        if usage:
            self.metrics.tokens(usage["prompt_tokens"], usage["completion_tokens"])
        # The answer comes whole (no streaming while speculating): time per token over all of it.
        self.metrics.token_time(seconds, usage and usage["completion_tokens"])
        finish = "length" if usage and usage["completion_tokens"] >= max_tokens else "stop"
        speculation = {"acceptance_rate": rate, "accepted_draft_tokens": accepted, "draft_tokens": draft}
        return {"text": text, "usage": usage, "finish_reason": finish, "speculation": speculation}

    @staticmethod
    def _max_tokens(body: dict[str, Any], default: int) -> int:
        value = body.get("max_tokens")
        value = body.get("max_completion_tokens") if value is None else value
        return default if value is None else value

    async def _triton_completions(self, request: web.Request, body: dict[str, Any], started: float):
        prompt = body["prompt"]
        prompts = [prompt] if isinstance(prompt, str) else prompt
        max_tokens = self._max_tokens(body, COMPLETIONS_DEFAULT_MAX_TOKENS)
        results = await asyncio.gather(*(self._triton_one(p, body, max_tokens) for p in prompts))
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        usage = _sum_usage([r["usage"] for r in results])
        if body.get("stream"):
            chunks = [{"id": rid, "object": "text_completion", "created": created, "model": self.model,
                       "choices": [{"index": i, "text": r["text"], "logprobs": None,
                                    "finish_reason": r["finish_reason"]}]} for i, r in enumerate(results)]
            return await self._sse(request, chunks, usage, body, rid, created, "text_completion", started)
        return web.json_response({
            "id": rid, "object": "text_completion", "created": created, "model": self.model,
            "choices": [{"index": i, "text": (prompts[i] if body.get("echo") else "") + r["text"],
                         "logprobs": None, "finish_reason": r["finish_reason"]} for i, r in enumerate(results)],
            "usage": usage, "speculation": _sum_speculation(results)})

    async def _triton_chat(self, request: web.Request, body: dict[str, Any], started: float):
        try:
            prompt = self.tokenizer.chat_prompt(body["messages"])
        except ValueError as error:
            raise invalid(str(error), "messages", None) from None
        max_tokens = self._max_tokens(body, CHAT_DEFAULT_MAX_TOKENS)
        result = await self._triton_one(prompt, body, max_tokens)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.get("stream"):
            chunks = [{"id": rid, "object": "chat.completion.chunk", "created": created, "model": self.model,
                       "choices": [{"index": 0, "delta": {"role": "assistant", "content": result["text"]},
                                    "finish_reason": result["finish_reason"]}]}]
            return await self._sse(request, chunks, result["usage"], body, rid, created, "chat.completion.chunk",
                                   started)
        return web.json_response({
            "id": rid, "object": "chat.completion", "created": created, "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": result["text"]},
                         "finish_reason": result["finish_reason"]}],
            "usage": result["usage"], "speculation": result["speculation"]})

    async def _sse(self, request, chunks, usage, body, rid, created, kind, started) -> web.StreamResponse:
        """The whole answer as a stream; with stream_options.include_usage, as OpenAI sends it: `usage` null in
        every chunk, then one chunk with the usage (null without the tokenizer's counts) and no choices."""
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if include_usage:
            chunks = [*({**chunk, "usage": None} for chunk in chunks),
                      {"id": rid, "object": kind, "created": created, "model": self.model, "choices": [],
                       "usage": usage}]
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        self.metrics.first_token(time.monotonic() - started)
        for chunk in chunks:
            await _write(response, f"data: {json.dumps(chunk)}\n\n".encode())
        await _write(response, b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    # --- trtllm-serve (OpenAI proxy) ------------------------------------------------------------------

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
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=self.request_timeout)
        with backend_errors("trtllm-serve", self.request_timeout):
            upstream = await self.session.post(self.backend.url + path, json=body, timeout=timeout)
        try:
            if upstream.status != 200:
                raw = await upstream.read()
                if 400 <= upstream.status < 500:  # the client's mistake: trtllm-serve's words, OpenAI's shape
                    return backend_client_error(upstream.status, raw)
                raise FrontError(502, f"trtllm-serve answered HTTP {upstream.status}: "
                                      f"{raw[:500].decode(errors='replace')}")
            if not stream or not upstream.content_type.startswith("text/event-stream"):
                try:
                    data = await upstream.json(content_type=None)
                except (aiohttp.ClientError, ValueError, asyncio.TimeoutError) as error:
                    raise FrontError(502, f"trtllm-serve's answer could not be read: {type(error).__name__}") from None
                if isinstance(data, dict):
                    data["model"] = self.model
                    self.metrics.token_time(time.monotonic() - started, self._record_usage(data.get("usage")))
                return web.json_response(data)
            return await self._relay_stream(request, upstream, client_usage, started)
        finally:
            if upstream.content.at_eof():
                upstream.release()
            else:
                upstream.close()  # a client that left must not keep the backend generating

    async def _relay_stream(self, request, upstream, client_usage: bool, started: float) -> web.StreamResponse:
        response = web.StreamResponse(headers=SSE_HEADERS)
        await response.prepare(request)
        first_token: float | None = None
        completion: int | None = None
        try:
            async for raw_line in upstream.content:
                line = raw_line.decode(errors="replace").rstrip("\r\n")
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    await _write(response, b"data: [DONE]\n\n")
                    continue
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    await _write(response, f"data: {payload}\n\n".encode())
                    continue
                if isinstance(chunk, dict):
                    if chunk.get("usage") and not chunk.get("choices"):
                        completion = self._record_usage(chunk["usage"])
                        if not client_usage:
                            continue
                    elif not client_usage:
                        chunk.pop("usage", None)
                    elif "usage" not in chunk:
                        chunk["usage"] = None  # OpenAI's chunks say usage: null until the usage chunk
                    if "model" in chunk:
                        chunk["model"] = self.model
                if first_token is None:
                    first_token = time.monotonic() - started
                    self.metrics.first_token(first_token)
                await _write(response, f"data: {json.dumps(chunk)}\n\n".encode())
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, asyncio.TimeoutError) as error:
            # Headers are gone already: say it in the stream, and count it as a backend failure.
            message = f"trtllm-serve's stream broke off: {type(error).__name__}"
            log.warning("%s", message)
            self.metrics.backend_error("stream_broken")
            await _write(response, f"data: {json.dumps(error_body(message, 'backend_error', None, 502))}\n\n".encode())
            await response.write_eof()
            raise StreamBroken(response) from None
        await response.write_eof()
        if first_token is not None:
            self.metrics.token_time(time.monotonic() - started, completion, first_token)
        return response


def _sum_usage(usages: list[dict[str, int] | None]) -> dict[str, int] | None:
    if not usages or any(u is None for u in usages):
        return None
    return {k: sum(u[k] for u in usages) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def _sum_speculation(results: list[dict[str, Any]]) -> dict[str, Any]:
    draft = sum(r["speculation"]["draft_tokens"] for r in results)
    accepted = sum(r["speculation"]["accepted_draft_tokens"] for r in results)
    return {"acceptance_rate": accepted / draft if draft else None, "accepted_draft_tokens": accepted,
            "draft_tokens": draft}
