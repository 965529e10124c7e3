"""Fixtures of the chart tests; the cluster ones build on tests/conftest.py (kube, kubeconfig, namespace)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.chart.cluster_helpers import ChartOperator, Releases
from tests.chart.tools import RESTRICTED
from tests.kube_helpers import Kube


@pytest.fixture(scope="session")
def helm_home(tmp_path_factory) -> Path:
    """HELM_CACHE_HOME / CONFIG / DATA for the session, away from the user's own helm setup."""
    return tmp_path_factory.mktemp("helm-home")


@pytest.fixture
def releases(kubeconfig: Path, helm_home: Path):
    tracker = Releases(kubeconfig, helm_home)
    yield tracker
    tracker.cleanup()  # cluster-scoped objects (ClusterRole, ClusterRoleBinding) go with the release


@pytest.fixture
def restricted_namespace(kube: Kube, request):
    """Make namespaces (or label an existing one) where the API server enforces Pod Security `restricted`."""
    created: list[str] = []

    def make(existing: str | None = None, prefix: str = "chart") -> str:
        if existing:
            kube.core.patch_namespace(existing, {"metadata": {"labels": RESTRICTED}})
            return existing
        name = f"{prefix}-{request.node.name[5:30].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
        name = "".join(c for c in name if c.isalnum() or c == "-")
        kube.core.create_namespace({"metadata": {"name": name, "labels": {"specdec.io/test": "true", **RESTRICTED}}})
        created.append(name)
        return name

    yield make
    for name in created:
        kube.core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def chart_operators(request):
    """Operators started by a test; stopped at teardown, their logs shown when the test failed."""
    started: list[ChartOperator] = []
    yield started
    for runner in started:
        runner.stop()
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for runner in started:
            print(f"--- operator log ({runner.log_path}) ---\n{runner.logs()}")
