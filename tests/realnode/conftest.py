"""The real node (specdec_dev.real_node) of the session's local cluster: a kubelet with containerd and runc,
running the project's images built from its Dockerfiles. Started once for the session; the session cluster's
teardown stops it and undoes what it changed on the host."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from specdec_dev import cluster, images, real_node
from tests.chart.conftest import helm_home, releases, restricted_namespace  # noqa: F401 - the chart's fixtures
from tests.conftest import TEST_CLUSTER_NAME, _unavailable


@pytest.fixture(scope="session")
def node(kubeconfig: Path) -> real_node.RealNode:
    if os.environ.get("SPECDEC_TEST_KUBECONFIG"):
        pytest.skip("the real-node tests run on the local cluster, not on SPECDEC_TEST_KUBECONFIG's")
    problems = real_node.problems()
    if problems:
        _unavailable("; ".join(problems), "real node")
    local = cluster.LocalCluster(name=TEST_CLUSTER_NAME)
    try:
        return real_node.up(local)
    except (cluster.ClusterError, images.ImageBuildError) as error:
        _unavailable(str(error), "real node")


def pod_exec(node: real_node.RealNode, namespace: str, pod: str, *argv: str) -> subprocess.CompletedProcess:
    """`kubectl exec` through the API server and the kubelet (its webhook authentication and authorization)."""
    return node.cluster.kubectl("exec", "-n", namespace, pod, "--", *argv, check=False)
