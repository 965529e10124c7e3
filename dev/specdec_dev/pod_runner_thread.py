"""The local cluster's pod runner (specdec_dev.podrunner) on an event loop of its own, in a thread of the calling
process: for callers that drive the pods themselves (the cluster tests, bench/breakeven_cluster.py), whose
coroutines run on the same loop as the pods' servers, as one process runs them (no second loop contends with
them for the GIL)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

from specdec_dev.podrunner import PodRunner

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Threaded:
    """A PodRunner serving on `loop`, in a thread of this process."""

    runner: PodRunner
    loop: asyncio.AbstractEventLoop

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the runner's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@contextlib.contextmanager
def in_thread(kubeconfig: Path, cluster_dir: Path, namespace: str | None = None) -> Iterator[Threaded]:
    """Serve the runtime pods (of `namespace`) from a thread until the block ends; yields a Threaded."""
    runner = PodRunner(kubeconfig, cluster_dir, namespace)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(
        target=loop.run_until_complete, args=(runner.run(),), daemon=True, name="specdec-pod-runner"
    )
    thread.start()
    try:
        yield Threaded(runner, loop)
    finally:
        loop.call_soon_threadsafe(runner.stop)
        thread.join(30)
        loop.close()
