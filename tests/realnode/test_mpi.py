"""A CPU MPI program across two pods on the real node, launched as a multi-node TensorRT-LLM group is: `mpirun`
in the leader pod starts the worker's rank over SSH, from a hostfile, with the environment it exports. The key
pair is a Secret both pods mount; the worker runs sshd as its own user; nothing uses `pods/exec`. Debian's
Open MPI and mpi4py in the MPI test image (specdec_dev.mpi_image), in a namespace where Pod Security
`restricted` is enforced.

The first test makes its two pods and their headless Service itself, with mpirun flags of its own; the second
creates the LeaderWorkerSet the operator renders, and LeaderWorkerSet's controller running in the test cluster
makes the group's pods and its headless Service. Either way the hostfile names the pods by the stable names the
headless Service gives them (`<hostname>.<service>`), which the real node's pod DNS (specdec_dev.pod_dns) answers."""

from __future__ import annotations

import json
import shlex
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes.client.rest import ApiException

from specdec.api.runtime_config import (
    RUNTIME_CONFIG_DIR,
    SSH_AUTHORIZED_KEYS,
    SSH_CLIENT_KEY,
    SSH_HOST_KEY,
    SSH_KNOWN_HOSTS,
)
from specdec.builders import ssh_keys
from specdec.builders.multinode import build_leader_worker_set, build_ssh_secret
from specdec.builders.serving import config_map_name
from specdec.runtime import launch, multinode
from specdec.versions import LWS
from specdec_dev import mpi_image, node_config, real_node
from tests.kube_helpers import Kube, wait_for
from tests.unit.helpers import SETTINGS, load_example, make_plan

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


LWS_NAME = "mpi"  # its group 0's pods: leader mpi-0, worker mpi-0-1, both named in the headless Service mpi-0


def group_env(namespace: str) -> dict[str, str]:
    """The LWS_* variables LeaderWorkerSet's Pod webhook gives group 0's leader (subdomain policy UniquePerReplica);
    the test checks them against what the leader's rank 0 reports."""
    leader = f"{LWS_NAME}-0.{LWS_NAME}-0.{namespace}"
    return {multinode.LEADER_ADDRESS: leader, multinode.GROUP_SIZE: "2", multinode.WORKER_INDEX: "0"}


def swap_in_the_mpi_program(pod: dict, command: str, env: dict[str, str]) -> None:
    """A rendered pod template (in the MPI image, spec.runtime.image), with what must change to run a CPU MPI
    program in place of TensorRT-LLM:
    - a shell command in place of specdec-runtime (the image has no package of ours): it copies the keys as
      multinode.prepare_keys does and runs what the runtime would (the worker's sshd, the leader's mpirun);
    - the MPI image's user named (the runtime images run as theirs, the MPI image as root);
    - PATH and LD_LIBRARY_PATH set, as NVIDIA's images set them (mpirun forwards both, sshd sets them);
    - no model cache claim: no model here (its volume an emptyDir)."""
    spec = pod["spec"]
    spec["securityContext"] |= {"runAsUser": mpi_image.MPI_UID, "runAsGroup": mpi_image.MPI_UID}
    spec["volumes"] = [
        {"name": "cache", "emptyDir": {}} if volume["name"] == "cache" else volume for volume in spec["volumes"]
    ]
    container = spec["containers"][0]
    container["command"] = ["sh", "-c", command]
    container.pop("args")
    container["env"] += [{"name": k, "value": v} for k, v in env.items()]


def leader_log(kube: Kube, namespace: str, pod: str) -> str | None:
    """The leader's log once its mpirun has ended (the line MPI_DONE), else None."""
    try:
        log = kube.core.read_namespaced_pod_log(pod, namespace)
    except ApiException as error:
        if error.status in (400, 404):  # not created or not started yet
            return None
        raise
    return log if MPI_DONE in log else None


MPI_DONE = "mpirun exited with"


def test_a_leader_worker_set_group_runs_an_mpi_program_across_its_two_pods_as_the_operator_launches_it(
    kube: Kube, mpi_node, restricted_namespace
):
    """A LeaderWorkerSet of one group of 2 pods on the real node, rendered by the operator's own builder
    (specdec.builders.multinode) with the MPI program in place of trtllm-serve (swap_in_the_mpi_program says what
    changes and why), its pods and their headless Service made by LeaderWorkerSet's controller, their LWS_*
    variables by its Pod webhook. In the pods: the hostfile of specdec.runtime.multinode from LWS's variables, the
    SSH key Secret of specdec.builders (known_hosts checked strictly), the workers' sshd configuration, the leader's
    mpirun flags and environment (remote shell, names kept whole), the CPU program in place of
    trtllm-llmapi-launch's ranks. The leader then stays up: a container ending would recreate the group."""
    namespace = restricted_namespace(prefix="lws")
    spec = real_node.on_real_node(load_example("deepseek-v3-mtp-2x8-h100"), image=mpi_image.MPI_IMAGE)["spec"]
    spec["target"] |= {"tensorParallelSize": 2, "nodes": 2}  # one stand-in GPU in each pod
    plan = make_plan(spec, name=LWS_NAME)
    multi = plan.runtime.multi_node
    assert multi is not None and (multi.nodes, multi.gpus_per_node) == (2, 1)

    def unowned(obj: dict) -> dict:  # no SpeculativeDeployment here: the test creates what the operator would
        obj["metadata"] = {k: v for k, v in obj["metadata"].items() if k != "ownerReferences"}
        obj["metadata"]["namespace"] = namespace
        return obj

    secret = kube.core.create_namespaced_secret(
        namespace, unowned(build_ssh_secret(plan, "", ssh_keys.generate(LWS_NAME)))
    )
    lws = unowned(build_leader_worker_set(plan, "", SETTINGS, secret.metadata.uid))

    hosts = multinode.group_hosts(group_env(namespace), multi)
    key_dir = launch.ssh_key_dir("/tmp/work")
    image_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LD_LIBRARY_PATH": "/usr/local/lib"}
    job = {  # in the runtime's ConfigMap, mounted where the runtime reads its configuration
        "program.py": PROGRAM,
        "hostfile": multinode.hostfile(hosts, multi.gpus_per_node),
        "sshd_config": multinode.sshd_config(multi, key_dir, image_env),
    }
    job_dir = RUNTIME_CONFIG_DIR
    names = " ".join((SSH_CLIENT_KEY, SSH_AUTHORIZED_KEYS, SSH_HOST_KEY, SSH_KNOWN_HOSTS))
    keys = (
        f"mkdir -p {key_dir} && chmod 0700 {key_dir} && "
        f"for f in {names}; do install -m 0600 {multi.ssh_dir}/$f {key_dir}/$f; done"
    )
    argv = multinode.mpirun_argv(
        multi, f"{job_dir}/hostfile", ["python3", f"{job_dir}/program.py", "HF_HOME", *group_env(namespace)]
    )
    argv.remove(multinode.LAUNCHER)
    ssh = multinode.ssh_command(multi, key_dir)
    # The leader waits for the worker's sshd as multinode.wait_for_workers does, by logging in with the key.
    leader_command = (
        f"set -e; {keys}; until {ssh} {hosts[1]} true; do sleep 2; done; set +e; "
        f'{shlex.join(argv)}; echo "{MPI_DONE} $?"; exec sleep infinity'
    )
    template = lws["spec"]["leaderWorkerTemplate"]
    leader_env = {**image_env, **multinode.mpirun_env(multi, key_dir)}
    swap_in_the_mpi_program(template["leaderTemplate"], leader_command, leader_env)
    sshd = shlex.join(multinode.sshd_argv(f"{job_dir}/sshd_config"))
    swap_in_the_mpi_program(template["workerTemplate"], f"set -e; {keys}; exec {sshd}", image_env)

    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": config_map_name(plan)}, "data": job})
    kube.custom.create_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural, lws)
    leader, worker = f"{LWS_NAME}-0", f"{LWS_NAME}-0-1"
    logs = wait_for(lambda: leader_log(kube, namespace, leader), "the leader's mpirun ended", timeout=START_SECONDS)
    assert f"{MPI_DONE} 0" in logs, logs[-3000:]
    result = json.loads(next(line for line in logs.splitlines() if line.startswith("{")))
    assert result["size"] == 2 and result["sum"] == 1 + 2, result
    first, second = sorted(result["ranks"], key=lambda rank: rank["rank"])
    assert (first["host"], second["host"]) == (leader, worker), result  # one rank in each of LWS's pods
    # The hostfile was made from the variables LeaderWorkerSet gave the leader: its rank 0 has them (mpirun's own
    # environment); a rank started over SSH has only what mpirun forwards.
    assert {name: first["env"][name] for name in group_env(namespace)} == group_env(namespace), result
    assert all(second["env"][name] is None for name in group_env(namespace)), result
    assert second["env"]["HF_HOME"] == first["env"]["HF_HOME"] == "/tmp/hf", result  # forwarded by the rendered -x
    pods = {p.metadata.name: p for p in kube.core.list_namespaced_pod(namespace).items}
    assert set(pods) == {leader, worker}
    assert {p.spec.node_name for p in pods.values()} == {real_node.NODE_NAME}
    assert {p.spec.subdomain for p in pods.values()} == {f"{LWS_NAME}-0"}  # the group's own headless Service
    service = kube.core.read_namespaced_service(f"{LWS_NAME}-0", namespace)
    assert service.spec.cluster_ip == "None", service.spec

    def worker_ready():  # the leader logs in as soon as sshd answers, maybe before the kubelet's probes have run
        status = kube.core.read_namespaced_pod(worker, namespace).status.container_statuses[0]
        return status if status.ready else None

    assert wait_for(worker_ready, "the worker Ready", timeout=60).restart_count == 0
