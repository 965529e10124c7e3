"""Delayed reconciles: retry with back-off, or look again later at something no watch reports.

controller-runtime's rate-limited work queue does this in Go; kopf has per-object timers that fire
for every object forever (idle work at any scale) and per-handler retries that it records in
annotations (writes), but no one-shot "reconcile this key in N seconds". So: one thread, one heap,
at most one pending entry per key (the earliest wins). The calls run on that thread, so they must be
quick: the reconciler's only add a key to its work queue (workqueue.py).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import threading
import time
from typing import Callable, Hashable

log = logging.getLogger(__name__)

BACKOFF_FIRST = 2.0
BACKOFF_MAX = 300.0


def backoff(failures: int) -> float:
    """Seconds before retrying after `failures` consecutive failures (>= 1): doubling, jittered."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1)) * random.uniform(0.8, 1.2)


class DelayQueue:
    def __init__(self):
        self._heap: list[tuple[float, int, Hashable]] = []
        self._due: dict[Hashable, tuple[float, Callable[[], None]]] = {}
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True, name="specdec-requeue")
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def after(self, seconds: float, key: Hashable, call: Callable[[], None]) -> None:
        """Run `call` in `seconds`, unless `key` is already due sooner."""
        due = time.monotonic() + seconds
        with self._wake:
            current = self._due.get(key)
            if current is not None and current[0] <= due:
                return
            self._due[key] = (due, call)
            heapq.heappush(self._heap, (due, next(self._order), key))
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._wake.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                due, _, key = heapq.heappop(self._heap)
                entry = self._due.get(key)
                if entry is None or entry[0] != due:  # superseded by an earlier entry for the key
                    continue
                del self._due[key]
            self._call(key, entry[1])

    @staticmethod
    def _call(key: Hashable, call: Callable[[], None]) -> None:
        try:
            call()
        except Exception:  # the callers report their own failures; this only keeps the thread alive
            log.exception("delayed reconcile of %s failed", key)
