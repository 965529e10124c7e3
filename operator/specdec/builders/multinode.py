"""A target spanning several nodes: one LeaderWorkerSet (LWS) per deployment, in place of the Deployment, and the
SSH key Secret its group's pods share. Pure: the keys are given (specdec.builders.ssh_keys makes them).

Each group is one copy of the model: `size` pods, one per node, each with the node's share of the ranks' GPUs.
The leader (LWS worker index 0) runs specdec-runtime as a single-node pod does (the front, /metrics, the server
process), its server process being `mpirun ... trtllm-llmapi-launch trtllm-serve ...` over every rank of the group
(specdec.runtime.multinode); the workers run sshd with the deployment's keys and nothing else until mpirun starts
their ranks. The Service selects the leaders, and the monitor scrapes them alone (component `runtime`; the workers
are `runtime-worker`).

- restartPolicy RecreateGroupOnPodRestart: an MPI world does not survive the loss of a rank, so a pod or container
  restarted anywhere in a group recreates the whole group.
- startupPolicy LeaderCreated, not LeaderReady: the leader is Ready when it serves, which needs every worker's rank;
  with LeaderReady its workers would never be created. The leader waits for the workers' sshd instead.
- A spec change rolls group by group (LWS RollingUpdate): one new group surged, none taken down before its
  replacement is Ready (maxSurge 1, maxUnavailable 0), as the Deployment does pod by pod.
"""

from __future__ import annotations

import copy
from typing import Any

from specdec.api.runtime_config import RUNTIME_CONFIG_DIR, RUNTIME_CONFIG_KEY, SSH_DIR, SSH_PORT
from specdec.builders import common
from specdec.builders.serving import (
    RUNTIME,
    _metadata,
    pod_template,
    runtime_name,
    runtime_pod_spec,
    selector_labels,
)
from specdec.builders.ssh_keys import SshKeys
from specdec.plan import Plan
from specdec.settings import Settings
from specdec.versions import LWS

RUNTIME_WORKER = "runtime-worker"
# On the LeaderWorkerSet: the uid of the SSH key Secret the operator created (specdec.reconcile.ssh_key_secret).
ANNOTATION_SSH_SECRET_UID = "specdec.io/ssh-key-secret-uid"
WORKER_FLAG = "--worker"  # specdec-runtime's: run sshd for the leader's mpirun


def is_multi_node(plan: Plan) -> bool:
    return plan.runtime.multi_node is not None


def runtime_kind(plan: Plan) -> str:
    """The kind that runs the deployment's pods: a LeaderWorkerSet for a target spanning nodes, else a Deployment."""
    return LWS.kind if is_multi_node(plan) else "Deployment"


def ssh_secret_name(plan: Plan) -> str:
    return f"{plan.name}-ssh"


def build_ssh_secret(plan: Plan, owner_uid: str, keys: SshKeys) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(plan, ssh_secret_name(plan), owner_uid, RUNTIME),
        "type": "Opaque",
        "stringData": keys.secret_data(),
    }


def _with_ssh(pod_spec: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The pod spec with the SSH Secret mounted read-only (specdec-runtime copies the keys to files of its own)."""
    spec = copy.deepcopy(pod_spec)
    spec["volumes"].append({"name": "ssh", "secret": {"secretName": ssh_secret_name(plan), "defaultMode": 0o400}})
    spec["containers"][0]["volumeMounts"].append({"name": "ssh", "mountPath": SSH_DIR, "readOnly": True})
    return spec


def _worker_spec(leader: dict[str, Any]) -> dict[str, Any]:
    """A worker: the leader's pod (image, GPUs, volumes, placement) running sshd, Ready once it accepts
    connections; it serves no HTTP."""
    spec = copy.deepcopy(leader)
    container = spec["containers"][0]
    container["args"] = ["--config", f"{RUNTIME_CONFIG_DIR}/{RUNTIME_CONFIG_KEY}", WORKER_FLAG]
    container["ports"] = [{"name": "ssh", "containerPort": SSH_PORT, "protocol": "TCP"}]
    probe = {"tcpSocket": {"port": "ssh"}, "periodSeconds": 10}
    container["readinessProbe"] = {**probe, "failureThreshold": 3}
    container["startupProbe"] = {**probe, "failureThreshold": 30}
    container.pop("lifecycle", None)  # no Service sends it requests: nothing to drain
    return spec


def build_leader_worker_set(plan: Plan, owner_uid: str, settings: Settings, ssh_secret_uid: str) -> dict[str, Any]:
    multi = plan.runtime.multi_node
    assert multi is not None, "a single-node target runs in a Deployment (serving.build_deployment)"
    leader_spec = _with_ssh(runtime_pod_spec(plan, settings), plan)
    selector = selector_labels(plan)
    leader = pod_template(plan, {**common.labels(RUNTIME), **selector}, leader_spec)
    worker_labels = {**common.labels(RUNTIME_WORKER), common.LABEL_INSTANCE: plan.name}
    worker = pod_template(plan, worker_labels, _worker_spec(leader_spec))
    metadata = _metadata(plan, runtime_name(plan), owner_uid, RUNTIME)
    metadata["annotations"] = {
        common.ANNOTATION_ENGINE_BUILDS: ",".join(plan.engine_names),
        ANNOTATION_SSH_SECRET_UID: ssh_secret_uid,
    }
    return {
        "apiVersion": LWS.api_version,
        "kind": LWS.kind,
        "metadata": metadata,
        "spec": {
            "replicas": plan.spec.runtime.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "leaderWorkerTemplate": {
                "size": multi.nodes,
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": worker,
            },
            # A headless Service per group, named after its leader: with one for the whole set (Shared) LeaderWorkerSet
            # names it after the set, the name of the runtime's Service (build_service), and whichever is created
            # first stands for both: the runtime unreachable at its endpoint, or the workers at their DNS names.
            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
        },
    }
