"""End to end on trtllm-serve (backend pytorch): draftLen: auto moves the draft length, and the draft lengths
by load, by one surge rollout of the runtime pods each (trtllm-serve takes them at start), and no request sent
through the Service (tests.service_clients) fails meanwhile.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from specdec.speculation import payoff
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, scrape, scrape_if_served, wait_for
from tests.service_clients import ServiceClients

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
SAMPLE = "llama-3.1-8b-draft-1b-pytorch.yaml"  # trtllm-serve, Draft_Target
ALPHA, COST = 0.55, 0.2  # the simulated acceptance per token and draft cost


@pytest.fixture
def operator_env(operator_env):
    return {
        **operator_env,
        "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS),
        "SPECDEC_DRAFT_LEN_ROLLOUT_SECONDS": "60",
    }


def test_auto_draft_len_on_trtllm_serve_converges_with_one_surge_rollout(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    body = example(SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=8)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    optimum = payoff.best_draft_len(ALPHA, COST, 1, 8)
    assert optimum == 2  # from where auto starts (4): an estimated 13 % more, above the 5 % a rollout needs
    simulation_profile.update(
        tmp_path / simulation_profile.FILE_NAME,
        f"{namespace}/{sd.name}",
        {**FAST_PROFILE, "acceptance": ALPHA, "costRatio": COST, "noise": 0.05},
    )
    apps = kube.apps
    phases = []  # the SpeculativeDeployment's, at every look: the old pod serves during the rollout

    def chosen():
        status = sd.get().get("status") or {}
        phases.append(status.get("phase"))
        return (status.get("speculation") or {}).get("draftLen") == optimum and status["speculation"]

    def rolled_out():
        phases.append((sd.get().get("status") or {}).get("phase"))
        d = apps.read_namespaced_deployment(sd.name, namespace)
        return d.status.updated_replicas == 1 and d.status.replicas == 1 and d.status.ready_replicas == 1

    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name) as clients:
        status = wait_for(chosen, f"status.speculation.draftLen {optimum}", timeout=150)
        wait_for(rolled_out, "the rollout to finish", timeout=60)
        time.sleep(4 * SCRAPE_SECONDS)  # it holds: no second rollout
        print(
            f"requests: {clients.ok} answered, {len(clients.failures)} failed, {clients.skipped} skipped "
            f"(endpoint not served yet); status {status}"
        )
    assert clients.failures == [], clients.failures[:10]
    assert clients.ok > 100
    assert set(phases) == {"Ready"}, phases
    deployment = apps.read_namespaced_deployment(sd.name, namespace)
    assert deployment.metadata.annotations["deployment.kubernetes.io/revision"] == "2"  # one rollout
    config = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["speculativeConfig"]["max_draft_len"] == optimum
    changes = [e for e in kube.events_for(namespace, sd.name) if e.reason == "DraftLenChanged"]
    assert len(changes) == 1 and changes[0].message.startswith(f"draftLen 4 -> {optimum}: "), [
        e.message for e in changes
    ]
    assert "rolling the pods" in changes[0].message
    assert (sd.get()["status"]["speculation"]["draftLen"]) == optimum


def test_auto_on_trtllm_serve_rolls_out_draft_lengths_by_load_once_they_pay(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    """A load that grows from a couple of sequences in flight to 64: the operator fits the step time from
    trtllm-serve's iteration statistics, and at the high load rolls out a draft_len_schedule (shorter drafts
    for larger batches, never 0 on Draft_Target); the new pods draft less under that load."""
    body = example(SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=4)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    profiles, deployment = tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}"
    load = {
        "acceptance": 0.8,
        "costRatio": 0.05,
        "targetStepSeconds": 0.005,
        "stepSecondsPerToken": 0.0002,
        "maxTokens": 32,
        "noise": 0.0,
    }
    simulation_profile.update(profiles, deployment, {**load, "requestsPerSecond": 20})
    port = body["spec"]["runtime"].get("port", 8000)

    def runtime_pods():
        return [
            p
            for p in kube.core.list_namespaced_pod(
                namespace, label_selector=f"app.kubernetes.io/instance={sd.name}"
            ).items
            if not p.metadata.deletion_timestamp and p.status.pod_ip
        ]

    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name, clients=2) as clients:
        time.sleep(5 * SCRAPE_SECONDS)  # windows at a low load
        simulation_profile.update(profiles, deployment, {**load, "requestsPerSecond": 200})  # 64 in flight
        changed = wait_for(
            lambda: next(
                (e for e in kube.events_for(namespace, sd.name) if e.reason == "DraftLenScheduleChanged"), None
            ),
            "a DraftLenScheduleChanged Event",
            timeout=120,
        )
        wait_for(
            lambda: (
                (d := kube.apps.read_namespaced_deployment(sd.name, namespace)).status.updated_replicas == 1
                and d.status.replicas == 1
                and d.status.ready_replicas == 1
                and d.metadata.annotations.get("deployment.kubernetes.io/revision") == "2"
            ),
            "the rollout to finish",
            timeout=60,
        )
        (pod,) = wait_for(lambda: len(p := runtime_pods()) == 1 and p, "one runtime pod")
        metrics = f"http://{pod.status.pod_ip}:{port}/metrics"
        before = wait_for(lambda: scrape_if_served(metrics), "the new pod's front")
        time.sleep(3 * SCRAPE_SECONDS)
        after = scrape(metrics)
        print(f"{changed.message}; requests: {clients.ok} answered, {len(clients.failures)} failed")
    sequences = after["specdec_target_batch_sequences_total"] - before["specdec_target_batch_sequences_total"]
    drafts = after["specdec_target_batch_draft_tokens_total"] - before["specdec_target_batch_draft_tokens_total"]
    iterations = after["specdec_target_iterations_total"] - before["specdec_target_iterations_total"]
    assert sequences / iterations > 20  # the high load
    assert 1 <= drafts / sequences < 4  # shorter drafts than draftLen 4 at that load, never none
    config = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    schedule = config["speculation"]["speculativeConfig"]["draft_len_schedule"]
    assert schedule[min(schedule, key=int)] == 4 and min(schedule.values()) >= 1, schedule
    assert "tokens/s at the" in changed.message and "rolling the pods" in changed.message
    assert clients.failures == [], clients.failures[:10]
    assert sd.get()["status"]["speculation"].get("breakEven") is not None
