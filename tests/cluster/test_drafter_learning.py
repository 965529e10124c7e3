"""spec.drafter.learning on the local cluster: the pod runner serves the runtime pod (the production front, capturing
samples of its simulated clients' requests into the directory standing for the claim), the operator counts them in
status.drafter from the pods' metrics, and once there are enough runs a round: the SaveState server (runtime pods of
their own), the replay Job, the train Job (simulated under kwok: its result is a SIMULATED train result, the pod's
annotation made its termination message by stages/pod-complete.yaml), then the decision. A better head is served
from status (the runtime ConfigMap names it; the spec is unchanged); one that is not better is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.drafter.samples import read_samples
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from specdec_dev.simulated_steps import simulated_train_result
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
MIN_SAMPLES = 20


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def learning_deployment(name: str, better: bool) -> dict:
    body = example("llama-3.1-8b-eagle3.yaml")
    body["metadata"]["name"] = name
    body["spec"]["drafter"] = {
        "learning": {
            "enabled": True,
            "sampleRate": 1,
            "minSamples": MIN_SAMPLES,
            "trainer": {
                "podAnnotations": simulated_train_result(better, 1.8, 2.4 if better else 1.85, MIN_SAMPLES // 10)
            },
        }
    }
    return body


def drafter(sd: SD) -> dict:
    return (sd.get().get("status") or {}).get("drafter") or {}


def runtime_config(kube: Kube, namespace: str, name: str) -> dict:
    config_map = kube.core.read_namespaced_config_map(f"{name}-runtime", namespace)
    return json.loads(config_map.data["runtime.json"])


def test_samples_are_counted_replayed_trained_and_decided(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    better = SD(kube, namespace, learning_deployment("learns", True))
    worse = SD(kube, namespace, learning_deployment("refused", False))
    for sd in (better, worse):
        sd.wait_ready()
        assert sd.condition("DraftLearning")["reason"] == "NotEnoughSamples"
        simulation_profile.update(tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}", FAST_PROFILE)
    served_draft = runtime_config(kube, namespace, better.name)["speculation"]["speculativeConfig"]["speculative_model"]
    with pod_runner(kubeconfig, tmp_path, namespace):
        counted = wait_for(lambda: (d := drafter(better)).get("samples", 0) >= 1 and d, "samples counted", timeout=60)
        assert counted["path"] == f"drafter-samples/{better.name}" and counted["bytes"] > 0
        promoted = wait_for(
            lambda: better.condition("DraftLearning").get("reason") == "Promoted" and drafter(better),
            "the better head promoted",
            timeout=180,
        )
        refused = wait_for(
            lambda: worse.condition("DraftLearning").get("reason") == "NotBetter" and drafter(worse),
            "the worse head refused",
            timeout=60,
        )
    claim = counted["claimName"]
    samples, skipped = read_samples(tmp_path / "claims" / namespace / claim / f"drafter-samples/{better.name}")
    assert len(samples) >= MIN_SAMPLES and skipped == 0 and all(s.completion for s in samples)

    assert promoted["round"] == 1 and promoted["roundSamples"] >= MIN_SAMPLES
    assert (promoted["replayPhase"], promoted["trainPhase"]) == ("Succeeded", "Succeeded")
    assert promoted["acceptanceLength"] == {"baseline": 1.8, "candidate": 2.4} and promoted["decidedAt"].endswith("Z")
    assert promoted["head"] == f"pvc://{claim}/drafter-rounds/{better.name}/1/head"
    reasons = [e.reason for e in kube.events_for(namespace, better.name)]
    assert {"DraftReplayStarted", "DraftTrainingStarted", "Promoted"} <= set(reasons)
    # the head serves from status: the runtime's ConfigMap names it, the spec still names the published head
    head_dir = f"/models/{claim}/drafter-rounds/{better.name}/1/head"
    wait_for(
        lambda: (
            runtime_config(kube, namespace, better.name)["speculation"]["speculativeConfig"]["speculative_model"]
            == head_dir
        ),
        "the runtime rolled to the promoted head",
        timeout=60,
    )
    assert served_draft != head_dir
    assert better.get()["spec"]["speculation"]["eagle3"]["draftModel"] == "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    # the SaveState server is gone once replayed; the Jobs stay for their logs, owned by their deployment
    assert not kube.apps.list_namespaced_deployment(
        namespace, label_selector="app.kubernetes.io/component=drafter-replay-server"
    ).items
    jobs = {j.metadata.name: j for j in kube.batch.list_namespaced_job(namespace).items}
    for name in (f"{better.name}-replay", f"{better.name}-train"):
        assert jobs[name].metadata.owner_references[0].name == better.name

    assert refused["decision"] == "NotBetter" and "head" not in refused
    assert refused["acceptanceLength"] == {"baseline": 1.8, "candidate": 1.85}
    assert worse.condition("DraftLearning")["status"] == "False"
    assert (
        runtime_config(kube, namespace, worse.name)["speculation"]["speculativeConfig"]["speculative_model"]
        == served_draft
    )
