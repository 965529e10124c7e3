"""Run the real operator (`specdec operator`) as a child process, watching one namespace.

A process rather than kopf's in-thread KopfRunner, so a test can kill it with SIGKILL mid-build
and start it again, as a crashed pod would be.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from specdec_dev.cluster import wait_healthy


class OperatorProcess:
    """`specdec <args>`; `port` is where its --liveness endpoint answers once it is up.

    With `isolated`, no SPECDEC_* setting of the test environment leaks in: only `env` counts."""

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        port: int,
        args: list[str],
        env: dict[str, str] | None = None,
        isolated: bool = False,
    ):
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.port = port
        self.args = args
        self.env = env or {}
        self.isolated = isolated
        self.process: subprocess.Popen | None = None

    @classmethod
    def watching(
        cls, namespace: str, kubeconfig: Path, log_path: Path, port: int, env: dict[str, str] | None = None
    ) -> OperatorProcess:
        return cls(
            kubeconfig,
            log_path,
            port,
            ["operator", "--namespace", namespace, "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env,
        )

    def start(self, timeout: float = 60.0) -> None:
        base = {
            k: v
            for k, v in os.environ.items()
            if not (self.isolated and (k.startswith("SPECDEC_") or k == "KUBECONFIG"))
        }
        env = {**base, "KUBECONFIG": str(self.kubeconfig), **self.env}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specdec.cli", *self.args], env=env, stdout=log, stderr=subprocess.STDOUT
        )
        problem = wait_healthy(self.process, self.port, timeout)
        if problem:
            raise AssertionError(f"{problem}:\n{self.logs()}")

    def kill(self) -> None:
        """SIGKILL: no cleanup handlers run, as when a node dies."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""
