"""The operator behind a fault-injecting proxy (tests/faults/proxy.py): throttling, 5xx, resets,
watch faults and an API-server outage must cost time, never correctness or the operator's life."""

from __future__ import annotations

import time

import pytest

from tests.cluster.test_operator import DRAFT_TARGET, SD, example
from tests.conftest import free_port, stop_and_report
from tests.faults.proxy import REQUEST_FAULTS, WATCH_FAULTS, FaultPlan
from tests.kube_helpers import wait_for
from tests.operator_runner import OperatorProcess

pytestmark = pytest.mark.cluster

WATCHED_KINDS = 8  # specdec.handlers.WATCHED: one watch each in the test namespace


@pytest.fixture
def operator_through_proxy(fault_proxy, crds, namespace, operator_env, tmp_path, request) -> OperatorProcess:
    """The operator watching this test's namespace, talking to the API server only through the proxy.

    It starts with faults off (a test turns them on): start-up checks are not what these tests test."""
    runner = OperatorProcess.watching(
        namespace, fault_proxy.kubeconfig, tmp_path / "operator.log", free_port(), operator_env
    )
    runner.start()
    yield runner
    stop_and_report(
        runner, request, f"--- injected faults: {fault_proxy.injected()}; forwarded: {fault_proxy.forwarded}"
    )


def deployment(name: str, target: str, draft: str) -> dict:
    """The draft-target example on one GPU (draft and target share GPU 0), so a batch fits the cluster."""
    body = example(DRAFT_TARGET)
    body["metadata"]["name"] = name
    body["spec"]["target"]["model"] = target
    body["spec"]["target"]["devices"] = [0]
    body["spec"]["speculation"]["draftTarget"]["draft"]["model"] = draft
    return body


def batch(kube, namespace: str, tag: str, count: int) -> list[SD]:
    """`count` deployments; pairs share a target engine and all share one draft engine."""
    return [
        SD(kube, namespace, deployment(f"{tag}-{i}", f"hf://org-{tag}/target-{i // 2}", f"hf://org-{tag}/draft"))
        for i in range(count)
    ]


def alive(operator: OperatorProcess) -> bool:
    return operator.process is not None and operator.process.poll() is None


def wait_all_ready(sds: list[SD], operator: OperatorProcess, timeout: float) -> float:
    """Seconds until every one is Ready with a fresh status; fails at once if the operator exits."""
    start = time.monotonic()

    def ready():
        assert alive(operator), f"the operator exited with {operator.process.returncode}"
        return all(fresh_and_ready(sd.get()) for sd in sds)

    wait_for(ready, f"{', '.join(sd.name for sd in sds)} Ready=True", timeout=timeout, interval=0.5)
    return time.monotonic() - start


def fresh_and_ready(obj: dict) -> bool:
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
    return status.get("observedGeneration") == obj["metadata"]["generation"] and ready.get("status") == "True"


def summary(sds: list[SD]) -> str:
    lines = []
    for sd in sds:
        obj = sd.get()
        status = obj.get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        lines.append(
            f"{sd.name}: generation {obj['metadata']['generation']}, observed "
            f"{status.get('observedGeneration')}, Ready={ready.get('status')}/{ready.get('reason')}: "
            f"{ready.get('message')}"
        )
    return "\n".join(lines)


BATCH = 6
# 10 % of requests get 429+Retry-After, 500, 503 or a reset. Watch requests are few (one per watched
# kind, reopened only when a stream ends): at 10 % a short test would rarely see a watch fault, so
# half the watch requests get one (stream closed, cut, in-stream 410, or HTTP 410), and every faulted
# stream ends within seconds, so the watches keep being reopened and faulted all through the test.
FAULTS = FaultPlan(0.10, kinds=REQUEST_FAULTS, watch_rate=0.5, watch_kinds=WATCH_FAULTS)


def test_all_deployments_get_ready_through_ten_percent_faults(kube, namespace, fault_proxy, operator_through_proxy):
    operator = operator_through_proxy
    # Baseline: the same shape of work, fault-free, in this run (the machine is shared and noisy).
    baseline_sds = batch(kube, namespace, "base", BATCH)
    baseline = wait_all_ready(baseline_sds, operator, timeout=120)
    for sd in baseline_sds:  # free their GPUs for the faulted batch
        kube.custom.delete_namespaced_custom_object(
            "specdec.io", "v1alpha1", namespace, "speculativedeployments", sd.name
        )
    fault_proxy.set_faults(FAULTS)
    fault_proxy.cut_streams()  # the watches opened fault-free: reopen them under faults
    start = time.monotonic()
    sds = batch(kube, namespace, "faulty", BATCH)
    # Two of them change while everything is faulted: their status must catch up with generation 2.
    for sd in sds[:2]:
        sd.patch({"spec": {"runtime": {"kvCache": {"freeGpuMemoryFraction": 0.3}}}})
    # 2x the baseline, with a floor: the operator's resync period (5 s) and Retry-After (1 s) are fixed
    # costs a retried request can pay once or twice even when the baseline is only a few seconds.
    deadline = max(2 * baseline, baseline + 20)
    try:
        wait_all_ready(sds, operator, timeout=deadline)
    except AssertionError as error:
        raise AssertionError(
            f"{error}\nbaseline {baseline:.1f}s, deadline {deadline:.1f}s, injected "
            f"{fault_proxy.injected()}\n{summary(sds)}"
        ) from None
    took = time.monotonic() - start
    injected = fault_proxy.injected()
    print(f"baseline {baseline:.1f}s, with faults {took:.1f}s; injected {injected}; forwarded {fault_proxy.forwarded}")
    # The faults were really there, on both plain and watch requests.
    assert sum(injected.get(k, 0) for k in REQUEST_FAULTS) >= 5, injected
    assert sum(injected.get(k, 0) for k in WATCH_FAULTS) >= 3, injected
    assert alive(operator)
    assert all(fresh_and_ready(sd.get()) for sd in sds), summary(sds)
    assert all(sd.get()["metadata"]["generation"] == 2 for sd in sds[:2])


def watch_driven_operator(operator_env, request) -> OperatorProcess:
    """The operator with its periodic re-list pushed out of the test's time: only watches drive it."""
    operator_env["SPECDEC_RESYNC_SECONDS"] = "3600"
    return request.getfixturevalue("operator_through_proxy")


def test_events_and_watches_survive_an_api_server_outage(kube, namespace, fault_proxy, operator_env, request):
    operator = watch_driven_operator(operator_env, request)
    first = batch(kube, namespace, "before", 3)
    # Cut the API server off while the operator is writing: its first EngineBuild exists, the rest not yet.
    wait_for(
        lambda: kube.custom.list_namespaced_custom_object("specdec.io", "v1alpha1", namespace, "enginebuilds")["items"],
        "the operator's first EngineBuild",
        timeout=30,
        interval=0.05,
    )
    fault_proxy.outage(5)
    wait_for(lambda: not fault_proxy.down, "the outage to end", timeout=15)
    assert fault_proxy.injected().get("outage", 0) > 0  # the operator did try to talk during the outage
    after = SD(kube, namespace, deployment("after", "hf://org-after/target", "hf://org-after/draft"))
    try:
        wait_all_ready([after], operator, timeout=60)  # watch-driven: its watches survived
    except AssertionError as error:
        raise AssertionError(f"{error}\n{summary([after])}") from None
    # Posted by the operator's event thread after the outage: it survived it.
    wanted = {"EngineBuildCreated", "RuntimeApplied", "Ready"}
    reasons = wait_for(
        lambda: wanted <= (r := {e.reason for e in kube.events_for(namespace, "after")}) and r,
        f"Events {sorted(wanted)} for the deployment created after the outage",
        timeout=30,
    )
    assert wanted <= reasons
    # What failed during the outage is retried, not left for the periodic re-list (an hour here).
    try:
        wait_all_ready(first, operator, timeout=60)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{summary(first)}") from None
    assert alive(operator)


def test_a_watch_request_answered_410_does_not_stop_the_operator(kube, namespace, fault_proxy, operator_env, request):
    operator = watch_driven_operator(operator_env, request)
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("watch_gone",), only=lambda request: request.is_watch))
    fault_proxy.cut_streams()  # every watch reconnects, and every new watch request gets HTTP 410
    wait_for(
        lambda: fault_proxy.injected().get("watch_gone", 0) >= WATCHED_KINDS or not alive(operator),
        "a 410 answer to the watch of every kind",
        timeout=30,
    )
    assert alive(operator), f"the operator exited with {operator.process.returncode} after a 410"
    fault_proxy.set_faults(FaultPlan())
    sd = SD(kube, namespace, deployment("after-410", "hf://org-410/target", "hf://org-410/draft"))
    try:
        wait_all_ready([sd], operator, timeout=60)  # its watches are back, or nothing would get Ready in time
    except AssertionError as error:
        raise AssertionError(f"{error}\ninjected {fault_proxy.injected()}\n{summary([sd])}") from None
