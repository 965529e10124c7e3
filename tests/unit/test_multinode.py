"""A target spanning several nodes: its API rules, its LeaderWorkerSet and SSH Secret, the leader's launch and the
workers' sshd (specdec.builders.multinode, specdec.runtime.multinode)."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest
from kubernetes.client.rest import ApiException

from specdec import versions
from specdec.admission.checks import Observed
from specdec.api.runtime_config import SSH_DIR, SSH_PORT, MultiNode
from specdec.builders import ssh_keys
from specdec.builders.multinode import (
    ANNOTATION_SSH_SECRET_UID,
    RUNTIME_WORKER,
    build_leader_worker_set,
    build_ssh_secret,
    ssh_secret_name,
)
from specdec.builders.serving import LWS_WORKER_INDEX_LABEL, build_service
from specdec.plan import plan as plan_of
from specdec.reconcile import ssh_key_secret
from specdec.reconcile.errors import failure_condition
from specdec.render import render_objects
from specdec.runtime import launch, multinode
from specdec_dev import nodes as dev_nodes
from tests.unit.apiserver import Cluster
from tests.unit.helpers import SETTINGS, deployment, load_example, make_plan, make_problem
from tests.unit.invalid_specs import eagle3
from tests.unit.test_admission import observed, simulated_gpu_node
from tests.unit.test_reconcile_controllers import Operator

EXAMPLE = "deepseek-v3-mtp-2x8-h100"
TWO_H100_NODES = observed(*dev_nodes.dev_nodes(cpu_nodes=0, gpu_nodes=2))
REARMED = {"mode": "mtp", "mtp": {"maxDraftLen": 3}, "rearm": {"enabled": True}}


def small_gpu_node(name: str) -> dict:
    return simulated_gpu_node(name, "Tesla-T4", "15360", gpus=1)


GROUP_ENV = {"LWS_LEADER_ADDRESS": "sd-0.sd.ns", "LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0"}


def spec(**target: object) -> dict:
    return copy.deepcopy(load_example(EXAMPLE)["spec"]) | (
        {"target": {**load_example(EXAMPLE)["spec"]["target"], **target}} if target else {}
    )


def test_the_example_spans_two_nodes_of_eight_gpus():
    p = make_plan(spec())
    assert p.runtime.multi_node == MultiNode(nodes=2, gpus_per_node=8, ssh_port=SSH_PORT, ssh_dir=SSH_DIR)
    assert p.gpus == 8  # a pod's, one node's share of tensor parallelism 16


@pytest.mark.parametrize(
    "change, complaint",
    [
        ({"nodes": 3}, "must be a multiple of nodes"),
        ({"pipelineParallelSize": 2}, "across nodes the target is split by tensor (and expert) parallelism only"),
        ({"devices": list(range(16))}, "devices apply to one node"),
    ],
)
def test_the_split_across_nodes_is_checked(change, complaint):
    problem = make_problem(spec(**change))
    assert problem.reason == "InvalidSpec" and complaint in problem.message


def test_pipeline_parallelism_with_drafting_is_refused_with_tensorrt_llms_reason():
    problem = make_problem(spec(nodes=1, tensorParallelSize=8, pipelineParallelSize=2))
    assert "Drafting is not supported for selected executor loop" in problem.message
    assert "NVIDIA/TensorRT-LLM#9009" in problem.message
    without_draft = spec(nodes=1, tensorParallelSize=8, pipelineParallelSize=2) | {"speculation": {"mode": "none"}}
    assert make_plan(without_draft).runtime.target.pipeline_parallel_size == 2


def test_the_engine_path_is_refused_for_several_nodes():
    problem = make_problem(spec() | {"backend": "tensorrt", "speculation": {"mode": "none"}})
    assert "nodes and pipelineParallelSize need backend pytorch" in problem.message


def test_leader_worker_set_runs_groups_of_nodes_that_recreate_together():
    p = make_plan(spec())
    lws = build_leader_worker_set(p, "uid-1", SETTINGS, "secret-uid")
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" == versions.LWS.api_version
    assert lws["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert lws["metadata"]["annotations"][ANNOTATION_SSH_SECRET_UID] == "secret-uid"  # the Secret it created
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2 and template["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["spec"]["startupPolicy"] == "LeaderCreated"
    assert lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"] == {"maxSurge": 1, "maxUnavailable": 0}
    leader, worker = template["leaderTemplate"], template["workerTemplate"]
    for pod in (leader, worker):
        container = pod["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert {"name": "ssh", "mountPath": SSH_DIR, "readOnly": True} in container["volumeMounts"]
        assert {"name": "ssh", "secret": {"secretName": ssh_secret_name(p), "defaultMode": 0o400}} in pod["spec"][
            "volumes"
        ]
    assert leader["metadata"]["labels"]["app.kubernetes.io/component"] == "runtime"
    assert worker["metadata"]["labels"]["app.kubernetes.io/component"] == RUNTIME_WORKER
    assert worker["spec"]["containers"][0]["args"][-1] == "--worker"
    assert worker["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": "ssh"}


def test_a_spec_change_rolls_the_groups():
    before = build_leader_worker_set(make_plan(spec()), "u", SETTINGS, "s")
    after = build_leader_worker_set(
        make_plan(spec() | {"speculation": {"mode": "mtp", "mtp": {"maxDraftLen": 2}}}), "u", SETTINGS, "s"
    )
    hash_of = lambda lws, t: lws["spec"]["leaderWorkerTemplate"][t]["metadata"]["annotations"]  # noqa: E731
    assert hash_of(before, "leaderTemplate") != hash_of(after, "leaderTemplate")


def test_the_service_selects_the_leaders_only():
    selector = build_service(make_plan(spec()), "u")["spec"]["selector"]
    assert selector[LWS_WORKER_INDEX_LABEL] == "0"
    single = build_service(make_plan(spec(nodes=1, tensorParallelSize=8)), "u")["spec"]["selector"]
    assert LWS_WORKER_INDEX_LABEL not in single


def test_ssh_secret_holds_keys_ssh_accepts(tmp_path):
    keys = ssh_keys.generate("sd")
    secret = build_ssh_secret(make_plan(spec()), "u", keys)
    assert secret["metadata"]["name"] == "sd-ssh" and secret["metadata"]["ownerReferences"][0]["uid"] == "u"
    data = secret["stringData"]
    private = tmp_path / "id"
    private.write_text(data["id_ed25519"])
    private.chmod(0o600)
    derived = subprocess.run(["ssh-keygen", "-y", "-f", str(private)], capture_output=True, text=True, check=True)
    assert data["authorized_keys"].split()[:2] == derived.stdout.split()[:2]
    assert data["known_hosts"].startswith("* ssh-ed25519 ")
    assert ssh_keys.generate("sd").client_private != keys.client_private


def test_render_shows_no_key_and_no_deployment():
    objects = render_objects(deployment(spec()), SETTINGS)
    kinds = [o["kind"] for o in objects]
    assert "Deployment" not in kinds and kinds.count("LeaderWorkerSet") == 1
    secret = next(o for o in objects if o["kind"] == "Secret")
    assert set(secret["stringData"].values()) <= {
        "<generated by the operator>",
        "<generated by the operator>\n",
        "* <generated by the operator>\n",
    }


def test_hostfile_from_the_leader_address():
    multi = make_plan(spec()).runtime.multi_node
    hosts = multinode.group_hosts(GROUP_ENV, multi)
    assert hosts == ["sd-0.sd.ns", "sd-0-1.sd.ns"]
    assert multinode.hostfile(hosts, 8) == "sd-0.sd.ns slots=8\nsd-0-1.sd.ns slots=8\n"
    with pytest.raises(multinode.MultiNodeError, match="LWS_GROUP_SIZE"):
        multinode.group_hosts({**GROUP_ENV, "LWS_GROUP_SIZE": "3"}, multi)
    with pytest.raises(multinode.MultiNodeError, match="not a LeaderWorkerSet pod"):
        multinode.group_hosts({}, multi)


def test_the_leader_launches_every_rank_through_trtllm_llmapi_launch():
    config = make_plan(spec()).runtime
    plan = launch.plan_launch(config, "/w", group_env=GROUP_ENV)
    argv = plan.argv
    assert argv[:5] == ["mpirun", "--hostfile", "/w/hostfile", "-np", "16"]
    rsh = plan.env["OMPI_MCA_plm_rsh_agent"]
    assert plan.env["PRTE_MCA_plm_rsh_agent"] == rsh
    assert shlex.split(rsh)[:5] == ["ssh", "-p", str(SSH_PORT), "-i", "/w/ssh/id_ed25519"]
    assert "StrictHostKeyChecking=yes" in rsh
    assert plan.env["OMPI_MCA_orte_keep_fqdn_hostnames"] == plan.env["PRTE_MCA_prte_keep_fqdn_hostnames"] == "1"
    launcher = argv.index("trtllm-llmapi-launch")
    serve = argv[launcher + 1 :]
    assert serve[0] == "trtllm-serve" and serve[serve.index("--tp_size") + 1] == "16"
    assert plan.files["/w/hostfile"] == "sd-0.sd.ns slots=8\nsd-0-1.sd.ns slots=8\n"


def test_a_pod_outside_a_group_cannot_launch_a_multi_node_target():
    from specdec.runtime import config as cfg

    with pytest.raises(cfg.ConfigError, match="LWS_LEADER_ADDRESS"):
        launch.plan_launch(make_plan(spec()).runtime, "/w", group_env={})


def test_workers_sshd_accepts_the_deployments_key_only():
    multi = make_plan(spec()).runtime.multi_node
    text = multinode.sshd_config(multi, "/w/ssh", {"PATH": "/opt/bin:/usr/bin"})
    lines = set(text.splitlines())
    assert {
        f"Port {SSH_PORT}",
        "PasswordAuthentication no",
        "PermitRootLogin no",
        "SetEnv PATH=/opt/bin:/usr/bin",
    } <= lines
    assert "AuthorizedKeysFile /w/ssh/authorized_keys" in lines
    # sshd itself reads this configuration in tests/realnode/test_mpi.py (Debian's OpenSSH in the MPI image).


# --- admission on the nodes' GPUs -----------------------------------------------------------------------------------


def admitted(raw: dict, seen: Observed):
    return plan_of(deployment(raw), SETTINGS, seen)


def test_deepseek_v3_mtp_fits_two_h100_nodes_and_one_is_refused_naming_two():
    assert admitted(spec(), TWO_H100_NODES).runtime.multi_node.nodes == 2
    one = admitted(spec(nodes=1, tensorParallelSize=8), TWO_H100_NODES)
    assert one.reason == "ModelDoesNotFitGpu"
    assert "It fits 2 nodes of 8 GPUs: set spec.target.nodes: 2 and tensorParallelSize: 16" in one.message


def test_a_group_needs_as_many_nodes():
    problem = admitted(spec(nodes=4, tensorParallelSize=32), TWO_H100_NODES)
    assert problem.reason == "NotEnoughGpuNodes"
    assert "spec.target.nodes 4 needs 4 nodes with 8 allocatable GPU(s) each" in problem.message
    assert "may land on 2 such node(s)" in problem.message


def test_a_model_that_fits_no_node_count_is_refused_with_the_sizes():
    small = observed(*(small_gpu_node(f"t4-{i}") for i in range(2)))
    problem = admitted(spec(nodes=2, tensorParallelSize=2), small)
    assert problem.reason == "ModelDoesNotFitGpu"
    assert "It fits no node count up to 16 nodes of 1 GPUs: at tensorParallelSize 16 each GPU would still need" in (
        problem.message
    )


@pytest.mark.parametrize(
    "change, reason",
    [
        ({"rollout": {"canary": {"enabled": True}}}, "CanaryUnsupported"),
        ({"speculation": REARMED}, "RearmUnsupported"),
        ({"speculation": eagle3(), "drafter": {"learning": {"enabled": True}}}, "DraftLearningUnsupported"),
    ],
)
def test_what_rolls_a_deployment_is_refused_for_a_group(change, reason):
    assert make_problem(spec() | change).reason == reason


# --- the rollout, on the in-memory API server ------------------------------------------------------------------------


SECRET_PATH = "/api/v1/namespaces/ns/secrets/dsv3-ssh"


def group_cluster() -> tuple[Cluster, Operator, dict]:
    cluster = Cluster()
    for node in dev_nodes.dev_nodes(cpu_nodes=0, gpu_nodes=2):
        cluster.add(node)
    sd = cluster.add(deployment(spec(), name="dsv3", namespace="ns"))
    operator = Operator(cluster)
    operator.reconciler.gpu_nodes.refresh()
    return cluster, operator, sd


def status_of(cluster: Cluster) -> dict:
    return cluster.store.get("SpeculativeDeployment", "ns", "dsv3").get("status") or {}


def condition(status: dict, kind: str) -> dict:
    return next(c for c in status.get("conditions") or [] if c["type"] == kind)


def converge(cluster: Cluster, operator: Operator) -> dict:
    for _ in range(8):
        operator.resync()
        cluster.run_controllers()
        if status_of(cluster).get("phase") == "Ready":
            break
    return status_of(cluster)


def group_pod(name: str, group: int, worker: int, ready: bool) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {
                "app.kubernetes.io/instance": "dsv3",
                "app.kubernetes.io/managed-by": "specdec-operator",
                "leaderworkerset.sigs.k8s.io/group-index": str(group),
                "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
            },
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_a_multi_node_deployment_becomes_ready_on_its_leader_worker_set():
    cluster, operator, sd = group_cluster()
    status = converge(cluster, operator)
    assert status.get("phase") == "Ready", status
    created = {path.rsplit("/", 1)[-1] for method, path in cluster.writes() if method == "POST"}
    assert {"leaderworkersets", "secrets", "services"} <= created and "deployments" not in created
    lws = cluster.store.get("LeaderWorkerSet", "ns", "dsv3")
    assert lws["metadata"]["ownerReferences"][0]["uid"] == sd["metadata"]["uid"]
    assert condition(status, "RuntimeAvailable")["message"] == "1/1 groups ready"
    secret = cluster.objects[SECRET_PATH]
    assert lws["metadata"]["annotations"][ANNOTATION_SSH_SECRET_UID] == secret["metadata"]["uid"]
    assert secret["stringData"]["known_hosts"].startswith("* ssh-ed25519 ")
    service = cluster.store.get("Service", "ns", "dsv3")
    assert service["spec"]["selector"][LWS_WORKER_INDEX_LABEL] == "0"


def test_a_group_missing_a_worker_says_which_and_its_keys_stay():
    cluster, operator, _ = group_cluster()
    converge(cluster, operator)
    secret = copy.deepcopy(cluster.objects[SECRET_PATH])
    path = next(p for p in cluster.objects if p.endswith("/leaderworkersets/dsv3"))
    lws = cluster.objects[path]
    lws["status"] = {**lws["status"], "readyReplicas": 0, "conditions": [{"type": "Available", "status": "False"}]}
    cluster.store.put(copy.deepcopy(lws))
    cluster.add(group_pod("dsv3-0", 0, 0, ready=False))
    operator.resync()
    runtime = condition(status_of(cluster), "RuntimeAvailable")
    assert runtime["status"] == "False" and runtime["reason"] == "GroupsNotReady"
    assert "group 0: worker 1 missing; leader dsv3-0 Running, not ready" in runtime["message"]
    assert cluster.objects[SECRET_PATH] == secret and "SshKeySecretRecreated" not in dict(cluster.events)


def test_a_cluster_without_leader_worker_set_gets_a_condition_naming_what_to_install():
    cluster, operator, _ = group_cluster()
    answer = cluster._answer

    def no_lws(method, path, body, query, content_type):
        if "leaderworkerset" in path:  # its objects and its group version's discovery
            cluster.requests.append((method, path))
            raise ApiException(status=404, reason="NotFound")
        return answer(method, path, body, query, content_type)

    cluster.kube._request = no_lws
    status = converge(cluster, operator)
    ready = condition(status, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "LeaderWorkerSetNotInstalled"
    assert "install LeaderWorkerSet (https://lws.sigs.k8s.io" in ready["message"]
    assert SECRET_PATH not in cluster.objects  # no Secret without its group: it would pass for another's later


def test_the_ssh_key_secret_is_the_one_created_or_the_one_recorded_never_anothers():
    assert ssh_key_secret.owned_uid("new", None, "sd-ssh") == "new"
    assert ssh_key_secret.owned_uid("new", "old", "sd-ssh") == "new"  # deleted since, created again
    assert ssh_key_secret.owned_uid(None, "old", "sd-ssh") == "old"
    with pytest.raises(ssh_key_secret.SshKeySecretNotOwned) as refused:
        ssh_key_secret.owned_uid(None, None, "sd-ssh")
    ready = failure_condition(refused.value)
    assert (ready.status, ready.reason) == (False, "SshKeySecretNotOwned")
    assert ready.message.startswith("Secret sd-ssh already exists and this deployment did not create it")
    assert "delete or rename it" in ready.message


def test_an_ssh_key_secret_someone_else_made_is_refused_in_status_and_left_untouched():
    cluster, operator, _ = group_cluster()
    foreign = cluster.add({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "dsv3-ssh", "namespace": "ns"}})
    status = converge(cluster, operator)
    ready = condition(status, "Ready")
    assert ready["status"] == "False" and ready["reason"] == "SshKeySecretNotOwned", ready
    assert "Secret dsv3-ssh already exists" in ready["message"]
    assert cluster.store.get("LeaderWorkerSet", "ns", "dsv3") is None  # no pod mounts it
    assert cluster.objects[SECRET_PATH]["metadata"]["uid"] == foreign["metadata"]["uid"]
    assert not [path for method, path in cluster.writes() if path.startswith(SECRET_PATH)]  # never written


def test_a_deleted_ssh_key_secret_is_created_again_and_recorded():
    cluster, operator, _ = group_cluster()
    converge(cluster, operator)
    first = cluster.objects.pop(SECRET_PATH)  # deleted by someone
    operator.resync()
    again = cluster.objects[SECRET_PATH]
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert again["stringData"]["id_ed25519"] != first["stringData"]["id_ed25519"]  # new keys
    lws = cluster.store.get("LeaderWorkerSet", "ns", "dsv3")
    assert lws["metadata"]["annotations"][ANNOTATION_SSH_SECRET_UID] == again["metadata"]["uid"]
    assert ("SshKeySecretRecreated", "dsv3") in cluster.events
    assert condition(status_of(cluster), "Ready")["status"] == "True"
