"""The operator's alerts fire against the pinned Prometheus and resolve, each from a real cause: another
candidate holding the leader-election Lease, the operator process stopped, fetch and build pods that fail
(kwok's failure stage), and an API server answering the operator's writes with 500s (tests/faults' proxy).
Rules rendered from specdec.observability.alerts with short windows (monitoring.SHORT)."""

from __future__ import annotations

import pytest
from kubernetes import config

from specdec.kube.leader import Leadership
from specdec_dev import simulated_steps
from specdec_dev.prometheus import OPERATOR_JOB
from tests.cluster.test_operator import SD, example
from tests.faults.proxy import FaultPlan
from tests.kube_helpers import wait_for
from tests.observability.monitoring import fires_then_resolves, firing, scraped_operator, up_jobs

pytestmark = pytest.mark.cluster

SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"
OPERATOR_ALERTS = (
    "SpecdecOperatorDown",
    "SpecdecOperatorNotLeading",
    "SpecdecEngineBuildFailing",
    "SpecdecModelFetchFailing",
    "SpecdecReconcileErrors",
)
WRITES = ("create", "update", "patch", "delete")


def deployment(name: str, **spec) -> dict:
    body = example(SAMPLE)
    body["metadata"]["name"] = name
    body["spec"].update(spec)
    return body


def test_not_leading_and_down_fire_and_resolve(kube, kubeconfig, namespace, crds, operator_env, tmp_path, request):
    """A candidate that holds the Lease and reconciles nothing (as a hung leader whose renewals still run) keeps
    the scraped operator a standby: not leading, until it releases the Lease. Then the operator stops: down,
    until it runs again."""
    holder = Leadership(
        config.new_client_from_config(config_file=str(kubeconfig)),
        namespace,
        "specdec-operator",
        "hung-leader",
        lease_seconds=4,
        renew_deadline=3,
        retry_period=1,
    )
    holder.start()
    wait_for(holder.is_leader, "the other candidate to hold the Lease", timeout=30)
    env = {
        **operator_env,
        "SPECDEC_LEADER_ELECTION": "true",
        "SPECDEC_LEADER_ELECTION_NAMESPACE": namespace,
        "SPECDEC_LEADER_ELECTION_LEASE_SECONDS": "4",
        "SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "3",
        "SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "1",
    }
    try:
        with scraped_operator(kubeconfig, namespace, env, tmp_path, request) as (operator, server):
            SD(kube, namespace, deployment("watched"))

            def watch() -> set[str]:
                return firing(server, OPERATOR_ALERTS)

            fires_then_resolves(watch, {"SpecdecOperatorNotLeading"}, lambda: None, holder.stop)
            assert server.query("sum(specdec_reconcile_total)")  # it leads now
            fires_then_resolves(watch, {"SpecdecOperatorDown"}, operator.stop, operator.start)
            assert OPERATOR_JOB in up_jobs(server)
    finally:
        holder.stop()


def test_failing_fetch_and_build_fire_until_the_fixed_deployments_leave_them_unused(
    kube, kubeconfig, namespace, crds, operator_env, tmp_path, request
):
    """One deployment's fetch pods fail, another's build pods: both alerts fire. Fixed (the failing pod settings
    removed), the deployments use new ModelCaches and EngineBuilds, and the operator deletes the Failed ones as
    unused (retention 0 s): both resolve."""
    env = {**operator_env, "SPECDEC_ENGINE_RETENTION_SECONDS": "0"}
    with scraped_operator(kubeconfig, namespace, env, tmp_path, request) as (_, server):
        fetch = {"backoffLimit": 0, **simulated_steps.failing("fetch", message="simulated-401-gated-repo")}
        build = {"backoffLimit": 0, **simulated_steps.failing("build", message="simulated-build-error")}
        broken = []

        def cause():
            broken.extend(
                [
                    SD(kube, namespace, deployment("fetch-fails", cache={"fetch": fetch})),
                    SD(kube, namespace, deployment("build-fails", build=build)),
                ]
            )

        def cure():
            broken[0].patch({"spec": {"cache": {"fetch": None}}})
            broken[1].patch({"spec": {"build": None}})

        fires_then_resolves(
            lambda: firing(server, OPERATOR_ALERTS),
            {"SpecdecModelFetchFailing", "SpecdecEngineBuildFailing"},
            cause,
            cure,
            timeout=120,
        )
        for sd in broken:
            assert sd.wait_ready(timeout=120)["status"]["phase"] == "Ready"


def test_reconcile_errors_fire_while_the_api_server_fails_the_operators_writes(
    kube, kubeconfig, namespace, crds, operator_env, tmp_path, request, fault_proxy
):
    """A deployment created while every write of the operator in this namespace is answered 500: each reconcile
    of it fails (after the client's retries) and the operator keeps retrying. Once the API server answers again,
    its reconciles succeed."""
    only_writes_here = FaultPlan(
        1.0, kinds=("error500",), watch_rate=0.0, only=lambda r: r.namespace == namespace and r.verb in WRITES
    )

    def cause():
        fault_proxy.set_faults(only_writes_here)
        SD(kube, namespace, deployment("fails-to-write"))  # through the cluster's own API server, not the proxy

    with scraped_operator(
        kubeconfig, namespace, operator_env, tmp_path, request, operator_kubeconfig=fault_proxy.kubeconfig
    ) as (_, server):
        fires_then_resolves(
            lambda: firing(server, OPERATOR_ALERTS),
            {"SpecdecReconcileErrors"},
            cause,
            lambda: fault_proxy.set_faults(FaultPlan()),
        )
        assert fault_proxy.injected().get("error500", 0) > 0
        assert server.query('sum(specdec_reconcile_total{result="error"}) > 0')
