"""SpeculationActive through the whole reconciler on the in-memory API server (tests/unit/apiserver.py): the
monitor scrapes a real HTTP /metrics endpoint, the condition is written once when it flips, and nothing
more is written while nothing changes."""

from __future__ import annotations

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from tests.unit.apiserver import Cluster
from tests.unit.test_monitor import Endpoint, _free_port, metrics_text
from tests.unit.test_reconcile_controllers import Operator, example


def condition(cluster: Cluster, name: str, kind: str) -> dict:
    status = cluster.store.get("SpeculativeDeployment", "ns", name).get("status") or {}
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def status_writes(cluster: Cluster, name: str) -> int:
    return sum(1 for method, path in cluster.writes() if path.endswith(f"/speculativedeployments/{name}/status"))


def test_not_drafting_is_written_once_and_a_steady_fleet_writes_nothing_more():
    port = _free_port(["127.0.0.1"])
    endpoint = Endpoint("127.0.0.1", port)
    try:
        cluster = Cluster()
        sd = example()
        sd["spec"].setdefault("runtime", {})["port"] = port
        name = cluster.add(sd)["metadata"]["name"]
        operator = Operator(cluster)
        for _ in range(8):
            operator.resync()
            cluster.run_controllers()
        assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["phase"] == "Ready"
        assert condition(cluster, name, "SpeculationActive")["reason"] == "NoTraffic"
        cluster.store.put({"kind": "Pod", "metadata": {
            "name": f"{name}-runtime-a", "namespace": "ns", "uid": "pod-a",
            "labels": {LABEL_INSTANCE: name, LABEL_COMPONENT: "runtime"}},
            "status": {"podIP": "127.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}})
        monitor = operator.reconciler.speculation
        monitor.run_once(now=0.0)
        endpoint.text = metrics_text(400, 300, 100, tokens=600, requests=10)  # drafting
        monitor.run_once(now=15.0)
        operator.resync()
        assert condition(cluster, name, "SpeculationActive")["status"] == "True"
        writes, events = status_writes(cluster, name), len(cluster.events)

        for n in range(2, 5):  # traffic goes on, the drafts stop
            endpoint.text = metrics_text(400, 300, 100, tokens=600 * n, requests=10 * n)
            monitor.run_once(now=15.0 * n)
            operator.resync()
        active = condition(cluster, name, "SpeculationActive")
        assert (active["status"], active["reason"]) == ("False", "NotDrafting")
        assert "0 draft tokens for 600 generated tokens" in active["message"]
        assert status_writes(cluster, name) == writes + 1
        assert cluster.events[events:] == [("NotDrafting", name)]

        requests = len(cluster.requests)
        for n in range(5, 9):  # still not drafting: not a write, not an Event
            endpoint.text = metrics_text(400, 300, 100, tokens=600 * n, requests=10 * n)
            monitor.run_once(now=15.0 * n)
            operator.resync()
        assert cluster.requests[requests:] == []
        assert cluster.events[events:] == [("NotDrafting", name)]
    finally:
        endpoint.close()
