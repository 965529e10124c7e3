"""End to end: the guard SpeculationActive on the local cluster. The runtime pods are served by the local
pod runner (the real front before a simulated backend); the simulation profile's `drafting: false` is a
server that stopped speculating (as TensorRT-LLM once acceptance_rate_threshold turned it off), its
acceptance a drafter that no longer fits the traffic."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specdec.builders.common import LABEL_INSTANCE
from specdec.reconcile.runtime_applier import ANNOTATION_REARMED_AT
from specdec.speculation.guard import GuardPolicy
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"  # Triton route, draftLen 10
# A flip needs GuardPolicy.windows windows of evidence; a window can straddle the profile change, and the
# pod runner reads the profile within a second or two.
FLIP_SECONDS = (GuardPolicy().windows + 1) * SCRAPE_SECONDS + 4.0


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def reasons(kube: Kube, sd: SD) -> list[str]:
    return [
        e.reason
        for e in sorted(
            kube.events_for(sd.namespace, sd.name),
            key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp,
        )
    ]


def wait_active(sd: SD, status: str, reason: str, timeout: float) -> tuple[dict, float]:
    started = time.monotonic()
    found = wait_for(
        lambda: (c := sd.condition("SpeculationActive")).get("reason") == reason and c,
        f"SpeculationActive={status} ({reason})",
        timeout=timeout,
        interval=0.2,
    )
    assert found["status"] == status
    return found, time.monotonic() - started


def test_drafting_off_and_acceptance_collapse_flip_the_guard_and_back(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    sd = SD(kube, namespace, example(SAMPLE))
    sd.wait_ready()
    assert sd.condition("SpeculationActive")["status"] == "Unknown"  # no traffic yet
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**FAST_PROFILE, "acceptance": 0.8})
    with pod_runner(kubeconfig, tmp_path, namespace):
        wait_active(sd, "True", "Drafting", timeout=60)
        time.sleep(4 * SCRAPE_SECONDS)  # the baseline warms up (GuardPolicy.warmup windows)

        simulation_profile.update(profiles, deployment, {"drafting": False})
        active, took = wait_active(sd, "False", "NotDrafting", timeout=FLIP_SECONDS + 30)
        print(f"NotDrafting {took:.1f}s after drafting stopped (scrape interval {SCRAPE_SECONDS:g}s)")
        assert took <= FLIP_SECONDS, f"NotDrafting only {took:.1f}s after drafting stopped"
        assert "0 draft tokens for" in active["message"] and "acceptance_rate_threshold" in active["message"]
        assert "NotDrafting" in reasons(kube, sd)

        simulation_profile.update(profiles, deployment, {"drafting": True})
        wait_active(sd, "True", "Drafting", timeout=FLIP_SECONDS + 30)
        assert "SpeculationResumed" in reasons(kube, sd)
        time.sleep(4 * SCRAPE_SECONDS)

        # At draftLen 10: an acceptance rate of ~0.03 against a baseline of ~0.36.
        simulation_profile.update(profiles, deployment, {"acceptance": 0.2})
        active, took = wait_active(sd, "False", "AcceptanceCollapsed", timeout=FLIP_SECONDS + 30)
        print(f"AcceptanceCollapsed {took:.1f}s after the acceptance fell")
        assert took <= FLIP_SECONDS
        assert "against a baseline of" in active["message"]

        simulation_profile.update(profiles, deployment, {"acceptance": 0.8})
        wait_active(sd, "True", "Drafting", timeout=FLIP_SECONDS + 30)


def test_rearm_restarts_the_runtime_pods_once_drafting_stayed_off(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    body = example(SAMPLE)
    body["spec"]["speculation"]["rearm"] = {"enabled": True, "cooldownSeconds": 60}
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    profiles = tmp_path / simulation_profile.FILE_NAME
    simulation_profile.update(profiles, f"{namespace}/{sd.name}", {**FAST_PROFILE, "drafting": False})
    with pod_runner(kubeconfig, tmp_path, namespace):
        wait_active(sd, "False", "NotDrafting", timeout=60)
        rearm = wait_for(lambda: (sd.get().get("status") or {}).get("rearm"), "status.rearm", timeout=60 + 30)
        assert rearm["restarts"] == 1
        runtime = kube.apps.list_namespaced_deployment(namespace, label_selector=f"{LABEL_INSTANCE}={sd.name}").items[0]
        wait_for(
            lambda: (
                (
                    kube.apps.read_namespaced_deployment(
                        runtime.metadata.name, namespace
                    ).spec.template.metadata.annotations
                    or {}
                ).get(ANNOTATION_REARMED_AT)
                == rearm["lastRestartAt"]
            ),
            "the pod template carries the restart",
        )
        assert "SpeculationRearmed" in reasons(kube, sd)
        time.sleep(20)  # within the cool-down: no second restart
        assert (sd.get().get("status") or {})["rearm"]["restarts"] == 1
