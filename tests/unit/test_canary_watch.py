"""The monitor's canary arms against real HTTP endpoints: each arm's pods give its window, the test decides, a
restarted monitor resumes from status.canary."""

from __future__ import annotations

import pytest

from specdec.builders.common import LABEL_COMPONENT
from specdec.canary.rollout import recorded_test
from specdec.feedback.monitor import SpeculationMonitor
from specdec.kube.cache import Store
from tests.unit.test_monitor import LABEL_INSTANCE, Endpoint, _free_port, metrics_text, pod, sd

REQUESTS = 50  # per arm and window
TOKENS = 40  # per request


class Arm:
    """One arm's pod: its counters grow by a window of traffic at a time."""

    def __init__(self, endpoint: Endpoint, acceptance: float, tpot: float):
        self.endpoint, self.acceptance, self.tpot = endpoint, acceptance, tpot
        self.windows = 0
        self.publish()

    def publish(self) -> None:
        n = self.windows
        draft = 1000.0 * n
        tpot_count = REQUESTS * n
        self.endpoint.text = metrics_text(
            draft, draft * self.accepted_share, 250 * n, requests=REQUESTS * n, tokens=REQUESTS * TOKENS * n
        ) + (
            "# TYPE specdec_time_per_output_token_seconds histogram\n"
            f"specdec_time_per_output_token_seconds_sum {self.tpot_sum + self.tpot * REQUESTS * (n - self.at)}\n"
            f"specdec_time_per_output_token_seconds_count {tpot_count}\n"
        )

    accepted_share = 0.0
    tpot_sum = 0.0
    at = 0

    def serve(self, acceptance: float | None = None, tpot: float | None = None) -> None:
        """One more window of traffic (at a new acceptance or TPOT from this window on)."""
        self.tpot_sum += self.tpot * REQUESTS * (self.windows - self.at)
        self.at = self.windows
        self.acceptance = acceptance if acceptance is not None else self.acceptance
        self.tpot = tpot if tpot is not None else self.tpot
        self.windows += 1
        self.accepted_share = self.acceptance  # cumulative share is close enough over steady windows
        self.publish()


def canary_sd(port: int, test: dict | None = None) -> dict:
    obj = sd(draft_len=6, port=port)
    obj["spec"]["rollout"] = {"canary": {"enabled": True}}
    current = {
        **obj["spec"]["speculation"],
        "draftTarget": {**obj["spec"]["speculation"]["draftTarget"], "draftLen": 4},
    }
    obj["status"] = {
        "canary": {
            "current": {"speculation": current},
            "state": "InProgress",
            "generation": 1,
            "retry": "",
            **(test or {}),
        }
    }
    return obj


@pytest.fixture
def arms():
    hosts = ["127.0.0.1", "127.0.0.2"]
    port = _free_port(hosts)
    endpoints = [Endpoint(h, port) for h in hosts]
    store = Store(("SpeculativeDeployment", "Pod"), indexed_labels=(LABEL_INSTANCE,))
    store.put(canary_sd(port))
    store.put(pod("llama-a", "llama", hosts[0]))
    canary_pod = pod("llama-canary-a", "llama", hosts[1])
    canary_pod["metadata"]["labels"][LABEL_COMPONENT] = "runtime-canary"
    store.put(canary_pod)
    enqueued: list = []
    yield store, endpoints, port, enqueued
    for e in endpoints:
        e.close()


def monitor_of(store: Store, enqueued: list) -> SpeculationMonitor:
    return SpeculationMonitor(
        store, lambda *a, **k: None, lambda ns, name: enqueued.append((ns, name)), interval=15, refresh_seconds=300
    )


def test_each_arm_is_read_from_its_own_pods_and_a_faster_canary_is_promoted(arms):
    store, (a, b), port, enqueued = arms
    monitor = monitor_of(store, enqueued)
    current, canary = Arm(a, 0.55, 0.030), Arm(b, 0.70, 0.024)
    monitor.run_once(now=0.0)  # the baselines
    assert monitor.canary.reading("ns", "llama").decision is None
    for n in range(1, 30):
        current.serve(), canary.serve()
        monitor.run_once(now=15.0 * n)
        reading = monitor.canary.reading("ns", "llama")
        if reading.decision is not None:
            break
    assert reading.decision.outcome == "Promoted" and reading.decision.reason == "Faster"
    assert 5 <= reading.state.pairs == n
    assert reading.arms["current"]["requests"] == reading.arms["canary"]["requests"] == REQUESTS * n
    assert reading.arms["current"]["tpotSeconds"] == pytest.approx(0.030)
    assert reading.arms["canary"]["tpotSeconds"] == pytest.approx(0.024)
    assert (
        reading.arms["canary"]["draft"] == f"draftTarget {sd()['spec']['speculation']['draftTarget']['draft']['model']}"
    )
    assert ("ns", "llama") in enqueued
    # the main arm's own measurement reads the main pods only
    assert monitor.published("ns", "llama", 1).status["pods"] == 1


def test_a_collapse_is_rolled_back_within_two_windows(arms):
    store, (a, b), port, enqueued = arms
    monitor = monitor_of(store, enqueued)
    current, canary = Arm(a, 0.62, 0.030), Arm(b, 0.62, 0.030)
    monitor.run_once(now=0.0)
    for n in (1, 2):
        current.serve(), canary.serve()
        monitor.run_once(now=15.0 * n)
    canary.serve(acceptance=0.05)  # collapses
    current.serve()
    monitor.run_once(now=45.0)
    reading = monitor.canary.reading("ns", "llama")
    assert reading.decision is not None and reading.decision.reason == "AcceptanceCollapsed"
    assert reading.decision.outcome == "Rejected" and not reading.decision.promote


def test_a_restarted_monitor_resumes_the_test_from_status(arms):
    store, (a, b), port, enqueued = arms
    first = monitor_of(store, enqueued)
    current, canary = Arm(a, 0.62, 0.030), Arm(b, 0.62, 0.029)
    first.run_once(now=0.0)
    for n in (1, 2, 3):
        current.serve(), canary.serve()
        first.run_once(now=15.0 * n)
    read = first.canary.reading("ns", "llama")
    assert read.state.pairs == 3 and read.decision is None
    # the controller wrote it into status.canary; another operator takes over
    store.put(canary_sd(port, {"test": recorded_test(read.state), "arms": read.arms}))
    second = monitor_of(store, enqueued)
    second.run_once(now=60.0)  # its baselines
    current.serve(), canary.serve()
    second.run_once(now=75.0)
    resumed = second.canary.reading("ns", "llama")
    assert resumed.state.pairs == 4 and resumed.state.windows == 4
    assert resumed.state.canary_requests == read.state.canary_requests + REQUESTS
    assert resumed.arms["canary"]["requests"] == REQUESTS * 4


def test_a_new_test_reads_its_first_window_from_its_own_start(arms):
    """The pods' samples of the last test are not a baseline of the next one: its first scrape is."""
    store, (a, b), port, enqueued = arms
    monitor = monitor_of(store, enqueued)
    current, canary = Arm(a, 0.62, 0.030), Arm(b, 0.62, 0.030)
    monitor.run_once(now=0.0)
    current.serve(), canary.serve()
    monitor.run_once(now=15.0)
    assert monitor.canary.reading("ns", "llama").state.windows == 1
    store.put(canary_sd(port, {"retry": "again"}))  # retried on the same pods, three windows of traffic later
    for _ in range(3):
        current.serve(), canary.serve()
    monitor.run_once(now=60.0)
    started = monitor.canary.reading("ns", "llama")
    assert started.retry == "again" and started.state.windows == 0
    current.serve(), canary.serve()
    monitor.run_once(now=75.0)
    first = monitor.canary.reading("ns", "llama")
    assert first.state.windows == 1 and first.state.canary_requests == first.state.current_requests == REQUESTS
    assert first.window_seconds == 15.0


def test_a_canary_that_never_serves_ends_not_serving(arms):
    """Its pod never ready (never scraped): no window, and after notServingSeconds the canary ends, the current
    draft kept; until then the current arm's windows go on alone."""
    store, (a, b), port, enqueued = arms
    sd_ = canary_sd(port)
    sd_["spec"]["rollout"]["canary"]["notServingSeconds"] = 60
    store.put(sd_)
    never_ready = pod("llama-canary-a", "llama", "127.0.0.2", ready=False)
    never_ready["metadata"]["labels"][LABEL_COMPONENT] = "runtime-canary"
    store.put(never_ready)
    monitor = monitor_of(store, enqueued)
    current = Arm(a, 0.62, 0.030)
    for n in range(4):  # 0 to 45 s
        current.serve()
        monitor.run_once(now=15.0 * n)
        assert monitor.canary.reading("ns", "llama").decision is None
    current.serve()
    monitor.run_once(now=60.0)
    ended = monitor.canary.reading("ns", "llama").decision
    assert ended is not None and (ended.outcome, ended.reason, ended.promote) == ("Inconclusive", "NotServing", False)
    assert "no request for 60s" in ended.message


def test_a_canary_that_serves_is_not_ended_for_idling(arms):
    store, (a, b), port, enqueued = arms
    sd_ = canary_sd(port)
    sd_["spec"]["rollout"]["canary"]["notServingSeconds"] = 20
    store.put(sd_)
    monitor = monitor_of(store, enqueued)
    current, canary = Arm(a, 0.62, 0.030), Arm(b, 0.62, 0.030)
    for n in range(4):  # windows of 15 s, each with the canary's requests
        current.serve(), canary.serve()
        monitor.run_once(now=15.0 * n)
    assert monitor.canary.reading("ns", "llama").decision is None
