"""A CPU MPI program across two pods on the real node, launched as a multi-node TensorRT-LLM group is: `mpirun`
in the leader pod starts the worker's rank over SSH, from a hostfile, with the environment it exports. The key
pair is a Secret both pods mount; the worker runs sshd as its own user; nothing uses `pods/exec`. Debian's
Open MPI and mpi4py in the MPI test image (specdec_dev.mpi_image), in a namespace where Pod Security
`restricted` is enforced.

The hostfile names both pods by the stable names a headless Service gives them (`<hostname>.<service>`, as
LeaderWorkerSet's do), which the real node's pod DNS (specdec_dev.pod_dns) answers."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from specdec_dev import mpi_image, node_config, real_node
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

START_SECONDS = 180  # the kubelet's first start of a pod in a new image: its layers are unpacked then
SSH_PORT = 2222  # sshd as a user other than root: above 1024
SSH_DIR = "/etc/mpi-ssh"
JOB_DIR = "/etc/mpi-job"
# Each rank's facts, gathered on rank 0 and printed there as one JSON line; the sum proves a collective ran.
PROGRAM = """\
import json, os, socket
from mpi4py import MPI
comm = MPI.COMM_WORLD
me = {"rank": comm.rank, "host": socket.gethostname(), "group": os.environ.get("SPECDEC_GROUP"),
      "pod_env": os.environ.get("POD_NAME")}
ranks = comm.gather(me, root=0)
total = comm.allreduce(comm.rank + 1)
if comm.rank == 0:
    print(json.dumps({"size": comm.size, "sum": total, "ranks": ranks}), flush=True)
"""
SSHD = (
    "mkdir -p /tmp/ssh && ssh-keygen -q -t ed25519 -N '' -f /tmp/ssh/host_key && "
    f"exec /usr/sbin/sshd -D -e -p {SSH_PORT} -h /tmp/ssh/host_key -o PidFile=/tmp/ssh/sshd.pid -o UsePAM=no "
    f"-o StrictModes=no -o PasswordAuthentication=no -o AuthorizedKeysFile={SSH_DIR}/authorized_keys"
)
SSH_AGENT = (
    f"ssh -p {SSH_PORT} -i {SSH_DIR}/id_ed25519 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
    "-o LogLevel=ERROR"
)


def mpirun(ranks: int) -> list[str]:
    """The leader's launch: one rank per hostfile slot, the remote ones through SSH_AGENT, over TCP on the pod
    network, SPECDEC_GROUP exported to every rank. Open MPI 4.1 cuts a hostfile's names at the first dot unless
    told to keep them, and `mpi-1` alone resolves nowhere: the pod's name resolves with its Service's."""
    return [
        "mpirun",
        "-np",
        str(ranks),
        "--hostfile",
        f"{JOB_DIR}/hostfile",
        "--mca",
        "plm_rsh_agent",
        SSH_AGENT,
        "--mca",
        "orte_keep_fqdn_hostnames",
        "1",
        "--mca",
        "btl",
        "self,tcp",
        "--mca",
        "btl_tcp_if_include",
        "eth0",
        "--mca",
        "oob_tcp_if_include",
        "eth0",
        "-x",
        "SPECDEC_GROUP",
        "python3",
        f"{JOB_DIR}/program.py",
    ]


def key_pair(directory: Path) -> dict[str, str]:
    key = directory / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "mpi", "-f", str(key)], check=True)
    return {"id_ed25519": key.read_text(), "authorized_keys": (directory / "id_ed25519.pub").read_text()}


SERVICE = "mpi"
HOSTFILE = f"mpi-0.{SERVICE} slots=1\nmpi-1.{SERVICE} slots=1\n"  # short names: the pods' DNS search completes them
HEADLESS = {  # as LeaderWorkerSet's: headless, its pods named before they are Ready
    "metadata": {"name": SERVICE},
    "spec": {"clusterIP": "None", "selector": {"app": "mpi-proof"}, "publishNotReadyAddresses": True},
}


def pod(name: str, command: str | list[str], group: str, **spec) -> dict:
    """A pod of the group on the real node, named `<name>.<SERVICE>`, as `restricted` Pod Security wants it,
    with the key pair and the job's files mounted."""
    return {
        "metadata": {"name": name, "labels": {"app": "mpi-proof"}},
        "spec": {
            "hostname": name,
            "subdomain": SERVICE,
            "nodeSelector": {"kubernetes.io/hostname": real_node.NODE_NAME},
            "tolerations": [{"key": t["key"], "operator": "Exists", "effect": t["effect"]} for t in node_config.TAINTS],
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": mpi_image.MPI_UID,
                "runAsGroup": mpi_image.MPI_UID,
                "fsGroup": mpi_image.MPI_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "mpi",
                    "image": mpi_image.MPI_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-ec", command] if isinstance(command, str) else command,
                    "env": [
                        {"name": "SPECDEC_GROUP", "value": group},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    ],
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [
                        {"name": "ssh", "mountPath": SSH_DIR, "readOnly": True},
                        {"name": "job", "mountPath": JOB_DIR, "readOnly": True},
                    ],
                    **spec.pop("container", {}),
                }
            ],
            "volumes": [
                {"name": "ssh", "secret": {"secretName": "mpi-ssh", "defaultMode": 0o440}},
                {"name": "job", "configMap": {"name": "mpi-job"}},
            ],
            **spec,
        },
    }


@pytest.fixture
def mpi_node(node: real_node.RealNode) -> real_node.RealNode:
    node.import_images(mpi_image.build_mpi_image())
    return node


def test_mpirun_in_the_leader_pod_runs_a_rank_in_the_worker_pod_over_ssh(
    kube: Kube, mpi_node, restricted_namespace, tmp_path: Path
):
    namespace = restricted_namespace(prefix="mpi")
    group = f"group-{uuid.uuid4().hex[:8]}"
    kube.core.create_namespaced_secret(namespace, {"metadata": {"name": "mpi-ssh"}, "stringData": key_pair(tmp_path)})
    job = {"metadata": {"name": "mpi-job"}, "data": {"program.py": PROGRAM, "hostfile": HOSTFILE}}
    kube.core.create_namespaced_config_map(namespace, job)
    kube.core.create_namespaced_service(namespace, HEADLESS)

    worker = pod("mpi-1", SSHD, group, container={"readinessProbe": {"tcpSocket": {"port": SSH_PORT}}})
    kube.core.create_namespaced_pod(namespace, worker)

    def worker_ready():
        status = kube.core.read_namespaced_pod("mpi-1", namespace).status
        return any(s.ready for s in status.container_statuses or [])

    wait_for(worker_ready, "the worker's sshd Ready", timeout=START_SECONDS)
    kube.core.create_namespaced_pod(namespace, pod("mpi-0", mpirun(2), group, restartPolicy="Never"))

    def leader_done():
        phase = kube.core.read_namespaced_pod("mpi-0", namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(leader_done, "the leader's mpirun finished", timeout=START_SECONDS)
    logs = kube.core.read_namespaced_pod_log("mpi-0", namespace)
    assert phase == "Succeeded", logs[-3000:]
    result = json.loads(logs.strip().splitlines()[-1])
    assert result["size"] == 2 and result["sum"] == 1 + 2, result
    leader, remote = sorted(result["ranks"], key=lambda rank: rank["rank"])
    assert (leader["host"], remote["host"]) == ("mpi-0", "mpi-1"), result  # one rank in each pod, found by name
    assert leader["group"] == remote["group"] == group, result  # exported by mpirun (-x) to the remote rank
    # A rank started over SSH has sshd's session environment, not its container's: whatever the ranks need
    # from the pod's environment, mpirun exports it.
    assert leader["pod_env"] == "mpi-0" and remote["pod_env"] is None, result
    worker_status = kube.core.read_namespaced_pod("mpi-1", namespace).status.container_statuses[0]
    assert worker_status.ready and worker_status.restart_count == 0, worker_status
