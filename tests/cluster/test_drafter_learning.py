"""spec.drafter.learning on the local cluster, the real pipeline on CPU: the pod runner serves the deployment's
runtime pod with the transformers stand-in of trtllm-serve over the tiny target placed in its cache claim, behind
the production front, which captures the conversations of two traffic classes driven through it; the operator
counts them in status.drafter and runs a round on the learning's class: the SaveState server (the stand-in writing
the target's real hidden states), the replay Job and the train Job, whose command lines the pod runner runs as
processes (ModelOpt's EAGLE-3 training on CPU, the offline evaluation against the running draft), their ends
reported as a kubelet's; then the decision from the train Job's termination message.

The refusal's path (a head not better by the margin is not served) is checked with a SIMULATED train result
(stages/pod-complete.yaml makes the pod's annotation its termination message): a real refusal costs another real
training, and the decision does not depend on where the result came from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.drafter.samples import read_samples
from specdec_dev import learning_cluster, simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from specdec_dev.simulated_steps import simulated_train_result
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
CLASS_A, CLASS_B = 700, 60  # driven through the front; a tenth of class A is held out for the evaluation
# The round starts once every class-A conversation is counted. The 627 replayed make a head that beats the running
# draft by the margin whatever the trainer's seed (+21 % to +47 % over six seeds; 306 replayed made +8 % to +30 %).
MIN_SAMPLES = CLASS_A


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def drafter(sd: SD) -> dict:
    return (sd.get().get("status") or {}).get("drafter") or {}


def runtime_config(kube: Kube, namespace: str, name: str) -> dict:
    config_map = kube.core.read_namespaced_config_map(f"{name}-runtime", namespace)
    return json.loads(config_map.data["runtime.json"])


def served_draft(kube: Kube, namespace: str, name: str) -> str:
    return runtime_config(kube, namespace, name)["speculation"]["speculativeConfig"]["speculative_model"]


def test_captured_traffic_is_replayed_trained_on_and_the_better_head_promoted(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    target, running_head = learning_cluster.prepare(tmp_path / "prepared")
    body = learning_cluster.deployment("learns", MIN_SAMPLES, traffic_class="a")
    learning_cluster.place(tmp_path / "claims", namespace, body, target, running_head)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    assert sd.condition("DraftLearning")["reason"] == "NotEnoughSamples"
    running_draft = served_draft(kube, namespace, sd.name)
    with pod_runner(kubeconfig, tmp_path, namespace):
        url = wait_for(lambda: learning_cluster.front_url(kube.core, namespace, sd.name), "the runtime pod", 60)
        model = wait_for(lambda: learning_cluster.served_model(url), "the tiny target served", timeout=120)
        assert learning_cluster.drive(url, model, "b", CLASS_B, seed=1) == CLASS_B
        assert learning_cluster.drive(url, model, "a", CLASS_A, seed=0) == CLASS_A
        decided = learning_cluster.watch(kube.custom, namespace, sd.name, timeout=600, say=print)
        status = decided["status"]["drafter"]
        assert sd.condition("DraftLearning")["reason"] == "Promoted", sd.condition("DraftLearning")
        head_dir = f"/models/{status['claimName']}/drafter-rounds/{sd.name}/1/head"
        wait_for(lambda: served_draft(kube, namespace, sd.name) == head_dir, "the runtime rolled to the head", 60)
        # the rolled pod serves the tiny target again, behind the front that names the new head
        new_url = wait_for(
            lambda: (u := learning_cluster.front_url(kube.core, namespace, sd.name)) != url and u, "the new pod", 60
        )
        wait_for(lambda: learning_cluster.served_model(new_url), "the rolled pod served", timeout=120)

    claim_dir = tmp_path / "claims" / namespace / status["claimName"]
    samples, skipped = read_samples(claim_dir / f"drafter-samples/{sd.name}")
    assert skipped == 0 and len(samples) == CLASS_A + CLASS_B
    assert {s.traffic_class for s in samples} == {"a", "b"} and all(s.completion for s in samples)
    assert status["samples"] == CLASS_A + CLASS_B and status["bytes"] > 0
    assert status["round"] == 1 and status["roundSamples"] == CLASS_A  # the learning's class only
    assert (status["replayPhase"], status["trainPhase"], status["decision"]) == ("Succeeded", "Succeeded", "Promoted")
    baseline, candidate = status["acceptanceLength"]["baseline"], status["acceptanceLength"]["candidate"]
    assert candidate >= 1.1 * baseline > 1.0, status["acceptanceLength"]
    assert status["head"] == f"pvc://{status['claimName']}/drafter-rounds/{sd.name}/1/head"
    assert status["decidedAt"].endswith("Z")

    # the round's files: the SaveState server's records (one per replayed conversation), the hold-out, the head
    round_dir = claim_dir / f"drafter-rounds/{sd.name}/1"
    records = list((round_dir / "hidden-states").glob("*.pt"))
    held_out, _ = read_samples(round_dir / "holdout")
    assert len(records) + len(held_out) == CLASS_A and held_out and {s.traffic_class for s in held_out} == {"a"}
    assert {"config.json", "model.safetensors"} <= {p.name for p in (round_dir / "head").iterdir()}
    # the train Job's result is its pod's termination message, as the kubelet reports it
    (train_pod,) = kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={sd.name}-train").items
    terminated = train_pod.status.container_statuses[0].state.terminated
    assert train_pod.status.phase == "Succeeded" and terminated.exit_code == 0
    result = json.loads(terminated.message)
    assert result["better"] and result["acceptanceLength"] == status["acceptanceLength"]
    assert result["trainingConversations"] == len(records)
    jobs = {j.metadata.name: j for j in kube.batch.list_namespaced_job(namespace).items}
    for name in (f"{sd.name}-replay", f"{sd.name}-train"):
        assert jobs[name].status.succeeded == 1 and jobs[name].metadata.owner_references[0].name == sd.name
    reasons = [e.reason for e in kube.events_for(namespace, sd.name)]
    assert {"DraftReplayStarted", "DraftTrainingStarted", "Promoted"} <= set(reasons)
    # served from status: the spec still names the published head; the SaveState server is gone
    assert running_draft != head_dir
    assert (
        sd.get()["spec"]["speculation"]["eagle3"]["draftModel"] == body["spec"]["speculation"]["eagle3"]["draftModel"]
    )
    assert not kube.apps.list_namespaced_deployment(
        namespace, label_selector="app.kubernetes.io/component=drafter-replay-server"
    ).items


def test_a_head_that_is_not_better_is_refused(kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path):
    body = example("llama-3.1-8b-eagle3.yaml")
    body["metadata"]["name"] = "refused"
    samples = 20
    body["spec"]["drafter"] = {
        "learning": {
            "enabled": True,
            "sampleRate": 1,
            "minSamples": samples,
            "trainer": {"podAnnotations": simulated_train_result(False, 1.8, 1.85, samples // 10)},
        }
    }
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    simulation_profile.update(tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}", FAST_PROFILE)
    running_draft = served_draft(kube, namespace, sd.name)
    with pod_runner(kubeconfig, tmp_path, namespace):  # its simulated clients' requests are the samples
        refused = wait_for(
            lambda: sd.condition("DraftLearning").get("reason") == "NotBetter" and drafter(sd),
            "the worse head refused",
            timeout=180,
        )
    assert refused["decision"] == "NotBetter" and "head" not in refused
    assert refused["acceptanceLength"] == {"baseline": 1.8, "candidate": 1.85}
    assert sd.condition("DraftLearning")["status"] == "False"
    assert served_draft(kube, namespace, sd.name) == running_draft
