"""spec.drafter.learning at the front: samples of completed requests written over real HTTP against the trtllm-serve
stand-in, and the capture's bounds (rate, opt-out, budget, retention, failures) with the files on disk."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import time
from pathlib import Path

import aiohttp

from specdec.api.drafter import SAMPLES_MOUNT, FrontCapture
from specdec.drafter.samples import read_samples
from specdec.runtime import launch
from specdec.runtime.chat import Tokenizer
from specdec.runtime.front import Front
from tests.runtime.helpers import eventually, metric, scenario_configs, serving, serving_front
from tests.runtime.standins import OpenAIState

EAGLE3 = scenario_configs()["llama-3.1-8b-eagle3"]
TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def capture(directory: Path, **fields) -> FrontCapture:
    values = dict(
        directory=str(directory),
        sample_rate=1.0,
        max_bytes=1 << 20,
        retention_seconds=3600,
        opt_out_header="X-Specdec-No-Capture",
        traffic_class_header="X-Specdec-Traffic-Class",
    )
    return FrontCapture(**{**values, **fields})


def tokenizer(tmp_path: Path) -> Tokenizer:
    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return Tokenizer(str(model))


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, front_capture: FrontCapture | None, draws=None, state: OpenAIState | None = None):
    config = EAGLE3.model_copy(update={"drafter_capture": front_capture})
    async with serving((state or OpenAIState()).app(), handler_cancellation=True) as backend_url:
        backend = dataclasses.replace(launch.plan_launch(config).backend, url=backend_url)
        front = Front(config, backend, stats_interval=0, tokenizer=tokenizer(tmp_path))
        if front.drafter is not None:
            front.drafter.scan_seconds = 0.05
            front.drafter.pod = "pod-a"
            if draws is not None:
                front.drafter.draw = draws.__next__
        async with serving_front(front) as url:
            async with aiohttp.ClientSession() as client:
                yield front, url, client


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def ask(client, url: str, *, chat: bool = False, stream: bool = False, headers=None, text: str = "Hi"):
    if chat:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": text}]}
    else:
        path, body = "/v1/completions", {"prompt": text}
    async with client.post(f"{url}{path}", json={**body, "stream": stream}, headers=headers or {}) as resp:
        await resp.read()
        return resp.status


def written(front) -> float:
    return sum(
        s.value
        for m in front.metrics.registry.collect()
        for s in m.samples
        if s.name == "specdec_drafter_captured_total"
    )


def test_every_completed_request_is_a_sample_at_rate_one_whole_or_streamed(tmp_path):
    samples = tmp_path / "samples"

    async def scenario():
        async with stack(tmp_path, capture(samples)) as (front, url, client):
            assert await ask(client, url) == 200
            assert await ask(client, url, chat=True) == 200
            assert await ask(client, url, chat=True, stream=True, headers={"X-Specdec-Traffic-Class": "A"}) == 200
            assert await ask(client, url, stream=True, headers={"X-Specdec-Traffic-Class": "A"}) == 200
            await eventually(lambda: written(front) == 4, "four samples written")
            await eventually(lambda: metric(front, "specdec_drafter_samples", **{"class": "A"}) == 2, "a scan")
            return metric(front, "specdec_drafter_samples", **{"class": ""}), front

    unclassed, front = run(scenario())
    got, skipped = read_samples(samples)
    assert skipped == 0 and unclassed == 2
    assert [(s.prompt, s.completion, s.traffic_class) for s in got] == [
        ("Hi", "Hello, world", None),
        ("<|user|>Hi\n<|assistant|>", "Hello, world", None),  # the model's chat template applied
        ("<|user|>Hi\n<|assistant|>", "Hello, world", "A"),
        ("Hi", "Hello, world", "A"),
    ]
    assert all(s.captured_at > time.time() - 60 for s in got)
    assert [p.name.startswith("samples-pod-a-") for p in samples.iterdir()] == [True]


def test_the_rate_draws_requests_and_the_opt_out_header_is_honoured(tmp_path):
    samples = tmp_path / "samples"
    draws = itertools.cycle([0.1, 0.7])  # rate 0.5: every other request drawn

    async def scenario():
        async with stack(tmp_path, capture(samples, sample_rate=0.5), draws) as (front, url, client):
            for i in range(6):
                assert await ask(client, url, text=f"q{i}") == 200
            for i in range(4):  # drawn or not, never captured
                assert await ask(client, url, headers={"X-Specdec-No-Capture": "1"}, text=f"private{i}") == 200
            await eventually(lambda: written(front) == 3, "three samples written")
            await asyncio.sleep(0.2)
            return written(front), metric(front, "specdec_drafter_dropped_total", reason="opted_out")

    count, opted_out = run(scenario())
    got, _ = read_samples(samples)
    assert count == 3 and [s.prompt for s in got] == ["q0", "q2", "q4"]
    assert opted_out == 2  # of the four, two were drawn
    assert "private" not in "".join(p.read_text() for p in samples.iterdir())


def test_the_byte_budget_stops_the_capture_not_the_requests(tmp_path):
    samples = tmp_path / "samples"

    async def scenario():
        async with stack(tmp_path, capture(samples, max_bytes=200)) as (front, url, client):
            statuses = [await ask(client, url, text=f"q{i}") for i in range(5)]
            await eventually(
                lambda: written(front) + metric(front, "specdec_drafter_dropped_total", reason="budget") == 5,
                "every drawn request written or dropped",
            )
            return statuses, written(front), metric(front, "specdec_drafter_dropped_total", reason="budget")

    statuses, count, over_budget = run(scenario())
    size = sum(p.stat().st_size for p in samples.iterdir())
    assert statuses == [200] * 5
    assert count >= 1 and over_budget >= 1 and size <= 200


def test_retention_deletes_the_fronts_old_files_and_nothing_else(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    old = time.time() - 7200
    own_old = samples / "samples-pod-b-1000.jsonl"
    own_old.write_text('{"prompt":"p","completion":"c","trafficClass":null,"capturedAt":1}\n')
    foreign_old = samples / "notes.jsonl"
    foreign_old.write_text("kept\n")
    own_recent = samples / "samples-pod-c-2000.jsonl"
    own_recent.write_text('{"prompt":"p","completion":"c","trafficClass":"B","capturedAt":2}\n')
    for path in (own_old, foreign_old):
        os.utime(path, (old, old))

    async def scenario():
        async with stack(tmp_path, capture(samples, retention_seconds=3600)) as (front, url, client):
            await eventually(lambda: not own_old.exists(), "the old samples file deleted")
            await eventually(lambda: metric(front, "specdec_drafter_samples", **{"class": "B"}) == 1, "a scan")
            return metric(front, "specdec_drafter_files")

    files = run(scenario())
    assert foreign_old.exists() and own_recent.exists()
    assert files == 1  # the recent samples file; notes.jsonl is not the front's


def test_a_capture_failure_is_counted_and_the_client_is_answered(tmp_path):
    samples = tmp_path / "samples"
    samples.write_text("a file where the directory should be")

    async def scenario():
        async with stack(tmp_path, capture(samples)) as (front, url, client):
            statuses = [await ask(client, url), await ask(client, url, chat=True, stream=True)]
            await eventually(
                lambda: metric(front, "specdec_drafter_dropped_total", reason="error") == 2, "both failures counted"
            )
            return statuses

    assert run(scenario()) == [200, 200]


def test_no_capture_without_the_opt_in(tmp_path):
    async def scenario():
        async with stack(tmp_path, None) as (front, url, client):
            assert await ask(client, url) == 200 and await ask(client, url, chat=True, stream=True) == 200
            async with client.get(f"{url}/metrics") as resp:
                return front.drafter, await resp.text()

    drafter, metrics = run(scenario())
    assert drafter is None and "specdec_drafter_" not in metrics
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # nothing written beside the test's own
    assert not Path(SAMPLES_MOUNT).exists()
