"""The Triton route's translation, pure: an OpenAI request's sampling parameters and token limit as the
generate request of Triton's BLS, and the BLS's answers as OpenAI's completion and chat answers, whole or as
one event stream (the BLS does not stream while speculating). The route (specdec.runtime.triton_route) does
the I/O, the draft length and the metrics.
"""

from __future__ import annotations

from typing import Any

import orjson

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI default for /v1/completions
CHAT_DEFAULT_MAX_TOKENS = 512


def strip_prompt(text: str, prompt: str) -> str:
    """The BLS answers a speculative request with prompt + completion (it merges the target's outputs)."""
    if prompt and text.startswith(prompt):
        return text[len(prompt) :]
    stripped = prompt.strip()
    if stripped and text.lstrip().startswith(stripped):
        return text.lstrip()[len(stripped) :]
    return text


def scalar(value: Any) -> Any:
    """A tensor's first element (Triton answers every output as a tensor)."""
    while isinstance(value, list) and value:
        value = value[0]
    return value


def number(value: Any) -> float | None:
    value = scalar(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The request's sampling parameters and stop words, as the BLS's inputs."""
    out: dict[str, Any] = {}
    for key in (
        "temperature",
        "top_p",
        "top_k",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ):
        if body.get(key) is not None:
            out[key] = body[key]
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_words"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_words"] = stop
    return out


def max_tokens(body: dict[str, Any], default: int) -> int:
    value = body.get("max_tokens")
    value = body.get("max_completion_tokens") if value is None else value
    return default if value is None else value


def generate_request(
    prompt: str, max_tokens: int, sampling: dict[str, Any], draft_len: int, use_draft_logits: bool
) -> dict[str, Any]:
    """The BLS's inputs: `num_draft_tokens` and `use_draft_logits` make it speculate, `return_perf_metrics`
    reports what speculation did."""
    return {
        "text_input": prompt,
        "max_tokens": max_tokens,
        "stream": False,
        "num_draft_tokens": draft_len,
        "use_draft_logits": use_draft_logits,
        "return_perf_metrics": True,
        **sampling,
    }


def completion_chunks(results: list[dict[str, Any]], rid: str, created: int, model: str) -> list[dict[str, Any]]:
    """The completions as a stream's chunks, one a prompt."""
    return [
        {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": i, "text": r["text"], "logprobs": None, "finish_reason": r["finish_reason"]}],
        }
        for i, r in enumerate(results)
    ]


def completion(
    results: list[dict[str, Any]], prompts: list[str], body: dict[str, Any], rid: str, created: int, model: str
) -> dict[str, Any]:
    """The completions as one answer, with their usage and what speculation did."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "text": (prompts[i] if body.get("echo") else "") + r["text"],
                "logprobs": None,
                "finish_reason": r["finish_reason"],
            }
            for i, r in enumerate(results)
        ],
        "usage": sum_usage([r["usage"] for r in results]),
        "speculation": sum_speculation(results),
    }


def chat_chunks(result: dict[str, Any], rid: str, created: int, model: str) -> list[dict[str, Any]]:
    """The chat completion as a stream's one chunk."""
    return [
        {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": result["text"]},
                    "finish_reason": result["finish_reason"],
                }
            ],
        }
    ]


def chat_completion(result: dict[str, Any], rid: str, created: int, model: str) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result["text"]},
                "finish_reason": result["finish_reason"],
            }
        ],
        "usage": result["usage"],
        "speculation": result["speculation"],
    }


def events(
    chunks: list[dict[str, Any]],
    usage: dict[str, int] | None,
    body: dict[str, Any],
    rid: str,
    created: int,
    kind: str,
    model: str,
) -> list[bytes]:
    """The whole answer as a stream's events; with stream_options.include_usage, as OpenAI sends it: `usage`
    null in every chunk, then one chunk with the usage (null without the tokenizer's counts) and no choices."""
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    if include_usage:
        chunks = [
            *({**chunk, "usage": None} for chunk in chunks),
            {"id": rid, "object": kind, "created": created, "model": model, "choices": [], "usage": usage},
        ]
    return [*(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks), b"data: [DONE]\n\n"]


def sum_usage(usages: list[dict[str, int] | None]) -> dict[str, int] | None:
    known = [u for u in usages if u is not None]
    if not usages or len(known) < len(usages):
        return None
    return {k: sum(u[k] for u in known) for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


def sum_speculation(results: list[dict[str, Any]]) -> dict[str, Any]:
    draft = sum(r["speculation"]["draft_tokens"] for r in results)
    accepted = sum(r["speculation"]["accepted_draft_tokens"] for r in results)
    return {
        "acceptance_rate": accepted / draft if draft else None,
        "accepted_draft_tokens": accepted,
        "draft_tokens": draft,
    }
