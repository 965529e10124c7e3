"""SpeculationActive through the whole reconciler on the in-memory API server (tests/unit/apiserver.py): the
monitor scrapes a real HTTP /metrics endpoint, the condition is written once when it flips, and nothing
more is written while nothing changes."""

from __future__ import annotations

import pytest

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec.reconcile.runtime_applier import ANNOTATION_REARMED_AT
from tests.unit.apiserver import Cluster
from tests.unit.test_monitor import Endpoint, _free_port, metrics_text
from tests.unit.test_reconcile_controllers import Operator, example


def condition(cluster: Cluster, name: str, kind: str) -> dict:
    status = cluster.store.get("SpeculativeDeployment", "ns", name).get("status") or {}
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def status_writes(cluster: Cluster, name: str) -> int:
    return sum(1 for method, path in cluster.writes() if path.endswith(f"/speculativedeployments/{name}/status"))


@pytest.fixture
def serving():
    """A Ready deployment on the in-memory API server whose one runtime pod's /metrics is a real endpoint
    (drafting at first), and its operator; `rearm`: speculation.rearm."""
    port = _free_port(["127.0.0.1"])
    endpoint = Endpoint("127.0.0.1", port)

    def start(rearm: dict | None = None) -> tuple[Cluster, Operator, str]:
        cluster = Cluster()
        sd = example()
        sd["spec"].setdefault("runtime", {})["port"] = port
        if rearm:
            sd["spec"]["speculation"]["rearm"] = rearm
        name = cluster.add(sd)["metadata"]["name"]
        operator = Operator(cluster)
        for _ in range(8):
            operator.resync()
            cluster.run_controllers()
        assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["phase"] == "Ready"
        assert condition(cluster, name, "SpeculationActive")["reason"] == "NoTraffic"
        cluster.store.put(
            {
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-runtime-a",
                    "namespace": "ns",
                    "uid": "pod-a",
                    "labels": {LABEL_INSTANCE: name, LABEL_COMPONENT: "runtime"},
                },
                "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
        operator.reconciler.speculation.run_once(now=0.0)
        endpoint.text = metrics_text(400, 300, 100, tokens=600, requests=10)  # drafting
        operator.reconciler.speculation.run_once(now=15.0)
        operator.resync()
        assert condition(cluster, name, "SpeculationActive")["status"] == "True"
        return cluster, operator, name

    yield endpoint, start
    endpoint.close()


def not_drafting(endpoint: Endpoint, operator: Operator, n: int) -> None:
    """Window n (at 15 n s): traffic goes on, no drafts."""
    endpoint.text = metrics_text(400, 300, 100, tokens=600 * n, requests=10 * n)
    operator.reconciler.speculation.run_once(now=15.0 * n)
    operator.resync()
    operator.resync()  # the status write's own reconcile (its watch event)


def test_not_drafting_is_written_once_and_a_steady_fleet_writes_nothing_more(serving):
    endpoint, start = serving
    cluster, operator, name = start()
    monitor = operator.reconciler.speculation
    writes, events = status_writes(cluster, name), len(cluster.events)
    for n in range(2, 5):  # traffic goes on, the drafts stop
        not_drafting(endpoint, operator, n)
    active = condition(cluster, name, "SpeculationActive")
    assert (active["status"], active["reason"]) == ("False", "NotDrafting")
    assert "0 draft tokens for 600 generated tokens" in active["message"]
    assert status_writes(cluster, name) == writes + 1
    assert cluster.events[events:] == [("NotDrafting", name)]

    requests = len(cluster.requests)
    for n in range(5, 9):  # still not drafting: not a write, not an Event
        not_drafting(endpoint, operator, n)
    assert cluster.requests[requests:] == []
    assert cluster.events[events:] == [("NotDrafting", name)]
    assert "rearm" not in cluster.store.get("SpeculativeDeployment", "ns", name)["status"]  # not opted in
    assert monitor.published("ns", name, 1).rearm is None


def test_rearm_restarts_the_runtime_once_per_cooldown_when_drafting_stopped(serving):
    endpoint, start = serving
    cluster, operator, name = start(rearm={"enabled": True, "cooldownSeconds": 60})

    def runtime():
        return cluster.store.list("Deployment", "ns", f"{LABEL_INSTANCE}={name}")[0]

    assert ANNOTATION_REARMED_AT not in runtime()["spec"]["template"]["metadata"]["annotations"]
    events = len(cluster.events)
    for n in range(2, 7):  # NotDrafting from window 3 (45 s); its cool-down ends at 105 s (window 7)
        not_drafting(endpoint, operator, n)
    assert "rearm" not in cluster.store.get("SpeculativeDeployment", "ns", name)["status"]
    not_drafting(endpoint, operator, 7)
    rearm = cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["rearm"]
    assert rearm["restarts"] == 1
    annotations = runtime()["spec"]["template"]["metadata"]["annotations"]
    assert annotations[ANNOTATION_REARMED_AT] == rearm["lastRestartAt"]
    reasons = [reason for reason, _ in cluster.events[events:]]
    # the restart is the operator's own, and the pods of the old template serve meanwhile: still Ready
    assert reasons == ["NotDrafting", "SpeculationRearmed", "RuntimeApplied"]
    status = cluster.store.get("SpeculativeDeployment", "ns", name)["status"]
    available = next(c for c in status["conditions"] if c["type"] == "RuntimeAvailable")
    assert (status["phase"], available["status"]) == ("Ready", "True")
    assert "rolling out a change the operator made: 0/1 pods updated" in available["message"]
    cluster.run_controllers()  # the rolling restart completes
    for n in range(8, 11):  # still not drafting, within the cool-down of the restart: no second one
        not_drafting(endpoint, operator, n)
    assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["rearm"]["restarts"] == 1
    not_drafting(endpoint, operator, 11)  # 165 s: a cool-down after the first
    assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["rearm"]["restarts"] == 2
    assert [reason for reason, _ in cluster.events[events:]].count("SpeculationRearmed") == 2
