"""The front as the official `openai` client sees it, on both routes: trtllm-serve's OpenAI API relayed (a
stand-in, kind "openai") and Triton's generate endpoint translated (a stand-in BLS, kind "triton").

Errors in OpenAI's shape (an unknown model is 404 model_not_found; a bad parameter is 400 naming it, and no
backend sees the request), streamed usage with stream_options.include_usage, and /v1/models."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from tests.runtime import test_front_openai as relay
from tests.runtime import test_front_triton as translation
from tests.runtime.helpers import metric
from tests.runtime.standins import OpenAIState, TritonState
from tests.runtime.test_front_triton import tokenizer_dir  # noqa: F401 - the fixture

SERVED = {"openai": relay.PYTORCH.served_model_name, "triton": translation.CONFIG.served_model_name}


@dataclass
class Route:
    kind: str
    state: Any  # the stand-in: what it received is in .requests
    stack: Callable[[], Any]  # -> (front, url, aiohttp client)

    @property
    def model(self) -> str:
        return SERVED[self.kind]

    @contextlib.asynccontextmanager
    async def client(self):
        """The front and the official client pointed at it (no retries: each request is sent once)."""
        async with self.stack() as (front, url, session):
            client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=10)
            try:
                yield client, front, url, session
            finally:
                await client.close()


@pytest.fixture(params=["openai", "triton"])
def route(request, tokenizer_dir) -> Route:  # noqa: F811 - the fixture imported above
    if request.param == "openai":
        state = OpenAIState()
        return Route("openai", state, lambda: relay.stack(state))
    state = TritonState(declared_inputs=translation.bls_inputs())
    return Route("triton", state, lambda: translation.stack(state, tokenizer_dir))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def create(client: openai.AsyncOpenAI, endpoint: str, model: str, **kwargs):
    if endpoint == "chat":
        kwargs.setdefault("messages", [{"role": "user", "content": "Hello there"}])
        return client.chat.completions.create(model=model, **kwargs)
    kwargs.setdefault("prompt", "Hello there")
    return client.completions.create(model=model, **kwargs)


# --- the model ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_an_unknown_model_is_404_model_not_found_in_openais_shape(route, endpoint):
    async def scenario():
        async with route.client() as (client, front, url, session):
            with pytest.raises(openai.NotFoundError) as raised:
                await create(client, endpoint, "gpt-4o")
            path = "/v1/chat/completions" if endpoint == "chat" else "/v1/completions"
            async with session.post(
                url + path, json={"model": "gpt-4o", "prompt": "Hi", "messages": [{"role": "user", "content": "Hi"}]}
            ) as resp:
                return raised.value, resp.status, await resp.json()

    error, status, raw = run(scenario())
    assert error.status_code == 404 and error.code == "model_not_found"
    # OpenAI's own answer for a model that does not exist: param null, code model_not_found.
    message = error.body["message"]
    assert error.body == {"message": message, "type": "invalid_request_error", "param": None, "code": "model_not_found"}
    assert "`gpt-4o` does not exist" in message and route.model in message
    assert status == 404 and raw == {"error": error.body}
    assert route.state.requests == []


def test_the_served_model_is_served_and_so_is_a_request_that_names_none(route):
    async def scenario():
        async with route.client() as (client, front, url, session):
            named = await client.completions.create(model=route.model, prompt="Hello there", max_tokens=4)
            unnamed = []
            for body in (
                {"prompt": "Hello there"},
                {"model": None, "prompt": "Hello there"},
                {"model": "", "prompt": "Hello there"},
            ):
                async with session.post(f"{url}/v1/completions", json=body) as resp:
                    unnamed.append((resp.status, (await resp.json())["model"]))
            return named, unnamed

    named, unnamed = run(scenario())
    assert named.model == route.model and named.choices[0].text
    assert unnamed == [(200, route.model)] * 3
    assert len(route.state.requests) == 4
    if route.kind == "openai":  # trtllm-serve gets the served name whatever the client said
        assert {r["model"] for r in route.state.requests} == {route.model}


def test_models_are_listed_and_retrieved_with_openais_fields(route):
    async def scenario():
        async with route.client() as (client, front, url, session):
            listed = await client.models.list()
            retrieved = await client.models.retrieve(route.model)  # the id has a "/": sent as %2F
            with pytest.raises(openai.NotFoundError) as missing:
                await client.models.retrieve("gpt-4o")
            async with session.get(f"{url}/v1/models") as resp:
                return listed, retrieved, missing.value, await resp.json()

    listed, retrieved, missing, raw = run(scenario())
    assert raw["object"] == "list" and [m.id for m in listed.data] == [route.model]
    (card,) = raw["data"]
    assert set(card) == {"id", "object", "created", "owned_by"}
    assert card["object"] == "model" and isinstance(card["created"], int) and isinstance(card["owned_by"], str)
    assert retrieved.model_dump() == card
    assert missing.code == "model_not_found"


# --- parameters --------------------------------------------------------------------------------------------

INVALID = [
    # endpoint, what the client sends, param, code
    ("completions", {"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ("completions", {"max_tokens": -3}, "max_tokens", "integer_below_min_value"),
    ("completions", {"max_tokens": 2.5}, "max_tokens", "invalid_type"),
    ("completions", {"max_tokens": "16"}, "max_tokens", "invalid_type"),
    ("chat", {"max_tokens": True}, "max_tokens", "invalid_type"),
    ("chat", {"max_completion_tokens": 0}, "max_completion_tokens", "integer_below_min_value"),
    ("chat", {"max_completion_tokens": "many"}, "max_completion_tokens", "invalid_type"),
    ("completions", {"n": 0}, "n", "integer_below_min_value"),
    ("chat", {"n": 1.5}, "n", "invalid_type"),
    ("completions", {"temperature": 2.5}, "temperature", "decimal_above_max_value"),
    ("chat", {"temperature": -0.1}, "temperature", "decimal_below_min_value"),
    ("chat", {"temperature": "hot"}, "temperature", "invalid_type"),
    ("completions", {"top_p": 1.5}, "top_p", "decimal_above_max_value"),
    ("chat", {"top_p": -1}, "top_p", "decimal_below_min_value"),
    ("completions", {"extra_body": {"stream": "yes"}}, "stream", "invalid_type"),
    ("chat", {"extra_body": {"stream": 1}}, "stream", "invalid_type"),
    ("chat", {"stream_options": {"include_usage": True}}, "stream_options", "invalid_value"),  # without stream
    ("completions", {"prompt": ""}, "prompt", "empty_string"),
    ("completions", {"prompt": []}, "prompt", "empty_array"),
    ("completions", {"prompt": ["Hi", ""]}, "prompt[1]", "empty_string"),
    ("completions", {"prompt": None}, "prompt", "missing_required_parameter"),
    ("completions", {"prompt": {"text": "Hi"}}, "prompt", "invalid_type"),
    ("chat", {"messages": []}, "messages", "empty_array"),
    ("chat", {"messages": [{"content": "Hi"}]}, "messages[0].role", "missing_required_parameter"),
]


@pytest.mark.parametrize(
    "endpoint, sent, param, code", INVALID, ids=[f"{e}-{p}-{c}-{i}" for i, (e, _, p, c) in enumerate(INVALID)]
)
def test_an_invalid_parameter_is_400_naming_it_and_no_backend_sees_it(route, endpoint, sent, param, code):
    async def scenario():
        async with route.client() as (client, front, url, session):
            with pytest.raises(openai.BadRequestError) as raised:
                await create(client, endpoint, route.model, **sent)
            return raised.value

    error = run(scenario())
    assert error.status_code == 400
    assert error.body["type"] == "invalid_request_error"
    assert error.param == param and error.code == code
    assert f"'{param}'" in error.body["message"]
    assert route.state.requests == []


def test_n_above_1_is_refused_on_the_triton_route_and_left_to_trtllm_serve_on_the_other(route):
    async def scenario():
        async with route.client() as (client, front, url, session):
            try:
                return await client.completions.create(model=route.model, prompt="Hello there", n=2)
            except openai.BadRequestError as error:
                return error

    answer = run(scenario())
    if route.kind == "triton":  # the BLS generates one sequence per request while speculating
        assert isinstance(answer, openai.BadRequestError)
        assert answer.param == "n" and answer.code == "unsupported_value" and "n must be 1" in answer.body["message"]
        assert route.state.requests == []
    else:
        assert isinstance(answer, openai.types.Completion)
        assert route.state.requests[0]["n"] == 2


def test_an_error_trtllm_serve_answers_reaches_the_client_in_openais_shape():
    state = OpenAIState()

    async def scenario():
        async with relay.stack(state) as (front, url, session):
            async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
                with pytest.raises(openai.BadRequestError) as raised:
                    # Valid for OpenAI, refused by trtllm-serve's request model.
                    await client.completions.create(model=relay.PYTORCH.served_model_name, prompt="Hi", user="me")
                return raised.value

    error = run(scenario())
    assert error.body["type"] == "invalid_request_error" and "extra fields not permitted" in error.body["message"]
    assert set(error.body) == {"message", "type", "param", "code"}


# --- streaming ---------------------------------------------------------------------------------------------


def _text(chunk, endpoint: str) -> str:
    choice = chunk.choices[0]
    return (choice.delta.content or "") if endpoint == "chat" else choice.text


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_include_usage_streams_a_final_usage_chunk_with_no_choices(route, endpoint):
    async def scenario():
        async with route.client() as (client, front, url, session):
            with_usage = [
                c
                async for c in await create(
                    client, endpoint, route.model, stream=True, stream_options={"include_usage": True}
                )
            ]
            without = [c async for c in await create(client, endpoint, route.model, stream=True)]
            return with_usage, without

    with_usage, without = run(scenario())
    *content, last = with_usage
    assert last.choices == [] and last.usage is not None
    # The stand-in's counts; on the Triton route the tokenizer's, of the prompt (chat: as the template made it).
    prompt_tokens = {"openai": 5, "triton": 8 if endpoint == "chat" else 2}[route.kind]
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        prompt_tokens,
        3,
        prompt_tokens + 3,
    )
    assert content and all(c.choices and c.usage is None for c in content)
    assert all(c.model == route.model for c in with_usage)
    expected = "Hello, world" if route.kind == "openai" else " and then some"
    assert "".join(_text(c, endpoint) for c in content) == expected
    assert content[-1].choices[0].finish_reason == "stop"
    # Without include_usage: no usage chunk, and no usage in the chunks.
    assert without and all(c.choices and c.usage is None for c in without)
    assert "".join(_text(c, endpoint) for c in without) == expected


def test_include_usage_on_the_triton_route_without_token_counts_still_ends_with_the_usage_chunk():
    """Without the tokenizer (no token counts), the final chunk is there all the same, its usage null."""
    state = TritonState(declared_inputs=translation.bls_inputs())

    async def scenario():
        async with translation.stack(state, None) as (front, url, session):
            async with session.post(
                f"{url}/v1/completions",
                json={"prompt": "Hello", "stream": True, "stream_options": {"include_usage": True}},
            ) as resp:
                return await translation.sse_events(resp)

    events = run(scenario())
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"] == [] and events[-2]["usage"] is None
    assert events[0]["choices"][0]["text"] == " and then some" and events[0]["usage"] is None


def test_a_bad_request_is_counted_as_400_by_the_front(route):
    async def scenario():
        async with route.client() as (client, front, url, session):
            with pytest.raises(openai.BadRequestError):
                await client.completions.create(model=route.model, prompt="Hi", temperature=3)
            with pytest.raises(openai.NotFoundError):
                await client.completions.create(model="nope", prompt="Hi")
            return front

    front = run(scenario())
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="400") == 1
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="404") == 1
    assert metric(front, "specdec_backend_errors_total", kind="invalid_request_error") == 0


@pytest.mark.parametrize("kind", ["openai", "triton"])
def test_a_body_that_is_not_json_is_400_in_openais_shape(kind, tokenizer_dir):  # noqa: F811 - the fixture
    state = OpenAIState() if kind == "openai" else TritonState(declared_inputs=translation.bls_inputs())
    stack = relay.stack(state) if kind == "openai" else translation.stack(state, tokenizer_dir)

    async def scenario():
        async with stack as (front, url, session):
            async with session.post(
                f"{url}/v1/completions", data="{not json", headers={"Content-Type": "application/json"}
            ) as resp:
                return resp.status, await resp.json()

    status, body = run(scenario())
    assert status == 400
    assert body == {
        "error": {
            "message": "The request body is not valid JSON.",
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
    }
    assert state.requests == []
