"""One lock per object: the work queue never runs one key twice at once, but a resync pass runs beside it."""

from __future__ import annotations

import collections
import threading


class Locks:
    def __init__(self) -> None:
        self._locks: dict[tuple, threading.Lock] = collections.defaultdict(threading.Lock)
        self._guard = threading.Lock()

    def __call__(self, *key: str) -> threading.Lock:
        with self._guard:
            return self._locks[key]
