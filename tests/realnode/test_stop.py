"""Stopping the real node leaves the host as it was before the node started: no kubelet, containerd or shim
process, no mount under its directory, no bridge, no KUBE-* iptables chain or DNAT rule, the kernel sysctls
the kubelet set back to their values, no QoS cgroup it made. Runs after the other real-node tests (file
order), with their pods still on the node; the session's teardown then has nothing left to stop."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specdec_dev import host_changes, node_config, real_node, toolchain

pytestmark = pytest.mark.cluster


def processes() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
            except OSError:
                continue
            if Path(argv0).name in ("kubelet", "containerd", "containerd-shim-runc-v2"):
                found.append(f"{proc.name} {argv0}")
    return found


def iptables(*args: str) -> str:
    env = {"PATH": toolchain.with_system_dirs("/usr/bin:/bin")}
    return subprocess.run(["iptables-save", *args], capture_output=True, text=True, env=env).stdout


def test_stopping_the_node_leaves_the_host_as_it_found_it(node: real_node.RealNode):
    before = host_changes.HostState.load(node.directory / "host-state.json")
    assert processes() and real_node.DNAT_COMMENT in iptables("-t", "nat")  # running, with pods, until now
    node.stop()
    assert processes() == []
    assert host_changes.mounts_under(node.directory) == [] and not node.directory.exists()
    assert not Path("/sys/class/net", node_config.BRIDGE).exists()
    rules = iptables()
    assert real_node.DNAT_COMMENT not in iptables("-t", "nat")
    new_chains = [
        line
        for line in rules.splitlines()
        if line.startswith(":KUBE-")
        and line.split()[0][1:] not in {c for chains in before.chains.values() for c in chains}
    ]
    assert new_chains == []
    assert {name: Path("/proc/sys", name).read_text().strip() for name in before.sysctls} == before.sysctls
    assert [c for c in host_changes.kube_cgroups() if c not in before.cgroups] == []
    assert not real_node.OWNER_FILE.exists()
