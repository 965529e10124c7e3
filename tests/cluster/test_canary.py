"""End to end: a draft change with spec.rollout.canary on the local cluster. The runtime pods of both arms are served
by the local pod runner (the real front before a simulated backend), each arm with its simulated acceptance
(specdec_dev.simulation_profile: the canary arm's `<namespace>/<name>/canary`). Besides the pod runner's own load on
each pod, clients send requests through the Service (tests.service_clients, to both arms' ready pods): none may fail
while a canary starts, is decided, promoted or rolled back."""

from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path

import pytest

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for
from tests.service_clients import ServiceClients

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


def ready_canary(kube: Kube, namespace: str, tmp_path: Path, current: float, canary: dict, **canary_spec: object) -> SD:
    """The sample with the canary on (spec.rollout.canary updated by `canary_spec`), Ready; the runtime's pods
    simulate acceptance `current`, the canary's pods the profile `canary`."""
    body = with_canary(example(SAMPLE))
    body["spec"]["rollout"]["canary"].update(canary_spec)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**PROFILE, "acceptance": current})
    simulation_profile.update(profiles, simulation_profile.canary_key(deployment), canary)
    return sd


def served_without_failures(clients: ServiceClients) -> None:
    """Every request sent through the Service was answered; the counts are printed."""
    print(
        f"requests through the Service: {clients.ok} answered, {len(clients.failures)} failed, {clients.skipped} "
        f"skipped (endpoint not served yet)"
    )
    assert clients.failures == [], clients.failures[:10]
    assert clients.ok > 20


class CanaryDeployments:
    """Samples the canary Deployment every 0.2 s: the uids seen, and when a sample first missed it once seen."""

    def __init__(self, kube: Kube, sd: SD):
        self.kube, self.sd = kube, sd
        self.uids: set[str] = set()
        self.samples = 0
        self.first_missing: datetime.datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> CanaryDeployments:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self) -> None:
        selector = f"{LABEL_INSTANCE}={self.sd.name},{LABEL_COMPONENT}=runtime-canary"
        while not self._stop.wait(0.2):
            try:
                found = self.kube.apps.list_namespaced_deployment(self.sd.namespace, label_selector=selector).items
            except Exception:  # the API server busy for a moment: no sample
                continue
            self.samples += 1
            if self.uids and not found and self.first_missing is None:
                self.first_missing = datetime.datetime.now(datetime.UTC)
            self.uids |= {d.metadata.uid for d in found}


def test_a_faster_canary_is_promoted_and_the_runtime_rolls_to_it(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    sd = ready_canary(kube, namespace, tmp_path, 0.4, {"acceptance": 0.9})
    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name, clients=2) as clients:
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
        time.sleep(2)  # requests to the rolled pods
    served_without_failures(clients)
    assert {"CanaryStarted", "CanaryPromoted"} <= set(reasons(kube, sd))


def test_a_collapsed_canary_is_rejected_and_removed_and_the_current_draft_keeps_serving(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    sd = ready_canary(kube, namespace, tmp_path, 0.7, {"acceptance": 0.05})
    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name, clients=2) as clients:
        status = started_canary(kube, sd)
        main_template = kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.metadata.annotations
        canary = decided(sd, timeout=120)
        print(json.dumps(canary, indent=1))
        assert canary["state"] == "Rejected", (canary["decision"], canary["arms"])
        assert canary["decision"]["reason"] == "AcceptanceCollapsed", canary["decision"]
        assert canary["test"]["windows"] <= 2, canary["test"]  # rolled back within two scrape windows
        assert sd.condition("Canary")["status"] == "False"
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed", timeout=60)
        assert kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.metadata.annotations == (
            main_template
        )
        assert canary["current"] == status["canary"]["current"]  # the current draft keeps serving
        time.sleep(2)  # requests to the current arm alone
    served_without_failures(clients)
    (rejected,) = [e for e in kube.events_for(namespace, sd.name) if e.reason == "CanaryRejected"]
    assert rejected.type == "Warning" and "acceptance 0.0" in rejected.message, rejected.message


def test_a_canary_that_serves_nothing_ends_not_serving_and_the_current_draft_keeps_serving(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    """No traffic reaches the canary's pod (its simulated clients send none, and no client uses the Service): no
    window is a pair, and after notServingSeconds the canary ends Inconclusive, removed, though the policy would
    promote an Inconclusive canary."""
    sd = ready_canary(
        kube, namespace, tmp_path, 0.7, {"requestsPerSecond": 0}, notServingSeconds=10, onInconclusive="Promoted"
    )
    with pod_runner(kubeconfig, tmp_path, namespace):
        status = started_canary(kube, sd)
        canary = decided(sd, timeout=60)
        print(json.dumps(canary, indent=1))
        decision = canary["decision"]
        assert (canary["state"], decision["reason"], decision["promote"]) == ("Inconclusive", "NotServing", False)
        assert "the canary served no request for" in decision["message"]
        assert canary["current"] == status["canary"]["current"]
        condition = sd.condition("Canary")
        assert (condition["status"], condition["reason"]) == ("False", "Inconclusive")
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed", timeout=60)
        runtime = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
        assert runtime["speculation"]["speculativeConfig"]["max_draft_len"] == 4  # the current draft serves
    (ended,) = [e for e in kube.events_for(namespace, sd.name) if e.reason == "CanaryInconclusive"]
    assert ended.type == "Warning" and ended.message == decision["message"]


def test_a_slower_canary_is_rejected_as_not_faster_and_the_current_draft_keeps_serving(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    """A worse draft that does not collapse: the SPRT, not the safety rules, rejects it."""
    sd = ready_canary(kube, namespace, tmp_path, 0.7, {"acceptance": 0.5})
    with pod_runner(kubeconfig, tmp_path, namespace):
        status = started_canary(kube, sd)
        canary = decided(sd, timeout=180)
        print(json.dumps(canary, indent=1))
        assert canary["state"] == "Rejected", (canary["decision"], canary["arms"])
        assert canary["decision"]["reason"] == "NotFaster" and not canary["decision"]["promote"], canary["decision"]
        assert canary["test"]["pairs"] >= 5 and canary["decision"]["message"].startswith("not 5% faster: TPOT gain -")
        arms = canary["arms"]
        assert arms["canary"]["requests"] > 0 and arms["current"]["requests"] > 0 and arms["canary"]["windows"] >= 5
        assert (
            arms["canary"]["draft"] == arms["current"]["draft"] == "draftTarget hf://meta-llama/Llama-3.2-1B-Instruct"
        )
        assert canary["current"] == status["canary"]["current"] and canary["decision"]["at"]
        condition = sd.condition("Canary")
        assert (condition["status"], condition["reason"]) == ("False", "Rejected")
        assert condition["message"] == canary["decision"]["message"]
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed", timeout=60)
        assert sd.get()["spec"]["speculation"]["draftTarget"]["draftLen"] == 3  # the spec keeps the new draft
        runtime = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
        assert runtime["speculation"]["speculativeConfig"]["max_draft_len"] == 4  # the current draft serves
    events = {e.reason: e for e in kube.events_for(namespace, sd.name)}
    assert events["CanaryStarted"].type == "Normal"
    assert events["CanaryRejected"].type == "Warning"
    assert events["CanaryRejected"].message == canary["decision"]["message"]


def test_a_restarted_operator_resumes_the_running_canary_from_status(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    """The operator killed mid-canary and started again: the same canary Deployment throughout, the test's windows
    and start kept, one CanaryStarted, and the canary decides."""
    sd = ready_canary(kube, namespace, tmp_path, 0.4, {"acceptance": 0.9})
    with (
        pod_runner(kubeconfig, tmp_path, namespace),
        ServiceClients(kube, namespace, sd.name, clients=2) as clients,
        CanaryDeployments(kube, sd) as sampled,
    ):
        started_canary(kube, sd)
        before = wait_for(
            lambda: (c := sd.get()["status"]["canary"]).get("test", {}).get("windows", 0) >= 1 and c,
            "a first window in status.canary.test",
            interval=0.3,
        )
        assert before["state"] == "InProgress", before
        operator.kill()
        time.sleep(2 * SCRAPE_SECONDS)  # windows pass with no operator
        operator.start()
        resumed = wait_for(
            lambda: (c := sd.get()["status"]["canary"])["test"]["windows"] > before["test"]["windows"] and c,
            "a window read by the restarted operator",
            timeout=60,
            interval=0.3,
        )
        assert resumed["startedAt"] == before["startedAt"] and resumed["generation"] == before["generation"]
        assert resumed["arms"]["canary"]["requests"] >= before["arms"]["canary"]["requests"], (before, resumed)
        canary = decided(sd, timeout=180)
        print(json.dumps(canary, indent=1))
        assert canary["state"] == "Promoted", (canary["decision"], canary["arms"])
        assert canary["startedAt"] == before["startedAt"]
        assert canary["test"]["windows"] > before["test"]["windows"]
        wait_for(lambda: not canary_pods(kube, namespace, sd.name), "the canary removed after the rollout", timeout=120)
        sd.wait_ready()
    print(f"canary Deployment samples: {sampled.samples}, uids {sorted(sampled.uids)}, gone {sampled.first_missing}")
    assert len(sampled.uids) == 1  # one canary Deployment: never deleted and created again, never a second
    decided_at = datetime.datetime.fromisoformat(canary["decision"]["at"])  # whole seconds
    assert sampled.first_missing is not None and sampled.first_missing >= decided_at  # removed once decided only
    served_without_failures(clients)
    started = [e for e in kube.events_for(namespace, sd.name) if e.reason == "CanaryStarted"]
    assert len(started) == 1 and sum(e.count or 1 for e in started) == 1, [(e.message, e.count) for e in started]
