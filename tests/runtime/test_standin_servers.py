"""The stand-in servers (specdec_dev.standin_servers) run the exact command line specdec-runtime launches for
every example (launch.plan_launch's argv, only the ports swapped for free ones): each answers its health path and
a completion sent through the front, speculates as its configuration says, refuses an option the real
server does not have, and stops with status 0 on SIGTERM.

All stand-ins start at once (module fixture), so the module costs about one Python start-up per core.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specdec.runtime import launch, triton
from specdec.runtime.chat import Tokenizer
from specdec.runtime.front import Front
from specdec_dev.hidden_state_writer import captured_into
from tests.runtime.helpers import EXAMPLES, ROOT, free_port, parse_prometheus, scenario_configs, serving, serving_front

# A multi-node example's leader launches mpirun over its LeaderWorkerSet group (tests/unit/test_multinode.py
# checks that launch, tests/realnode/test_mpi.py runs it): one stand-in process cannot serve it.
CONFIGS = {
    name: config
    for name, config in scenario_configs().items()
    if name in {p.stem for p in EXAMPLES} and config.multi_node is None
}
STANDINS = [sys.executable, "-m", "specdec_dev.standin_servers"]
# Every draft accepted, and fast steps: the counts below are exact.
PROFILE = {"acceptance": 1.0, "targetStepSeconds": 0.001}
ENV = {
    **os.environ,
    "SPECDEC_SIMULATION_PROFILE": json.dumps(PROFILE),
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "operator"), os.environ.get("PYTHONPATH")])),
}
MAX_TOKENS = 12


@dataclasses.dataclass
class Running:
    config: object
    plan: launch.LaunchPlan
    argv: list[str]
    port: int
    metrics_port: int | None
    process: subprocess.Popen

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def with_ports(argv: list[str], ports: dict[str, int]) -> list[str]:
    """The plan's argv with free ports: trtllm-serve's `--port N`, tritonserver's `--<name>-port=N`."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--port":
            out[i + 1] = str(ports["http"])
        for name in ("http", "grpc", "metrics"):
            if arg.startswith(f"--{name}-port="):
                out[i] = f"--{name}-port={ports[name]}"
    return out


def python_models(directory: Path) -> Path:
    """What the runtime image has at SPECDEC_TRITON_MODELS_DIR (the backend's Python models)."""
    for model in triton.PYTHON_MODELS:
        (directory / model / "1").mkdir(parents=True, exist_ok=True)
        (directory / model / "1" / "model.py").write_text("# placeholder\n")
    return directory


def saves_states(config) -> bool:
    return (config.speculative_config or {}).get("decoding_type") == "SaveState"


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    models = python_models(tmp_path_factory.mktemp("backend-models"))
    started: dict[str, Running] = {}
    try:
        for name, config in CONFIGS.items():
            if saves_states(config):  # the capture goes to a directory of the test's, not the pod's /captures
                config = captured_into(config, tmp_path_factory.mktemp(f"{name}-captures"))
            plan = launch.plan_launch(config, str(tmp_path_factory.mktemp(name)))
            launch.prepare(plan, str(models))  # the YAML, or the Triton repository
            ports = {"http": free_port(), "grpc": free_port(), "metrics": free_port()}
            argv = with_ports(plan.argv, ports)
            assert argv != plan.argv, f"{name}: no port swapped in {plan.argv}"
            process = subprocess.Popen(
                [*STANDINS, *argv],
                env={**ENV, **plan.env},
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            started[name] = Running(
                config, plan, argv, ports["http"], ports["metrics"] if plan.backend.kind == "triton" else None, process
            )
        yield started
    finally:
        for item in started.values():
            if item.process.poll() is None:
                item.process.kill()
            item.process.communicate()


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as error:
        return error.code
    except (urllib.error.URLError, ConnectionError):
        return 0


def wait_healthy(item: Running, timeout: float = 30.0) -> None:
    url = item.url + item.plan.backend.health_path
    deadline = time.monotonic() + timeout
    while http_status(url) != 200:
        if item.process.poll() is not None:
            raise AssertionError(f"the stand-in exited with {item.process.returncode}: {item.process.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {timeout}s")
        time.sleep(0.1)


async def through_the_front(item: Running, requests: int = 1) -> tuple[dict, Any]:
    """Completions through the front (as specdec-runtime builds it) to the stand-in; then the stand-in's
    own speculation statistics (trtllm-serve's /metrics) or counters (Triton's metrics), or in mode saveState
    the front's own metrics."""
    backend = dataclasses.replace(
        item.plan.backend,
        url=item.url,
        metrics_url=(f"http://127.0.0.1:{item.metrics_port}/metrics" if item.metrics_port else None),
    )
    front = Front(item.config, backend, tokenizer=Tokenizer(None), route=item.plan.route, stats_interval=0)
    async with serving_front(front) as url, aiohttp.ClientSession() as client:
        async with client.get(f"{url}/health") as resp:
            assert resp.status == 200, await resp.text()
        request = {"prompt": "Hello there", "max_tokens": MAX_TOKENS}
        for _ in range(requests):
            async with client.post(f"{url}/v1/completions", json=request) as resp:
                assert resp.status == 200, await resp.text()
                body = await resp.json()
        if front.capture is not None:
            async with client.get(f"{url}/metrics") as resp:
                stats = parse_prometheus(await resp.text())
            return body, stats
        stats_url = backend.metrics_url or f"{item.url}/metrics"
        async with client.get(stats_url) as resp:
            stats = await resp.json() if item.metrics_port is None else (await resp.text()).splitlines()
    return body, stats


def expected_draft_len(item: Running) -> int:
    if item.plan.backend.kind == "triton":
        return item.plan.backend.draft_len
    speculative = item.config.speculative_config
    if item.config.backend != "pytorch" or not speculative:
        return 0  # an engine's drafts are in its config.json, and these engines were never built
    if speculative["decoding_type"] == "SaveState":
        return 0  # captures hidden states, proposes no token
    return speculative.get("max_draft_len") or 4


def test_the_examples_take_every_route():
    routes = {launch.plan_launch(config).route for config in CONFIGS.values()}
    assert routes == {"triton", "trtllm-serve-engine", "trtllm-serve-pytorch"}


@pytest.mark.parametrize("name", sorted(n for n, c in CONFIGS.items() if not saves_states(c)))
def test_answers_health_and_a_completion_through_the_front(running, name):
    item = running[name]
    wait_healthy(item)
    body, stats = asyncio.run(asyncio.wait_for(through_the_front(item), 20))
    assert body["choices"][0]["text"] == " sim" * MAX_TOKENS
    k = expected_draft_len(item)
    if item.plan.backend.kind == "triton":
        # Every draft accepted: each step yields k + 1 tokens.
        steps = -(-MAX_TOKENS // (k + 1))
        assert body["speculation"] == {
            "acceptance_rate": 1.0,
            "accepted_draft_tokens": steps * k,
            "draft_tokens": steps * k,
        }
        assert any(
            line.startswith(f'nv_inference_exec_count{{model="{triton.DRAFT_MODEL}"') and line.endswith(f" {steps}")
            for line in stats
        ), stats
    else:
        # One statistic per iteration (step), every draft accepted: each step yields k + 1 tokens.
        assert len(stats) == -(-MAX_TOKENS // (k + 1))
        assert sum(e["specDecodingStats"]["numDraftTokens"] for e in stats) == k * len(stats)
        assert sum(e["specDecodingStats"]["numAcceptedTokens"] for e in stats) == k * len(stats)


@pytest.mark.parametrize("name", sorted(n for n, c in CONFIGS.items() if saves_states(c)))
def test_save_state_answers_one_token_and_the_front_counts_the_files_it_writes(running, name):
    """As TensorRT-LLM's SaveHiddenStatesDrafter: one token per request, a file every write_interval requests."""
    item = running[name]
    wait_healthy(item)
    speculative = item.config.speculative_config
    interval = speculative["write_interval"]
    body, metrics = asyncio.run(asyncio.wait_for(through_the_front(item, requests=interval + 1), 30))
    assert body["choices"][0]["text"] == " sim"
    (written,) = Path(speculative["output_directory"]).iterdir()
    assert written.name == f"{speculative['file_prefix']}_{interval}.pt"
    assert metrics["specdec_capture_files"] == 1 and metrics["specdec_capture_bytes"] == written.stat().st_size
    # "Hello there": two token ids a request; the request after the write waits for the next one.
    assert metrics["specdec_capture_requests"] == interval and metrics["specdec_capture_tokens"] == 2 * interval
    assert metrics["specdec_capture_unreadable_files"] == 0
    assert metrics["specdec_capture_last_write_timestamp_seconds"] == pytest.approx(written.stat().st_mtime)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_unknown_option_is_refused(name):
    argv = launch.plan_launch(CONFIGS[name]).argv
    result = subprocess.run(
        [*STANDINS, *argv, "--no-such-option", "1"], env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and "unrecognized arguments: --no-such-option" in result.stderr, result


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_sigterm_stops_it_with_status_0(running, name):
    item = running[name]
    wait_healthy(item)
    item.process.send_signal(signal.SIGTERM)
    assert item.process.wait(timeout=10) == 0, item.process.communicate()


def test_triton_refuses_a_repository_without_every_model(tmp_path):
    config = CONFIGS["llama-2-13b-draft-7b-logits"]
    plan = launch.plan_launch(config, str(tmp_path))
    launch.prepare(plan, str(python_models(tmp_path / "models")))
    (Path(plan.triton_repo) / triton.DRAFT_MODEL / "config.pbtxt").unlink()
    result = subprocess.run(
        [*STANDINS, *with_ports(plan.argv, {"http": 1, "grpc": 1, "metrics": 1})],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1 and f"failed to load all models: {triton.DRAFT_MODEL}" in result.stderr


def test_a_bad_profile_is_refused(tmp_path):
    argv = ["trtllm-serve", "model", "--port", str(free_port())]
    result = subprocess.run(
        [*STANDINS, *argv],
        env={**ENV, "SPECDEC_SIMULATION_PROFILE": '{"acceptance": 2}'},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1 and "SPECDEC_SIMULATION_PROFILE is not a simulation profile" in result.stderr


def test_the_paced_trtllm_serve_stand_in_keeps_its_schedule_when_writing_a_piece_is_slow(monkeypatch):
    """bench/front_bench.py's backend: piece k of a stream at (k + 1) steps from the request's arrival, whatever
    the server's own time to write each one (here 15 ms of a 20 ms step, blocking its loop)."""
    from specdec_dev.simulation_profile import Profile
    from specdec_dev.standin_servers import paced_trtllm_serve

    paced = paced_trtllm_serve()
    slow = paced.chunk_sent

    async def slow_chunk_sent(self, request):
        time.sleep(0.015)
        return await slow(self, request)

    monkeypatch.setattr(paced, "chunk_sent", slow_chunk_sent)
    profile = Profile(acceptance=0, cost_ratio=0, target_step_seconds=0.02, step_seconds_per_token=0)

    async def scenario():
        async with serving(paced(profile, "m", 0, True, None).app()) as url, aiohttp.ClientSession() as client:
            started = time.monotonic()
            async with client.post(
                f"{url}/v1/completions", json={"prompt": "Hi", "max_tokens": 10, "stream": True}
            ) as resp:
                await resp.read()
            return time.monotonic() - started

    seconds = asyncio.run(scenario())
    assert 0.2 <= seconds < 0.3  # 10 steps of 20 ms; the writes' 15 ms each added up would make it 0.35 s
