"""Simulated step durations in the local cluster: ModelCaches and EngineBuilds move through the phases
of their steps, one after another, as in a real cluster."""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from specdec.builders.common import LABEL_MANAGED_BY, MANAGED_BY
from specdec.reconcile import PROGRESS_WRITE_SECONDS
from specdec_dev import simulated_steps
from tests.cluster.test_model_cache import SAMPLE, model_caches
from tests.cluster.test_operator import DRAFT_TARGET, SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

# Longer than PROGRESS_WRITE_SECONDS: a step that ends sooner after the object's last status write is not
# written (the operator writes what is current when the wait is over), as in a fleet's instant simulated steps.
STEP_SECONDS = dict.fromkeys(("fetch", "convert", "quantize", "build"), PROGRESS_WRITE_SECONDS + 3)


def phases_until_ready(kube: Kube, namespace: str, deployments: list[SD], timeout: float = 120) -> dict[str, list]:
    """Each ModelCache's and EngineBuild's status.phase, every change seen (polled), until every deployment is
    Ready."""
    seen: dict[str, list] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for kind, objects in (
            ("ModelCache", model_caches(kube, namespace)),
            ("EngineBuild", engine_builds(kube, namespace)),
        ):
            for obj in objects:
                phase = (obj.get("status") or {}).get("phase", "Pending")
                history = seen.setdefault(f"{kind}/{obj['spec'].get('model') or obj['spec']['recipe']['model']}", [])
                if not history or history[-1] != phase:
                    history.append(phase)
        if all(d.condition("Ready").get("status") == "True" for d in deployments):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"not all Ready after {timeout:.0f}s; phases seen: {seen}")


def test_fetch_and_build_phases_follow_the_simulated_steps(kube: Kube, namespace: str, operator):
    deployments = [
        SD(kube, namespace, simulated_steps.deployment_with_step_seconds(example(name), STEP_SECONDS))
        for name in (SAMPLE, DRAFT_TARGET)
    ]
    seen = phases_until_ready(kube, namespace, deployments)

    def steps(key: str) -> list[str]:
        return [phase for phase in seen[key] if phase != "Pending"]  # before its Job has a running pod

    fp8, fp16 = ["Quantizing", "Building", "Succeeded"], ["Converting", "Building", "Succeeded"]
    expected = {
        "ModelCache/hf://meta-llama/Llama-3.1-70B-Instruct": ["Fetching", "Fetched"],
        "ModelCache/hf://meta-llama/Llama-3.2-1B-Instruct": ["Fetching", "Fetched"],
        "ModelCache/hf://meta-llama/Llama-2-13b-hf": ["Fetching", "Fetched"],
        "ModelCache/hf://meta-llama/Llama-2-7b-hf": ["Fetching", "Fetched"],
        "EngineBuild/hf://meta-llama/Llama-3.1-70B-Instruct": fp8,
        "EngineBuild/hf://meta-llama/Llama-3.2-1B-Instruct": fp8,
        "EngineBuild/hf://meta-llama/Llama-2-13b-hf": fp16,
        "EngineBuild/hf://meta-llama/Llama-2-7b-hf": fp16,
    }
    assert {key: steps(key) for key in seen} == expected, seen

    models = {
        **{c["metadata"]["name"]: c["spec"]["model"] for c in model_caches(kube, namespace)},
        **{b["metadata"]["name"]: b["spec"]["recipe"]["model"] for b in engine_builds(kube, namespace)},
    }
    pods = kube.core.list_namespaced_pod(namespace, label_selector=f"{LABEL_MANAGED_BY}={MANAGED_BY}").items
    fetched = {
        models[p.metadata.labels["specdec.io/model-cache"]]: p.status.container_statuses[0].state.terminated
        for p in pods
        if "specdec.io/model-cache" in p.metadata.labels
    }
    assert all(
        t and (t.finished_at - t.started_at).total_seconds() >= STEP_SECONDS["fetch"] - 1 for t in fetched.values()
    ), fetched  # the timestamps have whole seconds
    build_pods = [p for p in pods if "specdec.io/engine-build" in p.metadata.labels]
    assert len(build_pods) == 4
    for pod in build_pods:
        model = models[pod.metadata.labels["specdec.io/engine-build"]]
        assert pod.metadata.creation_timestamp >= fetched[model].finished_at, (pod.metadata.name, fetched[model])
        steps_run = pod.status.init_container_statuses + pod.status.container_statuses
        assert steps_run[-1].name == "build"
        for earlier, later in pairwise(steps_run):  # one step after another, each for its seconds
            assert earlier.state.terminated.finished_at <= later.state.terminated.started_at, steps_run
        for step in steps_run:
            ran = step.state.terminated.finished_at - step.state.terminated.started_at
            assert ran.total_seconds() >= STEP_SECONDS[step.name] - 1, (step.name, ran)
