"""specdec.kube.gc_pacing: full collections on a timer, none triggered by a growing heap."""

from __future__ import annotations

import gc
import threading

from specdec.kube import gc_pacing


class FullCollections:
    """Counts the garbage collector's full (generation 2) collections while installed."""

    def __init__(self):
        self.count = 0
        self.one = threading.Event()

    def __call__(self, phase, info):
        if phase == "stop" and info["generation"] == 2:
            self.count += 1
            self.one.set()

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


def grow_a_cache() -> list:
    return [{"metadata": {"name": str(i)}, "spec": [i]} for i in range(300_000)]  # like the watch cache


def test_a_growing_heap_triggers_no_full_collection_only_the_timer_does():
    before = gc.get_threshold()
    try:
        gc.collect()
        with FullCollections() as full:
            grow_a_cache()
        assert full.count >= 1  # CPython's own pacing: without gc_pacing the test fails
        stop = gc_pacing.install(interval=3600)
        assert gc.get_threshold() == (*before[:2], gc_pacing.NEVER)
        with FullCollections() as full:
            grow_a_cache()
        stop.set()
        assert full.count == 0
        stop = gc_pacing.install(interval=0.05)
        with FullCollections() as full:
            assert full.one.wait(5)
        stop.set()
    finally:
        gc.set_threshold(*before)
