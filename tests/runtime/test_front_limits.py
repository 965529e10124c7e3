"""The front's limits on its clients (FrontLimits), over raw sockets: too many connections (503), a head or a
body that arrives too slowly (408), more request bodies being received than the front holds (503), a client
that takes nothing of its answer (dropped); each counted by reason, the gauges restored."""

from __future__ import annotations

import asyncio
import json
import time

from specdec.api.runtime_config import FrontLimits, RuntimeConfig
from specdec.plan import Plan, plan
from specdec.runtime import launch
from specdec.runtime.front import Front
from specdec.runtime.front_server import FrontServer
from specdec.settings import Settings
from tests.runtime.helpers import metric
from tests.runtime.standins import OpenAIState
from tests.runtime.test_front_openai import run
from tests.runtime.test_front_server import connection, get, own_server, post, response


def test_a_connection_past_the_limit_is_answered_503_as_it_connects_and_the_next_one_after_a_close_served():
    state = OpenAIState()

    async def scenario():
        async with own_server(state, max_connections=2) as (server, url):
            async with connection(url) as (r1, w1), connection(url) as (r2, w2):
                for writer, reader in ((w1, r1), (w2, r2)):
                    writer.write(get("/health"))
                    assert (await response(reader))[0] == 200
                async with connection(url) as (r3, _):
                    refused = await asyncio.wait_for(response(r3), 2), await asyncio.wait_for(r3.read(), 2)
            await asyncio.sleep(0.1)
            async with connection(url) as (r4, w4):
                w4.write(get("/health"))
                after = await asyncio.wait_for(response(r4), 2)
            return server.front, refused, after

    front, ((status, headers, body), rest), (after, _, _) = run(scenario())
    assert status == 503 and headers["retry-after"] == "1" and headers["connection"] == "close" and rest == b""
    assert "2 connections at most" in json.loads(body)["error"]["message"] and after == 200
    assert metric(front, "specdec_front_refusals_total", reason="too_many_connections") == 1


def test_a_head_sent_a_byte_at_a_time_is_408_within_the_head_timeout_of_its_first_byte():
    state = OpenAIState()

    async def scenario():
        async with own_server(state, head_timeout_seconds=0.5) as (server, url), connection(url) as (reader, writer):
            started = time.monotonic()
            answer = asyncio.ensure_future(response(reader))
            for byte in b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 100:
                if answer.done():
                    break
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)  # each byte well within any per-read timeout
            status, headers, body = await asyncio.wait_for(answer, 2)
            return server.front, status, headers, body, time.monotonic() - started

    front, status, headers, body, took = run(scenario())
    assert status == 408 and headers["connection"] == "close" and "within 0.5s" in json.loads(body)["error"]["message"]
    assert took < 2.0
    assert metric(front, "specdec_front_refusals_total", reason="head_timeout") == 1


def test_a_body_that_stops_arriving_is_408_after_the_body_timeout_and_its_bytes_are_let_go():
    state = OpenAIState()

    async def scenario():
        async with own_server(state, body_timeout_seconds=0.3) as (server, url), connection(url) as (reader, writer):
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            await asyncio.sleep(0.1)
            held = server.buffered_bodies
            answer = await asyncio.wait_for(response(reader), 3)
            return server, held, answer

    server, held, (status, _, body) = run(scenario())
    assert held == 100 and server.buffered_bodies == 0
    assert status == 408 and "body did not come" in json.loads(body)["error"]["message"] and not state.requests
    assert metric(server.front, "specdec_front_refusals_total", reason="body_timeout") == 1


def test_a_body_past_what_the_front_holds_for_all_connections_is_503_and_one_within_it_is_served():
    state = OpenAIState()
    raw = json.dumps({"prompt": "x" * 500}).encode()

    async def scenario():
        async with own_server(state, max_buffered_body_bytes=800) as (server, url):
            async with connection(url) as (slow, slow_writer), connection(url) as (other, other_writer):
                whole = post("/v1/completions", {"prompt": "x" * 500})
                slow_writer.write(whole[: -len(raw) + 10])  # the head and 10 of its body's bytes: 500 and more held
                await asyncio.sleep(0.1)
                other_writer.write(whole[: -len(raw) + 10])  # as much again: past the 800
                refused = await asyncio.wait_for(response(other), 2)
                slow_writer.write(whole[-len(raw) + 10 :])
                served = await asyncio.wait_for(response(slow), 2)
            return server, refused, served

    server, (status, _, body), (served, _, _) = run(scenario())
    assert status == 503 and "request bodies" in json.loads(body)["error"]["message"] and served == 200
    assert server.buffered_bodies == 0
    assert metric(server.front, "specdec_front_refusals_total", reason="bodies_buffered") == 1


def test_a_client_that_takes_nothing_of_its_stream_is_dropped_after_the_send_timeout_and_its_request_ended():
    state = OpenAIState(pieces=("x" * 65536,) * 200)  # 13 MB of events, more than the sockets' buffers hold

    async def scenario():
        async with own_server(state, send_timeout_seconds=0.5) as (server, url):
            async with connection(url, receive_buffer=4096) as (reader, writer):
                writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}))
                await asyncio.sleep(0.3)
                in_flight = metric(server.front, "specdec_requests_in_flight")
                started = time.monotonic()
                while not server.front.metrics.render().count(b'reason="send_timeout"'):
                    await asyncio.sleep(0.1)
                    assert time.monotonic() - started < 5, "not dropped"
                await asyncio.sleep(0.1)
                return server.front, in_flight, len(server.connections)

    front, in_flight, connections = run(scenario())
    assert in_flight == 1 and connections == 0
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="499") == 1


def test_the_limits_are_set_from_the_speculative_deployment_into_the_runtime_config():
    spec = {
        "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "runtime": {"front": {"maxConnections": 64, "headTimeoutSeconds": 10}},
    }
    result = plan(
        {
            "apiVersion": "specdec.io/v1alpha1",
            "kind": "SpeculativeDeployment",
            "metadata": {"name": "limits", "namespace": "default"},
            "spec": spec,
        },
        Settings(),
    )
    assert isinstance(result, Plan), result
    limits = result.runtime.front_limits
    assert limits == FrontLimits(max_connections=64, head_timeout_seconds=10)
    written = result.runtime.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert written["frontLimits"]["maxConnections"] == 64 and written["frontLimits"]["keepaliveTimeoutSeconds"] == 75
    read = RuntimeConfig.model_validate_json(json.dumps(written))  # what specdec-runtime reads back
    front = Front(read, launch.plan_launch(read).backend, stats_interval=0)
    assert FrontServer(front).limits == limits  # the server a pod runs holds its clients to them


def test_a_body_waiting_its_turn_behind_a_stream_counts_in_the_buffered_bodies_until_it_starts():
    state = OpenAIState(pieces=tuple("abcd"), chunk_delay=0.2)

    async def scenario():
        async with own_server(state) as (server, url), connection(url) as (reader, writer):
            second = post("/v1/completions", {"prompt": "x" * 1000})
            writer.write(post("/v1/completions", {"prompt": "Hi", "stream": True}) + second)
            await asyncio.sleep(0.3)  # the stream is being answered; the second request is read and waits
            waiting = server.buffered_bodies
            answers = [await asyncio.wait_for(response(reader), 5) for _ in range(2)]
            return waiting, server.buffered_bodies, [status for status, _, _ in answers]

    waiting, after, statuses = run(scenario())
    assert waiting == len(json.dumps({"prompt": "x" * 1000})) and after == 0 and statuses == [200, 200]
