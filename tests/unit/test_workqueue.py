"""The work queue: repeated adds of a key collapse, one key never runs twice at once, delayed adds come once."""

from __future__ import annotations

import threading
import time

from specdec.kube.workqueue import DelayQueue, WorkQueue


class Recorder:
    """A handler that blocks on `gate` for key "hold", and records every call."""

    def __init__(self):
        self.calls: list[str] = []
        self.running: set[str] = set()
        self.overlaps = 0
        self.gate = threading.Event()
        self.holding = threading.Event()
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)

    def __call__(self, key: str) -> None:
        with self.lock:
            self.overlaps += key in self.running
            self.running.add(key)
        if key == "hold":
            self.holding.set()
            self.gate.wait(10)
        with self.lock:
            self.running.discard(key)
            self.calls.append(key)
            self.done.notify_all()

    def wait_for(self, count: int) -> None:
        with self.lock:
            assert self.done.wait_for(lambda: len(self.calls) >= count, 10), self.calls


def test_adds_while_waiting_collapse_into_one_reconcile():
    handler = Recorder()
    queue = WorkQueue(handler, workers=1)
    queue.add("hold")
    assert handler.holding.wait(10)  # the only worker is busy: what follows waits
    for _ in range(5):
        queue.add("a")
        queue.add("b")
    handler.gate.set()
    handler.wait_for(3)
    queue.add("end")
    handler.wait_for(4)
    assert handler.calls == ["hold", "a", "b", "end"]


def test_a_key_added_while_it_runs_runs_once_more_afterwards_never_alongside():
    handler = Recorder()
    queue = WorkQueue(handler, workers=4)
    queue.add("hold")
    assert handler.holding.wait(10)
    for _ in range(5):
        queue.add("hold")  # three idle workers must not pick it up while it runs
    handler.holding.clear()
    handler.gate.set()
    handler.wait_for(2)
    queue.add("end")
    handler.wait_for(3)
    assert sorted(handler.calls) == ["end", "hold", "hold"] and handler.overlaps == 0


def test_a_failing_handler_does_not_stop_the_workers():
    calls: list[str] = []
    finished = threading.Event()

    def handle(key: str) -> None:
        calls.append(key)
        if key == "boom":
            raise RuntimeError("boom")
        finished.set()

    queue = WorkQueue(handle, workers=1)
    queue.add("boom")
    queue.add("next")
    assert finished.wait(10) and calls == ["boom", "next"] and queue.alive


def test_urgent_keys_go_first_and_a_promoted_key_runs_once():
    handler = Recorder()
    queue = WorkQueue(handler, workers=1)
    queue.add("hold")
    assert handler.holding.wait(10)
    queue.add("a")
    queue.add("b")
    queue.add("new", urgent=True)
    queue.add("b", urgent=True)  # promoted: runs among the urgent ones, and only once
    queue.add("a")  # already waiting: nothing changes
    handler.gate.set()
    handler.wait_for(4)
    queue.add("end")
    handler.wait_for(5)
    assert handler.calls == ["hold", "new", "b", "a", "end"]


def test_a_key_made_urgent_while_it_runs_runs_again_first():
    handler = Recorder()
    queue = WorkQueue(handler, workers=1)
    queue.add("hold")
    assert handler.holding.wait(10)
    queue.add("a")
    queue.add("hold", urgent=True)  # while it runs: once more afterwards, before "a"
    handler.holding.clear()
    handler.gate.set()
    handler.wait_for(3)
    assert handler.calls == ["hold", "hold", "a"] and handler.overlaps == 0


def test_add_after_adds_once_when_due_the_earliest_delay_winning():
    handler = Recorder()
    delays = DelayQueue()
    queue = WorkQueue(handler, workers=1, delays=delays)
    other = WorkQueue(handler, workers=1, delays=delays)  # one delay thread for both; keys apart per queue
    started = time.monotonic()
    queue.add_after(30, "a")
    queue.add_after(0.2, "a")  # sooner: replaces the later one
    queue.add_after(5, "a")  # later than the one pending: ignored
    other.add_after(0.2, "a")
    handler.wait_for(2)
    assert handler.calls == ["a", "a"] and 0.15 <= time.monotonic() - started < 5
    queue.add("end")
    handler.wait_for(3)
    assert handler.calls == ["a", "a", "end"]


def test_add_after_without_a_shared_delay_thread_starts_its_own():
    handler = Recorder()
    queue = WorkQueue(handler, workers=1)
    queue.add_after(0.05, "later", urgent=True)
    handler.wait_for(1)
    assert handler.calls == ["later"]


def test_urgent_waiting_counts_urgent_keys_until_a_worker_takes_them():
    handler = Recorder()
    queue = WorkQueue(handler, workers=1)
    queue.add("hold")
    assert handler.holding.wait(10)
    assert not queue.urgent_waiting()
    queue.add("a")
    assert not queue.urgent_waiting()  # waits, not urgent
    queue.add("a", urgent=True)  # promoted
    queue.add("b", urgent=True)
    queue.add("hold", urgent=True)  # runs now: waits for its own reconcile to end
    assert queue.urgent_waiting()
    handler.gate.set()
    handler.wait_for(4)
    assert handler.calls == ["hold", "a", "b", "hold"] and not queue.urgent_waiting()
