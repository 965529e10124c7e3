"""A work queue of keys to reconcile, with the semantics of client-go's workqueue.

A key added while it waits is not added twice: a burst of events for one object (or a shared
EngineBuild telling its thousand users at once) costs one reconcile per key, not one per event.
A key added while a worker reconciles it runs once more afterwards, never twice at the same time.
`queue.Queue` has no notion of a key already waiting or in progress, and kopf's per-object event
batching collapses only the events of the object watched, not the reconciles they fan out to.
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
        self._order: collections.deque[Hashable] = collections.deque()
        self._waiting: dict[Hashable, float] = {}  # in _order, or to be re-queued when its worker is done;
        # the value: when it was added (monotonic)
        self._processing: set[Hashable] = set()
        self._ready = threading.Condition()
        self._workers = [threading.Thread(target=self._work, daemon=True, name=f"specdec-worker-{i}")
                         for i in range(workers)]
        for worker in self._workers:
            worker.start()

    @property
    def alive(self) -> bool:
        return all(w.is_alive() for w in self._workers)

    def add(self, key: Hashable) -> None:
        with self._ready:
            if key in self._waiting:
                return
            self._waiting[key] = time.monotonic()
            if key in self._processing:  # its worker re-queues it when done
                return
            self._order.append(key)
            self._ready.notify()

    def _work(self) -> None:
        while True:
            with self._ready:
                while not self._order:
                    self._ready.wait()
                key = self._order.popleft()
                added = self._waiting.pop(key)
                self._processing.add(key)
            self._waited(time.monotonic() - added)
            try:
                self._handle(key)
            except Exception:  # the handler reports its own failures; this only keeps the worker alive
                log.exception("reconciling %s failed", key)
            finally:
                with self._ready:
                    self._processing.discard(key)
                    if key in self._waiting:
                        self._order.append(key)
                        self._ready.notify()
