"""The operator as a pod: `helm install` of the chart, with the operator image built from the repository's
Dockerfile, on the real node, in a namespace where Pod Security `restricted` is enforced. The kubelet starts
it with the chart's security context (uid 1000, read-only root), its ServiceAccount token (no admin
credentials) and probes; the operator reaches the API server through the `kubernetes` Service, as on any
cluster, and takes a SpeculativeDeployment to Ready (its fetch Jobs and runtime pod on simulated nodes)."""

from __future__ import annotations

import pytest
from kubernetes import client

from specdec_dev import images, node_config, podman, real_node
from tests.chart.cluster_helpers import SD
from tests.chart.tools import RESTRICTED
from tests.kube_helpers import Kube, wait_for
from tests.realnode.conftest import pod_exec

pytestmark = pytest.mark.cluster

RELEASE = "specdec"


def operator_values(namespace: str) -> dict:
    repository, tag = images.OPERATOR_IMAGE.rsplit(":", 1)
    return {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},  # imported, never pulled
        "nodeSelector": {"kubernetes.io/hostname": real_node.NODE_NAME},
        "tolerations": [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in node_config.TAINTS],
        "watchNamespaces": [namespace],  # a shared test cluster: only this test's namespace
        "speculation": {"scrapeSeconds": 5, "refreshSeconds": 300},
    }


def test_the_chart_runs_the_operator_image_on_the_real_node(kube: Kube, node, releases, restricted_namespace):
    namespace = restricted_namespace()
    assert kube.core.read_namespace(namespace).metadata.labels.items() >= RESTRICTED.items()
    releases.install(RELEASE, namespace, operator_values(namespace))  # --wait: the pod is Ready
    (pod,) = kube.core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=specdec-operator").items
    assert pod.spec.node_name == real_node.NODE_NAME
    status = pod.status.container_statuses[0]
    assert status.ready and status.image_id and status.restart_count == 0, status
    assert pod_exec(node, namespace, pod.metadata.name, "id", "-u").stdout.strip() == "1000"
    touch = pod_exec(node, namespace, pod.metadata.name, "touch", "/probe")
    assert touch.returncode != 0 and "Read-only file system" in touch.stderr, touch
    token = pod_exec(
        node, namespace, pod.metadata.name, "cat", "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
    )
    assert token.stdout == namespace  # the ServiceAccount's projected token, mounted by the kubelet

    sd = SD(kube, namespace)
    sd.wait_ready(timeout=180)
    (lease,) = client.CoordinationV1Api(kube.api).list_namespaced_lease(namespace).items
    assert pod.metadata.name in (lease.spec.holder_identity or "")  # the pod leads
    logs = node.cluster.kubectl("logs", "-n", namespace, pod.metadata.name).stdout
    assert "Traceback" not in logs, logs[-3000:]
    wait_for(
        lambda: kube.core.read_namespaced_pod(pod.metadata.name, namespace).status.container_statuses[0].ready,
        "the operator pod still Ready",
    )


def test_the_operator_image_holds_the_operator_and_no_development_code(node):
    """The operator image the chart runs, as built (its OCI archive): specdec installed, specdec_dev nowhere."""
    files = podman.image_files(podman.archive_path(images.OPERATOR_IMAGE))
    installed = [f for f in files if "/site-packages/" in f]
    assert any(f.endswith("/site-packages/specdec/cli.py") for f in installed)
    assert not [f for f in files if "specdec_dev" in f or "/site-packages/specdec/dev/" in f]
