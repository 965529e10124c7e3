"""What the front checks in an OpenAI request before a backend sees it, and OpenAI's error shape.

Every error the front answers is `{"error": {"message", "type", "param", "code"}}`, as OpenAI's API answers
them; a refused request is `invalid_request_error` with the field in `param` and OpenAI's `code`
(`invalid_type`, `integer_below_min_value`, `decimal_above_max_value`, `missing_required_parameter`, ...).
A model other than the served one is 404 `model_not_found` (`param` null, as OpenAI answers it). A request
without a model (absent, null or "") goes to the one model there is, as vLLM serves it: OpenAI would refuse
it (400), but curl users and load generators leave it out, and the official clients always send one.
trtllm-serve's own 4xx answers reach the client in the same shape, in trtllm-serve's words.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

# name -> (lowest, highest), OpenAI's ranges; null is the default everywhere.
NUMBERS = {"temperature": (0, 2), "top_p": (0, 1), "presence_penalty": (-2, 2), "frequency_penalty": (-2, 2)}
POSITIVE_INTEGERS = ("max_tokens", "max_completion_tokens", "n")


def error_body(message: str, kind: str, param: str | None = None, code: str | int | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class APIError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | int | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code

    def body(self) -> bytes:
        return orjson.dumps(error_body(self.message, self.kind, self.param, self.code))


def invalid(message: str, param: str | None, code: str | None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def model_not_found(requested: str, served: str) -> APIError:
    return APIError(
        404,
        f"The model `{requested}` does not exist or you do not have access to it (this server serves `{served}`).",
        "invalid_request_error",
        None,
        "model_not_found",
    )


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for types, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a decimal"),
        (str, "a string"),
        (list, "an array"),
        (dict, "an object"),
    ):
        if isinstance(value, types):
            return name
    return type(value).__name__


def _show(value: Any) -> str:
    return json.dumps(value)


def _invalid_type(param: str, expected: str, value: Any) -> APIError:
    return invalid(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.", param, "invalid_type"
    )


def _missing(param: str) -> APIError:
    return invalid(f"Missing required parameter: '{param}'.", param, "missing_required_parameter")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_model(body: dict[str, Any], served: str) -> None:
    requested = body.get("model")
    if requested is None or requested == "":
        return
    if not isinstance(requested, str):
        raise _invalid_type("model", "a string", requested)
    if requested != served:
        raise model_not_found(requested, served)


def _check_prompt(prompt: Any, text_only: bool) -> None:
    if prompt is None:
        raise _missing("prompt")
    if isinstance(prompt, str):
        if not prompt:
            raise invalid(
                "Invalid 'prompt': empty string. Expected a string with minimum length 1, but got an "
                "empty string instead.",
                "prompt",
                "empty_string",
            )
        return
    if not isinstance(prompt, list):
        raise _invalid_type("prompt", "a string or an array", prompt)
    if not prompt:
        raise invalid(
            "Invalid 'prompt': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "prompt",
            "empty_array",
        )
    if all(isinstance(p, str) for p in prompt):
        if not all(prompt):
            param = f"prompt[{prompt.index('')}]"
            raise invalid(
                f"Invalid '{param}': empty string. Expected a string with minimum length 1, but got an "
                "empty string instead.",
                param,
                "empty_string",
            )
        return
    token_ids = all(_is_int(t) for t in prompt) or all(
        isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt
    )
    if not token_ids:
        raise _invalid_type(
            "prompt",
            "a string, an array of strings, an array of token ids or an array of non-empty token-id arrays",
            prompt,
        )
    if text_only:
        raise invalid(
            "Invalid 'prompt': the Triton route takes text (a string or an array of strings); token "
            "ids need trtllm-serve.",
            "prompt",
            "unsupported_value",
        )


def _check_messages(messages: Any) -> None:
    if messages is None:
        raise _missing("messages")
    if not isinstance(messages, list):
        raise _invalid_type("messages", "an array", messages)
    if not messages:
        raise invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
            "messages",
            "empty_array",
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise _invalid_type(f"messages[{i}]", "an object", message)
        if message.get("role") is None:
            raise _missing(f"messages[{i}].role")
        if not isinstance(message["role"], str):
            raise _invalid_type(f"messages[{i}].role", "a string", message["role"])


def _check_sampling(body: dict[str, Any], one_choice: bool) -> None:
    for param in POSITIVE_INTEGERS:
        value = body.get(param)
        if value is None:
            continue
        if not _is_int(value):
            raise _invalid_type(param, "an integer", value)
        if value < 1:
            raise invalid(
                f"Invalid '{param}': integer below minimum value. Expected a value >= 1, but got {value} instead.",
                param,
                "integer_below_min_value",
            )
    if one_choice and body.get("n") not in (None, 1):
        raise invalid(
            "Invalid 'n': n must be 1 on the Triton route (draft-target speculation through the "
            "tensorrt_llm_bls model, one sequence per request).",
            "n",
            "unsupported_value",
        )
    for param, (low, high) in NUMBERS.items():
        value = body.get(param)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _invalid_type(param, "a number", value)
        if not value >= low:  # NaN too
            raise invalid(
                f"Invalid '{param}': decimal below minimum value. Expected a value >= {low}, but got "
                f"{_show(value)} instead.",
                param,
                "decimal_below_min_value",
            )
        if not value <= high:
            raise invalid(
                f"Invalid '{param}': decimal above maximum value. Expected a value <= {high}, but got "
                f"{_show(value)} instead.",
                param,
                "decimal_above_max_value",
            )
    if body.get("seed") is not None and not _is_int(body["seed"]):
        raise _invalid_type("seed", "an integer", body["seed"])
    stop = body.get("stop")
    if (
        stop is not None
        and not isinstance(stop, str)
        and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop))
    ):
        raise _invalid_type("stop", "a string or an array of strings", stop)


def _check_stream(body: dict[str, Any]) -> None:
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _invalid_type("stream", "a boolean", stream)
    options = body.get("stream_options")
    if options is None:
        return
    if not isinstance(options, dict):
        raise _invalid_type("stream_options", "an object", options)
    if not stream:
        raise invalid(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "stream_options",
            "invalid_value",
        )
    include_usage = options.get("include_usage")
    if include_usage is not None and not isinstance(include_usage, bool):
        raise _invalid_type("stream_options.include_usage", "a boolean", include_usage)


def check_request(body: dict[str, Any], *, chat: bool, served_model: str, triton: bool) -> None:
    """Raise the APIError OpenAI would answer for this completion (chat=False) or chat completion request.
    The Triton route takes one choice (n = 1) and text prompts only; trtllm-serve answers n and token ids."""
    _check_model(body, served_model)
    if chat:
        _check_messages(body.get("messages"))
    else:
        _check_prompt(body.get("prompt"), text_only=triton)
    _check_sampling(body, one_choice=triton)
    _check_stream(body)


def parse_request(raw: bytes, *, chat: bool, served_model: str, triton: bool) -> dict[str, Any]:
    """The request body, checked (check_request): the APIError to answer otherwise."""
    try:
        body = orjson.loads(raw)
    except ValueError:
        raise invalid("The request body is not valid JSON.", None, None) from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, None)
    check_request(body, chat=chat, served_model=served_model, triton=triton)
    return body


def backend_client_error(status: int, raw: bytes) -> bytes:
    """A 4xx of trtllm-serve (its `{"object": "error", "message", "type", "param", "code"}`) in OpenAI's shape."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return raw
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        message, param = data["message"], data.get("param")
    else:
        message, param = raw[:500].decode(errors="replace") or f"trtllm-serve answered HTTP {status}", None
    return orjson.dumps(error_body(message, "invalid_request_error", param if isinstance(param, str) else None))
