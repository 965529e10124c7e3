"""Shared fixtures: a real Kubernetes cluster, a namespace per test, API clients.

The session cluster is, in order: the one `SPECDEC_TEST_KUBECONFIG` points to; kind through
pytest-kind where a Docker engine answers; else the local control plane (`specdec dev`), started
for the session and stopped after it (keep it with `SPECDEC_KEEP_CLUSTER=1`).
With `CI=true` a cluster that cannot be had fails the run; elsewhere the cluster tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.kube_helpers import Kube

TEST_CLUSTER_NAME = "specdec-test"


def _docker_works() -> bool:
    if not (shutil.which("docker") and shutil.which("kind")):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _unavailable(reason: str):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"no Kubernetes cluster for the cluster tests (CI=true): {reason}", pytrace=False)
    pytest.skip(f"no Kubernetes cluster: {reason}")


@pytest.fixture(scope="session")
def kubeconfig(request) -> Path:
    explicit = os.environ.get("SPECDEC_TEST_KUBECONFIG")
    if explicit:
        return Path(explicit)
    if _docker_works():
        from pytest_kind import KindCluster  # only needed where Docker runs

        kind = KindCluster(TEST_CLUSTER_NAME)
        kind.create()
        request.addfinalizer(kind.delete)
        return Path(kind.kubeconfig_path)
    from specdec.dev import cluster, toolchain

    local = cluster.LocalCluster(name=TEST_CLUSTER_NAME)
    try:
        cluster.up(local)
    except (toolchain.ToolchainError, cluster.ClusterError) as error:
        _unavailable(str(error))
    if os.environ.get("SPECDEC_KEEP_CLUSTER") != "1":
        request.addfinalizer(lambda: cluster.down(local))
    return local.kubeconfig


@pytest.fixture(scope="session")
def kube(kubeconfig: Path) -> Kube:
    return Kube.from_kubeconfig(kubeconfig)


@pytest.fixture
def namespace(kube: Kube, request) -> str:
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    kube.core.create_namespace({"metadata": {"name": name, "labels": {"specdec.io/test": "true"}}})
    yield name
    kube.core.delete_namespace(name, propagation_policy="Background")
