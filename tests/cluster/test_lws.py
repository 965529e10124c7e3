"""LeaderWorkerSet's real controller and webhooks on the test cluster (specdec_dev.lws): a group of two pods on kwok
nodes is created, labelled and given its environment by LWS's Pod webhook, becomes Ready, and is recreated as a
whole when one of its pods goes."""

from __future__ import annotations

from typing import Any

import pytest

from specdec.versions import LWS
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.timeout(240)

NAME = "group"
LABEL = "leaderworkerset.sigs.k8s.io"


def _lws(size: int) -> dict[str, Any]:
    template = {
        "spec": {
            "nodeSelector": {"type": "kwok"},
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        }
    }
    return {
        "apiVersion": LWS.api_version,
        "kind": LWS.kind,
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": size,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": template,
                "workerTemplate": template,
            },
        },
    }


def _pods(kube: Kube, namespace: str) -> dict[str, Any]:
    """The group's pods by name, those not being deleted."""
    listing = kube.core.list_namespaced_pod(namespace, label_selector=f"{LABEL}/name={NAME}")
    return {p.metadata.name: p for p in listing.items if p.metadata.deletion_timestamp is None}


def _ready(pod: Any) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _group_ready(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The group's two pods once both are Ready and the LWS says Available."""
    pods = _pods(kube, namespace)
    lws = kube.custom.get_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural, NAME)
    available = any(
        c["type"] == "Available" and c["status"] == "True" for c in lws.get("status", {}).get("conditions", [])
    )
    if len(pods) == 2 and all(_ready(p) for p in pods.values()) and available:
        return pods
    return None


def test_lws_group_is_created_labelled_and_recreated(kube: Kube, namespace: str) -> None:
    kube.custom.create_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural, _lws(size=2))
    pods = wait_for(lambda: _group_ready(kube, namespace), "the LWS group's two pods Ready, the LWS Available")

    leader, worker = pods[f"{NAME}-0"], pods[f"{NAME}-0-1"]
    env = {p.metadata.name: {e.name: e.value for e in p.spec.containers[0].env or []} for p in (leader, worker)}
    address = f"{NAME}-0.{NAME}.{namespace}"
    for pod, index in ((leader, "0"), (worker, "1")):
        labels = pod.metadata.labels
        assert labels[f"{LABEL}/name"] == NAME and labels[f"{LABEL}/group-index"] == "0", labels
        assert labels[f"{LABEL}/worker-index"] == index and labels.get(f"{LABEL}/group-key"), labels
        assert env[pod.metadata.name]["LWS_LEADER_ADDRESS"] == address, env
        assert env[pod.metadata.name]["LWS_GROUP_SIZE"] == "2", env
        assert env[pod.metadata.name]["LWS_WORKER_INDEX"] == index, env
        assert pod.spec.subdomain == NAME, pod.spec
    assert leader.metadata.annotations[f"{LABEL}/size"] == "2", leader.metadata.annotations

    kube.core.delete_namespaced_pod(worker.metadata.name, namespace)
    recreated = wait_for(
        lambda: (
            (group := _group_ready(kube, namespace))
            and group[leader.metadata.name].metadata.uid != leader.metadata.uid
            and group[worker.metadata.name].metadata.uid != worker.metadata.uid
            and group
        ),
        "the group recreated (a new leader and worker) and Ready again",
        timeout=120,
    )
    assert set(recreated) == {leader.metadata.name, worker.metadata.name}
