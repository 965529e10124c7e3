"""Shared fixtures: a real Kubernetes cluster, a namespace per test, API clients.

The session cluster is, in order: the one `SPECDEC_TEST_KUBECONFIG` points to; kind through
pytest-kind when `SPECDEC_TEST_KIND=1` and a Docker engine answers (opt-in: a plain kind cluster has
no simulated GPU nodes, so only the tests that need no GPU pass there); else the local control plane
(`specdec dev`), started for the session and stopped after it (keep it with `SPECDEC_KEEP_CLUSTER=1`).
With `CI=true` a cluster that cannot be had fails the run; elsewhere the cluster tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.kube_helpers import Kube, wait_for
from tests.operator_runner import OperatorProcess

ROOT = Path(__file__).resolve().parent.parent

TEST_CLUSTER_NAME = "specdec-test"


def _docker_works() -> bool:
    if not (shutil.which("docker") and shutil.which("kind")):
        return False
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def _unavailable(reason: str, what: str = "Kubernetes cluster"):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"no {what} for these tests (CI=true): {reason}", pytrace=False)
    pytest.skip(f"no {what}: {reason}")


@pytest.fixture(scope="session")
def kubeconfig(request) -> Path:
    explicit = os.environ.get("SPECDEC_TEST_KUBECONFIG")
    if explicit:
        return Path(explicit)
    if os.environ.get("SPECDEC_TEST_KIND") == "1" and _docker_works():
        from pytest_kind import KindCluster  # only needed where Docker runs

        kind = KindCluster(
            TEST_CLUSTER_NAME,
            kind_path=Path(shutil.which("kind")),
            kubectl_path=Path(shutil.which("kubectl") or "kubectl"),
        )
        kind.create()
        request.addfinalizer(kind.delete)
        return Path(kind.kubeconfig_path)
    from specdec_dev import cluster, real_node, toolchain

    local = cluster.LocalCluster(name=TEST_CLUSTER_NAME)
    try:  # with a real node's settings where one can run (tests/realnode starts the node itself)
        cluster.up(local, real_node=not real_node.problems())
    except (toolchain.ToolchainError, cluster.ClusterError) as error:
        _unavailable(str(error))
    if os.environ.get("SPECDEC_KEEP_CLUSTER") != "1":
        request.addfinalizer(lambda: real_node.down(local))
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


@pytest.fixture(scope="session")
def crds(kube: Kube) -> list[str]:
    """Install (or update) the CRDs from crds/ and wait until the API server serves them."""
    names = []
    for path in sorted((ROOT / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        name = crd["metadata"]["name"]
        try:
            existing = kube.apiext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = existing.metadata.resource_version
            kube.apiext.replace_custom_resource_definition(name, crd)
        except ApiException as error:
            if error.status != 404:
                raise
            kube.apiext.create_custom_resource_definition(crd)
        names.append(name)
    for name in names:
        wait_for(
            lambda name=name: any(
                c.type == "Established" and c.status == "True"
                for c in kube.apiext.read_custom_resource_definition(name).status.conditions or []
            ),
            f"CRD {name} Established",
        )
    return names


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def operator_env() -> dict[str, str]:
    """Settings for the operator under test; a test may override entries before `operator` starts."""
    return {"SPECDEC_RESYNC_SECONDS": "5", "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:test"}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
def operator(kubeconfig: Path, crds, namespace: str, operator_env, tmp_path, request) -> OperatorProcess:
    """The operator as a process watching this test's namespace; its log is shown when a test fails."""
    runner = OperatorProcess.watching(namespace, kubeconfig, tmp_path / "operator.log", free_port(), operator_env)
    runner.start()
    yield runner
    stop_and_report(runner, request)


def stop_and_report(runner: OperatorProcess, request, *context: str) -> None:
    """Stop an operator process; when the test failed, print `context` lines and the operator's log."""
    runner.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for line in context:
            print(line)
        print(f"--- operator log ({runner.log_path}) ---\n{runner.logs()}")


@pytest.fixture
def fault_proxy(kubeconfig: Path, tmp_path):
    """A fault-injecting proxy to the test cluster (tests/faults/proxy.py), passing everything through
    until a test sets faults; seeded by SPECDEC_FAULT_SEED (default 0) so a failing run can be replayed."""
    from tests.faults.proxy import FaultProxy

    seed = int(os.environ.get("SPECDEC_FAULT_SEED", "0"))
    with FaultProxy(kubeconfig, tmp_path / "proxy.kubeconfig", seed=seed) as proxy:
        yield proxy
