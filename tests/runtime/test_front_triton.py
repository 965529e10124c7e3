"""The front over real HTTP against a stand-in speaking Triton's generate contract (draft-target, BLS)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time

import aiohttp
import pytest
from google.protobuf import text_format
from tokenizers import Tokenizer as HfTokenizer
from tokenizers import models, pre_tokenizers
from tritonclient.grpc import model_config_pb2

from specdec.runtime import launch, triton
from specdec.runtime.chat import Tokenizer
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
from tests.runtime.standins import TritonState

CONFIG = scenario_configs()["llama-2-13b-draft-7b-logits"]  # draftLen 4 (maxDraftLen 10), logits acceptance
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def bls_inputs() -> set[str]:
    repo = triton.render_repository(CONFIG, 4)
    bls = text_format.Parse(repo.files["tensorrt_llm_bls/config.pbtxt"], model_config_pb2.ModelConfig())
    return {t.name for t in bls.input}


@pytest.fixture
def tokenizer_dir(tmp_path):
    """A tiny word-level tokenizer and a chat template, in the files a Hugging Face checkpoint has."""
    tok = HfTokenizer(models.WordLevel({"[UNK]": 0, "Hello": 1, "there": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": TEMPLATE, "bos_token": {"content": "<s>"}, "eos_token": "</s>"})
    )
    return str(tmp_path)


@contextlib.asynccontextmanager
async def stack(state: TritonState, tokenizer_dir: str | None, **front_args):
    async with (
        serving(state.app(), handler_cancellation=True) as triton_url,
        serving(state.metrics_app()) as metrics_url,
    ):
        backend = dataclasses.replace(
            launch.plan_launch(CONFIG).backend, url=triton_url, metrics_url=f"{metrics_url}/metrics"
        )
        front = Front(CONFIG, backend, tokenizer=Tokenizer(tokenizer_dir), **front_args)
        async with serving_front(front) as url:
            async with aiohttp.ClientSession() as client:
                yield front, url, client


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def sse_events(response) -> list:
    events = []
    async for line in response.content:
        line = line.decode().strip()
        if line.startswith("data: "):
            payload = line[6:]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_completion_adds_the_speculation_inputs_and_strips_the_prompt(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs())

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.post(
                f"{url}/v1/completions",
                json={
                    "model": CONFIG.served_model_name,
                    "prompt": "Hello there",
                    "max_tokens": 8,
                    "temperature": 0.5,
                    "top_p": 0.9,
                    "seed": 7,
                    "stop": ["\n"],
                },
            ) as resp:
                assert resp.status == 200
                body = await resp.json()
        return body

    body = run(scenario())
    sent = state.requests[0]
    assert sent["num_draft_tokens"] == 4 and sent["use_draft_logits"] is True
    assert sent["return_perf_metrics"] is True and sent["stream"] is False
    assert sent["text_input"] == "Hello there" and sent["max_tokens"] == 8
    assert (sent["temperature"], sent["top_p"], sent["seed"], sent["stop_words"]) == (0.5, 0.9, 7, ["\n"])
    assert body["object"] == "text_completion" and body["model"] == "meta-llama/Llama-2-13b-hf"
    assert body["choices"] == [{"index": 0, "text": " and then some", "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert body["speculation"] == {"acceptance_rate": 0.75, "accepted_draft_tokens": 3, "draft_tokens": 4}


def test_metrics_count_requests_tokens_latency_and_acceptance(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs(), drafts=(2, 4))

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.get(f"{url}/metrics") as resp:
                before = parse_prometheus(await resp.text())
            for prompt in ("Hello", "Hello there"):
                async with client.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 3}) as resp:
                    assert resp.status == 200
                    assert (await resp.json())["choices"][0]["finish_reason"] == "length"  # 3 tokens of 3
            async with client.get(f"{url}/metrics") as resp:
                assert resp.headers["Content-Type"].startswith("text/plain")
                return before, parse_prometheus(await resp.text())

    before, after = run(scenario())
    assert before["specdec_draft_tokens_total"] == 0 and before["specdec_draft_len"] == 4
    assert not any(name.startswith("specdec_acceptance_rate") for name in after)  # rates are the scraper's
    assert after['specdec_requests_total{endpoint="/v1/completions",status="200"}'] == 2
    assert after["specdec_draft_tokens_total"] == 8 and after["specdec_accepted_draft_tokens_total"] == 4
    assert after["specdec_prompt_tokens_total"] == 3 and after["specdec_completion_tokens_total"] == 6
    assert after["specdec_time_per_output_token_seconds_count"] == 2  # one per (non-streamed) answer of 3 tokens
    assert after['specdec_request_duration_seconds_count{endpoint="/v1/completions"}'] == 2
    assert after['specdec_request_duration_seconds_bucket{endpoint="/v1/completions",le="+Inf"}'] == 2
    assert after["specdec_response_acceptance_rate_count"] == 2
    assert after['specdec_response_acceptance_rate_bucket{le="0.5"}'] == 2
    assert after["specdec_requests_in_flight"] == 0
    assert (
        after[
            'specdec_runtime_info{backend="tensorrt",mode="draftTarget",model="meta-llama/Llama-2-13b-hf",route="triton"}'
        ]
        == 1
    )


def test_steps_and_tokens_per_step_come_from_each_responses_perf_metrics(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs())

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            # 7 draft tokens at 4 a step: 2 steps, (5 + 2) / 2 = 3.5 tokens a step; then 1 step of 4 + 1 tokens;
            # then a response that did not speculate.
            for drafts in ((5, 7), (4, 4), (0, 0)):
                state.drafts = drafts
                async with client.post(f"{url}/v1/completions", json={"prompt": "Hello"}) as resp:
                    assert resp.status == 200
            async with client.get(f"{url}/metrics") as resp:
                return parse_prometheus(await resp.text())

    metrics = run(scenario())
    assert metrics["specdec_draft_tokens_total"] == 11 and metrics["specdec_accepted_draft_tokens_total"] == 9
    assert metrics["specdec_speculative_steps_total"] == 3
    assert metrics["specdec_speculative_requests_total"] == 2
    assert metrics["specdec_accepted_tokens_per_step_count"] == 2
    assert metrics["specdec_accepted_tokens_per_step_sum"] == 8.5
    assert metrics['specdec_accepted_tokens_per_step_bucket{le="3.0"}'] == 0
    assert metrics['specdec_accepted_tokens_per_step_bucket{le="3.5"}'] == 1
    assert metrics['specdec_accepted_tokens_per_step_bucket{le="5.0"}'] == 2
    assert metrics["specdec_response_acceptance_rate_count"] == 2
    assert metrics["specdec_time_per_output_token_seconds_count"] == 3


def test_compute_time_comes_from_tritons_own_counters_across_a_restart(tokenizer_dir):
    state = TritonState(
        declared_inputs=bls_inputs(),
        compute_us={"tensorrt_llm": 2_000_000, "tensorrt_llm_draft": 500_000, "tensorrt_llm_bls": 9_000_000},
    )

    async def scenario():
        async with stack(state, tokenizer_dir, stats_interval=0.02) as (front, url, client):

            def seconds():
                return tuple(round(metric(front, f"specdec_{model}_seconds_total"), 6) for model in ("draft", "target"))

            await eventually(lambda: seconds() == (0.5, 2.0), "the first counters")
            state.compute_us.update({"tensorrt_llm": 3_000_000, "tensorrt_llm_draft": 800_000})
            await eventually(lambda: seconds() == (0.8, 3.0), "the increase")
            # Triton restarted: its counters start again from 0, and what they show now is all new.
            state.compute_us.update({"tensorrt_llm": 250_000, "tensorrt_llm_draft": 100_000})
            await eventually(lambda: seconds() == (0.9, 3.25), "the counters after the restart")
            await asyncio.sleep(0.1)  # more polls of the same counters add nothing
            return seconds()

    assert run(scenario()) == (0.9, 3.25)


def test_the_draft_len_file_sets_num_draft_tokens_of_the_next_requests(tokenizer_dir, tmp_path, caplog):
    state = TritonState(declared_inputs=bls_inputs(), drafts=(4, 4))
    draft_len_file = tmp_path / "draft_len"

    async def scenario():
        async with stack(state, tokenizer_dir, stats_interval=0.02, draft_len_file=draft_len_file) as (
            front,
            url,
            client,
        ):

            async def complete():
                async with client.post(f"{url}/v1/completions", json={"prompt": "Hello"}) as resp:
                    assert resp.status == 200
                return state.requests[-1]["num_draft_tokens"], metric(front, "specdec_draft_len")

            sent = [await complete()]  # no file yet: the configured length
            draft_len_file.write_text("2\n")
            await eventually(lambda: front.route.draft_len == 2, "the new draft length")
            sent.append(await complete())
            draft_len_file.write_text("11")  # over maxDraftLen (10): ignored
            await eventually(lambda: "ignoring" in caplog.text, "the warning")
            await asyncio.sleep(0.1)  # read again, warned once
            sent.append(await complete())
            draft_len_file.unlink()
            await eventually(lambda: front.route.draft_len == 4, "the configured length again")
            sent.append(await complete())
            return sent, metric(front, "specdec_speculative_steps_total")

    with caplog.at_level(logging.INFO, logger="specdec.runtime"):
        sent, steps = run(scenario())
    assert sent == [(4, 4), (2, 2), (2, 2), (4, 4)]
    assert steps == 1 + 2 + 2 + 1  # 4 draft tokens a response, at the length each request was sent with
    assert caplog.text.count("is not a draft length in 1..10") == 1


def test_chat_uses_the_models_chat_template(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs())

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.post(
                f"{url}/v1/chat/completions",
                json={
                    "messages": [
                        {"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": "Hello there"}]},
                    ]
                },
            ) as resp:
                assert resp.status == 200
                return await resp.json()

    body = run(scenario())
    # The BOS token is left to the preprocessing model (add_special_tokens).
    assert state.requests[0]["text_input"] == "<|system|>Be brief.\n<|user|>Hello there\n<|assistant|>"
    assert state.requests[0]["max_tokens"] == 512
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": " and then some"}


def test_streaming_requests_get_the_answer_as_one_chunk(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs())

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.post(
                f"{url}/v1/completions",
                json={"prompt": "Hello", "stream": True, "stream_options": {"include_usage": True}},
            ) as resp:
                assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
                completion = await sse_events(resp)
            async with client.post(
                f"{url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hello"}], "stream": True}
            ) as resp:
                chat = await sse_events(resp)
            async with client.get(f"{url}/metrics") as resp:
                return completion, chat, parse_prometheus(await resp.text())

    completion, chat, metrics = run(scenario())
    assert all(r["stream"] is False for r in state.requests)  # the BLS refuses to stream while speculating
    assert completion[0]["choices"][0]["text"] == " and then some"
    assert completion[1]["choices"] == [] and completion[1]["usage"]["completion_tokens"] == 3
    assert completion[-1] == "[DONE]" and len(completion) == 3
    assert chat[0]["object"] == "chat.completion.chunk"
    assert chat[0]["choices"][0]["delta"] == {"role": "assistant", "content": " and then some"}
    assert chat[-1] == "[DONE]" and len(chat) == 2
    assert metrics["specdec_time_to_first_token_seconds_count"] == 2


def test_a_triton_error_is_a_clear_502(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs(), fail_with="Traceback ...: cannot perform speculative decoding")

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hello"}) as resp:
                status, body = resp.status, await resp.json()
            async with client.get(f"{url}/metrics") as resp:
                return status, body, parse_prometheus(await resp.text())

    status, body, metrics = run(scenario())
    assert status == 502
    assert body["error"]["type"] == "backend_error"
    assert "Triton answered HTTP 400: Traceback ...: cannot perform speculative decoding" in body["error"]["message"]
    assert metrics['specdec_requests_total{endpoint="/v1/completions",status="502"}'] == 1
    assert metrics['specdec_backend_errors_total{kind="backend_error"}'] == 1


def test_an_unreachable_backend_is_503_and_unhealthy():
    dead = f"http://127.0.0.1:{free_port()}"

    async def scenario():
        backend = dataclasses.replace(launch.plan_launch(CONFIG).backend, url=dead)
        front = Front(CONFIG, backend)
        async with serving_front(front) as url, aiohttp.ClientSession() as client:
            started = time.monotonic()
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hello"}) as resp:
                status, body = resp.status, await resp.json()
            async with client.get(f"{url}/health") as resp:
                health = resp.status, await resp.json()
            return status, body, health, time.monotonic() - started

    status, body, health, elapsed = run(scenario())
    assert status == 503 and body["error"]["type"] == "backend_unavailable"
    assert health[0] == 503 and "not reachable" in health[1]["detail"]
    assert elapsed < 5


def test_a_backend_that_does_not_answer_in_time_is_504_without_hanging(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs(), delay=10)

    async def scenario():
        async with stack(state, tokenizer_dir, request_timeout=0.3) as (front, url, client):
            started = time.monotonic()
            async with client.post(f"{url}/v1/completions", json={"prompt": "Hello"}) as resp:
                return resp.status, await resp.json(), time.monotonic() - started

    status, body, elapsed = run(scenario())
    assert status == 504 and body["error"]["type"] == "backend_timeout"
    assert elapsed < 3


def test_a_client_that_leaves_cancels_its_backend_request(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs(), delay=10)

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            with pytest.raises(asyncio.TimeoutError):
                await client.post(
                    f"{url}/v1/completions", json={"prompt": "Hello"}, timeout=aiohttp.ClientTimeout(total=0.3)
                )
            await eventually(lambda: state.cancelled == 1, "the stand-in to see the request cancelled")
            await eventually(lambda: metric(front, "specdec_requests_in_flight") == 0, "no request in flight")
            return metric(front, "specdec_requests_total", endpoint="/v1/completions", status="499")

    assert run(scenario()) == 1


def test_health_follows_tritons_readiness_and_models_list(tokenizer_dir):
    state = TritonState(declared_inputs=bls_inputs(), ready=False)

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            async with client.get(f"{url}/health") as resp:
                starting = resp.status, await resp.json()
            state.ready = True
            async with client.get(f"{url}/health") as resp:
                ready = resp.status
            async with client.get(f"{url}/v1/models") as resp:
                listed = await resp.json()
            return starting, ready, listed, metric(front, "specdec_backend_up")

    starting, ready, listed, up = run(scenario())
    assert starting[0] == 503 and "HTTP 400" in starting[1]["detail"]
    assert ready == 200 and up == 1
    assert [m["id"] for m in listed["data"]] == ["meta-llama/Llama-2-13b-hf"]


@pytest.mark.parametrize(
    "body, message",
    [
        ("{not json", "not valid JSON"),
        ({"prompt": "Hello", "n": 2}, "n must be 1"),
        ({"prompt": [1, 2, 3]}, "token ids need trtllm-serve"),
        ({"prompt": "Hello", "max_tokens": 0}, "Invalid 'max_tokens': integer below minimum value"),
    ],
)
def test_bad_requests_are_400_and_never_reach_triton(tokenizer_dir, body, message):
    state = TritonState(declared_inputs=bls_inputs())

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, client):
            kwargs = (
                {"data": body, "headers": {"Content-Type": "application/json"}}
                if isinstance(body, str)
                else {"json": body}
            )
            async with client.post(f"{url}/v1/completions", **kwargs) as resp:
                return resp.status, await resp.json()

    status, answer = run(scenario())
    assert status == 400 and message in answer["error"]["message"]
    assert state.requests == []


def test_the_triton_route_is_served_by_the_fronts_own_server_with_its_rules_and_limits(tokenizer_dir):
    """One server for both routes: a Triton-route request over a raw socket meets the same head parser,
    HEAD/405 rules and refusal counts as the trtllm-serve route's, on a connection kept alive."""
    from tests.runtime.test_front_server import connection, get, post, response

    state = TritonState()

    async def scenario():
        async with stack(state, tokenizer_dir) as (front, url, _client), connection(url) as (reader, writer):
            writer.write(
                post("/v1/completions", {"prompt": "Hi", "max_tokens": 4})
                + get("/v1/completions")
                + post("/v1/completions", {"prompt": "Hi", "stream": True})
            )
            answers = [await asyncio.wait_for(response(reader), 5) for _ in range(3)]
            writer.write(b"GET /health HTTP/1.1\nHost: x\n\n")
            refused = await asyncio.wait_for(response(reader), 5)
            return front, answers, refused

    front, ((whole, _, body), (not_allowed, headers, _), (streamed, stream_headers, events)), refused = run(scenario())
    assert whole == 200 and json.loads(body)["object"] == "text_completion"
    assert not_allowed == 405 and headers["allow"] == "POST"
    assert streamed == 200 and stream_headers["content-type"] == "text/event-stream"
    assert events.decode().rstrip().endswith("data: [DONE]")
    assert refused[0] == 400 and metric(front, "specdec_front_refusals_total", reason="bad_request") == 1
    assert metric(front, "specdec_requests_in_flight") == 0
    assert metric(front, "specdec_requests_total", endpoint="/v1/completions", status="200") == 2
