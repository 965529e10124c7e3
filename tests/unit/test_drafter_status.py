"""status.drafter's counts: read from the metrics the runtime front renders (specdec.runtime.drafter_capture),
published by the monitor once per change, and written by the status writer only for a learning deployment."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from specdec.conditions import Cond
from specdec.feedback.drafter_watch import DrafterFacts, DrafterWatch, parse_drafter
from specdec.feedback.monitor import SpeculationMonitor
from specdec.kube.cache import Store
from specdec.reconcile.bookkeeping.pacing import WritePacing
from specdec.reconcile.deployment_status import DeploymentStatusWriter
from specdec.runtime.drafter_capture import DrafterMetrics
from specdec.status.drafter import DrafterSample, SamplesPlace, drafter_counts
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import eagle3, spec
from tests.unit.test_capture_status import StatusPatches
from tests.unit.test_monitor import Endpoint, _free_port, metrics_text, pod

PLACE = SamplesPlace("cache", "drafter-samples/llama")


def front_metrics(files: int, by_class: dict[str, tuple[int, int]], dropped: dict[str, int]) -> str:
    """What a capturing front renders, from its own metrics' code."""
    registry = CollectorRegistry()
    metrics = DrafterMetrics(registry)
    metrics.files.set(files)
    for key, (samples, size) in by_class.items():
        metrics.samples.labels(key).set(samples)
        metrics.bytes.labels(key).set(size)
    for reason, n in dropped.items():
        metrics.dropped.labels(reason).inc(n)
    return generate_latest(registry).decode()


def test_reads_the_figures_the_runtime_front_renders():
    text = front_metrics(2, {"": (3, 300), "A": (5, 900)}, {"budget": 4})
    assert parse_drafter(text) == DrafterSample(
        2,
        {"": 3, "A": 5},
        {"": 300, "A": 900},
        {"opted_out": 0, "budget": 4, "backlog": 0, "classes": 0, "bad_class": 0, "unsupported": 0, "error": 0},
    )
    assert parse_drafter(metrics_text(1, 1, 1)) is None  # a front that does not capture


def test_pods_count_one_directory_and_their_drops_add_up():
    older = DrafterSample(1, {"A": 2}, {"A": 200}, {"budget": 1, "error": 0})
    latest = DrafterSample(2, {"A": 4, "": 1}, {"A": 400, "": 90}, {"budget": 2, "opted_out": 3})
    assert drafter_counts(PLACE, [older, latest]) == {
        "claimName": "cache",
        "path": "drafter-samples/llama",
        "samples": 5,
        "bytes": 490,
        "classes": {"(none)": {"samples": 1, "bytes": 90}, "A": {"samples": 4, "bytes": 400}},
        "dropped": {"budget": 3, "opted_out": 3},
    }


def deployment(status: dict | None = None) -> dict:
    return {"metadata": {"namespace": "ns", "name": "llama", "generation": 1}, "status": status or {}}


def test_published_once_per_change_and_for_its_generation():
    enqueued = []
    watch = DrafterWatch(lambda ns, name: enqueued.append((ns, name)))
    facts = DrafterFacts(1, PLACE)
    sample = DrafterSample(1, {"A": 2}, {"A": 200})
    watch.account(deployment(), facts, [None])
    assert enqueued == [] and watch.published("ns", "llama", 1) is None  # no pod answered: nothing known
    watch.account(deployment(), facts, [sample, None])
    watch.account(deployment(), facts, [sample])
    assert enqueued == [("ns", "llama")] and watch.published("ns", "llama", 1).counts["samples"] == 2
    assert watch.published("ns", "llama", 2) is None
    watch.account(deployment(), facts, [DrafterSample(1, {"A": 3}, {"A": 300})])
    assert len(enqueued) == 2


def learning_spec(port: int = 8000) -> dict:
    return spec(
        backend="pytorch",
        speculation=eagle3(),
        drafter={"learning": {"enabled": True}},
        runtime={"port": port},
        cache={"claimName": "cache"},
    )


def test_the_monitor_reads_samples_beside_the_speculation_counters():
    hosts = ["127.0.0.1"]
    port = _free_port(hosts)
    endpoint = Endpoint(hosts[0], port)
    try:
        store = Store(("SpeculativeDeployment", "Pod"))
        enqueued = []
        monitor = SpeculationMonitor(store, lambda *a, **k: None, lambda ns, n: enqueued.append((ns, n)), interval=10)
        store.put(
            {
                "kind": "SpeculativeDeployment",
                "metadata": {"name": "llama", "namespace": "ns", "uid": "uid-llama", "generation": 1},
                "spec": learning_spec(port),
            }
        )
        store.put(pod("llama-a", "llama", hosts[0]))
        endpoint.text = metrics_text(10, 5, 4) + front_metrics(1, {"A": (7, 700)}, {})
        monitor.run_once(now=0.0)
        assert monitor.drafter.published("ns", "llama", 1).counts["classes"] == {"A": {"samples": 7, "bytes": 700}}
        endpoint.text = metrics_text(30, 20, 10) + front_metrics(1, {"A": (8, 800)}, {})
        monitor.run_once(now=15.0)
        assert monitor.drafter.published("ns", "llama", 1).counts["samples"] == 8
        assert monitor.published("ns", "llama", 1) is not None  # the speculation window was measured as before
        store.remove("SpeculativeDeployment", "ns", "llama")
        monitor.run_once(now=30.0)
        assert monitor.drafter.published("ns", "llama", 1) is None
    finally:
        endpoint.close()


def test_the_written_status_has_the_counts_of_a_learning_deployment_only():
    watch, kube = DrafterWatch(lambda *a: None), StatusPatches()
    writer = DeploymentStatusWriter(kube, WritePacing(lambda *a, **k: None), lambda *a: None, drafted=watch.published)
    conds = [Cond("SpecValid", True, "Valid"), Cond("Ready", True, "Ready")]
    learning = make_plan(learning_spec())
    watch.account(deployment(), DrafterFacts(1, PLACE), [DrafterSample(1, {"": 4}, {"": 400})])
    sd = deployment()
    writer.write(sd, learning, "Ready", conds, None, [])
    assert kube.patched[-1]["drafter"]["samples"] == 4
    sd["status"] = kube.patched[-1]
    writer.write(sd, learning, "Ready", conds, None, [])
    assert len(kube.patched) == 1  # nothing changed: no write
    restarted = DeploymentStatusWriter(kube, WritePacing(lambda *a, **k: None), lambda *a: None)
    restarted.write(sd, learning, "Ready", conds, None, [])
    assert len(kube.patched) == 1  # a new leader keeps what status says until it has scraped
    off = make_plan(spec(backend="pytorch", speculation=eagle3()))
    writer.write(sd, off, "Ready", conds, None, [])
    assert kube.patched[-1]["drafter"] is None
