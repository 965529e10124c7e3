"""End to end on the local cluster: speculation off under load. The runtime pod is served by the local pod runner
(the production front before the simulated Triton, whose step time grows with the batch); closed-loop clients
load it through its front at a few concurrencies; the operator's speculation monitor, scraping the pod, fits the
step time, writes the break-even and the draft lengths by load into the runtime ConfigMap and the break-even
into status.speculation; the front then sends requests without draft tokens above the break-even and with them
below it. The machinery is bench/breakeven_cluster.py's, on a short sweep."""

from __future__ import annotations

import argparse
import math

import pytest
from bench.breakeven_cluster import (
    ServedPod,
    create_deployment,
    load_keys,
    profile_entry,
    speculation_status,
    wait_for_fit,
    wait_ready,
)
from bench.breakeven_sweep import DRAFTED, UNDRAFTED_LOAD, deployment, profile_break_even_of, profile_of

from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.speculation import load_model
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.kube_helpers import wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
MAX_TOKENS = 32
# Warm-up longer than a request at the heaviest load here (~1 s), so the window counts only requests the gate
# decided on at that load.
WINDOW = argparse.Namespace(warmup=2.0, seconds=3.0, max_tokens=MAX_TOKENS)


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def test_the_front_stops_drafting_above_the_operators_break_even_and_resumes_below_it(
    kube, kubeconfig, namespace, operator, tmp_path
):
    name = create_deployment(kube, namespace)
    profile = profile_of(argparse.Namespace(profile="{}"))
    simulation_profile.update(tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{name}", profile_entry(profile))
    wait_ready(kube, namespace, name)
    assert load_keys(kube, namespace, name) == {}  # nothing measured yet: no break-even
    with pod_runner(kubeconfig, tmp_path, namespace) as served:
        pod = ServedPod.find(served, kube, namespace)
        keys = wait_for_fit(pod, kube, namespace, name, timeout=120, seconds=12.0, max_tokens=MAX_TOKENS)
        break_even = int(keys[BREAK_EVEN_KEY])
        # The fit is of measured windows (the event loop's own time per step is in them): near the profile's own.
        truth = profile_break_even_of(profile, deployment()["spec"]["speculation"]["draftTarget"]["draftLen"])
        assert truth / 2 <= break_even <= truth * 2, (break_even, truth)
        assert load_model.schedule_break_even(load_model.parse_schedule(keys[SCHEDULE_KEY])) == break_even
        # status.speculation shows the break-even the ConfigMap holds (the operator may have refitted since).
        wait_for(
            lambda: (
                speculation_status(kube, namespace, name).get("breakEven")
                == int(load_keys(kube, namespace, name)[BREAK_EVEN_KEY])
            ),
            "status.speculation.breakEven",
            timeout=30,
        )

        heavy = 2 * break_even + math.floor(break_even * load_model.HYSTERESIS)
        above = pod.level(heavy, WINDOW)["counters"]
        light = max(1, break_even // 8)
        below = pod.level(light, WINDOW)["counters"]
    undrafted, drafted = above.get(UNDRAFTED_LOAD, 0.0), above.get(DRAFTED, 0.0)
    assert undrafted > 0 and undrafted >= 0.9 * (undrafted + drafted), (heavy, undrafted, drafted)
    undrafted, drafted = below.get(UNDRAFTED_LOAD, 0.0), below.get(DRAFTED, 0.0)
    assert drafted > 0 and undrafted == 0, (light, undrafted, drafted)
    assert below.get("specdec_draft_tokens_total", 0.0) > 0
