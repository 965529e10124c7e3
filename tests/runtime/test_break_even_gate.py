"""The Triton route under load: no draft tokens from the operator's break-even, with hysteresis, and per request."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

import aiohttp

from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.runtime import launch
from specdec.runtime.front import Front
from specdec.runtime.triton_route import OPT_OUT_HEADER
from specdec_dev.backend_contracts import Generation
from specdec_dev.simulation_profile import Profile
from specdec_dev.simulator import SimulatedTriton
from tests.runtime.helpers import eventually, metric, serving, serving_front
from tests.runtime.standins import TritonState
from tests.runtime.test_front_triton import CONFIG, bls_inputs, run, stack


@dataclass
class HeldTriton(TritonState):
    """Answers a request only when the test releases it: the test sets how many are in flight."""

    held: list[asyncio.Event] = field(default_factory=list)

    async def generate(self, body):
        self.requests.append(body)
        released = asyncio.Event()
        self.held.append(released)
        await released.wait()
        return Generation(self.completion, body["num_draft_tokens"], 0)


def test_the_front_stops_drafting_above_the_break_even_and_resumes_below_with_hysteresis(tmp_path):
    state = HeldTriton(declared_inputs=bls_inputs())
    (tmp_path / BREAK_EVEN_KEY).write_text("10\n")  # margin floor(0.1 * 10) = 1: off from 11, on below 9
    draft_len = CONFIG.draft_target.draft_len

    async def scenario():
        async with stack(state, None, draft_len_file=tmp_path / "draft_len", stats_interval=0.02) as (
            front,
            url,
            client,
        ):

            async def send(headers=None):
                async with client.post(
                    f"{url}/v1/completions", headers=headers or {}, json={"prompt": "Hi", "max_tokens": 4}
                ) as r:
                    assert r.status == 200

            async def load(count: int) -> list[asyncio.Task]:
                """`count` more requests in flight, each at Triton before the next is sent."""
                tasks = []
                for _ in range(count):
                    seen = len(state.requests)
                    tasks.append(asyncio.create_task(send()))
                    await eventually(lambda seen=seen: len(state.requests) == seen + 1, "the request at Triton")
                return tasks

            async def finish(count: int) -> None:
                """The oldest `count` requests in flight answered."""
                for released in [e for e in state.held if not e.is_set()][:count]:
                    released.set()
                await eventually(
                    lambda: front.route.in_flight == sum(not e.is_set() for e in state.held), "the answers at the front"
                )

            tasks = await load(12)  # requests 11 and 12 join at 11 and 12 in flight: above the break-even
            await finish(2)  # 10 in flight: inside the band, still off
            tasks += await load(1)  # joins at 11
            await finish(3)  # 8 in flight
            tasks += await load(2)  # the first joins at 9 (inside the band: off), then 10
            await finish(3)  # 7 in flight
            tasks += await load(1)  # joins at 8: below the band, drafting again
            tasks.append(asyncio.create_task(send({OPT_OUT_HEADER: "off"})))  # asks for none, whatever the load
            await eventually(lambda: len(state.requests) == 17, "the opted-out request at Triton")
            await finish(len(state.held))
            await asyncio.gather(*tasks)
            (tmp_path / BREAK_EVEN_KEY).unlink()  # the operator removed it: speculation at any load
            await eventually(lambda: front.route.break_even is None, "the front to re-read the file")
            tasks = await load(12)
            await finish(12)
            await asyncio.gather(*tasks)
            return (
                [r["num_draft_tokens"] for r in state.requests],
                metric(front, "specdec_undrafted_requests_total", reason="load"),
                metric(front, "specdec_undrafted_requests_total", reason="opt_out"),
            )

    sent, by_load, opted_out = run(scenario())
    k = draft_len
    assert sent[:12] == [k] * 10 + [0, 0]
    assert sent[12] == 0  # 11 in flight, still off
    assert sent[13:15] == [0, 0]  # 9 and 10 in flight: inside the band, off stays off
    assert sent[15] == k  # 8 in flight: on again
    assert sent[16] == 0  # the opted-out request
    assert sent[17:] == [k] * 12, "without a break-even the front drafts at any load"
    assert (by_load, opted_out) == (5, 1)


def test_the_simulated_tritons_step_time_grows_with_its_batch_and_the_front_counts_its_iterations():
    """The simulated Triton batches the requests in flight (t(T) = a + b*T); the front reads the TensorRT-LLM
    backend's iteration gauges and counts iterations, their time and their batch."""
    profile = Profile(acceptance=0.0, target_step_seconds=0.002, step_seconds_per_token=0.001, cost_ratio=0.1)
    simulated = SimulatedTriton(profile, seed=3)

    async def scenario():
        async with serving(simulated.app()) as triton_url, serving(simulated.metrics_app()) as metrics_url:
            backend = dataclasses.replace(
                launch.plan_launch(CONFIG).backend, url=triton_url, metrics_url=f"{metrics_url}/metrics"
            )
            front = Front(CONFIG, backend, stats_interval=0.02)
            async with serving_front(front) as url, aiohttp.ClientSession() as client:

                async def one(headers):
                    async with client.post(
                        f"{url}/v1/completions", headers=headers, json={"prompt": "Hi", "max_tokens": 20}
                    ) as r:
                        assert r.status == 200

                async def timed(clients: int) -> float:
                    started = asyncio.get_running_loop().time()
                    await asyncio.gather(*(one({OPT_OUT_HEADER: "off"}) for _ in range(clients)))
                    return asyncio.get_running_loop().time() - started

                alone, eight = await timed(1), await timed(8)
                await eventually(
                    lambda: metric(front, "specdec_target_iterations_total") >= 5,
                    "the front to poll the iteration gauges",
                )
                return alone, eight, front

    alone, eight, front = run(scenario())
    # 20 steps of t(1) = 3 ms alone, of t(8) = 10 ms with 8 in flight (no drafts: acceptance and opt-out)
    assert 0.06 <= alone < 0.2 and 0.2 <= eight < 0.6
    per_iteration = metric(front, "specdec_target_batch_sequences_total") / metric(
        front, "specdec_target_iterations_total"
    )
    # Intervals with a moment of no request at Triton (before, between and after the two runs) are not
    # counted: what is counted is the 8-request batch.
    assert 4 <= per_iteration <= 8 and metric(front, "specdec_target_batch_draft_tokens_total") == 0
    assert metric(front, "specdec_target_iteration_seconds_total") > 0


def test_below_the_break_even_the_front_sends_the_scheduled_draft_length(tmp_path):
    state = HeldTriton(declared_inputs=bls_inputs())
    (tmp_path / BREAK_EVEN_KEY).write_text("8\n")  # margin 0: off from 8
    (tmp_path / SCHEDULE_KEY).write_text("1:4 3:2 5:1 8:0\n")

    async def scenario():
        async with stack(state, None, draft_len_file=tmp_path / "draft_len", stats_interval=0.02) as (
            front,
            url,
            client,
        ):

            async def send():
                async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}) as r:
                    assert r.status == 200

            tasks = []
            for _ in range(9):
                seen = len(state.requests)
                tasks.append(asyncio.create_task(send()))
                await eventually(lambda seen=seen: len(state.requests) == seen + 1, "the request at Triton")
            for released in state.held:
                released.set()
            await asyncio.gather(*tasks)
            return [r["num_draft_tokens"] for r in state.requests]

    assert run(scenario()) == [4, 4, 2, 2, 1, 1, 1, 0, 0]  # at 1..9 in flight
