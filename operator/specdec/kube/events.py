"""Kubernetes Events about our objects, posted from a thread of their own.

client-go's `tools/record` (an EventBroadcaster with a bounded queue, behind an EventRecorder) does the
same; the Python client has no recorder, and kopf's posting (`settings.posting`) posts every handler's
log line, which the operator turns off: it posts an Event only when something changes.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from specdec import conditions
from specdec.kube.errors import api_error_message
from specdec.metrics import EVENTS_DROPPED

EVENT_QUEUE_SIZE = 1000
MESSAGE_MAX = 1024

log = logging.getLogger(__name__)


class EventRecorder:
    """`create(event)` posts one Event object (the client's POST, with its retries)."""

    def __init__(self, create: Callable[[dict[str, Any]], Any], component: str):
        self._create = create
        self._component = component
        self._events: queue.Queue = queue.Queue(EVENT_QUEUE_SIZE)
        self._poster = threading.Thread(target=self._post_events, daemon=True, name="specdec-events")
        self._poster.start()

    def record(self, obj: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        """Post an Event from the background thread: it informs people, it must not slow a reconcile.
        The queue is bounded: when the API server is unreachable for long, the oldest Events go. Stamped
        now, not when posted: beside a fleet of 1000 the poster ran up to a minute behind (bench/run.py)."""
        item = (obj, reason, message, warning, conditions.now())
        while True:
            try:
                self._events.put_nowait(item)
                return
            except queue.Full:
                try:
                    self._events.get_nowait()
                    EVENTS_DROPPED.inc()
                except queue.Empty:
                    pass

    @property
    def alive(self) -> bool:
        return self._poster.is_alive()

    def _post_events(self) -> None:
        while True:
            item = self._events.get()
            try:
                self.post(*item)
            except Exception:  # an Event is never worth the poster: log it and go on with the next
                log.exception("could not post event %s", item[1])

    def post(self, obj: dict[str, Any], reason: str, message: str, warning: bool, stamp: str) -> None:
        """Post one Event now, from the calling thread (the poster's; `bench/write_cost.py`'s)."""
        meta = obj["metadata"]
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:MESSAGE_MAX],
            "type": "Warning" if warning else "Normal",
            "source": {"component": self._component},
            "reportingComponent": self._component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self._create(event)
        except ApiException as error:  # retries are spent: an event is never worth more
            log.warning("could not post event %s on %s: %s", reason, meta["name"], api_error_message(error))
