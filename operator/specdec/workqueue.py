"""A work queue of keys to reconcile, with the semantics of client-go's workqueue.

A key added while it waits is not added twice: a burst of events for one object (or a shared
EngineBuild telling its thousand users at once) costs one reconcile per key, not one per event.
A key added while a worker reconciles it runs once more afterwards, never twice at the same time.
`queue.Queue` has no notion of a key already waiting or in progress, and kopf's per-object event
batching collapses only the events of the object watched, not the reconciles they fan out to.
Urgent keys (something to create or apply) go before the rest, as in controller-runtime's priority
queue; within a level, first added, first served.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable, Hashable

log = logging.getLogger(__name__)


class WorkQueue:
    def __init__(self, handle: Callable[[Hashable], None], workers: int,
                 waited: Callable[[float], None] = lambda seconds: None):
        """`waited`: told how long each key waited for a worker (since it was first added)."""
        self._handle = handle
        self._waited = waited
        self._urgent: collections.deque[Hashable] = collections.deque()  # served first
        self._order: collections.deque[Hashable] = collections.deque()
        # In a deque, or to be re-queued when its worker is done: when it was added (monotonic), urgent.
        # A key promoted to urgent stays in _order too; a worker skips entries no longer waiting.
        self._waiting: dict[Hashable, tuple[float, bool]] = {}
        self._processing: set[Hashable] = set()
        self._ready = threading.Condition()
        self._workers = [threading.Thread(target=self._work, daemon=True, name=f"specdec-worker-{i}")
                         for i in range(workers)]
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
                    if key not in self._processing:
                        self._urgent.append(key)
                        self._ready.notify()
                return
            self._waiting[key] = (time.monotonic(), urgent)
            if key in self._processing:  # its worker re-queues it when done
                return
            (self._urgent if urgent else self._order).append(key)
            self._ready.notify()

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
                added, _ = self._waiting.pop(key)
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
