"""A draft change with spec.rollout.canary: the canary arm beside the main runtime, its decision, promotion and
rejection, on the in-memory API server (the deployment controller with the monitor's reading handed in)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specdec.api.canary import ANNOTATION_CANARY_RETRY
from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY
from specdec.canary import rollout
from specdec.canary.decision import ArmWindow, CanaryPolicy, CanaryState, Decision, observe
from specdec.reconcile.deployment import DeploymentController
from specdec.reconcile.ownership import Children
from specdec.reconcile.service_lane import ServiceLane
from tests.unit.apiserver import Cluster
from tests.unit.test_reconcile_controllers import Queues, deployment_controller, example


def window(tpot: float, accepted: float = 600, requests: float = 50) -> ArmWindow:
    return ArmWindow(requests, 0, 250, 1000, accepted, 2000, tpot, 1, 0, 15.0)


def decided(current: ArmWindow, canary: ArmWindow) -> tuple[CanaryState, Decision]:
    """The test's state and decision after as many of these windows as it takes."""
    state, decision = CanaryState(), None
    while decision is None:
        state, decision = observe(state, current, canary, CanaryPolicy())
    return state, decision


class Rig:
    def __init__(self) -> None:
        self.cluster = Cluster()
        self.queues = Queues()
        self.controller: DeploymentController = deployment_controller(self.cluster, self.queues, [])
        self.reading: rollout.Reading | None = None
        self.controller.canary_reading = lambda namespace, name: self.reading
        c = self.controller
        self.services = ServiceLane(
            c.kube, c.plans, Children(c.kube), c.service_failures, c.backoff, self.queues.enqueue, lambda: True
        )
        sd = example()
        sd["spec"]["rollout"] = {"canary": {"enabled": True}}
        self.name = self.cluster.add(sd)["metadata"]["name"]

    def sd(self) -> dict[str, Any]:
        return self.cluster.store.get("SpeculativeDeployment", "ns", self.name)

    def status(self) -> dict[str, Any]:
        return self.sd()["status"]

    def condition(self, kind: str) -> dict[str, Any] | None:
        return next((c for c in self.status().get("conditions") or [] if c["type"] == kind), None)

    def reconcile(self) -> None:
        self.controller.status.pacing.last_written.clear()
        self.controller.reconcile("ns", self.name)

    def converge(self) -> None:
        """Reconcile with every build and fetch done and every Deployment available, until nothing changes."""
        for _ in range(4):
            self.reconcile()
            for kind in ("EngineBuild", "ModelCache"):
                phase, reason = ("Succeeded", "Built") if kind == "EngineBuild" else ("Fetched", "Fetched")
                for obj in self.cluster.kube.list(kind, "ns"):
                    if (obj.get("status") or {}).get("phase") != phase:
                        self.cluster.kube.patch(
                            kind,
                            "ns",
                            obj["metadata"]["name"],
                            {
                                "status": {
                                    "phase": phase,
                                    "conditions": [{"type": "Ready", "status": "True", "reason": reason}],
                                }
                            },
                            subresource="status",
                        )
            self.cluster.run_controllers()
            for key in self.queues.take():
                if key[0] == "Service":
                    self.services.reconcile(key)

    def deployment(self, name: str) -> dict[str, Any] | None:
        return self.cluster.store.get("Deployment", "ns", name)

    def runtime_config(self, config_map: str) -> dict[str, Any]:
        return json.loads(self.cluster.store.get("ConfigMap", "ns", config_map)["data"]["runtime.json"])

    def change_draft_len(self, draft_len: int) -> None:
        self.cluster.kube.patch(
            "SpeculativeDeployment",
            "ns",
            self.name,
            {"spec": {"speculation": {"draftTarget": {"draftLen": draft_len}}}},
        )

    def read(self, current: ArmWindow, canary: ArmWindow) -> None:
        """The monitor's reading of the running canary: the test run to its decision on these windows."""
        status = self.status()["canary"]
        state, decision = decided(current, canary)
        self.reading = rollout.Reading(
            status["generation"],
            status["retry"],
            state,
            {"current": {"requests": 1}, "canary": {"requests": 1}},
            15.0,
            decision,
        )


def draft_len_served(config: dict[str, Any]) -> int:
    return config["speculation"]["draftLen"]


@pytest.fixture
def rig() -> Rig:
    rig = Rig()
    rig.converge()
    assert rig.status()["phase"] == "Ready"
    return rig


def test_a_first_deployment_records_what_it_serves_and_runs_no_canary(rig):
    assert rig.status()["canary"]["current"]["speculation"] == rig.sd()["spec"]["speculation"]
    assert rig.deployment(f"{rig.name}-canary") is None
    assert rig.condition("Canary") is None
    service = rig.cluster.store.get("Service", "ns", rig.name)
    assert service["spec"]["selector"] == {
        LABEL_INSTANCE: rig.name,
        LABEL_MANAGED_BY: MANAGED_BY,
    }  # both arms, ours only


def test_a_draft_change_runs_as_a_canary_and_is_promoted_when_faster(rig):
    main_before = rig.deployment(rig.name)
    served_before = draft_len_served(rig.runtime_config(f"{rig.name}-runtime"))
    rig.change_draft_len(6)
    rig.converge()

    canary = rig.deployment(f"{rig.name}-canary")
    assert canary is not None and canary["spec"]["replicas"] == 1
    labels = canary["spec"]["template"]["metadata"]["labels"]
    assert (labels[LABEL_INSTANCE], labels[LABEL_COMPONENT]) == (rig.name, "runtime-canary")
    assert canary["metadata"]["ownerReferences"][0]["uid"] == rig.sd()["metadata"]["uid"]
    assert draft_len_served(rig.runtime_config(f"{rig.name}-canary-runtime")) == 6
    assert draft_len_served(rig.runtime_config(f"{rig.name}-runtime")) == served_before == 4  # nothing rolled
    assert rig.deployment(rig.name)["spec"]["template"] == main_before["spec"]["template"]
    assert rig.status()["canary"]["state"] == "InProgress"
    assert rig.condition("Canary")["reason"] == "InProgress"
    assert ("CanaryStarted", rig.name) in rig.cluster.events

    rig.read(window(0.030), window(0.024))  # the canary generates 25 % faster
    rig.reconcile()
    status = rig.status()["canary"]
    assert status["state"] == "Promoted" and status["decision"]["reason"] == "Faster"
    assert status["current"]["speculation"] == rig.sd()["spec"]["speculation"]
    assert status["test"]["pairs"] >= 5 and status["arms"]["canary"]["requests"] == 1
    assert rig.condition("Canary")["status"] == "True"
    assert ("CanaryPromoted", rig.name) in rig.cluster.events
    assert draft_len_served(rig.runtime_config(f"{rig.name}-runtime")) == 6  # the main arm rolls to it
    assert rig.deployment(f"{rig.name}-canary") is not None  # serving until the main arm has rolled
    rig.converge()
    assert rig.deployment(f"{rig.name}-canary") is None
    assert rig.cluster.store.get("ConfigMap", "ns", f"{rig.name}-canary-runtime") is None
    assert rig.status()["phase"] == "Ready" and rig.status()["canary"]["state"] == "Promoted"


def test_a_collapsed_canary_is_rejected_removed_and_retried_on_the_annotation(rig):
    rig.change_draft_len(6)
    rig.converge()
    assert rig.deployment(f"{rig.name}-canary") is not None
    main_template = rig.deployment(rig.name)["spec"]["template"]

    rig.read(window(0.030, accepted=600), window(0.030, accepted=100))  # the canary's acceptance collapsed
    rig.reconcile()
    status = rig.status()["canary"]
    assert status["state"] == "Rejected" and status["decision"]["reason"] == "AcceptanceCollapsed"
    assert "canary acceptance 0.100" in status["decision"]["message"]
    assert rig.condition("Canary")["status"] == "False"
    assert ("CanaryRejected", rig.name) in rig.cluster.events
    assert rig.deployment(f"{rig.name}-canary") is None  # removed at once
    assert rig.deployment(rig.name)["spec"]["template"] == main_template  # the current draft keeps serving
    assert rig.sd()["spec"]["speculation"]["draftTarget"]["draftLen"] == 6  # the spec keeps the new draft

    rig.reading = None
    rig.converge()  # decided: nothing starts again on its own
    assert rig.status()["canary"]["state"] == "Rejected" and rig.deployment(f"{rig.name}-canary") is None

    started = rig.cluster.events.count(("CanaryStarted", rig.name))
    rig.cluster.kube.patch(
        "SpeculativeDeployment", "ns", rig.name, {"metadata": {"annotations": {ANNOTATION_CANARY_RETRY: "1"}}}
    )
    rig.converge()
    assert rig.status()["canary"]["state"] == "InProgress" and rig.status()["canary"]["retry"] == "1"
    # A new test: none of the last one's sums, arms or decision survives the status's merge patch.
    assert rig.status()["canary"]["test"] == rollout.recorded_test(CanaryState())
    assert not {"arms", "decision", "windowSeconds"} & set(rig.status()["canary"])
    assert rig.deployment(f"{rig.name}-canary") is not None
    assert rig.cluster.events.count(("CanaryStarted", rig.name)) == started + 1


def test_without_a_canary_policy_a_draft_change_rolls_out_at_once():
    rig = Rig()
    rig.cluster.kube.patch("SpeculativeDeployment", "ns", rig.name, {"spec": {"rollout": None}})
    rig.converge()
    rig.change_draft_len(6)
    rig.converge()
    assert rig.deployment(f"{rig.name}-canary") is None and "canary" not in rig.status()
    assert draft_len_served(rig.runtime_config(f"{rig.name}-runtime")) == 6


def test_a_restarted_operator_resumes_the_running_canary_without_starting_another(rig):
    rig.change_draft_len(6)
    rig.converge()
    state = CanaryState()
    for _ in range(3):  # three windows read, not yet a decision
        state, decision = observe(state, window(0.030), window(0.029), CanaryPolicy())
        assert decision is None
    status = rig.status()["canary"]
    rig.reading = rollout.Reading(status["generation"], status["retry"], state, {}, 15.0, None)
    rig.reconcile()
    before = rig.status()["canary"]
    assert before["state"] == "InProgress" and before["test"]["windows"] == 3
    canary_uid = rig.deployment(f"{rig.name}-canary")["metadata"]["uid"]
    events = list(rig.cluster.events)

    rig.controller = deployment_controller(rig.cluster, rig.queues, [])  # another operator: nothing in memory
    rig.reading = None  # its monitor has read nothing yet
    rig.controller.canary_reading = lambda namespace, name: rig.reading
    rig.converge()
    after = rig.status()["canary"]
    assert (
        after["state"] == "InProgress" and after["test"] == before["test"] and after["startedAt"] == before["startedAt"]
    )
    assert rig.deployment(f"{rig.name}-canary")["metadata"]["uid"] == canary_uid  # the same canary
    assert [e for e in rig.cluster.events[len(events) :] if e[0].startswith("Canary")] == []
