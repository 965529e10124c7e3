"""A work queue of keys to reconcile, with the semantics of client-go's workqueue, and its delaying queue.

A key added while it waits is not added twice: a burst of events for one object (or a shared
EngineBuild telling its thousand users at once) costs one reconcile per key, not one per event.
A key added while a worker reconciles it runs once more afterwards, never twice at the same time.
`queue.Queue` has no notion of a key already waiting or in progress, and kopf's per-object event
batching collapses only the events of the object watched, not the reconciles they fan out to.
Urgent keys (something to create or apply) go before the rest, as in controller-runtime's priority
queue; within a level, first added, first served.

Delayed adds (client-go's `AddAfter`, with the rate limiter's exponential `backoff`): retry after a
failure, or look again later at something no watch reports. kopf has per-object timers that fire for
every object forever (idle work at any scale) and per-handler retries that it records in annotations
(writes), but no one-shot "reconcile this key in N seconds". So one DelayQueue thread, one heap, at most
one pending entry per key (the earliest wins), shared by the work queues; its calls run on that thread,
so they must be quick: adding a key to a work queue is.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import logging
import random
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

BACKOFF_FIRST = 2.0
BACKOFF_MAX = 300.0


def backoff(failures: int) -> float:
    """Seconds before retrying after `failures` consecutive failures (>= 1): doubling, jittered."""
    return min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1)) * random.uniform(0.8, 1.2)


class DelayQueue:
    """Calls run in `seconds`, at most one pending per key: the timer behind `WorkQueue.add_after`."""

    def __init__(self) -> None:
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


class WorkQueue:
    def __init__(
        self,
        handle: Callable[[Any], object],  # called with this queue's keys
        workers: int,
        waited: Callable[[float], None] = lambda seconds: None,
        delays: DelayQueue | None = None,
    ):
        """`waited`: told how long each key waited for a worker (since it was first added). `delays`: the
        thread of `add_after`, shared by queues; by default one of this queue's own, started at its first use."""
        self._handle = handle
        self._waited = waited
        self._delays = delays
        self._urgent: collections.deque[Hashable] = collections.deque()  # served first
        self._order: collections.deque[Hashable] = collections.deque()
        # In a deque, or to be re-queued when its worker is done: when it was added (monotonic), urgent.
        # A key promoted to urgent stays in _order too; a worker skips entries no longer waiting.
        self._waiting: dict[Hashable, tuple[float, bool]] = {}
        self._urgent_waiting = 0  # keys in _waiting marked urgent
        self._processing: set[Hashable] = set()
        self._ready = threading.Condition()
        self._workers = [
            threading.Thread(target=self._work, daemon=True, name=f"specdec-worker-{i}") for i in range(workers)
        ]
        for worker in self._workers:
            worker.start()

    @property
    def alive(self) -> bool:
        return all(w.is_alive() for w in self._workers)

    def add(self, key: Hashable, urgent: bool = False) -> None:
        """`urgent`: there is something to create or apply for this key, not only status to report; it
        goes before the others (a new deployment's first reconcile starts its downloads and builds, and
        must not wait behind a thousand status refreshes)."""
        with self._ready:
            waiting = self._waiting.get(key)
            if waiting is not None:
                if urgent and not waiting[1]:
                    self._waiting[key] = (waiting[0], True)
                    self._urgent_waiting += 1
                    if key not in self._processing:
                        self._urgent.append(key)
                        self._ready.notify()
                return
            self._waiting[key] = (time.monotonic(), urgent)
            self._urgent_waiting += urgent
            if key in self._processing:  # its worker re-queues it when done
                return
            (self._urgent if urgent else self._order).append(key)
            self._ready.notify()

    def urgent_waiting(self) -> bool:
        """Whether urgent keys wait for a worker (or for their running reconcile to end)."""
        return self._urgent_waiting > 0

    def add_after(self, seconds: float, key: Hashable, urgent: bool = False) -> None:
        """`add(key, urgent)` in `seconds`, unless the key is already due to be added sooner."""
        with self._ready:
            if self._delays is None:
                self._delays = DelayQueue()
        self._delays.after(seconds, (self, key), lambda: self.add(key, urgent))

    def _next(self) -> Hashable:
        """The next key to work on; the caller holds the lock."""
        while True:
            while not self._urgent and not self._order:
                self._ready.wait()
            key = (self._urgent or self._order).popleft()
            if key in self._waiting and key not in self._processing:  # else an entry left by a promotion
                return key

    def _work(self) -> None:
        while True:
            with self._ready:
                key = self._next()
                added, urgent = self._waiting.pop(key)
                self._urgent_waiting -= urgent
                self._processing.add(key)
            self._waited(time.monotonic() - added)
            try:
                self._handle(key)
            except Exception:  # the handler reports its own failures; this only keeps the worker alive
                log.exception("reconciling %s failed", key)
            finally:
                with self._ready:
                    self._processing.discard(key)
                    waiting = self._waiting.get(key)
                    if waiting is not None:
                        (self._urgent if waiting[1] else self._order).append(key)
                        self._ready.notify()
