"""A real Prometheus (the pinned build) on the local cluster, configured as `specdec dev up --prometheus` does:
it finds the sample deployment's runtime pod through the API server and scrapes it and the operator; every
dashboard query answers with series, and the runtime's alerts fire and resolve as the simulated backend's
acceptance falls and recovers and as it stops and resumes drafting (rules rendered from the same source with short
windows). The operator's alerts: test_operator_alerts.py."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import pytest

from specdec.observability import dashboard
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from specdec_dev.prometheus import OPERATOR_JOB, RUNTIME_JOB, PrometheusError
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, wait_for
from tests.observability.monitoring import fires_then_resolves, scraped_operator, up_jobs

pytestmark = pytest.mark.cluster

SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"  # Triton: measured draft and target time, draft length 10
SPECULATION_ALERTS = ("SpecdecSpeculationNotPayingOff", "SpecdecAcceptanceCollapsed")
RUNTIME_ALERTS = (*SPECULATION_ALERTS, "SpecdecSpeculationNotDrafting")


@contextlib.contextmanager
def monitored(kube, kubeconfig: Path, namespace: str, operator_env: dict, tmp_path: Path, request, acceptance: float):
    """The operator and the sample deployment in `namespace`, the pod runner sending it simulated traffic at
    `acceptance`, and Prometheus scraping both every second. Yields (Prometheus, the profile file, the
    deployment's name)."""
    with scraped_operator(kubeconfig, namespace, operator_env, tmp_path, request) as (_, server):
        sd = SD(kube, namespace, example(SAMPLE))
        sd.wait_ready()
        profiles = tmp_path / simulation_profile.FILE_NAME
        simulation_profile.update(profiles, f"{namespace}/{sd.name}", {**FAST_PROFILE, "acceptance": acceptance})
        with pod_runner(kubeconfig, tmp_path, namespace):
            wait_for(
                lambda: up_jobs(server) == {OPERATOR_JOB, RUNTIME_JOB},
                "Prometheus to scrape the operator and the runtime pod",
                timeout=60,
                interval=1,
            )
            yield server, profiles, sd.name


def panel_query(expr: str, namespace: str) -> str:
    """A panel's PromQL as Grafana sends it, for this namespace and every deployment."""
    return expr.replace("$namespace", namespace).replace("$deployment", ".*").replace("$__rate_interval", "15s")


def test_every_dashboard_query_answers_from_the_scraped_cluster(
    kube, kubeconfig, namespace, crds, operator_env, tmp_path, request
):
    with monitored(kube, kubeconfig, namespace, operator_env, tmp_path, request, acceptance=0.7) as (server, _, name):
        runtime = server.query(f'up{{job="{RUNTIME_JOB}", namespace="{namespace}"}}')
        assert [s["metric"]["deployment"] for s in runtime] == [name]  # the pod's instance label, relabelled

        def empty() -> list[str]:
            missing = []
            for title, expr in dashboard.queries():
                try:  # an invalid query fails the test at once
                    if not server.query(panel_query(expr, namespace)):
                        missing.append(title)
                except PrometheusError as error:
                    pytest.fail(f"panel {title!r}: {error}")
            return missing

        deadline = time.monotonic() + 60
        while (missing := empty()) and time.monotonic() < deadline:
            time.sleep(2)
        assert not missing, f"panels whose queries return no series: {missing}"
        values = {
            title: [float(s["value"][1]) for s in server.query(panel_query(expr, namespace))]
            for title, expr in dashboard.queries()
        }
        # Numbers, not only series. The speculation panels are positive. NaN (a histogram without observations)
        # only where the simulation has nothing to measure: the front without a tokenizer counts no output tokens
        # on the Triton route, hence no time per output token.
        for title, *_ in dashboard.SPECULATION:
            assert all(v > 0 for v in values[title]), (title, values[title])
        nan_only = {t for t, v in values.items() if all(math.isnan(x) for x in v)}
        assert nan_only <= {"Time per output token"}, values
        acceptance = server.query(panel_query(dashboard.SPECULATION[0][2][0][0], namespace))
        assert 0.1 < float(acceptance[0]["value"][1]) < 0.9


def test_runtime_alerts_fire_and_resolve_with_the_simulated_backend(
    kube, kubeconfig, namespace, crds, operator_env, tmp_path, request
):
    """Acceptance collapses (the speculation alerts), then the backend stops drafting (not drafting); each
    recovers. Only alerts labelled with this deployment count."""
    with monitored(kube, kubeconfig, namespace, operator_env, tmp_path, request, acceptance=0.9) as (
        server,
        profiles,
        name,
    ):
        deployment = f"{namespace}/{name}"

        def firing() -> set[str]:
            return {
                a
                for a, labels in server.firing().items()
                if a in RUNTIME_ALERTS
                and any(f"{s.get('namespace')}/{s.get('deployment')}" == deployment for s in labels)
            }

        def simulate(**values):
            return lambda: simulation_profile.update(profiles, deployment, values)

        time.sleep(30)  # a baseline at high acceptance
        for expected, cause, cure in (
            (set(SPECULATION_ALERTS), simulate(acceptance=0.02), simulate(acceptance=0.9)),
            ({"SpecdecSpeculationNotDrafting"}, simulate(drafting=False), simulate(drafting=True)),
        ):
            fires_then_resolves(firing, expected, cause, cure, timeout=60)
