"""Runtime configurations for the tests (from the examples, through the operator's own plan) and small
asyncio/HTTP helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from pathlib import Path

import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from specdec.api.runtime_config import RuntimeConfig
from specdec.plan import Plan, plan
from specdec.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "operator" / "specdec" / "examples").glob("*.yaml"))
DATA = Path(__file__).resolve().parent / "data"

# Scenarios the examples do not cover: the PyTorch path (draft-target and none) and the engine path
# without speculation.
EXTRA_SPECS = {
    "pytorch-llama-3.1-8b-draft-1b": {
        "backend": "pytorch",
        "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "speculation": {
            "mode": "draftTarget",
            "draftTarget": {"draft": {"model": "hf://meta-llama/Llama-3.2-1B-Instruct"}, "draftLen": 4},
        },
        "runtime": {"kvCache": {"freeGpuMemoryFraction": 0.5}},
    },
    "pytorch-none-tp2": {
        "backend": "pytorch",
        "target": {"model": "pvc://models/qwen/Qwen2.5-14B", "family": "qwen", "tensorParallelSize": 2},
    },
    "tensorrt-none-tp2": {
        "target": {"model": "hf://meta-llama/Llama-3.1-70B-Instruct", "quantization": "fp8", "tensorParallelSize": 2},
        "runtime": {"port": 9000},
    },
}


def _plan(doc: dict) -> Plan:
    result = plan(doc, Settings())
    assert isinstance(result, Plan), result
    return result


def scenario_configs() -> dict[str, RuntimeConfig]:
    configs = {}
    for path in EXAMPLES:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        configs[path.stem] = _plan(docs[0]).runtime
    for name, spec in EXTRA_SPECS.items():
        configs[name] = _plan(
            {
                "apiVersion": "specdec.io/v1alpha1",
                "kind": "SpeculativeDeployment",
                "metadata": {"name": name.replace(".", "-"), "namespace": "default"},
                "spec": spec,
            }
        ).runtime
    return configs


def config_json(config: RuntimeConfig) -> str:
    """Exactly what the operator writes into the ConfigMap."""
    return json.dumps(config.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2, sort_keys=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def serving(app: web.Application, *, handler_cancellation: bool = False):
    """Serve an aiohttp app on a free loopback port; yields its base URL."""
    runner = web.AppRunner(app, handler_cancellation=handler_cancellation, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # noqa: SLF001 - aiohttp tells the bound port nowhere else
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def serving_front(front):
    """Serve a Front as specdec-runtime does (specdec.runtime.front_server) on a free loopback port; yields its
    base URL."""
    from specdec.runtime.front_server import FrontServer

    server = FrontServer(front, shutdown_timeout=1.0)
    await server.start("127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        await server.stop()


async def eventually(predicate, what: str, timeout: float = 5.0, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


def parse_prometheus(text: str) -> dict[str, float]:
    """`name{labels}` (labels sorted by name) -> value, for the samples of a text exposition."""
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def metric(front, name: str, **labels: str) -> float:
    """One sample of a front's metrics, 0 before it has any."""
    return front.metrics.registry.get_sample_value(name, labels) or 0.0
