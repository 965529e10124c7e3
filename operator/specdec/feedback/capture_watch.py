"""The saveState side of the monitor (specdec.feedback.monitor scrapes, this reads): what the runtime pods count in the
capture directory (their specdec_capture_* gauges, specdec.runtime.capture) and the capacity of the claim it is
on, published as status.capture and the condition CaptureSpace (specdec.status.capture) when either changes, so an
idle capture writes nothing; a Warning Event when the capture nears the claim's capacity. Nothing is deleted."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes.client.rest import ApiException

from specdec import conditions, modes
from specdec.feedback.forget import forget_absent
from specdec.feedback.metric_text import metric_values
from specdec.modes import save_state
from specdec.plan import cache_claim_name
from specdec.schema.k8s import QUANTITY, parse_quantity
from specdec.schema.openapi import matches
from specdec.status.capture import CAPTURE_SPACE, CapturePlace, CaptureSample, capture_condition, capture_status

log = logging.getLogger("specdec.monitor")

CAPACITY_SECONDS = 300.0  # a claim's capacity is read again after this long: it changes only when it is resized
GAUGES = {
    "files": "specdec_capture_files",
    "bytes": "specdec_capture_bytes",
    "requests": "specdec_capture_requests",
    "tokens": "specdec_capture_tokens",
    "last_write": "specdec_capture_last_write_timestamp_seconds",
}
PREFIX = "specdec_capture_"


@dataclasses.dataclass(frozen=True)
class CaptureFacts:
    """What the watch needs of a saveState deployment's spec."""

    generation: int | None
    place: CapturePlace
    port: int


@dataclasses.dataclass(frozen=True)
class PublishedCapture:
    generation: int | None
    status: dict[str, Any]
    condition: conditions.Cond


def capture_facts_of(sd: dict[str, Any], spec: Any) -> CaptureFacts | None:
    """None unless the deployment captures hidden states."""
    chosen = modes.mode_of(spec.speculation)
    if chosen.mode is not save_state.MODE:
        return None
    claim, path = save_state.capture_place(chosen.block, sd["metadata"]["name"], cache_claim_name(spec))
    return CaptureFacts(sd["metadata"].get("generation"), CapturePlace(claim, path), spec.runtime.port)


def parse_capture(text: str) -> CaptureSample | None:
    """A pod's capture gauges; None without them (not a saveState runtime front)."""
    values = metric_values(text, (PREFIX,))
    if GAUGES["files"] not in values:
        return None
    counts = {key: int(values.get(name, 0)) for key, name in GAUGES.items() if key != "last_write"}
    return CaptureSample(**counts, last_write=values.get(GAUGES["last_write"]) or None)


def claim_capacity(claim: dict[str, Any] | None) -> int | None:
    """A bound claim's status.capacity.storage in bytes."""
    storage = (((claim or {}).get("status") or {}).get("capacity") or {}).get("storage")
    if not isinstance(storage, str) or not matches(QUANTITY, storage):
        return None
    value = parse_quantity(storage)
    return int(value) if value.is_finite() else None


class CaptureWatch:
    """`read_claim(namespace, name)`: the claim as the API server has it (the operator caches its own claims only)."""

    def __init__(
        self,
        read_claim: Callable[[str, str], dict[str, Any] | None],
        post_event: Callable[..., None],
        enqueue: Callable[[str, str], None],
    ):
        self.read_claim = read_claim
        self.post_event = post_event
        self.enqueue = enqueue
        self._capacity: dict[tuple[str, str], tuple[int | None, float]] = {}  # (namespace, claim) -> (bytes, read at)
        self._published: dict[tuple[str, str], PublishedCapture] = {}
        self._guard = threading.Lock()

    def published(self, namespace: str, name: str, generation: int | None) -> PublishedCapture | None:
        with self._guard:
            found = self._published.get((namespace, name))
        return found if found and found.generation == generation else None

    def account(self, sd: dict[str, Any], facts: CaptureFacts, samples: list[CaptureSample | None], now: float) -> None:
        seen = [s for s in samples if s is not None]
        if not seen:
            return
        # Every pod counts the same directory: the one that scanned last saw the most.
        sample = max(seen, key=lambda s: (s.last_write or 0.0, s.files, s.bytes))
        meta = sd["metadata"]
        key = (meta["namespace"], meta["name"])
        capacity = self._capacity_of(meta["namespace"], facts.place.claim, now)
        status = capture_status(facts.place, sample, capacity)
        condition = capture_condition(facts.place, sample, capacity)
        with self._guard:
            before = self._published.get(key)
            if before is not None and (before.generation, before.status, before.condition) == (
                facts.generation,
                status,
                condition,
            ):
                return
            self._published[key] = PublishedCapture(facts.generation, status, condition)
        if before is not None:
            was_full = before.condition.status is False
        else:  # a new leader: what status says
            said = {c.get("type"): c for c in (sd.get("status") or {}).get("conditions") or []}
            was_full = (said.get(CAPTURE_SPACE) or {}).get("status") == "False"
        if condition.status is False and not was_full:
            self.post_event(sd, condition.reason, condition.message, warning=True)
        self.enqueue(*key)

    def _capacity_of(self, namespace: str, claim: str, now: float) -> int | None:
        known = self._capacity.get((namespace, claim))
        if known is not None and now - known[1] < CAPACITY_SECONDS:
            return known[0]
        try:
            capacity = claim_capacity(self.read_claim(namespace, claim))
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            log.debug("reading claim %s/%s: %s", namespace, claim, error)
            capacity = known[0] if known else None
        self._capacity[(namespace, claim)] = (capacity, now)
        return capacity

    def forget_gone(self, present: set[tuple[str, str]]) -> None:
        with self._guard:
            forget_absent(present, self._published)
        namespaces = {namespace for namespace, _ in present}
        self._capacity = {k: v for k, v in self._capacity.items() if k[0] in namespaces}
