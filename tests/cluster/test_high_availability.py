"""Two operator replicas with leader election: only the leader writes; killing it hands over."""

from __future__ import annotations

import copy
import re
import time
import urllib.request

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import DRAFT_TARGET, SD, example, jobs
from tests.conftest import free_port
from tests.kube_helpers import Kube, wait_for
from tests.operator_runner import OperatorProcess

pytestmark = pytest.mark.cluster

LEASE_SECONDS = 4
WRITES = re.compile(r'specdec_api_requests_total\{code="[^"]+",verb="(POST|PATCH|DELETE|PUT)"\} ([0-9.e+]+)')


def writes(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as response:
        return sum(float(n) for _, n in WRITES.findall(response.read().decode()))


def replica(kubeconfig, namespace, tmp_path, name: str) -> tuple[OperatorProcess, int]:
    health, metrics_port = free_port(), free_port()
    env = {
        "SPECDEC_RESYNC_SECONDS": "5",
        "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:test",
        "SPECDEC_LEADER_ELECTION": "true",
        "SPECDEC_LEADER_ELECTION_NAMESPACE": namespace,
        "SPECDEC_LEADER_ELECTION_LEASE_SECONDS": str(LEASE_SECONDS),
        "SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "3",
        "SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "1",
        "POD_NAME": name,
    }
    runner = OperatorProcess(
        kubeconfig,
        tmp_path / f"{name}.log",
        health,
        [
            "operator",
            "--namespace",
            namespace,
            "--liveness",
            f"http://127.0.0.1:{health}/healthz",
            "--metrics-port",
            str(metrics_port),
        ],
        env,
    )
    runner.start()
    return runner, metrics_port


def holder(kube: Kube, namespace: str) -> str:
    try:
        lease = client.CoordinationV1Api(kube.api).read_namespaced_lease("specdec-operator", namespace)
    except ApiException as error:
        if error.status == 404:
            return ""
        raise
    return lease.spec.holder_identity or ""


def test_only_the_leader_writes_and_a_killed_leader_is_replaced(kube: Kube, kubeconfig, crds, namespace, tmp_path):
    a, a_metrics = replica(kubeconfig, namespace, tmp_path, "a")
    b, b_metrics = replica(kubeconfig, namespace, tmp_path, "b")
    try:
        leader_name = wait_for(lambda: holder(kube, namespace).split("_")[0], "a leader")
        (leader, leader_metrics), (standby, standby_metrics) = (
            ((a, a_metrics), (b, b_metrics)) if leader_name == "a" else ((b, b_metrics), (a, a_metrics))
        )
        first = example(DRAFT_TARGET)
        second = copy.deepcopy(first)
        second["metadata"]["name"] = "second"
        for body in (first, second):
            SD(kube, namespace, body).wait_ready()
        assert writes(standby_metrics) == 0, standby.logs()
        assert writes(leader_metrics) > 0
        assert len(jobs(kube, namespace)) == 2  # one target, one draft: no duplicate work
        reasons = wait_for(
            lambda: (r := [e.reason for e in kube.events_for(namespace, "second")]) and "Ready" in r and r,
            "the Ready Event (posted after the others)",
        )
        assert reasons.count("RuntimeApplied") == 1, reasons  # no duplicate Events either

        leader.kill()
        killed = time.monotonic()
        third = copy.deepcopy(first)
        third["metadata"]["name"] = "third"
        third["spec"]["runtime"]["replicas"] = 2
        SD(kube, namespace, third).wait_ready(timeout=LEASE_SECONDS + 30)
        took = time.monotonic() - killed
        assert holder(kube, namespace).split("_")[0] != leader_name
        assert writes(standby_metrics) > 0
        print(
            f"failover: the standby made a new deployment Ready {took:.1f}s after the leader was killed "
            f"(lease {LEASE_SECONDS}s)"
        )
        assert standby.process.poll() is None
    finally:
        a.stop()
        b.stop()
