"""A fault of the front's own at each step of a relayed request (checking it, sending it on, the backend's head,
each event, the end): the client gets an answer (a 500, or an error event in a stream already started), the
log says where without the request's body, the gauges are restored and the connection serves on."""

from __future__ import annotations

import asyncio
import json

import pytest

from specdec.runtime import relay_exchange
from specdec.runtime.chunk_rewriter import ChunkRewriter
from specdec.runtime.front_server import FrontConnection
from specdec.runtime.metrics import RuntimeMetrics
from specdec.runtime.openai_relay import OpenAIRelay
from specdec.runtime.upstream import Response, Upstream
from tests.runtime.helpers import metric
from tests.runtime.standins import OpenAIState
from tests.runtime.test_front_openai import data_lines, run, stack
from tests.runtime.test_front_server import connection, get, post, response

SECRET = "a prompt the log must not show"

# (where, what, streamed, what the client gets): "500" an error answer; "error-event" a stream ending in one;
# "either" the one or the other, as the first event comes with the backend's head or after it.
STEPS = [
    (relay_exchange, "parse_request", False, "500"),
    (OpenAIRelay, "backend_request", True, "500"),
    (Upstream, "send", False, "500"),
    (Response, "stream", False, "500"),
    (Response, "stream", True, "500"),
    (ChunkRewriter, "__init__", True, "500"),
    (FrontConnection, "start_events", True, "500"),
    (ChunkRewriter, "feed", True, "either"),
    (RuntimeMetrics, "first_token", True, "either"),
    (ChunkRewriter, "finish", True, "error-event"),
    (OpenAIRelay, "record_usage", False, "500"),
    (RuntimeMetrics, "token_time", False, "500"),
    (relay_exchange, "backend_client_error", False, "500"),  # the stand-in answers 400 here
]


@pytest.mark.parametrize(
    "where, name, stream, gets",
    STEPS,
    ids=[f"{getattr(w, '__name__', w)}.{n}-{'stream' if s else 'whole'}" for w, n, s, _ in STEPS],
)
def test_a_fault_at_each_step_ends_the_request_and_restores_the_gauges(monkeypatch, caplog, where, name, stream, gets):
    state = OpenAIState(fail_status=400 if name == "backend_client_error" else None)

    def fault(*args, **kwargs):
        raise RuntimeError("an injected fault")

    monkeypatch.setattr(where, name, fault)

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": SECRET, "stream": stream}) + get("/health"))
            return front, [await asyncio.wait_for(response(reader), 5) for _ in range(2)]

    front, ((status, _, body), (health, _, _)) = run(scenario())
    if gets == "500" or (gets == "either" and status == 500):
        assert status == 500 and json.loads(body)["error"]["type"] == "server_error"
    else:
        assert status == 200 and data_lines(body.decode())[-1]["error"]["type"] == "server_error"
    assert health == 200
    assert "failed relaying a request" in caplog.text and SECRET not in caplog.text
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="500") == 1
    assert metric(front, "specdec_backend_errors_total", kind="server_error") == 0  # not trtllm-serve's


def test_a_fault_after_the_answer_is_whole_leaves_it_whole_and_counted_as_answered(monkeypatch, caplog):
    state = OpenAIState()

    def fault(*args, **kwargs):
        raise RuntimeError("an injected fault")

    monkeypatch.setattr(OpenAIRelay, "record_usage", fault)

    async def scenario():
        async with stack(state) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(post("/v1/completions", {"prompt": SECRET, "stream": True}) + get("/health"))
            return front, [await asyncio.wait_for(response(reader), 5) for _ in range(2)]

    front, ((status, _, body), (health, _, _)) = run(scenario())
    assert status == 200 and data_lines(body.decode())[-1] == "[DONE]" and health == 200
    assert "failed relaying a request" in caplog.text and SECRET not in caplog.text
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="200") == 1
