"""A CPU MPI program across two pods on the real node, launched as a multi-node TensorRT-LLM group is: `mpirun`
in the leader pod starts the worker's rank over SSH, from a hostfile, with the environment it exports. The key
pair is a Secret both pods mount; the worker runs sshd as its own user; nothing uses `pods/exec`. Debian's
Open MPI and mpi4py in the MPI test image (specdec_dev.mpi_image), in a namespace where Pod Security
`restricted` is enforced.

The hostfile names both pods by the stable names a headless Service gives them (`<hostname>.<service>`, as
LeaderWorkerSet's do), which the real node's pod DNS (specdec_dev.pod_dns) answers."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from specdec.api.runtime_config import SSH_AUTHORIZED_KEYS, SSH_CLIENT_KEY, SSH_HOST_KEY, SSH_KNOWN_HOSTS, MultiNode
from specdec.api.runtime_config import SSH_DIR as RUNTIME_SSH_DIR
from specdec.api.runtime_config import SSH_PORT as RUNTIME_SSH_PORT
from specdec.builders import ssh_keys
from specdec.runtime import launch, multinode
from specdec_dev import mpi_image, node_config, real_node
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

START_SECONDS = 180  # the kubelet's first start of a pod in a new image: its layers are unpacked then
SSH_PORT = 2222  # sshd as a user other than root: above 1024
SSH_DIR = "/etc/mpi-ssh"
JOB_DIR = "/etc/mpi-job"
# Each rank's host and the variables named in its arguments, gathered on rank 0 and printed there as one JSON
# line; the sum proves a collective ran.
PROGRAM = """\
import json, os, socket, sys
from mpi4py import MPI
comm = MPI.COMM_WORLD
me = {"rank": comm.rank, "host": socket.gethostname(), "env": {name: os.environ.get(name) for name in sys.argv[1:]}}
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
        "SPECDEC_GROUP",
        "POD_NAME",
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


def pod(
    name: str, command: str | list[str], env: list[dict], ssh_dir: str = SSH_DIR, ssh_mode: int = 0o440, **spec
) -> dict:
    """A pod of the group on the real node, named `<name>.<SERVICE>`, as `restricted` Pod Security wants it,
    with the key pair (at `ssh_dir`) and the job's files mounted."""
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
                    "env": env,
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [
                        {"name": "ssh", "mountPath": ssh_dir, "readOnly": True},
                        {"name": "job", "mountPath": JOB_DIR, "readOnly": True},
                    ],
                    **spec.pop("container", {}),
                }
            ],
            "volumes": [
                {"name": "ssh", "secret": {"secretName": "mpi-ssh", "defaultMode": ssh_mode}},
                {"name": "job", "configMap": {"name": "mpi-job"}},
            ],
            **spec,
        },
    }


def run_group(kube: Kube, namespace: str, worker: dict, leader: dict) -> tuple[str, str]:
    """The worker until its sshd is Ready, then the leader until its mpirun ends: its phase and its log."""
    kube.core.create_namespaced_pod(namespace, worker)

    def worker_ready():
        status = kube.core.read_namespaced_pod(worker["metadata"]["name"], namespace).status
        return any(s.ready for s in status.container_statuses or [])

    wait_for(worker_ready, "the worker's sshd Ready", timeout=START_SECONDS)
    kube.core.create_namespaced_pod(namespace, leader)
    name = leader["metadata"]["name"]

    def leader_done():
        phase = kube.core.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for(leader_done, "the leader's mpirun finished", timeout=START_SECONDS)
    return phase, kube.core.read_namespaced_pod_log(name, namespace)


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

    env = [
        {"name": "SPECDEC_GROUP", "value": group},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    worker = pod("mpi-1", SSHD, env, container={"readinessProbe": {"tcpSocket": {"port": SSH_PORT}}})
    phase, logs = run_group(kube, namespace, worker, pod("mpi-0", mpirun(2), env, restartPolicy="Never"))
    assert phase == "Succeeded", logs[-3000:]
    result = json.loads(logs.strip().splitlines()[-1])
    assert result["size"] == 2 and result["sum"] == 1 + 2, result
    leader, remote = sorted(result["ranks"], key=lambda rank: rank["rank"])
    assert (leader["host"], remote["host"]) == ("mpi-0", "mpi-1"), result  # one rank in each pod, found by name
    assert leader["env"]["SPECDEC_GROUP"] == remote["env"]["SPECDEC_GROUP"] == group, result  # mpirun's -x
    # A rank started over SSH has sshd's session environment, not its container's: whatever the ranks need
    # from the pod's environment, mpirun exports it.
    assert leader["env"]["POD_NAME"] == "mpi-0" and remote["env"]["POD_NAME"] is None, result
    worker_status = kube.core.read_namespaced_pod("mpi-1", namespace).status.container_statuses[0]
    assert worker_status.ready and worker_status.restart_count == 0, worker_status


def test_a_leader_worker_set_group_launched_as_the_operator_renders_it_runs_across_two_pods(
    kube: Kube, mpi_node, restricted_namespace
):
    """The launch specdec.runtime.multinode makes from LeaderWorkerSet's variables: its hostfile, the SSH key Secret
    of specdec.builders.ssh_keys (known_hosts checked strictly), the workers' sshd configuration, the leader's
    mpirun flags and remote shell, with the CPU program in place of trtllm-llmapi-launch's ranks. The pods are made
    here as LeaderWorkerSet makes a group's (names, hostname and subdomain, LWS_* variables), so that they run these
    commands rather than the runtime's. The keys are copied as multinode.prepare_keys does (the image has no Python
    package of ours)."""
    namespace = restricted_namespace(prefix="lws")
    multi = MultiNode(nodes=2, gpus_per_node=1, ssh_port=RUNTIME_SSH_PORT, ssh_dir=RUNTIME_SSH_DIR)
    key_dir = launch.ssh_key_dir("/tmp/work")
    image_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/lib", "HOME": "/tmp"}
    image_env["HF_HOME"] = "/tmp/hf"

    def lws_env(index: int) -> dict[str, str]:
        leader = f"mpi-0.{SERVICE}.{namespace}"
        return {"LWS_LEADER_ADDRESS": leader, "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": str(index)}

    hosts = multinode.group_hosts(lws_env(0), multi)
    assert hosts == [f"mpi-0.{SERVICE}.{namespace}", f"mpi-0-1.{SERVICE}.{namespace}"]
    secret = {"metadata": {"name": "mpi-ssh"}, "stringData": ssh_keys.generate("mpi").secret_data()}
    kube.core.create_namespaced_secret(namespace, secret)
    job = {
        "program.py": PROGRAM,
        "hostfile": multinode.hostfile(hosts, multi.gpus_per_node),
        "sshd_config": multinode.sshd_config(multi, key_dir, image_env),
    }
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "mpi-job"}, "data": job})
    kube.core.create_namespaced_service(namespace, HEADLESS)
    names = " ".join((SSH_CLIENT_KEY, SSH_AUTHORIZED_KEYS, SSH_HOST_KEY, SSH_KNOWN_HOSTS))
    keys = (
        f"mkdir -p {key_dir} && chmod 0700 {key_dir} && "
        f"for f in {names}; do install -m 0600 {multi.ssh_dir}/$f {key_dir}/$f; done"
    )
    argv = multinode.mpirun_argv(
        multi, f"{JOB_DIR}/hostfile", ["python3", f"{JOB_DIR}/program.py", "HF_HOME", "LWS_WORKER_INDEX"]
    )
    argv.remove(multinode.LAUNCHER)

    def env(index: int, extra: dict[str, str]) -> list[dict]:
        return [{"name": k, "value": v} for k, v in {**image_env, **lws_env(index), **extra}.items()]

    sshd = shlex.join(multinode.sshd_argv(f"{JOB_DIR}/sshd_config"))
    worker = pod(
        "mpi-0-1",
        f"{keys} && exec {sshd}",
        env(1, {}),
        ssh_dir=multi.ssh_dir,
        ssh_mode=0o400,  # as the operator mounts it (fsGroup adds the group's read)
        container={"readinessProbe": {"tcpSocket": {"port": multi.ssh_port}}},
    )
    leader = pod(
        "mpi-0",
        f"{keys} && exec {shlex.join(argv)}",
        env(0, multinode.mpirun_env(multi, key_dir)),
        ssh_dir=multi.ssh_dir,
        ssh_mode=0o400,
        restartPolicy="Never",
    )
    phase, logs = run_group(kube, namespace, worker, leader)
    assert phase == "Succeeded", logs[-3000:]
    result = json.loads(logs.strip().splitlines()[-1])
    assert result["size"] == 2 and result["sum"] == 1 + 2, result
    first, second = sorted(result["ranks"], key=lambda rank: rank["rank"])
    assert (first["host"], second["host"]) == ("mpi-0", "mpi-0-1"), result
    assert second["env"]["HF_HOME"] == image_env["HF_HOME"], result  # forwarded by the rendered -x
    assert first["env"]["LWS_WORKER_INDEX"] == "0" and second["env"]["LWS_WORKER_INDEX"] is None, result
