"""status.drafter's counts: what the samples' directory of a deployment with spec.drafter.learning holds, as its
runtime pods count it (specdec.runtime.drafter_capture's specdec_drafter_* metrics). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

COUNT_FIELDS = ("claimName", "path", "samples", "bytes", "classes", "dropped")  # drafter_counts' keys
NO_CLASS = "(none)"  # status.drafter.classes' key of samples without a traffic class: no class can be spelled so


@dataclass(frozen=True)
class DrafterSample:
    """A runtime pod's specdec_drafter_* figures: the directory's gauges (every pod's files) and its own drops."""

    files: int
    samples: dict[str, int] = field(default_factory=dict)  # by traffic class ('' for none)
    bytes: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)  # by reason, this pod's since it started


@dataclass(frozen=True)
class SamplesPlace:
    claim: str
    path: str


def drafter_counts(place: SamplesPlace, pods: list[DrafterSample]) -> dict[str, Any]:
    """status.drafter's counts from the pods that answered (at least one): every pod counts the same directory,
    so the one that saw the most files is the latest; drops are each pod's own, summed."""
    latest = max(pods, key=lambda s: (s.files, sum(s.samples.values()), sum(s.bytes.values())))
    dropped: dict[str, int] = {}
    for pod in pods:
        for reason, n in pod.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    classes = {
        key or NO_CLASS: {"samples": latest.samples.get(key, 0), "bytes": latest.bytes.get(key, 0)}
        for key in sorted({*latest.samples, *latest.bytes})
    }
    counts = {
        "claimName": place.claim,
        "path": place.path,
        "samples": sum(latest.samples.values()),
        "bytes": sum(latest.bytes.values()),
        "classes": classes or None,
        "dropped": {k: v for k, v in sorted(dropped.items()) if v} or None,
    }
    return {k: v for k, v in counts.items() if v is not None}  # as status reads back: no nulls


def class_samples(counts: dict[str, Any] | None, traffic_class: str | None) -> int:
    """Samples of one class in status.drafter's counts (all of them when traffic_class is None)."""
    if not counts:
        return 0
    if traffic_class is None:
        return int(counts.get("samples") or 0)
    return int(((counts.get("classes") or {}).get(traffic_class) or {}).get("samples") or 0)
