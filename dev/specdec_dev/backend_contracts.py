"""The HTTP contracts of the two servers specdec-runtime fronts, for whatever plays them locally.

- Triton's generate extension (server docs/protocol/extension_generate.md, src/http_server.cc): POST
  /v2/models/<model>/generate with the input tensors as top-level JSON keys; the answer carries every
  output tensor by name, a one-element tensor as a scalar; an inference error is HTTP 400 {"error": msg};
  GET /v2/health/ready is 200 when ready (400 otherwise). Inputs the model does not declare are refused,
  as Triton refuses them; the BLS model's own rules apply (no streaming while speculating). Triton's
  Prometheus metrics (docs/user_guide/metrics.md) are on a port of their own: counters by model and version.
- trtllm-serve's OpenAI server (tensorrt_llm/serve/openai_server.py): /health, /v1/models,
  /v1/completions, /v1/chat/completions (SSE with `data: ` chunks and `data: [DONE]`, a usage-only chunk when
  stream_options.include_usage), and GET /metrics with iteration statistics (drained on read).

Subclasses say what the model answers; the simulators (specdec_dev.simulator) and the tests' stand-ins
(tests/runtime/standins.py) are such subclasses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from specdec.runtime.triton import BLS_MODEL

# Request fields of trtllm-serve's CompletionRequest / ChatCompletionRequest that the front and the simulator
# send; the real models refuse unknown fields (extra="forbid"), and so does the contract.
COMPLETION_FIELDS = {
    "model",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "stream",
    "stream_options",
    "seed",
    "n",
    "echo",
    "presence_penalty",
    "frequency_penalty",
}
CHAT_FIELDS = {
    "model",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stop",
    "stream",
    "stream_options",
    "seed",
    "n",
    "presence_penalty",
    "frequency_penalty",
}


@dataclass(frozen=True)
class Generation:
    """What the BLS produced for one generate request: the completion and its speculation counts."""

    text: str
    draft_tokens: int
    accepted_tokens: int


class InferenceError(Exception):
    """A failed inference: Triton answers HTTP 400 with the message."""


# Help texts of Triton's counters, as Triton writes them.
TRITON_COUNTERS = {
    "nv_inference_compute_infer_duration_us": (
        "Cumulative compute inference duration in microseconds (does not include cached requests)"
    ),
    "nv_inference_exec_count": "Number of model executions performed (does not include cached requests)",
}
# Help texts of the TensorRT-LLM backend's gauges (inflight_batcher_llm/src/custom_metrics_reporter), of the
# latest iteration of a model.
TRITON_GAUGES = {
    "nv_trt_llm_general_metrics": "General TRT LLM metrics",
    "nv_trt_llm_inflight_batcher_metrics": "TRT LLM inflight_batcher-specific metrics",
}


class TritonContract:
    """Triton serving the BLS model's generate endpoint; `generate` says what the model answers."""

    model = BLS_MODEL
    ready = True
    declared_inputs: set[str] | None = None  # the BLS model's inputs, when the caller's should be checked

    async def generate(self, body: dict[str, Any]) -> Generation:
        raise NotImplementedError

    def counters(self) -> dict[str, Mapping[str, float]]:
        """Triton's counters (names of TRITON_COUNTERS) by model, all of version 1."""
        raise NotImplementedError

    def gauges(self) -> list[tuple[str, dict[str, str], float]]:
        """The TensorRT-LLM backend's gauges (names of TRITON_GAUGES): (name, labels, value)."""
        return []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v2/health/ready", self._ready)
        app.router.add_post("/v2/models/{model}/generate", self._generate)
        return app

    def metrics_app(self) -> web.Application:
        """What Triton serves on its metrics port."""

        async def metrics(_request: web.Request) -> web.Response:
            lines = []
            for name, by_model in self.counters().items():
                lines += [f"# HELP {name} {TRITON_COUNTERS[name]}", f"# TYPE {name} counter"]
                lines += [f'{name}{{model="{model}",version="1"}} {round(value)}' for model, value in by_model.items()]
            for name in TRITON_GAUGES:
                found = [(labels, value) for family, labels, value in self.gauges() if family == name]
                lines += [f"# HELP {name} {TRITON_GAUGES[name]}", f"# TYPE {name} gauge"] if found else []
                lines += [
                    name
                    + "{"
                    + ",".join(f'{k}="{v}"' for k, v in {**labels, "version": "1"}.items())
                    + "} "
                    + str(round(value))
                    for labels, value in found
                ]
            return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    async def _ready(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 400)

    def _refusal(self, model: str, body: dict[str, Any]) -> str | None:
        if model != self.model:
            return f"Request for unknown model: '{model}'"
        unknown = sorted(set(body) - self.declared_inputs - {"parameters"}) if self.declared_inputs else []
        if unknown:
            return f"unexpected inference input '{unknown[0]}' for model '{model}'"
        missing = [name for name in ("text_input", "max_tokens") if name not in body]
        if missing:
            return f"expected input '{missing[0]}'"
        if body.get("num_draft_tokens") and body.get("stream"):
            return "streaming is not supported with speculative decoding"
        return None

    async def _generate(self, request: web.Request) -> web.Response:
        body = await request.json()
        refusal = self._refusal(request.match_info["model"], body)
        if refusal:
            return web.json_response({"error": refusal}, status=400)
        try:
            result = await self.generate(body)
        except InferenceError as error:
            return web.json_response({"error": str(error)}, status=400)
        drafted = result.draft_tokens
        # The BLS answers a speculative request with the prompt followed by the completion.
        return web.json_response(
            {
                "model_name": self.model,
                "model_version": "1",
                "text_output": body["text_input"] + result.text,
                "acceptance_rate": result.accepted_tokens / drafted if drafted else 0.0,
                "total_accepted_draft_tokens": result.accepted_tokens,
                "total_draft_tokens": drafted,
                "arrival_time_ns": 1,
                "first_scheduled_time_ns": 2,
                "first_token_time_ns": 3,
                "last_token_time_ns": 4,
                "batch_index": 0,
                "sequence_index": 0,
                "cum_log_probs": 0.0,
            }
        )


@dataclass(frozen=True)
class Completion:
    """What trtllm-serve generated for one request: the streamed pieces, in order, and the token counts."""

    pieces: tuple[str, ...]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str = "stop"


class OpenAIError(Exception):
    """A refused or failed generation, answered with trtllm-serve's error body."""

    def __init__(self, status: int, message: str, kind: str):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"object": "error", "message": message, "type": kind, "code": status}, status=status)


class TrtllmServeContract:
    """trtllm-serve's OpenAI server; `complete` says what the model answers."""

    served_as = "model"  # trtllm-serve names the model after its directory
    ready = True

    async def complete(self, body: dict[str, Any], chat: bool) -> Completion:
        raise NotImplementedError

    def iteration_stats(self) -> list[Any]:
        """The iteration statistics since the last call (trtllm-serve hands them out once)."""
        raise NotImplementedError

    async def chunk_sent(self, request: web.Request) -> bool:
        """Called after each streamed chunk; False ends the stream there."""
        return True

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        return app

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503)

    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": self.served_as, "object": "model"}]})

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.json_response(self.iteration_stats())

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generation(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generation(request, chat=True)

    async def _generation(self, request: web.Request, chat: bool) -> web.StreamResponse:
        body = await request.json()
        unknown = sorted(set(body) - (CHAT_FIELDS if chat else COMPLETION_FIELDS))
        if unknown:
            return _error(400, f"extra fields not permitted: {unknown}", "BadRequestError")
        try:
            result = await self.complete(body, chat)
        except OpenAIError as error:
            return _error(error.status, error.message, error.kind)
        kind = "chat.completion" if chat else "text_completion"
        usage = {
            "prompt_tokens": result.prompt_tokens,
            "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        }
        if not body.get("stream"):
            text = "".join(result.pieces)
            choice = (
                {"index": 0, "message": {"role": "assistant", "content": text}} if chat else {"index": 0, "text": text}
            )
            return web.json_response(
                {
                    "id": "x",
                    "object": kind,
                    "created": int(time.time()),
                    "model": self.served_as,
                    "choices": [{**choice, "finish_reason": result.finish_reason}],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunk_kind = f"{kind}.chunk" if chat else kind
        for i, piece in enumerate(result.pieces):
            finish = result.finish_reason if i == len(result.pieces) - 1 else None
            choice = {"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece}
            chunk = {
                "id": "x",
                "object": chunk_kind,
                "created": 0,
                "model": self.served_as,
                "choices": [{**choice, "finish_reason": finish}],
            }
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if not await self.chunk_sent(request):
                return response
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk = {"id": "x", "object": chunk_kind, "model": self.served_as, "choices": [], "usage": usage}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        return response
