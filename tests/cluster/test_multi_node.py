"""A target spanning two nodes on the local cluster: DeepSeek-V3 MTP on 2 simulated nodes of 8 H100s, one
LeaderWorkerSet group, through a real LWS controller and its pod webhook (as `specdec dev up` runs them): the group
becomes Ready, and a worker deleted recreates the group, the status naming the missing worker meanwhile. (Without
LeaderWorkerSet served the deployment says what to install: tests/unit/test_multinode.py, on the in-memory API
server, since the local cluster always serves it.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client, watch

from specdec.api.models import GROUP, VERSION
from specdec.versions import LWS
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "deepseek-v3-mtp-2x8-h100.yaml"


def lws_served(kube: Kube) -> bool:
    groups = client.ApisApi(kube.custom.api_client).get_api_versions().groups
    return any(g.name == LWS.group and any(v.version == LWS.version for v in g.versions) for g in groups)


def status_written(
    kube: Kube, sd: SD, since: str, kind: str, matches: Callable[[dict], bool], timeout: int = 120
) -> dict | None:
    """The first `kind` condition matching `matches` written to `sd` after resourceVersion `since`, from a watch:
    LeaderWorkerSet recreates a group on kwok's nodes in under a second, a window that polling can miss."""
    stream = watch.Watch().stream(
        kube.custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        sd.namespace,
        "speculativedeployments",
        field_selector=f"metadata.name={sd.name}",
        resource_version=since,
        timeout_seconds=timeout,
    )
    for event in stream:
        conditions = (event["object"].get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c["type"] == kind and matches(c)), None)
        if found:
            return found
    return None


def group_pods(kube: Kube, namespace: str, name: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={name}").items


def test_a_group_goes_ready_and_is_recreated_when_a_worker_goes(kube: Kube, namespace: str, operator):
    if not lws_served(kube):
        pytest.fail("this cluster serves no LeaderWorkerSet (specdec dev up runs its controller)")
    sd = SD(kube, namespace, example(EXAMPLE))
    assert sd.wait_ready(timeout=300)["status"]["readyReplicas"] == 1
    pods = {p.metadata.name: p for p in group_pods(kube, namespace, sd.name)}
    assert set(pods) == {f"{sd.name}-0", f"{sd.name}-0-1"}, sorted(pods)
    worker = pods[f"{sd.name}-0-1"]
    since = sd.get()["metadata"]["resourceVersion"]
    kube.core.delete_namespaced_pod(worker.metadata.name, namespace)
    missing = status_written(kube, sd, since, "RuntimeAvailable", lambda c: c["status"] == "False")
    assert missing and "group 0" in missing["message"], missing
    assert missing["reason"] in ("GroupsNotReady", "RollingOut"), missing
    sd.wait_ready(timeout=300)
    recreated = {p.metadata.name: p.metadata.uid for p in group_pods(kube, namespace, sd.name)}
    assert recreated.get(f"{sd.name}-0-1") not in (None, worker.metadata.uid)
