"""Runs the server process (tritonserver or trtllm-serve) and reports what happens to it.

SIGTERM to the runtime is forwarded to the server's process group for a graceful stop (then SIGKILL after
a grace period); a server that exits on its own takes the runtime down with its exit status, so the
kubelet restarts the pod and the log says why.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time

log = logging.getLogger("specdec.runtime")


def exit_status(returncode: int) -> int:
    """A shell-style exit status: 128+N for a child killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


class Supervisor:
    def __init__(self, argv: list[str], env: dict[str, str] | None = None, *, grace_seconds: float = 25.0):
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.grace_seconds = grace_seconds
        self.process: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.stopping = False
        self._exited = asyncio.Event()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def exited(self) -> bool:
        return self._exited.is_set()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode if self.process else None

    async def start(self) -> None:
        self.started_at = time.monotonic()
        try:
            # Its own session: a signal meant for the runtime does not reach the server twice, and the
            # whole group (mpirun and its ranks) can be signalled at once.
            self.process = await asyncio.create_subprocess_exec(*self.argv, env=self.env, start_new_session=True)
        except OSError as error:
            raise RuntimeError(f"cannot start {self.argv[0]}: {error.strerror or error}") from None
        log.info("started %s (pid %d)", self.argv[0], self.process.pid)
        asyncio.get_running_loop().create_task(self._wait())

    async def _wait(self) -> None:
        assert self.process is not None
        code = await self.process.wait()
        elapsed = time.monotonic() - self.started_at
        if self.stopping:
            log.info("%s stopped (exit status %d) after %.1fs", self.argv[0], exit_status(code), elapsed)
        else:
            log.error("%s exited on its own with status %d after %.1fs", self.argv[0], exit_status(code), elapsed)
        self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.process is not None and self.process.returncode is not None
        return self.process.returncode

    def _signal_group(self, sig: int) -> None:
        if self.process is None or self.process.returncode is not None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    async def stop(self) -> int:
        """Forward SIGTERM, wait up to the grace period, then SIGKILL; returns the server's return code."""
        self.stopping = True
        if self.process is None:
            return 0
        if self.process.returncode is None:
            log.info(
                "forwarding SIGTERM to %s (pid %d); grace period %.0fs",
                self.argv[0],
                self.process.pid,
                self.grace_seconds,
            )
            self._signal_group(signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(self._exited.wait()), self.grace_seconds)
            except TimeoutError:
                log.warning("%s did not stop within %.0fs; sending SIGKILL", self.argv[0], self.grace_seconds)
                self._signal_group(signal.SIGKILL)
        return await self.wait()
