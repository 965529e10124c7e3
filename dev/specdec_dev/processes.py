"""The local cluster's background processes (operator, pod runner, kubelet, containerd, Prometheus): started in
a session of their own with a PID file and a log, found again by the PID file, stopped politely then firmly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STOP_GRACE_SECONDS = 20


def running_pid(pid_file: Path) -> int | None:
    """The PID in `pid_file` if that process is running."""
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def start_process(
    argv: list[str], pid_file: Path, log_path: Path, env: dict[str, str], cwd: Path | None = None
) -> subprocess.Popen:
    """A background process in its own session (a terminal's Ctrl-C does not reach it), its output appended
    to `log_path`, its PID in `pid_file`."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)
    pid_file.write_text(str(process.pid))
    return process


def stop_process(pid_file: Path, what: str) -> None:
    """SIGTERM, then SIGKILL after STOP_GRACE_SECONDS."""
    pid = running_pid(pid_file)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    while time.monotonic() < deadline and running_pid(pid_file):
        time.sleep(0.2)
    if running_pid(pid_file):
        os.kill(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    print(f"[{what}] stopped (pid {pid})", file=sys.stderr, flush=True)
