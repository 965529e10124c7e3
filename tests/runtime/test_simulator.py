"""The local cluster's simulation without a cluster: the acceptance model, the simulated backends behind the
real front, the acceptance profiles, the simulated clients and the emulated ConfigMap volume."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics

import aiohttp
import pytest
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specdec.runtime import launch, triton
from specdec.runtime.front import Front
from specdec.speculation import payoff
from specdec.speculation.trtllm_schedule import draft_len_at
from specdec_dev import simulated_clients, simulation_profile
from specdec_dev.podrunner import write_volume
from specdec_dev.simulation_profile import Profile, ProfileError
from specdec_dev.simulator import SimulatedTriton, SimulatedTrtllmServe, draft_len_schedule, serve_drafts, speculate
from tests.runtime.helpers import eventually, metric, scenario_configs, serving, serving_front

CONFIGS = scenario_configs()
DRAFT_TARGET = CONFIGS["llama-2-13b-draft-7b-logits"]  # Triton route, draftLen 4
FAST = Profile(target_step_seconds=0.0001, step_seconds_per_token=0)  # load-independent: exact sums


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def rate(acceptance: float, draft_len: int) -> float:
    """Accepted / drafted tokens the model expects: the accepted tokens of a step, (E(k) - 1), over k."""
    return (payoff.tokens_per_step(acceptance, draft_len) - 1) / draft_len


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("acceptance, draft_len", [(0.3, 1), (0.7, 4), (0.9, 10), (0.5, 0)])
def test_tokens_per_step_converge_to_the_models_expectation(acceptance, draft_len):
    steps = speculate(200_000, draft_len, Profile(acceptance=acceptance), random.Random(7))
    expected = (1 - acceptance ** (draft_len + 1)) / (1 - acceptance)
    observed = (steps.accepted_tokens + steps.steps) / steps.steps
    assert abs(observed - expected) / expected < 0.02
    assert steps.draft_tokens == steps.steps * draft_len and steps.accepted_tokens <= steps.draft_tokens


def test_certain_and_impossible_acceptance_and_the_cost_of_a_request():
    profile = Profile(acceptance=1.0, cost_ratio=0.1, target_step_seconds=0.02)
    steps = speculate(50, 4, profile, random.Random(1))
    assert (steps.steps, steps.draft_tokens, steps.accepted_tokens) == (10, 40, 40)  # 5 tokens a step
    assert steps.target_seconds == pytest.approx(10 * 0.02) and steps.draft_seconds == pytest.approx(40 * 0.1 * 0.02)
    never = speculate(50, 4, profile.model_copy(update={"acceptance": 0.0}), random.Random(1))
    assert (never.steps, never.accepted_tokens) == (50, 0)
    assert speculate(50, 4, profile, random.Random(1), draft_costs=False).draft_seconds == 0
    stopped = speculate(50, 4, profile.model_copy(update={"drafting": False}), random.Random(1))
    assert (stopped.steps, stopped.draft_tokens, stopped.accepted_tokens, stopped.draft_seconds) == (50, 0, 0, 0)


def test_noise_spreads_the_acceptance_of_requests():
    def rates(noise: float) -> list[float]:
        rng = random.Random(3)
        runs = [speculate(400, 4, Profile(acceptance=0.6, noise=noise), rng) for _ in range(200)]
        return [s.accepted_tokens / s.draft_tokens for s in runs]

    assert statistics.stdev(rates(0.3)) > 2 * statistics.stdev(rates(0.0))


def test_simulated_triton_behind_the_front_counts_triton_metrics_and_follows_its_profile():
    simulated = SimulatedTriton(FAST.model_copy(update={"acceptance": 0.2}), seed=5)

    async def scenario():
        async with serving(simulated.app()) as triton_url, serving(simulated.metrics_app()) as metrics_url:
            backend = dataclasses.replace(
                launch.plan_launch(DRAFT_TARGET).backend, url=triton_url, metrics_url=f"{metrics_url}/metrics"
            )
            front = Front(DRAFT_TARGET, backend)
            async with serving_front(front) as url, aiohttp.ClientSession() as client:

                async def acceptance() -> float:
                    answers = []
                    for _ in range(20):
                        async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 64}) as r:
                            answers.append((await r.json())["speculation"])
                    return sum(a["accepted_draft_tokens"] for a in answers) / sum(a["draft_tokens"] for a in answers)

                low = await acceptance()
                simulated.profile = simulated.profile.model_copy(update={"acceptance": 0.9})
                high = await acceptance()
                async with client.get(f"{metrics_url}/metrics") as r:
                    triton_text = await r.text()
                async with client.get(f"{url}/metrics") as r:
                    front_metrics = samples(await r.text())
        return low, high, triton_text, front_metrics

    low, high, triton_text, front_metrics = run(scenario())
    assert low == pytest.approx(rate(0.2, 4), abs=0.05) and high == pytest.approx(rate(0.9, 4), abs=0.07)
    for model in (triton.TARGET_MODEL, triton.DRAFT_MODEL):  # Triton's names, as Triton writes them
        assert f'nv_inference_exec_count{{model="{model}",version="1"}}' in triton_text
    # The parser gives counters' samples a _total suffix.
    triton_metrics = samples(triton_text)
    target, draft = ((("model", m), ("version", "1")) for m in (triton.TARGET_MODEL, triton.DRAFT_MODEL))
    steps = triton_metrics[("nv_inference_exec_count_total", target)]
    drafted = front_metrics[("specdec_draft_tokens_total", ())]
    assert steps == triton_metrics[("nv_inference_exec_count_total", draft)] and drafted == 4 * steps  # draftLen 4
    assert triton_metrics[("nv_inference_compute_infer_duration_us_total", target)] == pytest.approx(steps * 100)
    assert triton_metrics[("nv_inference_compute_infer_duration_us_total", draft)] == pytest.approx(
        drafted * 0.05 * 100
    )  # costRatio 0.05 of a 100 us step


class RecordingTriton(SimulatedTriton):
    """The simulated Triton, noting the num_draft_tokens of every request."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.draft_lens: list[int] = []

    async def generate(self, body):
        self.draft_lens.append(body["num_draft_tokens"])
        return await super().generate(body)


def test_a_backend_that_does_not_draft_answers_from_the_target_alone():
    """Profile drafting=false: speculation configured, no draft tokens proposed nor draft time spent."""
    not_drafting = FAST.model_copy(update={"drafting": False})
    triton_backend = SimulatedTriton(not_drafting, seed=1)
    serve = SimulatedTrtllmServe(not_drafting, "m", draft_len=4, draft_costs=True, seed=1)

    async def scenario():
        generation = await triton_backend.generate({"max_tokens": 16, "num_draft_tokens": 4})
        await serve.complete({"prompt": "a b", "max_tokens": 16}, chat=False)
        return generation

    generation = asyncio.run(scenario())
    assert (generation.draft_tokens, generation.accepted_tokens) == (0, 0) and len(generation.text) > 0
    assert triton_backend.executions == {triton.TARGET_MODEL: 16, triton.DRAFT_MODEL: 0}
    stats = serve.iteration_stats()
    assert len(stats) == 16  # one token a step
    assert all(
        s["specDecodingStats"]["numDraftTokens"] == s["specDecodingStats"]["numRequestsWithDraftTokens"] == 0
        for s in stats
    )


def test_the_front_measures_the_profiles_cost_ratio_from_the_simulated_tritons_counters(tmp_path):
    profile = FAST.model_copy(update={"acceptance": 0.6, "cost_ratio": 0.15})
    simulated = RecordingTriton(profile, seed=11)
    draft_len_file = tmp_path / "draft_len"

    def sample(front: Front) -> payoff.Sample:
        """The front's counters, as the operator's monitor reads them from /metrics."""
        return payoff.Sample({key: metric(front, name) for key, name in payoff.COUNTERS.items()}, front.route.draft_len)

    async def scenario():
        async with serving(simulated.app()) as triton_url, serving(simulated.metrics_app()) as metrics_url:
            backend = dataclasses.replace(
                launch.plan_launch(DRAFT_TARGET).backend, url=triton_url, metrics_url=f"{metrics_url}/metrics"
            )
            front = Front(DRAFT_TARGET, backend, stats_interval=0.02, draft_len_file=draft_len_file)
            async with serving_front(front) as url, aiohttp.ClientSession() as client:

                async def window() -> payoff.Measurement:
                    before = sample(front)
                    for _ in range(20):
                        async with client.post(f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 64}) as r:
                            assert r.status == 200
                    # The front has polled Triton's counters since the last answer.
                    target_us = round(simulated.compute_us[triton.TARGET_MODEL])
                    await eventually(
                        lambda: round(metric(front, "specdec_target_seconds_total") * 1e6) == target_us,
                        "the front to read Triton's counters",
                    )
                    after = sample(front)
                    return payoff.measure(
                        payoff.delta(before, after),
                        after.draft_len,
                        pods=1,
                        max_draft_len=DRAFT_TARGET.draft_target.max_draft_len,
                        estimated_cost=(0.5, "Assumed"),
                    )

                configured = await window()  # no draft_len file: the configured draftLen 4
                draft_len_file.write_text("2\n")
                await eventually(lambda: front.route.draft_len == 2, "the front to read the draft_len file")
                sent = len(simulated.draft_lens)
                changed = await window()
        return configured, changed, simulated.draft_lens[:sent], simulated.draft_lens[sent:]

    configured, changed, before, after = run(scenario())
    assert set(before) == {4} and after == [2] * 20  # what the simulated Triton was asked for
    for measured, draft_len in ((configured, 4), (changed, 2)):
        assert measured.draft_len == draft_len and measured.cost_source == "Measured"
        assert measured.cost_ratio == pytest.approx(profile.cost_ratio, rel=1e-3)
        assert measured.acceptance_rate == pytest.approx(rate(profile.acceptance, draft_len), abs=0.08)


def test_simulated_trtllm_serve_hands_out_iteration_stats_once_and_streams():
    simulated = SimulatedTrtllmServe(FAST, "llama", draft_len=3, draft_costs=True, seed=2)

    async def scenario():
        async with serving(simulated.app()) as url, aiohttp.ClientSession() as client:
            for _ in range(3):
                async with client.post(f"{url}/v1/completions", json={"prompt": "a b c", "max_tokens": 20}) as r:
                    answer = await r.json()
            async with client.post(
                f"{url}/v1/chat/completions",
                json={
                    "messages": [{"role": "user", "content": "Hi"}],
                    "max_tokens": 5,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            ) as r:
                events = [line for line in (await r.text()).splitlines() if line.startswith("data: ")]
            async with client.get(f"{url}/metrics") as r:
                first = await r.json()
            async with client.get(f"{url}/metrics") as r:
                second = await r.json()
        return answer, events, first, second

    answer, events, first, second = run(scenario())
    assert answer["usage"] == {"prompt_tokens": 3, "completion_tokens": 20, "total_tokens": 23}
    assert len(answer["choices"][0]["text"].split()) == 20 and answer["choices"][0]["finish_reason"] == "length"
    assert len(events) == 5 + 2 and events[-1] == "data: [DONE]"  # 5 tokens, usage, [DONE]
    assert json.loads(events[-2][6:])["usage"]["completion_tokens"] == 5
    assert second == [] and 4 * 2 <= len(first) <= 3 * 20 + 5  # one per step: 1 to k + 1 tokens each
    for entry in first:  # one request in flight at a time: a batch of one, drafting 3 tokens
        spec = entry["specDecodingStats"]
        assert entry["inflightBatchingStats"]["numGenRequests"] == 1
        assert spec["numDraftTokens"] == 3 and spec["numRequestsWithDraftTokens"] == 1
        assert spec["acceptanceLength"] == spec["numAcceptedTokens"] + 1
        # t(n) = 0.1 ms at any batch; the draft's 3 tokens cost 0.05 of it each; the drafter's share apart
        assert entry["iterLatencyMS"] == pytest.approx(0.1 * (1 + 3 * 0.05))
        assert spec["iterLatencyMS"] == pytest.approx(entry["iterLatencyMS"] * spec["draftOverhead"])
    assert sum(1 + e["specDecodingStats"]["numAcceptedTokens"] for e in first) >= 3 * 20 + 5


@pytest.mark.parametrize(
    "scenario, drafts",
    [
        ("llama-3.1-8b-draft-1b-pytorch", (4, True, None)),  # speculative_config.max_draft_len: the draftLen
        ("llama-3.1-8b-eagle3", (3, True, {32: 3})),  # max_concurrency 32
        ("qwen2.5-7b-ngram", (4, False, None)),  # a lookup: no draft model to pay for
        ("vicuna-7b-redrafter", (4, True, None)),  # no speculative_config on the engine path: the default
        ("pytorch-none-tp2", (0, False, None)),
    ],
)
def test_trtllm_serve_draft_length_comes_from_the_runtime_config(scenario, drafts):
    assert serve_drafts(CONFIGS[scenario]) == drafts


def test_trtllm_serve_drafts_by_batch_size_as_tensorrt_llm_applies_its_schedule():
    """draft_len_schedule's keys are the largest batch of their tier, above the largest nothing is drafted;
    max_concurrency is {max_concurrency: max_draft_len}."""
    schedule = draft_len_schedule({"max_draft_len": 4, "draft_len_schedule": {"8": 2, "2": 4, "32": 1}}, 4)
    assert schedule == {2: 4, 8: 2, 32: 1}
    assert [draft_len_at(schedule, 4, n) for n in (1, 2, 3, 8, 9, 32, 33)] == [4, 4, 2, 2, 1, 1, 0]
    assert draft_len_schedule({"max_draft_len": 3, "max_concurrency": 16}, 3) == {16: 3}
    assert draft_len_schedule({"max_draft_len": 3}, 3) is None and draft_len_at(None, 3, 1000) == 3


def test_simulated_trtllm_serve_batches_and_drafts_by_the_schedule():
    """Eight requests at once: one batch of 8 steps together, drafting the schedule's length for 8 (1 token),
    and the statistics say so; a step of a larger batch takes longer (stepSecondsPerToken)."""
    profile = Profile(
        target_step_seconds=0.002, step_seconds_per_token=0.0005, acceptance=1.0, noise=0.0, cost_ratio=0.1
    )
    simulated = SimulatedTrtllmServe(profile, "llama", draft_len=4, draft_costs=True, schedule={2: 4, 16: 1}, seed=3)

    async def scenario():
        await asyncio.gather(*(simulated.complete({"prompt": "a", "max_tokens": 8}, chat=False) for _ in range(8)))
        return simulated.iteration_stats()

    stats = run(scenario())
    assert len(stats) == 4  # every draft accepted: 2 tokens a step
    for entry in stats:
        assert entry["inflightBatchingStats"]["numGenRequests"] == 8
        assert (
            entry["specDecodingStats"]["numDraftTokens"] == 8
            and entry["specDecodingStats"]["numRequestsWithDraftTokens"] == 8
        )
        # 1 * costRatio * t(8) + t(8 * 2)
        assert entry["iterLatencyMS"] == pytest.approx(1000 * (0.1 * (0.002 + 0.004) + 0.002 + 0.008))


def test_profiles_merge_defaults_and_refuse_what_cannot_be_simulated(tmp_path):
    path = tmp_path / simulation_profile.FILE_NAME
    assert simulation_profile.resolve(simulation_profile.read(path), "ns/a") == Profile()
    path.write_text(json.dumps({"default": {"costRatio": 0.2, "maxTokens": 32}}))
    updated = simulation_profile.update(path, "ns/a", {"acceptance": 0.9})
    assert (updated.acceptance, updated.cost_ratio, updated.max_tokens) == (0.9, 0.2, 32)
    document = simulation_profile.read(path)
    assert document["deployments"] == {"ns/a": {"acceptance": 0.9}}
    assert simulation_profile.resolve(document, "ns/b") == Profile(cost_ratio=0.2, max_tokens=32)
    with pytest.raises(ProfileError, match=r"acceptance: Input should be less than or equal to 1 \(got 1.5\)"):
        simulation_profile.update(path, "ns/a", {"acceptance": 1.5})
    assert simulation_profile.read(path) == document  # a refused update leaves the file alone
    path.write_text(json.dumps({"deployments": {"ns/a": {"noise": -1}}}))
    with pytest.raises(ProfileError, match=r"deployments\['ns/a'\]: noise"):
        simulation_profile.read(path)


def test_a_seeded_profile_seeds_each_pod_apart_and_repeats_its_draws():
    seeded = Profile(acceptance=0.6, noise=0.1, seed=7)
    assert simulation_profile.pod_seed(Profile(), "ns", "a-1") is None  # unseeded: the pods draw freshly
    first, again = simulation_profile.pod_seed(seeded, "ns", "a-1"), simulation_profile.pod_seed(seeded, "ns", "a-1")
    other = simulation_profile.pod_seed(seeded, "ns", "a-2")
    assert first == again and first != other
    reseeded = simulation_profile.pod_seed(seeded.model_copy(update={"seed": 8}), "ns", "a-1")
    assert reseeded != first

    def draws(seed: int | None) -> list[int]:
        rng = random.Random(seed)  # as the pod's simulated backend draws
        return [speculate(64, 4, seeded, rng).accepted_tokens for _ in range(5)]

    assert draws(first) == draws(again) and draws(first) != draws(other)
    with pytest.raises(ValueError, match="seed"):
        Profile(seed=-1)


def test_simulated_clients_arrive_at_the_profiles_rate():
    arrivals: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        arrivals.append(await request.json())
        return web.json_response({})

    async def scenario(rate: float) -> int:
        arrivals.clear()
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        profile = Profile(requests_per_second=rate, max_tokens=12)
        async with serving(app) as url, aiohttp.ClientSession() as session:
            load = asyncio.create_task(
                simulated_clients.open_loop(session, f"{url}/v1/completions", lambda: profile, random.Random(4))
            )
            await asyncio.sleep(1.0)
            load.cancel()
        return len(arrivals)

    assert 20 <= run(scenario(50.0)) <= 80
    assert {a["prompt"] for a in arrivals} == {simulated_clients.PROMPT} and {a["max_tokens"] for a in arrivals} == {12}
    assert {a["stream"] for a in arrivals} == {True, False}  # some stream: the front's first-token times
    assert run(scenario(0.0)) == 0


def test_closed_loop_clients_keep_their_number_in_flight_with_lengths_around_the_mean():
    lengths: list[int] = []
    in_flight, most = 0, 0

    async def completions(request: web.Request) -> web.Response:
        nonlocal in_flight, most
        lengths.append((await request.json())["max_tokens"])
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return web.json_response({})

    async def scenario() -> int:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        stop = asyncio.Event()
        async with serving(app) as url, aiohttp.ClientSession() as session:
            load = asyncio.create_task(simulated_clients.closed_loop(session, f"{url}/v1/completions", 5, 32, stop))
            await asyncio.sleep(0.5)
            stop.set()
            return await load

    answered = asyncio.run(scenario())
    assert most == 5 and answered == len(lengths) > 50
    assert min(lengths) >= 16 and max(lengths) <= 48 and len(set(lengths)) > 10  # clients do not run in step
    assert 28 <= statistics.mean(lengths) <= 36


def test_closed_loop_clients_stop_at_a_failed_request():
    async def completions(_request: web.Request) -> web.Response:
        return web.json_response({"error": "down"}, status=503)

    async def scenario() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        async with serving(app) as url, aiohttp.ClientSession() as session:
            await simulated_clients.closed_loop(session, f"{url}/v1/completions", 2, 8, asyncio.Event())

    with pytest.raises(aiohttp.ClientResponseError, match="503"):
        asyncio.run(scenario())


def test_config_volume_files_follow_the_config_map(tmp_path):
    volume = tmp_path / "config"
    write_volume(volume, {"runtime.json": "{}", "draft_len": "4"})
    assert sorted(p.name for p in volume.iterdir()) == ["draft_len", "runtime.json"]
    write_volume(volume, {"runtime.json": "{}", "draft_len": "6"})
    assert (volume / "draft_len").read_text() == "6"
    write_volume(volume, {"runtime.json": "{}"})
    assert [p.name for p in volume.iterdir()] == ["runtime.json"]


def test_specdec_dev_simulate_turns_drafting_off_and_on():
    from specdec_dev.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["simulate", "llama", "--no-drafting"]).drafting is False
    assert parse(["simulate", "llama", "--drafting"]).drafting is True
    assert parse(["simulate", "llama", "--acceptance", "0.5"]).drafting is None  # not given: not changed
