"""What a kubelet and containerd change on the host outside their own directories, recorded before a real
node starts and undone after it stops, so `specdec dev down` leaves the machine as it found it.

Neither component undoes these itself (measured on a Debian 12 host; /work/shared notes of the project's
real-node probe list them): the kubelet sets three kernel sysctls, adds KUBE-* iptables chains (and, with
iptables' nft backend, whole tables), creates QoS cgroups under every cgroup v1 controller and writes a
few fixed host paths; the CNI bridge plugin leaves its bridge. Only what was not there before is removed:
whatever another program made stays.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

from specdec_dev import toolchain

# The kubelet sets these at start (pkg/kubelet/cm/container_manager_linux.go, setupKernelTunables).
SYSCTLS = ("vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops")
# Host paths a kubelet or containerd writes whatever their root dirs are.
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",
    "/etc/cni",
    "/opt/cni",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBE_CHAIN_PREFIX = "KUBE-"
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


@dataclasses.dataclass
class HostState:
    """The host before a real node started: what is restored or left alone when it stops."""

    sysctls: dict[str, str]
    paths: list[str]  # FIXED_PATHS that existed
    chains: dict[str, list[str]]  # "<iptables>/<table>" -> its chains
    nft_tables: list[str]
    cgroups: list[str]  # kubepods cgroups that existed

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def load(cls, path: Path) -> HostState:
        return cls(**json.loads(path.read_text()))


def _run(*argv: str) -> subprocess.CompletedProcess:
    path = toolchain.with_system_dirs(os.environ.get("PATH", ""))
    return subprocess.run(list(argv), capture_output=True, text=True, env={**os.environ, "PATH": path})


def _chains(iptables: str, table: str) -> list[str]:
    """User chains and built-in ones, from `-S` (lines `-N NAME` and `-P NAME POLICY`)."""
    result = _run(iptables, "-w", "-t", table, "-S")
    return sorted({line.split()[1] for line in result.stdout.splitlines() if line.startswith(("-N ", "-P "))})


def _nft_tables() -> list[str]:
    if not toolchain.which("nft"):
        return []
    lines = _run("nft", "list", "tables").stdout.splitlines()
    return sorted(line.removeprefix("table ").strip() for line in lines if line.startswith("table "))


def _nft_rules(table: str) -> int:
    """Rules in an nft table (`nft list table` prints chains, their hook lines and the rules)."""
    lines = _run("nft", "list", "table", *table.split()).stdout.splitlines()
    skip = ("table ", "chain ", "type ", "policy ", "}")
    return sum(1 for line in lines if line.strip() and not line.strip().startswith(skip))


def kube_cgroups() -> list[str]:
    return sorted(str(p) for p in CGROUP_ROOT.glob("*/kubepods"))


def record() -> HostState:
    sysctls = {name: Path("/proc/sys", name).read_text().strip() for name in SYSCTLS}
    tables = _nft_tables()  # before listing chains: with iptables' nft backend a listing creates its table
    chains = {f"{ipt}/{table}": _chains(ipt, table) for ipt in IPTABLES if toolchain.which(ipt) for table in TABLES}
    return HostState(sysctls, [p for p in FIXED_PATHS if os.path.lexists(p)], chains, tables, kube_cgroups())


def _remove_new_chains(before: HostState) -> list[str]:
    """New KUBE-* chains: first the rules that jump to them, then the chains themselves."""
    notes = []
    for key, had in before.chains.items():
        iptables, table = key.split("/")
        new = [c for c in _chains(iptables, table) if c.startswith(KUBE_CHAIN_PREFIX) and c not in had]
        if not new:
            continue
        rules = _run(iptables, "-w", "-t", table, "-S").stdout.splitlines()
        for rule in rules:
            words = rule.split()
            if words[:1] == ["-A"] and any(words[i + 1] in new for i, w in enumerate(words[:-1]) if w in ("-j", "-g")):
                _run(iptables, "-w", "-t", table, "-D", *words[1:])
        for chain in new:
            _run(iptables, "-w", "-t", table, "-F", chain)
        for chain in new:
            if _run(iptables, "-w", "-t", table, "-X", chain).returncode != 0:
                notes.append(f"{iptables} -t {table}: chain {chain} could not be removed")
    return notes


def _remove_cgroup(path: Path) -> bool:
    """rmdir depth first (a cgroup directory holds only its children and the kernel's files)."""
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        try:
            child.rmdir()
        except OSError:
            return False
    try:
        path.rmdir()
    except OSError:
        return False
    return True


def restore(before: HostState, created_dirs: list[Path], bridge: str) -> list[str]:
    """Undo what the node changed; return what could not be undone (for the caller to report)."""
    notes = _remove_new_chains(before)
    for table in _nft_tables():
        if table not in before.nft_tables and not _nft_rules(table):
            _run("nft", "delete", "table", *table.split())  # made by the kubelet's iptables calls, now empty
    if Path("/sys/class/net", bridge).exists():
        _run("ip", "link", "delete", bridge)
    for name, value in before.sysctls.items():
        try:
            Path("/proc/sys", name).write_text(value)
        except OSError as error:
            notes.append(f"sysctl {name} not restored to {value}: {error}")
    for cgroup in kube_cgroups():
        if cgroup not in before.cgroups and not _remove_cgroup(Path(cgroup)):
            notes.append(f"cgroup {cgroup} still holds processes")
    for path in FIXED_PATHS:
        if path not in before.paths and os.path.lexists(path):
            shutil.rmtree(path, ignore_errors=True)
    for directory in created_dirs:
        shutil.rmtree(directory, ignore_errors=True)
    return notes


def mounts_under(directory: Path) -> list[str]:
    """Mount points at or under `directory`, deepest first (the order to unmount them in)."""
    prefix = str(directory.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(set(points), key=len, reverse=True)


def unmount_under(directory: Path) -> list[str]:
    notes = []
    for point in mounts_under(directory):
        result = _run("umount", point)
        if result.returncode != 0:
            result = _run("umount", "-l", point)  # a busy one goes once its last user does
            if result.returncode != 0:
                notes.append(f"{point} not unmounted: {result.stderr.strip()}")
    return notes
