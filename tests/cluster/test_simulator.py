"""Live numbers in the local cluster: a SpeculativeDeployment goes Ready, the pod runner serves its pod on
the pod's IP with the real front before a simulated backend, and the front's /metrics there, scraped as
the operator scrapes it, counts simulated speculation that follows the acceptance profile."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specdec.api.runtime_config import DRAFT_LEN_KEY, RUNTIME_CONFIG_KEY
from specdec.speculation import payoff
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from specdec_dev.podrunner import POD_SELECTOR
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, scrape, scrape_if_served, wait_for

pytestmark = pytest.mark.cluster


def scrape_or_none(url: str) -> dict[str, float] | None:
    metrics = scrape_if_served(url)
    return metrics if metrics and metrics.get("specdec_draft_tokens_total") else None


def acceptance_over(url: str, draft_tokens: int) -> float:
    """Accepted / drafted tokens from now until `draft_tokens` more were drafted."""
    start = scrape(url)
    end = wait_for(
        lambda: (
            (m := scrape(url))["specdec_draft_tokens_total"] >= start["specdec_draft_tokens_total"] + draft_tokens and m
        ),
        f"{draft_tokens} more draft tokens at {url}",
        timeout=60,
        interval=0.5,
    )
    drafted = end["specdec_draft_tokens_total"] - start["specdec_draft_tokens_total"]
    return (end["specdec_accepted_draft_tokens_total"] - start["specdec_accepted_draft_tokens_total"]) / drafted


def expected_rate(acceptance: float, draft_len: int) -> float:
    """Accepted / drafted tokens: a step's accepted tokens, E(k) - 1, over k (specdec.speculation.payoff's model)."""
    return (payoff.tokens_per_step(acceptance, draft_len) - 1) / draft_len


def measured_cost_ratio(url: str) -> float:
    """The draft's cost in target steps, as the operator measures it (payoff.measure), from the pod's
    totals (one draft length all along); once the front has compute time from its backend."""
    m = wait_for(
        lambda: (m := scrape(url))["specdec_target_seconds_total"] > 0 and m,
        f"compute time at {url}",
        timeout=30,
        interval=0.5,
    )
    return m["specdec_draft_seconds_total"] / (m["specdec_draft_len"] * m["specdec_target_seconds_total"])


@pytest.mark.parametrize(
    "manifest, draft_len, follows_draft_len_file",
    [
        ("llama-3.1-70b-fp8-draft-1b.yaml", 10, True),  # Triton: the front sends the ConfigMap's draft_len
        ("llama-3.1-8b-draft-1b-pytorch.yaml", 4, False),
    ],
)  # trtllm-serve: its configured max_draft_len
def test_runtime_pods_serve_live_speculation_numbers_that_follow_the_profile(
    kube: Kube,
    kubeconfig: Path,
    namespace: str,
    operator,
    tmp_path: Path,
    manifest: str,
    draft_len: int,
    follows_draft_len_file: bool,
):
    sd = SD(kube, namespace, example(manifest))
    sd.wait_ready()
    profiles = tmp_path / simulation_profile.FILE_NAME
    deployment = f"{namespace}/{sd.name}"
    simulation_profile.update(profiles, deployment, {**FAST_PROFILE, "acceptance": 0.3})
    pod = next(
        p
        for p in kube.core.list_namespaced_pod(namespace, label_selector=POD_SELECTOR).items
        if p.status.phase == "Running"
    )
    assert pod.status.pod_ip.startswith("127.64.")  # a GPU node's loopback pod network
    port = next(p.container_port for p in pod.spec.containers[0].ports if p.name == "http")
    url = f"http://{pod.status.pod_ip}:{port}/metrics"
    with pod_runner(kubeconfig, tmp_path, namespace):
        first = wait_for(lambda: scrape_or_none(url), f"{url} to answer with drafts", timeout=30, interval=0.5)
        wait_for(
            lambda: scrape(url)["specdec_draft_tokens_total"] > first["specdec_draft_tokens_total"],
            "specdec_draft_tokens_total to grow",
            timeout=30,
            interval=0.5,
        )
        low = acceptance_over(url, 2000)

        simulation_profile.update(profiles, deployment, {"acceptance": 0.95})
        time.sleep(3)  # the runner reads the file every 2 s; requests under the old profile finish
        acceptance_over(url, 1)  # and what the front had not counted yet is counted now
        high = acceptance_over(url, 2000)
        # Compute time: Triton's counters on its metrics port of the pod IP, or trtllm-serve's iteration stats.
        cost_ratio = measured_cost_ratio(url)

        # The emulated ConfigMap volume: a key the operator changes live shows up as a file.
        volume = tmp_path / "pods" / namespace / pod.metadata.name / "config"
        assert (volume / RUNTIME_CONFIG_KEY).is_file()
        config_map = next(v.config_map.name for v in pod.spec.volumes if v.name == "config")
        kube.core.patch_namespaced_config_map(config_map, namespace, {"data": {DRAFT_LEN_KEY: "6"}})
        wait_for(
            lambda: (volume / DRAFT_LEN_KEY).is_file() and (volume / DRAFT_LEN_KEY).read_text() == "6",
            "the draft_len file",
            timeout=10,
        )
        if follows_draft_len_file:  # the front reads the file every 5 s
            wait_for(lambda: scrape(url)["specdec_draft_len"] == 6, "the front to take draft_len 6", timeout=20)
        else:
            assert scrape(url)["specdec_draft_len"] == draft_len
    assert low == pytest.approx(expected_rate(0.3, draft_len), abs=0.05)
    assert high == pytest.approx(expected_rate(0.95, draft_len), abs=0.08)
    profile = simulation_profile.resolve(simulation_profile.read(profiles), deployment)
    assert cost_ratio == pytest.approx(profile.cost_ratio, rel=0.01)
    assert not volume.exists()  # a stopped runner leaves no pod behind
