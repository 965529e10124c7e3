"""End to end: a draft change with spec.rollout.canary on the local cluster. The runtime pods of both arms are served
by the local pod runner (the real front before a simulated backend), each arm with its simulated acceptance
(specdec_dev.simulation_profile: the canary arm's `<namespace>/<name>/canary`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
# trtllm-serve (backend pytorch), draftLen 4. Its answers carry their usage, from which the front times each output
# token (TPOT, what the test compares); the simulated Triton route answers without it where no tokenizer is mounted.
SAMPLE = "llama-3.1-8b-draft-1b-pytorch.yaml"
# Target steps long enough that a request's time per token is the steps', not the front's and the HTTP's own.
PROFILE = {**FAST_PROFILE, "targetStepSeconds": 0.02}


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def canary_pods(kube: Kube, namespace: str, name: str) -> list:
    selector = f"{LABEL_INSTANCE}={name},{LABEL_COMPONENT}=runtime-canary"
    return kube.core.list_namespaced_pod(namespace, label_selector=selector).items


def reasons(kube: Kube, sd: SD) -> list[str]:
    return [e.reason for e in kube.events_for(sd.namespace, sd.name)]


def started_canary(kube: Kube, sd: SD) -> dict:
    """The draft length changed with the canary on: the canary runs beside the unchanged runtime."""
    main_template = kube.apps.read_namespaced_deployment(sd.name, sd.namespace).spec.template.metadata.annotations
    sd.patch({"spec": {"speculation": {"draftTarget": {"draftLen": 3}}}})
    wait_for(lambda: canary_pods(kube, sd.namespace, sd.name), "canary pods", timeout=90)
    canary = kube.apps.read_namespaced_deployment(f"{sd.name}-canary", sd.namespace)
    assert canary.metadata.owner_references[0].uid == sd.get()["metadata"]["uid"]
    assert kube.apps.read_namespaced_deployment(sd.name, sd.namespace).spec.template.metadata.annotations == (
        main_template
    )  # nothing rolled
    status = wait_for(lambda: (s := sd.get().get("status") or {}).get("canary", {}).get("state") and s, "status.canary")
    assert status["canary"]["state"] == "InProgress"
    assert sd.condition("Canary")["reason"] == "InProgress"
    return status


def decided(sd: SD, timeout: float) -> dict:
    return wait_for(
        lambda: (
            (c := (sd.get().get("status") or {}).get("canary") or {}).get("state") not in (None, "InProgress") and c
        ),
        "the canary's decision",
        timeout=timeout,
        interval=0.5,
    )


def with_canary(body: dict) -> dict:
    body["spec"]["rollout"] = {"canary": {"enabled": True}}
    return body


def test_a_faster_canary_is_promoted_and_the_runtime_rolls_to_it(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    sd = SD(kube, namespace, with_canary(example(SAMPLE)))
    sd.wait_ready()
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**PROFILE, "acceptance": 0.4})
    simulation_profile.update(profiles, simulation_profile.canary_key(deployment), {"acceptance": 0.9})
    with pod_runner(kubeconfig, tmp_path, namespace):
        started_canary(kube, sd)
        canary = decided(sd, timeout=180)
        print(json.dumps(canary, indent=1))
        assert canary["state"] == "Promoted", (canary["decision"], canary["arms"])
        assert canary["decision"]["reason"] == "Faster" and canary["test"]["pairs"] >= 5
        assert canary["arms"]["canary"]["requests"] > 0 and canary["arms"]["current"]["requests"] > 0
        assert canary["current"]["speculation"]["draftTarget"]["draftLen"] == 3
        assert sd.condition("Canary")["status"] == "True"
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed after the rollout", timeout=120)
        sd.wait_ready()
    assert {"CanaryStarted", "CanaryPromoted"} <= set(reasons(kube, sd))


def test_a_collapsed_canary_is_rejected_and_removed_and_the_current_draft_keeps_serving(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    sd = SD(kube, namespace, with_canary(example(SAMPLE)))
    sd.wait_ready()
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**PROFILE, "acceptance": 0.7})
    simulation_profile.update(profiles, simulation_profile.canary_key(deployment), {"acceptance": 0.05})
    with pod_runner(kubeconfig, tmp_path, namespace):
        status = started_canary(kube, sd)
        main_template = kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.metadata.annotations
        canary = decided(sd, timeout=120)
        print(json.dumps(canary, indent=1))
        assert canary["state"] == "Rejected", (canary["decision"], canary["arms"])
        assert canary["decision"]["reason"] == "AcceptanceCollapsed", canary["decision"]
        assert sd.condition("Canary")["status"] == "False"
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed", timeout=60)
        assert kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.metadata.annotations == (
            main_template
        )
        assert canary["current"] == status["canary"]["current"]  # the current draft keeps serving
    assert "CanaryRejected" in reasons(kube, sd)
