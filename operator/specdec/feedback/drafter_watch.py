"""The spec.drafter.learning side of the monitor (specdec.feedback.monitor scrapes, this reads): what the runtime
pods count in the samples' directory (their specdec_drafter_* metrics, specdec.runtime.drafter_capture), published
for status.drafter (specdec.status.drafter) only when it changes, so an idle capture writes nothing."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from specdec.api.drafter import enabled_learning, samples_place
from specdec.feedback.forget import forget_absent
from specdec.plan import cache_claim_name
from specdec.status.drafter import DrafterSample, SamplesPlace, drafter_counts

PREFIX = "specdec_drafter_"
FIGURES = {
    "specdec_drafter_samples": ("samples", "class"),
    "specdec_drafter_bytes": ("bytes", "class"),
    "specdec_drafter_dropped_total": ("dropped", "reason"),
}


@dataclasses.dataclass(frozen=True)
class DrafterFacts:
    """What the watch needs of a learning deployment's spec."""

    generation: int | None
    place: SamplesPlace


@dataclasses.dataclass(frozen=True)
class PublishedDrafter:
    generation: int | None
    counts: dict[str, Any]


def drafter_facts_of(sd: dict[str, Any], spec: Any) -> DrafterFacts | None:
    """None unless the deployment captures samples."""
    learning = enabled_learning(spec.drafter)
    if learning is None:
        return None
    claim, path = samples_place(learning, sd["metadata"]["name"], cache_claim_name(spec))
    return DrafterFacts(sd["metadata"].get("generation"), SamplesPlace(claim, path))


def parse_drafter(text: str) -> DrafterSample | None:
    """A pod's specdec_drafter_* figures; None without them (a front that does not capture)."""
    lines = "\n".join(line for line in text.splitlines() if line.startswith(PREFIX)) + "\n"
    files: int | None = None
    figures: dict[str, dict[str, int]] = {"samples": {}, "bytes": {}, "dropped": {}}
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            if not math.isfinite(sample.value) or sample.value < 0:
                continue
            if sample.name == "specdec_drafter_files":
                files = int(sample.value)
            elif sample.name in FIGURES:
                figure, label = FIGURES[sample.name]
                figures[figure][sample.labels.get(label, "")] = int(sample.value)
    if files is None:
        return None
    return DrafterSample(files, figures["samples"], figures["bytes"], figures["dropped"])


class DrafterWatch:
    def __init__(self, enqueue: Callable[[str, str], None]):
        self.enqueue = enqueue
        self._published: dict[tuple[str, str], PublishedDrafter] = {}
        self._guard = threading.Lock()

    def published(self, namespace: str, name: str, generation: int | None) -> PublishedDrafter | None:
        with self._guard:
            found = self._published.get((namespace, name))
        return found if found and found.generation == generation else None

    def account(self, sd: dict[str, Any], facts: DrafterFacts, samples: list[DrafterSample | None]) -> None:
        seen = [s for s in samples if s is not None]
        if not seen:
            return
        meta = sd["metadata"]
        key = (meta["namespace"], meta["name"])
        counts = drafter_counts(facts.place, seen)
        with self._guard:
            before = self._published.get(key)
            if before is not None and (before.generation, before.counts) == (facts.generation, counts):
                return
            self._published[key] = PublishedDrafter(facts.generation, counts)
        self.enqueue(*key)

    def forget_gone(self, present: set[tuple[str, str]]) -> None:
        with self._guard:
            forget_absent(present, self._published)
