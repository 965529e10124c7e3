"""A target spanning a LeaderWorkerSet group (specdec.builders.multinode), inside its pods.

The leader's server process is `mpirun` over every rank of the group, each rank running
`trtllm-llmapi-launch trtllm-serve ...` as TensorRT-LLM documents for multi-node serving
(tensorrt_llm/llmapi/trtllm-llmapi-launch: rank 0 runs trtllm-serve and the MPI leader, the other ranks
`tensorrt_llm.llmapi.mgmn_worker_node`). mpirun starts the workers' ranks over SSH with the deployment's key; the
workers run sshd as the pod's non-root user on an unprivileged port, and nothing else. No `pods/exec`: nothing
but the group's own pods ever runs a command in them.

The hostfile is written at start from LeaderWorkerSet's environment: LWS_LEADER_ADDRESS is the leader's stable
name `<lws>-<group>.<lws>-<group>.<namespace>` (the group's own headless Service, subdomain policy UniquePerReplica),
a worker's is `<lws>-<group>-<index>.<lws>-<group>.<namespace>`, and LWS_GROUP_SIZE counts the pods.

Pure functions first; `prepare_keys` and `wait_for_workers` are the I/O.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import time
from collections.abc import Mapping
from pathlib import Path

from specdec.api.runtime_config import (
    SSH_AUTHORIZED_KEYS,
    SSH_CLIENT_KEY,
    SSH_HOST_KEY,
    SSH_KNOWN_HOSTS,
    MultiNode,
)

LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
GROUP_SIZE = "LWS_GROUP_SIZE"
WORKER_INDEX = "LWS_WORKER_INDEX"
LAUNCHER = "trtllm-llmapi-launch"
# What mpirun passes on to every rank (-x), each set in every runtime pod: the image's paths, the pod's HOME and
# HF_HOME. sshd starts a rank's orted with a login environment, not the container's.
FORWARDED_ENV = ("PATH", "LD_LIBRARY_PATH", "HOME", "HF_HOME")
SSHD = "/usr/sbin/sshd"


class MultiNodeError(Exception):
    """The pod is not in the group the runtime configuration describes."""


def group_hosts(env: Mapping[str, str], multi: MultiNode) -> list[str]:
    """Every pod of the group, the leader first, by its stable DNS name."""
    leader = env.get(LEADER_ADDRESS, "")
    size = env.get(GROUP_SIZE, "")
    if not leader or "." not in leader:
        raise MultiNodeError(f"{LEADER_ADDRESS} is {leader!r}: not a LeaderWorkerSet pod")
    if size != str(multi.nodes):
        raise MultiNodeError(f"{GROUP_SIZE} is {size!r}, the runtime configuration says {multi.nodes} nodes")
    name, domain = leader.split(".", 1)
    return [leader, *(f"{name}-{index}.{domain}" for index in range(1, multi.nodes))]


def example_group_env(multi: MultiNode) -> dict[str, str]:
    """LeaderWorkerSet's variables for a group `group` (leader group-0.group): what a dry run outside a group shows."""
    return {LEADER_ADDRESS: "group-0.group", GROUP_SIZE: str(multi.nodes), WORKER_INDEX: "0"}


def hostfile(hosts: list[str], slots: int) -> str:
    """Open MPI's hostfile: one line per pod, as many slots (ranks) as it has GPUs."""
    return "".join(f"{host} slots={slots}\n" for host in hosts)


def ssh_command(multi: MultiNode, key_dir: str) -> str:
    """The remote shell mpirun starts the workers' ranks with (its plm_rsh_agent): the deployment's key, the
    workers' host key checked against known_hosts, batch mode (never a prompt)."""
    return (
        f"ssh -p {multi.ssh_port} -i {key_dir}/{SSH_CLIENT_KEY} -o UserKnownHostsFile={key_dir}/{SSH_KNOWN_HOSTS} "
        "-o StrictHostKeyChecking=yes -o BatchMode=yes"
    )


def mpirun_argv(multi: MultiNode, hostfile_path: str, serve_argv: list[str]) -> list[str]:
    """mpirun over every rank of the group, each running trtllm-llmapi-launch over `serve_argv` (trtllm-serve's)."""
    forwarded = [arg for name in FORWARDED_ENV for arg in ("-x", name)]
    return [
        "mpirun",
        "--hostfile",
        hostfile_path,
        "-np",
        str(multi.nodes * multi.gpus_per_node),
        "--bind-to",
        "none",
        *forwarded,
        LAUNCHER,
        *serve_argv,
    ]


def mpirun_env(multi: MultiNode, key_dir: str) -> dict[str, str]:
    """mpirun's settings, as environment (Open MPI 4 reads OMPI_MCA_orte_*, Open MPI 5's runtime PRRTE
    PRTE_MCA_prte_*; a --mca flag would be spelt differently by each): its remote shell, and the hostfile's names
    kept whole (by default it cuts them at the first dot, and a group's pods resolve by their full names only)."""
    agent = ssh_command(multi, key_dir)
    return {
        "OMPI_MCA_plm_rsh_agent": agent,
        "PRTE_MCA_plm_rsh_agent": agent,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "1",
        "PRTE_MCA_prte_keep_fqdn_hostnames": "1",
    }


def sshd_config(multi: MultiNode, key_dir: str, env: Mapping[str, str]) -> str:
    """The workers' sshd: the deployment's key only, as the pod's user, the container's paths in every session.
    StrictModes off: HOME is /tmp (world-writable), the keys themselves are 0600 files of ours."""
    paths = " ".join(f"{name}={env[name]}" for name in ("PATH", "LD_LIBRARY_PATH") if env.get(name))
    lines = [
        f"Port {multi.ssh_port}",
        f"HostKey {key_dir}/{SSH_HOST_KEY}",
        f"AuthorizedKeysFile {key_dir}/{SSH_AUTHORIZED_KEYS}",
        f"PidFile {key_dir}/sshd.pid",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin no",
        "AllowTcpForwarding no",
        "X11Forwarding no",
        "StrictModes no",
        "UsePAM no",
        *([f"SetEnv {paths}"] if paths else []),
    ]
    return "\n".join(lines) + "\n"


def sshd_argv(config_path: str) -> list[str]:
    return [SSHD, "-D", "-e", "-f", config_path]


def prepare_keys(secret_dir: str, key_dir: str) -> None:
    """Copy the mounted Secret's keys to files of the pod's user, mode 0600: ssh and sshd refuse a private key
    others can read, and a Secret volume's files belong to root and the pod's fsGroup."""
    target = Path(key_dir)
    target.mkdir(parents=True, exist_ok=True)
    os.chmod(target, stat.S_IRWXU)
    for name in (SSH_CLIENT_KEY, SSH_AUTHORIZED_KEYS, SSH_HOST_KEY, SSH_KNOWN_HOSTS):
        copied = target / name
        shutil.copyfile(Path(secret_dir) / name, copied)
        os.chmod(copied, stat.S_IRUSR | stat.S_IWUSR)


def wait_for_workers(hosts: list[str], port: int, deadline_seconds: float) -> None:
    """Until every worker's sshd accepts a connection: LeaderWorkerSet starts the workers after the leader."""
    pending = list(hosts)
    until = time.monotonic() + deadline_seconds
    while pending:
        host = pending[0]
        try:
            with socket.create_connection((host, port), timeout=5):
                pending.pop(0)
                continue
        except OSError as error:
            if time.monotonic() > until:
                raise MultiNodeError(
                    f"worker {host}:{port} did not answer in {deadline_seconds:.0f} s: {error}"
                ) from None
        time.sleep(2)
