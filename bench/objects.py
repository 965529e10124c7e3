"""What the bench writes: the example SpeculativeDeployment and fleets of it, the stand-in objects the floors
and the probe write directly, and the namespace of each measurement."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kubernetes import client

from specdec.api.models import GROUP, VERSION

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "llama-2-13b-draft-7b-logits.yaml"


def sd_body(name: str) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name}
    return body


# Objects the floors and the probe write directly: the operator's kinds, stripped to what the API server
# needs (no label of ours: the operator ignores them; a suspended Job and 0 replicas: no pods).
STAND_IN_CONTAINER = {"name": "c", "image": "registry.invalid/x"}


def direct_engine_build(name: str, model: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EngineBuild",
        "metadata": {"name": name},
        "spec": {
            "recipe": {
                "model": model,
                "dtype": "float16",
                "quantization": "none",
                "kvCacheDtype": "auto",
                "tensorParallelSize": 1,
                "image": "x",
            },
            "cacheClaim": "c",
            "enginePath": f"engines/{name}",
        },
    }


def direct_job(name: str, suspend: bool = True) -> dict:
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [STAND_IN_CONTAINER]}}}
    return {"metadata": {"name": name}, "spec": {"suspend": True, **spec} if suspend else spec}


def direct_deployment(name: str, app: str | None = None) -> dict:
    labels = {"app": app or name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [STAND_IN_CONTAINER]}},
        },
    }


def create_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})


def target_model(i: int, models: int, own_every: int) -> str:
    """Every `own_every`-th deployment has a model of its own (its own EngineBuild); the others share
    `models` targets (and all share the draft)."""
    return f"hf://bench/own-{i}" if own_every and i % own_every == 0 else f"hf://bench/target-{i % models}"


def fleet(count: int, models: int, own_every: int) -> list[dict]:
    base = yaml.safe_load(EXAMPLE.read_text())
    bodies = []
    for i in range(count):
        body = copy.deepcopy(base)
        body["metadata"] = {"name": f"sd-{i:04d}"}
        body["spec"]["target"]["model"] = target_model(i, models, own_every)
        bodies.append(body)
    return bodies
