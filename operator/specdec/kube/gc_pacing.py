"""The garbage collector's full collections, paced by time instead of by allocations.

CPython runs a full (generation 2) collection whenever the objects that survived the young generations
grew by a quarter since the last one. The watch cache holds a fleet's objects (millions of Python objects
to traverse), so during a rollout of 1000 deployments the operator ran 37 full collections in 8 minutes,
each 0.13–0.49 s with the GIL held: 9.5 s of its CPU, and 36 of the 39 stalls over 0.1 s of kopf's event
loop, which delayed new deployments' watch events by up to 0.5 s (`bench/run.py`, with the collector's
callbacks and an event-loop probe logged). What the cache holds is parsed JSON, acyclic and freed by
reference counting; young cycles (exceptions, tasks) are still collected by the generation 0 and 1
collections as before. Full collections therefore run every FULL_COLLECTION_SECONDS from a thread of their
own. `gc.set_threshold` counts collections, not seconds: it has no setting for this.
"""

from __future__ import annotations

import gc
import threading

FULL_COLLECTION_SECONDS = 60.0
NEVER = 1_000_000_000  # generation-1 collections before an automatic full one: in practice none


def install(interval: float = FULL_COLLECTION_SECONDS) -> threading.Event:
    """Full collections every `interval` seconds from now on, none in between; set the event returned to stop."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)
    stop = threading.Event()
    threading.Thread(target=_collect_every, args=(interval, stop), daemon=True, name="specdec-gc").start()
    return stop


def _collect_every(interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        gc.collect()
