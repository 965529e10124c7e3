"""Write pacing: a status is written only if it changed, and a change of progress alone waits a while.

A deployment's status write that only moves a rollout's progress (pod counts, condition messages; no phase,
condition status or reason) waits PROGRESS_WRITE_SECONDS after its last write, and writes what is current
then: a pod event each was a status write each (3.6 per deployment in a fleet of 1000, bench/run.py). So does
an EngineBuild's or ModelCache's that none of its users reads (users_view: the step its Job runs, an attempt;
6 writes per shared object at N=1000, its Job's steps a second or less apart). A new state (Ready, done, a
failure, a new generation) is written at once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

PROGRESS_WRITE_SECONDS = 5.0


def status_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    return any((current or {}).get(k) != v for k, v in desired.items())


class WritePacing:
    """When each object's status was last written (monotonic), by key (kind, namespace, name)."""

    def __init__(self, enqueue_after: Callable[..., None]):
        """`enqueue_after(seconds, kind, namespace, name, urgent=False)`: reconcile a key later."""
        self._enqueue_after = enqueue_after
        self.last_written: dict[tuple[str, str, str], float] = {}

    def later(self, key: tuple[str, str, str], progress_only: bool) -> bool:
        """Whether a write that only moves progress waits (the key requeued) until PROGRESS_WRITE_SECONDS
        after the object's last one."""
        last = self.last_written.get(key)
        wait = 0.0 if last is None else last + PROGRESS_WRITE_SECONDS - time.monotonic()
        if wait > 0 and progress_only:
            self._enqueue_after(wait, *key)
            return True
        return False

    def written(self, key: tuple[str, str, str]) -> None:
        self.last_written[key] = time.monotonic()

    def forget(self, key: tuple[str, str, str]) -> None:
        self.last_written.pop(key, None)
