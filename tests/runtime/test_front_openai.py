"""The front over real HTTP against a stand-in speaking trtllm-serve's OpenAI API."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import json
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from specdec.runtime import launch
from specdec.runtime.front import Front
from tests.runtime.helpers import (
    eventually,
    free_port,
    metric,
    parse_prometheus,
    scenario_configs,
    serving,
    serving_front,
)
from tests.runtime.standins import OpenAIState

CONFIGS = scenario_configs()
PYTORCH = CONFIGS["pytorch-llama-3.1-8b-draft-1b"]
REDRAFTER = CONFIGS["vicuna-7b-redrafter"]


@contextlib.asynccontextmanager
async def stack(state: OpenAIState, config=PYTORCH, **front_args):
    async with serving(state.app(), handler_cancellation=True) as backend_url:
        backend = dataclasses.replace(launch.plan_launch(config).backend, url=backend_url)
        front_args.setdefault("stats_interval", 0)
        front = Front(config, backend, **front_args)
        async with serving_front(front) as url:
            async with aiohttp.ClientSession() as client:
                yield front, url, client


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def data_lines(text: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            payload = line[6:]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_completion_is_proxied_with_the_served_model_name():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}) as resp:
                assert resp.status == 200
                body = await resp.json()
            async with client.post(
                f"{url}/v1/chat/completions",
                json={"model": PYTORCH.served_model_name, "messages": [{"role": "user", "content": "Hi"}]},
            ) as resp:
                chat = await resp.json()
            async with client.get(f"{url}/metrics") as resp:
                return body, chat, parse_prometheus(await resp.text())

    body, chat, metrics = run(scenario())
    assert state.requests[0] == {"prompt": "Hi", "max_tokens": 4, "model": "meta-llama/Llama-3.1-8B-Instruct"}
    assert body["model"] == chat["model"] == "meta-llama/Llama-3.1-8B-Instruct"  # not trtllm-serve's name
    assert body["choices"][0]["text"] == "Hello, world"
    assert chat["choices"][0]["message"]["content"] == "Hello, world"
    assert metrics["specdec_prompt_tokens_total"] == 10 and metrics["specdec_completion_tokens_total"] == 6
    assert metrics['specdec_requests_total{endpoint="/v1/chat/completions",status="200"}'] == 1
    assert metrics["specdec_time_per_output_token_seconds_count"] == 2  # whole answers: time / tokens


def test_streaming_passes_chunks_through_as_they_come():
    state = OpenAIState(pieces=("a", "b", "c", "d"), chunk_delay=0.15)

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "stream": True}) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                first = await resp.content.readline()
                while not first.strip():
                    first = await resp.content.readline()
                sent_when_first_arrived = state.chunks_sent
                rest = (await resp.read()).decode()
            async with client.get(f"{url}/metrics") as resp:
                return first.decode(), sent_when_first_arrived, rest, parse_prometheus(await resp.text())

    first, sent, rest, metrics = run(scenario())
    assert json.loads(first[6:])["choices"][0]["text"] == "a"
    assert sent < 4  # the first chunk reached the client before the backend had written them all
    events = data_lines(rest)
    assert [e["choices"][0]["text"] for e in events if e != "[DONE]"] == ["b", "c", "d"]
    assert events[-1] == "[DONE]"
    assert all(e == "[DONE]" or e["model"] == "meta-llama/Llama-3.1-8B-Instruct" for e in events)
    # The front asked for usage (for its token counters) but the client did not: no usage chunk for it.
    assert state.requests[0]["stream_options"] == {"include_usage": True}
    assert all(e == "[DONE]" or "usage" not in e for e in events)
    assert metrics["specdec_prompt_tokens_total"] == 5 and metrics["specdec_completion_tokens_total"] == 3
    assert metrics["specdec_time_to_first_token_seconds_count"] == 1
    # After the first chunk the stand-in took 4 x 0.15s for the other 2 tokens (of 3, by its usage).
    assert metrics["specdec_time_per_output_token_seconds_count"] == 1
    assert metrics["specdec_time_per_output_token_seconds_sum"] >= 0.25


def test_a_client_that_asks_for_usage_gets_the_usage_chunk():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(
                f"{url}/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "Hi"}],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            ) as resp:
                return data_lines((await resp.read()).decode())

    events = run(scenario())
    assert [e["choices"][0]["delta"]["content"] for e in events[:3]] == ["Hello", ",", " world"]
    assert events[3]["choices"] == [] and events[3]["usage"]["total_tokens"] == 8
    assert events[4] == "[DONE]"


def test_client_errors_pass_through_in_openais_shape_and_server_errors_become_502():
    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "bogus": 1}) as resp:
                client_error = resp.status, await resp.json()
            state.fail_status = 500
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi"}) as resp:
                server_error = resp.status, await resp.json()
            return client_error, server_error, front

    client_error, server_error, front = run(scenario())
    # trtllm-serve's {"object": "error", "message", ...} as OpenAI's {"error": {...}}, in trtllm-serve's words.
    assert client_error[0] == 400 and "extra fields not permitted" in client_error[1]["error"]["message"]
    assert client_error[1]["error"]["type"] == "invalid_request_error"
    assert server_error[0] == 502
    assert "trtllm-serve answered HTTP 500" in server_error[1]["error"]["message"]
    assert "engine failure" in server_error[1]["error"]["message"]
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="400") == 1
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="502") == 1


def test_a_stream_that_breaks_off_ends_with_an_error_event():
    state = OpenAIState(break_stream=True)

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "stream": True}) as resp:
                events = data_lines((await resp.read()).decode())
            return events, front

    events, front = run(scenario())
    assert events[0]["choices"][0]["text"] == "Hello"
    assert events[-1]["error"]["code"] == 502 and "broke off" in events[-1]["error"]["message"]
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="502") == 1
    assert metric(front, "specdec_backend_errors_total", kind="stream_broken") == 1


def test_a_stream_that_goes_quiet_past_the_request_timeout_breaks_off_and_a_slow_steady_one_does_not():
    quiet, steady = OpenAIState(chunk_delay=1.5), OpenAIState(pieces=tuple("abcd"), chunk_delay=0.15)

    async def stream(state):
        async with stack(state, request_timeout=0.4) as (front, url, client):
            started = asyncio.get_running_loop().time()
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "stream": True}) as resp:
                events = data_lines((await resp.read()).decode())
            return events, asyncio.get_running_loop().time() - started, front

    events, seconds, front = run(stream(quiet))
    assert events[0]["choices"][0]["text"] == "Hello"
    assert "broke off" in events[-1]["error"]["message"] and 0.4 <= seconds < 1.4
    assert metric(front, "specdec_backend_errors_total", kind="stream_broken") == 1
    events, seconds, front = run(stream(steady))  # 0.15 s between chunks, 0.6 s in all: no read waits 0.4 s
    assert "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]) == "abcd" and seconds > 0.6
    assert metric(front, "specdec_backend_errors_total", kind="stream_broken") == 0


def test_a_client_that_leaves_mid_stream_stops_the_backend_stream():
    state = OpenAIState(pieces=tuple("abcdefghij"), chunk_delay=0.2)

    async def scenario():
        async with stack(state) as (front, url, client):
            resp = await client.post(f"{url}/v1/completions", json={"prompt": "Hi", "stream": True})
            line = await resp.content.readline()
            assert line.startswith(b"data: ")
            resp.close()  # the client goes away
            await eventually(lambda: state.cancelled == 1, "the stand-in's stream to be cancelled")
            await eventually(lambda: metric(front, "specdec_requests_in_flight") == 0, "no request in flight")
            return state.chunks_sent, metric(front, "specdec_requests_total", endpoint="/v1/completions", status="499")

    sent, closed = run(scenario())
    assert sent < 10 and closed == 1


def metrics_once_read(state: OpenAIState, counter: str, value: float) -> dict[str, float]:
    """The front's /metrics once its `counter` shows the stand-in's iteration statistics read."""

    async def scenario():
        async with stack(state, stats_interval=0.05) as (front, url, client):
            await eventually(lambda: metric(front, counter) == value, "the iteration stats to be read")
            async with client.get(f"{url}/metrics") as resp:
                return parse_prometheus(await resp.text())

    return run(scenario())


def test_speculation_counters_come_from_trtllm_serve_iteration_stats():
    state = OpenAIState(
        stats=[
            # Two-model: the drafter took 10 of the iteration's 40 ms (draftOverhead 0.25).
            {
                "iter": 1,
                "iterLatencyMS": 40.0,
                "specDecodingStats": {
                    "numDraftTokens": 8,
                    "numAcceptedTokens": 6,
                    "numRequestsWithDraftTokens": 2,
                    "acceptanceLength": 4.0,
                    "iterLatencyMS": 10.0,
                    "draftOverhead": 0.25,
                },
            },
            {
                "iter": 2,
                "iterLatencyMS": 5.0,
                "specDecodingStats": {
                    "numDraftTokens": 0,
                    "numAcceptedTokens": 0,
                    "numRequestsWithDraftTokens": 0,
                    "iterLatencyMS": 0.0,
                    "draftOverhead": 0.0,
                },
            },
            # No drafter timing (one-model modes, ngram): tokens and steps, no time.
            json.dumps(
                {
                    "iter": 3,
                    "iterLatencyMS": 20.0,
                    "specDecodingStats": {
                        "numDraftTokens": 4,
                        "numAcceptedTokens": 1,
                        "numRequestsWithDraftTokens": 1,
                        "iterLatencyMS": 0.0,
                        "draftOverhead": 0.0,
                    },
                }
            ),
            {"iter": 4, "iterLatencyMS": 3.0},
        ]
    )

    metrics = metrics_once_read(state, "specdec_speculative_steps_total", 3)
    assert metrics["specdec_draft_tokens_total"] == 12 and metrics["specdec_accepted_draft_tokens_total"] == 7
    assert metrics["specdec_draft_seconds_total"] == pytest.approx(0.010)
    assert metrics["specdec_target_seconds_total"] == pytest.approx(0.030)
    assert metrics["specdec_speculative_requests_total"] == 0  # not known per request on this route
    assert metrics["specdec_accepted_tokens_per_step_count"] == 0
    assert metrics["specdec_draft_len"] == 4  # speculative_config's max_draft_len


def test_a_scrape_reads_trtllm_serve_iteration_stats_up_to_now():
    """A scrape polls the iteration statistics itself: its counters do not wait for the next stats interval."""
    stats = {
        "iter": 1,
        "specDecodingStats": {"numDraftTokens": 8, "numAcceptedTokens": 5, "numRequestsWithDraftTokens": 2},
    }
    state = OpenAIState()

    async def scenario():
        async with stack(state, stats_interval=3600) as (front, url, client):
            read = []
            for _ in range(2):
                state.stats = [stats]
                async with client.get(f"{url}/metrics") as resp:
                    read.append(parse_prometheus(await resp.text()))
            return read

    first, second = run(scenario())
    assert state.stats_reads == 2  # one per scrape; the hour's interval never came
    assert first["specdec_draft_tokens_total"] == 8 and first["specdec_accepted_draft_tokens_total"] == 5
    assert second["specdec_draft_tokens_total"] == 16 and second["specdec_speculative_steps_total"] == 4


def test_a_scrape_waits_at_most_a_second_for_slow_iteration_stats_and_polls_them_once_at_a_time():
    asked = []

    async def slow_stats(request: web.Request) -> web.Response:
        asked.append(request.path)
        await asyncio.sleep(3)
        return web.json_response([])

    app = web.Application()
    app.router.add_get("/metrics", slow_stats)

    async def scenario():
        async with serving(app) as backend_url:
            backend = dataclasses.replace(launch.plan_launch(PYTORCH).backend, url=backend_url)
            async with serving_front(Front(PYTORCH, backend, stats_interval=3600)) as url:
                async with aiohttp.ClientSession() as client:
                    took = []
                    for _ in range(2):
                        started = time.monotonic()
                        async with client.get(f"{url}/metrics") as resp:
                            assert resp.status == 200 and "specdec_draft_tokens_total" in await resp.text()
                        took.append(time.monotonic() - started)
                    await asyncio.sleep(3.5)  # where a second poll queued behind the first would have been sent
                    return took

    took = run(scenario())
    assert all(0.9 < t < 2.0 for t in took), took  # SCRAPE_POLL_SECONDS, not the backend's 3 s
    assert asked == ["/metrics"]  # the second scrape waited for the first one's poll, still in flight


def test_the_targets_iterations_under_load_come_from_trtllm_serve_iteration_stats():
    """Each iteration with generation requests is a window of the load model: its time, its batch, its drafts."""
    state = OpenAIState(
        stats=[
            {
                "iter": 1,
                "iterLatencyMS": 40.0,
                "inflightBatchingStats": {"numGenRequests": 4, "numContextRequests": 1},
                "specDecodingStats": {"numDraftTokens": 16, "numAcceptedTokens": 9, "numRequestsWithDraftTokens": 4},
            },
            {"iter": 2, "iterLatencyMS": 10.0, "inflightBatchingStats": {"numGenRequests": 2}},
            {"iter": 3, "iterLatencyMS": 7.0, "inflightBatchingStats": {"numGenRequests": 0, "numContextRequests": 2}},
            {"iter": 4, "iterLatencyMS": 3.0},
        ]
    )

    metrics = metrics_once_read(state, "specdec_target_iterations_total", 2)
    assert metrics["specdec_target_iteration_seconds_total"] == pytest.approx(0.050)
    assert metrics["specdec_target_batch_sequences_total"] == 6
    assert metrics["specdec_target_batch_draft_tokens_total"] == 16  # 4 sequences with 4 draft tokens each


def test_redrafter_default_temperature_applies_when_the_client_sets_none():
    config = REDRAFTER.model_copy(update={"speculation": REDRAFTER.speculation.model_copy(update={"temperature": 0.7})})
    state = OpenAIState()

    async def scenario():
        async with stack(state, config=config) as (front, url, client):
            for body in ({"prompt": "Hi"}, {"prompt": "Hi", "temperature": 0.1}):
                async with client.post(f"{url}/v1/completions", json=body) as resp:
                    assert resp.status == 200

    run(scenario())
    assert [r["temperature"] for r in state.requests] == [0.7, 0.1]


def test_health_is_200_only_when_trtllm_serve_answers():
    state = OpenAIState(ready=False)
    dead = f"http://127.0.0.1:{free_port()}"

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.get(f"{url}/health") as resp:
                not_ready = resp.status
            state.ready = True
            async with client.get(f"{url}/health") as resp:
                ready = resp.status
            front.route.backend = dataclasses.replace(front.backend, url=dead)
            async with client.get(f"{url}/health") as resp:
                gone = resp.status
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi"}) as resp:
                return not_ready, ready, gone, resp.status

    assert run(scenario()) == (503, 200, 503, 503)


def test_the_draft_len_gauge_is_there_only_when_the_configuration_says():
    shown = {}
    for name in ("qwen2.5-7b-ngram", "vicuna-7b-redrafter", "pytorch-none-tp2"):
        front = Front(CONFIGS[name], launch.plan_launch(CONFIGS[name]).backend)
        shown[name] = front.metrics.registry.get_sample_value("specdec_draft_len")
    assert shown == {"qwen2.5-7b-ngram": 4, "vicuna-7b-redrafter": None, "pytorch-none-tp2": None}


def test_a_client_slow_to_read_holds_the_backend_back_and_gets_every_byte(monkeypatch):
    from specdec.runtime import upstream
    from specdec.runtime.http1 import Chunked
    from specdec.runtime.upstream import Response

    pieces = tuple(f"{i:04d}" + "x" * 4000 for i in range(2000))  # 8 MB: past the sockets' buffers
    state = OpenAIState(pieces=pieces)
    pauses = []
    pause = Response.pause
    monkeypatch.setattr(Response, "pause", lambda self: (pauses.append(1), pause(self)))
    # The front's socket to trtllm-serve gets a fixed receive buffer: autotuned, it may grow to tcp_rmem's
    # maximum (32 MB on some machines) and take the whole answer while the relay is paused.
    made = upstream.Connection.connection_made

    def small_receive_buffer(connection: upstream.Connection, transport: asyncio.BaseTransport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        made(connection, transport)

    monkeypatch.setattr(upstream.Connection, "connection_made", small_receive_buffer)

    async def scenario():
        async with stack(state) as (front, url, _client):
            host, port = url.removeprefix("http://").split(":")
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((host, int(port)))
            reader, writer = await asyncio.open_connection(sock=sock)
            body = json.dumps({"prompt": "Hi", "stream": True}).encode()
            writer.write(
                b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            await asyncio.sleep(0.5)  # the client reads nothing for a while
            sent_while_waiting = state.chunks_sent
            chunked, received = Chunked(), []
            while not chunked.done:
                received.append(chunked.feed(await reader.read(4096)))
                await asyncio.sleep(0.0005)
            writer.close()
            return head, sent_while_waiting, b"".join(received).decode()

    head, sent_while_waiting, text = run(scenario())
    assert b"Transfer-Encoding: chunked" in head
    assert pauses and sent_while_waiting < len(pieces)  # the relay stopped reading trtllm-serve meanwhile
    events = data_lines(text)
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "".join(pieces) and events[-1] == "[DONE]"


def test_the_front_streams_on_the_runtimes_event_loop(monkeypatch):
    """specdec-runtime serves on uvloop's loop when it is installed (specdec.runtime.event_loop), on asyncio's
    when it is not or SPECDEC_RUNTIME_LOOP says asyncio."""
    from specdec.runtime import event_loop

    state = OpenAIState()

    async def scenario():
        async with stack(state) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "stream": True}) as resp:
                return type(asyncio.get_running_loop()).__module__, data_lines((await resp.read()).decode())

    module, events = event_loop.run(asyncio.wait_for(scenario(), 20))
    assert module.startswith("uvloop" if importlib.util.find_spec("uvloop") else "asyncio")
    assert [e["choices"][0]["text"] for e in events[:-1]] == ["Hello", ",", " world"] and events[-1] == "[DONE]"
    monkeypatch.setenv(event_loop.LOOP_ENV, "asyncio")
    assert event_loop.loop_factory() is None
