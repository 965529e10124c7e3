"""status.capture and CaptureSpace (specdec.status.capture, pure), the monitor's capture watch
(specdec.feedback.capture_watch) on real HTTP endpoints, and what the status writer takes from it."""

from __future__ import annotations

import pytest

from specdec.feedback.capture_watch import CaptureFacts, CaptureWatch, claim_capacity, parse_capture
from specdec.feedback.monitor import SpeculationMonitor
from specdec.kube.cache import Store
from specdec.reconcile.deployment_status import DeploymentStatusWriter
from specdec.runtime.capture import CaptureTotals
from specdec.runtime.metrics import RuntimeMetrics
from specdec.status.capture import CapturePlace, CaptureSample, capture_condition, capture_status
from tests.unit.test_monitor import Endpoint, _free_port, pod

GIB = 1 << 30
PLACE = CapturePlace("captures", "hidden-states/llama")


def sample(
    files: int = 3, size: int = GIB, tokens: int = 9000, requests: int = 60, last_write: float | None = 1_764_000_000.0
) -> CaptureSample:
    return CaptureSample(files, size, requests, tokens, last_write)


def front_metrics(totals: CaptureTotals) -> str:
    """A saveState runtime front's /metrics, as it renders them."""
    metrics = RuntimeMetrics(mode="saveState", backend="pytorch", model="m", route="trtllm-serve-pytorch")
    metrics.capture(totals)
    return metrics.render().decode()


def test_the_status_says_what_is_where_and_how_full():
    assert capture_status(PLACE, sample(), 10 * GIB) == {
        "claimName": "captures",
        "path": "hidden-states/llama",
        "files": 3,
        "bytes": GIB,
        "requests": 60,
        "tokens": 9000,
        "lastWriteAt": "2025-11-24T16:00:00Z",
        "claimCapacityBytes": 10 * GIB,
        "claimUsedPercent": 10.0,
    }
    nothing = capture_status(PLACE, sample(files=0, size=0, tokens=0, requests=0, last_write=None), None)
    assert "lastWriteAt" not in nothing and "claimCapacityBytes" not in nothing and nothing["files"] == 0


def test_the_condition_turns_false_at_90_percent_and_says_what_to_do():
    within = capture_condition(PLACE, sample(size=8 * GIB), 10 * GIB)
    assert (within.status, within.reason) == (
        True,
        "WithinClaim",
    ) and "80.0% of the claim's 10.00 GiB" in within.message
    full = capture_condition(PLACE, sample(size=9 * GIB), 10 * GIB)
    assert (full.status, full.reason) == (False, "ClaimNearlyFull")
    for words in (
        "hidden-states/llama of claim captures",
        "90.0%",
        "Copy the files away",
        "output.claimName to a bigger claim",
        "never deletes captured data",
    ):
        assert words in full.message
    unknown = capture_condition(PLACE, sample(), None)
    assert (unknown.status, unknown.reason) == (None, "CapacityUnknown")


def test_reads_the_gauges_the_runtime_front_renders():
    text = front_metrics(CaptureTotals(files=2, bytes=5000, requests=40, tokens=700, unreadable=1, last_write=1.5e9))
    assert parse_capture(text) == CaptureSample(2, 5000, 40, 700, 1.5e9)
    assert parse_capture(front_metrics(CaptureTotals())) == CaptureSample(0, 0, 0, 0, None)
    assert parse_capture("specdec_draft_tokens_total 4\n") is None  # not a saveState front


@pytest.mark.parametrize(
    "claim, capacity",
    [
        ({"status": {"phase": "Bound", "capacity": {"storage": "10Gi"}}}, 10 * GIB),
        ({"status": {"phase": "Bound", "capacity": {"storage": "500M"}}}, 500_000_000),
        ({"status": {"phase": "Pending"}}, None),
        (None, None),
        ({"status": {"capacity": {"storage": "lots"}}}, None),
    ],
)
def test_the_claims_capacity_is_its_status_capacity(claim, capacity):
    assert claim_capacity(claim) == capacity


class Rig:
    def __init__(self, capacity: str | None = "10Gi"):
        self.events, self.enqueued, self.reads = [], [], []
        self.capacity = capacity
        self.watch = CaptureWatch(
            self.read_claim,
            lambda obj, reason, message, warning=False: self.events.append((reason, warning)),
            lambda ns, n: self.enqueued.append((ns, n)),
        )

    def read_claim(self, namespace, name):
        self.reads.append((namespace, name))
        return {"status": {"capacity": {"storage": self.capacity}}} if self.capacity else None


def deployment(status: dict | None = None) -> dict:
    return {"metadata": {"namespace": "ns", "name": "llama", "generation": 2}, **({"status": status} if status else {})}


def facts() -> CaptureFacts:
    return CaptureFacts(2, PLACE, 8000)


def test_published_once_per_change_with_one_warning_when_nearly_full():
    rig = Rig()
    rig.watch.account(deployment(), facts(), [sample(), None], now=0.0)
    published = rig.watch.published("ns", "llama", 2)
    assert published.status["files"] == 3 and published.condition.reason == "WithinClaim"
    assert rig.enqueued == [("ns", "llama")] and rig.events == [] and rig.watch.published("ns", "llama", 1) is None
    rig.watch.account(deployment(), facts(), [sample()], now=15.0)
    assert rig.enqueued == [("ns", "llama")]  # nothing changed: nothing to write
    rig.watch.account(deployment(), facts(), [sample(files=30, size=9 * GIB)], now=30.0)
    rig.watch.account(deployment(), facts(), [sample(files=31, size=int(9.1 * GIB))], now=45.0)
    assert rig.events == [("ClaimNearlyFull", True)] and len(rig.enqueued) == 3
    assert rig.reads == [("ns", "captures")]  # the capacity is read again only after CAPACITY_SECONDS


def test_pods_count_one_directory_so_the_latest_count_wins():
    rig = Rig()
    rig.watch.account(
        deployment(), facts(), [sample(files=2, last_write=10.0), sample(files=3, last_write=20.0)], now=0.0
    )
    assert rig.watch.published("ns", "llama", 2).status["files"] == 3


def test_a_new_leader_does_not_warn_again_for_what_status_says_already():
    rig = Rig()
    said = {"conditions": [{"type": "CaptureSpace", "status": "False", "reason": "ClaimNearlyFull"}]}
    rig.watch.account(deployment(said), facts(), [sample(size=9 * GIB)], now=0.0)
    assert rig.events == [] and rig.enqueued == [("ns", "llama")]


def test_the_writer_takes_the_published_capture_else_what_status_says():
    rig = Rig()
    writer = DeploymentStatusWriter(None, None, lambda *a: None, rig.watch.published)
    assert writer._capture_status(deployment(), {}) == (None, None)
    said = {
        "capture": {"files": 1},
        "conditions": [{"type": "CaptureSpace", "status": "True", "reason": "WithinClaim"}],
    }
    status, condition = writer._capture_status(deployment(said), said)
    assert status == {"files": 1} and (condition.status, condition.reason) == (True, "WithinClaim")
    rig.watch.account(deployment(), facts(), [sample()], now=0.0)
    status, condition = writer._capture_status(deployment(said), said)
    assert status["files"] == 3 and condition.reason == "WithinClaim"


def test_the_monitor_scrapes_save_state_pods_for_their_capture():
    hosts = ["127.0.0.1"]
    port = _free_port(hosts)
    endpoint = Endpoint(hosts[0], port)
    try:
        store = Store(("SpeculativeDeployment", "Pod"))
        enqueued, events = [], []
        monitor = SpeculationMonitor(
            store,
            lambda obj, reason, message, warning=False: events.append(reason),
            lambda ns, name: enqueued.append((ns, name)),
            interval=10,
            read_claim=lambda ns, name: {"status": {"capacity": {"storage": "1Gi"}}},
        )
        store.put(
            {
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "llama", "namespace": "ns", "uid": "uid-llama", "generation": 1},
                "spec": {
                    "backend": "pytorch",
                    "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct"},
                    "runtime": {"port": port},
                    "cache": {"claimName": "cache"},
                    "speculation": {"mode": "saveState", "saveState": {"output": {"claimName": "captures"}}},
                },
            }
        )
        store.put(pod("llama-a", "llama", hosts[0]))
        endpoint.text = front_metrics(CaptureTotals(files=1, bytes=1 << 20, requests=20, tokens=400, last_write=1e9))
        monitor.run_once(now=0.0)
        published = monitor.capture.published("ns", "llama", 1)
        assert published.status == {
            "claimName": "captures",
            "path": "hidden-states/llama",
            "files": 1,
            "bytes": 1 << 20,
            "requests": 20,
            "tokens": 400,
            "lastWriteAt": "2001-09-09T01:46:40Z",
            "claimCapacityBytes": 1 << 30,
            "claimUsedPercent": 0.1,
        }
        assert enqueued == [("ns", "llama")] and monitor.published("ns", "llama", 1) is None  # no speculation
        monitor.run_once(now=15.0)
        assert enqueued == [("ns", "llama")] and endpoint.hits == 2
        endpoint.text = front_metrics(CaptureTotals(files=2, bytes=1 << 21, requests=40, tokens=800, last_write=2e9))
        monitor.run_once(now=30.0)
        assert monitor.capture.published("ns", "llama", 1).status["tokens"] == 800 and len(enqueued) == 2
        store.remove("SpeculativeDeployment", "ns", "llama")
        monitor.run_once(now=45.0)
        assert monitor.capture.published("ns", "llama", 1) is None
    finally:
        endpoint.close()


class StatusPatches:
    def __init__(self):
        self.patched: list[dict] = []

    def patch(self, kind, namespace, name, patch, subresource=None):
        self.patched.append(patch["status"])

    def event(self, *args, **kwargs):
        pass


def test_the_written_status_has_the_capture_of_a_save_state_deployment_only():
    from specdec.conditions import Cond
    from specdec.reconcile.bookkeeping.pacing import WritePacing
    from tests.unit.helpers import make_plan
    from tests.unit.invalid_specs import spec

    rig, kube = Rig(), StatusPatches()
    writer = DeploymentStatusWriter(kube, WritePacing(lambda *a, **k: None), lambda *a: None, rig.watch.published)
    conds = [Cond("SpecValid", True, "Valid"), Cond("Ready", True, "Ready")]
    capturing = make_plan(spec(backend="pytorch", speculation={"mode": "saveState", "saveState": {}}))
    rig.watch.account(deployment(), facts(), [sample()], now=0.0)
    sd = deployment()
    writer.write(sd, capturing, "Ready", conds, None, [])
    written = kube.patched[-1]
    assert written["capture"]["files"] == 3
    assert [c["type"] for c in written["conditions"]] == ["SpecValid", "Ready", "CaptureSpace"]
    sd["status"] = written
    writer.write(sd, capturing, "Ready", conds, None, [])
    assert len(kube.patched) == 1  # nothing changed: no write
    serving = make_plan(spec(backend="pytorch", speculation={"mode": "none"}))  # the spec changed mode
    writer.write(sd, serving, "Ready", conds, None, [])
    assert kube.patched[-1]["capture"] is None
    assert [c["type"] for c in kube.patched[-1]["conditions"]] == ["SpecValid", "Ready"]
