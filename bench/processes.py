"""CPU seconds and memory of the operator, the local cluster's processes and the bench itself (/proc)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat, after the command name)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def process_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "peak_rss_mib": int(fields["VmHWM"].split()[0]) / 1024,
        "cpu_seconds": cpu_seconds(pid),
    }


CLUSTER_PROCESSES = ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok")  # /proc comm prefixes


def cluster_cpu(directory: Path) -> dict[str, float]:
    """CPU seconds so far of one local cluster's processes, by name: those whose command line names the
    cluster's directory (its certificates, data and logs are there), not another cluster's on the machine."""
    seconds: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        try:
            comm = (proc / "comm").read_text().strip()
            name = next((n for n in CLUSTER_PROCESSES if comm.startswith(n)), None)
            if name and proc.name.isdigit() and str(directory).encode() in (proc / "cmdline").read_bytes():
                seconds[name] = seconds.get(name, 0.0) + cpu_seconds(proc.name)
        except OSError:  # gone meanwhile
            continue
    if "kube-apiserver" not in seconds:
        raise RuntimeError(f"no kube-apiserver process of the cluster in {directory}")
    return seconds


def cpu_by_process(operator_pid: int, directory: Path) -> dict[str, float]:
    """CPU seconds so far of the local cluster's processes (by name), the operator and this bench: where a
    fleet's two cores go."""
    seconds = {"operator": cpu_seconds(operator_pid), **cluster_cpu(directory)}
    own = os.times()
    seconds["bench"] = own.user + own.system
    return seconds
