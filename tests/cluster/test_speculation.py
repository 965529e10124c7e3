"""End to end: the operator scrapes the runtime pods (served by the local pod runner: the real
front before a simulated backend, on the pods' own IPs) and writes status.speculation, the
SpeculationEffective condition and, with draftLen: auto, the draft length."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specdec.speculation import payoff
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"  # Triton route, draftLen 10
# Many short requests: a window of a few seconds counts thousands of draft tokens.


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def expected_rate(alpha: float, k: int) -> float:
    """Accepted / proposed draft tokens of the simulator's model."""
    return (payoff.tokens_per_step(alpha, k) - 1) / k


def speculation_status(sd: SD) -> dict:
    return (sd.get().get("status") or {}).get("speculation") or {}


def test_status_follows_the_acceptance_profile(kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path):
    sd = SD(kube, namespace, example(SAMPLE))
    sd.wait_ready()
    assert sd.condition("SpeculationEffective")["status"] == "Unknown"  # no traffic yet
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**FAST_PROFILE, "acceptance": 0.8, "costRatio": 0.02})
    with pod_runner(kubeconfig, tmp_path, namespace):
        high = expected_rate(0.8, 10)
        # The front polls Triton's metrics on its own schedule: the first windows may lack its times.
        wait_for(
            lambda: (
                abs((s := speculation_status(sd)).get("acceptanceRate", -1) - high) < 0.05
                and s.get("costRatioSource") == "Measured"
            ),
            f"acceptanceRate near {high:.2f}, cost measured",
            timeout=60,
        )
        status = speculation_status(sd)
        assert status["draftLen"] == 10 and status["pods"] == 1 and status["costRatioSource"] == "Measured"
        assert status["costRatio"] == pytest.approx(0.02, abs=0.005)
        assert status["acceptedTokensPerStep"] == pytest.approx(payoff.tokens_per_step(0.8, 10), abs=0.5)
        effective = sd.condition("SpeculationEffective")
        assert (effective["status"], effective["reason"]) == ("True", "SpeculationPaysOff")

        # Poor acceptance and a costly draft: the status moves within two scrape intervals and says what to do.
        simulation_profile.update(profiles, deployment, {"acceptance": 0.3, "costRatio": 0.1})
        changed = time.monotonic()
        low = expected_rate(0.3, 10)
        wait_for(
            lambda: abs(speculation_status(sd).get("acceptanceRate", -1) - low) < 0.03 and sd,
            f"acceptanceRate near {low:.2f}",
            timeout=30,
            interval=0.1,
        )
        moved_after = time.monotonic() - changed
        print(f"status moved {moved_after:.1f}s after the profile change (scrape interval {SCRAPE_SECONDS:g}s)")
        assert moved_after <= 2 * SCRAPE_SECONDS + 2.0, f"status moved {moved_after:.1f}s after the change"
        # Its reason and advice, once a window saw only the new profile (the cost is measured again).
        effective = wait_for(
            lambda: (
                (c := sd.condition("SpeculationEffective")).get("status") == "False"
                and abs(speculation_status(sd)["costRatio"] - 0.1) < 0.01
                and c
            ),
            "SpeculationEffective=False at the new cost",
            timeout=6 * SCRAPE_SECONDS,
        )
        assert effective["reason"] == "LowAcceptance"
        assert "draftLen 1 would give an estimated" in effective["message"], effective["message"]
        assert speculation_status(sd)["estimatedSpeedup"] < 1.0
        assert speculation_status(sd)["recommendedDraftLen"] == 1


def test_auto_draft_len_converges_to_the_optimum_and_holds(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    body = example(SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=8)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    config_map = f"{sd.name}-runtime"
    assert kube.core.read_namespaced_config_map(config_map, namespace).data["draft_len"] == "4"  # where auto starts
    alpha, cost = 0.45, 0.15
    optimum = payoff.best_draft_len(alpha, cost, 1, 8)
    assert optimum == 2  # a draft of 4 wastes 14 % of the possible speedup: worth moving
    simulation_profile.update(
        tmp_path / simulation_profile.FILE_NAME,
        f"{namespace}/{sd.name}",
        {**FAST_PROFILE, "acceptance": alpha, "costRatio": cost, "noise": 0.05},
    )
    with pod_runner(kubeconfig, tmp_path, namespace):
        wait_for(
            lambda: abs(speculation_status(sd).get("draftLen", 99) - optimum) <= 1 and sd,
            f"draftLen within 1 of {optimum}",
            timeout=90,
        )
        chosen = kube.core.read_namespaced_config_map(config_map, namespace).data["draft_len"]
        assert abs(int(chosen) - optimum) <= 1
        # Then it holds: noisy windows do not move it.
        seen = set()
        deadline = time.monotonic() + 8 * SCRAPE_SECONDS
        while time.monotonic() < deadline:
            seen.add(speculation_status(sd)["draftLen"])
            time.sleep(SCRAPE_SECONDS / 2)
        assert all(abs(k - optimum) <= 1 for k in seen), seen
    changes = sorted(
        (e for e in kube.events_for(namespace, sd.name) if e.reason == "DraftLenChanged"),
        key=lambda e: e.first_timestamp,
    )
    assert 1 <= len(changes) <= 2, [e.message for e in changes]
    assert changes[0].message.startswith("draftLen 4 -> ") and "estimated speedup" in changes[0].message
    deployment = kube.apps.read_namespaced_deployment(sd.name, namespace)
    assert deployment.metadata.generation == 1  # the draft length changed live: no rollout
