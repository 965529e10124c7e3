"""The operator's phase gauges, read from the watch cache at scrape time."""

from __future__ import annotations

from specdec import metrics
from specdec.kube.cache import Store


def sd(name: str, phase: str | None) -> dict:
    return {
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"},
        **({"status": {"phase": phase}} if phase else {}),
    }


def test_phases_are_counted_from_the_cache_in_every_namespace():
    store = Store(["SpeculativeDeployment", "EngineBuild", "ModelCache"])
    for obj in (
        sd("a", "Ready"),
        sd("b", "Ready"),
        sd("c", None),
        {**sd("d", "Failed"), "metadata": {"name": "d", "namespace": "other", "resourceVersion": "1"}},
    ):
        store.put(obj)
    families = {f.name: f for f in metrics.PhaseCollector(lambda kind: store.list(kind, None)).collect()}
    counts = {s.labels["phase"]: s.value for s in families["specdec_speculative_deployments"].samples}
    assert counts == {"Ready": 2, "Unknown": 1, "Failed": 1}
    assert families["specdec_engine_builds"].samples == []
