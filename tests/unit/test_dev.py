"""The local control plane's configuration, without starting it (the cluster tests start it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specdec import cli
from specdec.builders.serving import PRE_STOP_SLEEP_SECONDS
from specdec.render import render_objects
from specdec_dev import cluster, nodes, podrunner, simulation_profile, toolchain
from tests.unit.helpers import SETTINGS, deployment, load_example


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_kwokctl_config_binds_loopback_with_rbac_admission_and_local_binaries(tmp_path: Path):
    docs = _docs(cluster.kwokctl_config(tmp_path, tmp_path / "pki"))
    options = docs[0]["options"]
    assert docs[0]["kind"] == "KwokctlConfiguration"
    assert options["runtime"] == "binary" and options["bindAddress"] == "127.0.0.1"
    assert options["kubeAuthorization"] is True and options["kubeAdmission"] is True
    binaries = [k for k in options if k.endswith("Binary")]
    assert len(binaries) == 6 and all(options[k].startswith(str(tmp_path)) for k in binaries)  # never a URL
    assert "kubeAuditPolicy" not in options
    patches = {p["name"]: p["extraArgs"] for p in docs[0]["componentsPatches"]}
    assert {"key": "service-cluster-ip-range", "value": cluster.SERVICE_CIDR} in patches["kube-apiserver"]
    assert {"key": "kube-api-qps", "value": "200"} in patches["kube-controller-manager"]  # a fleet is not throttled
    controllers = next(a["value"] for a in patches["kube-controller-manager"] if a["key"] == "controllers").split(",")
    assert controllers[0] == "*" and {"-endpoints-controller", "-endpointslice-controller"} <= set(controllers)


def test_kwokctl_config_leaves_real_nodes_to_their_kubelets(tmp_path: Path):
    plain, real = (_docs(cluster.kwokctl_config(tmp_path, tmp_path / "pki", real_node=r))[0] for r in (False, True))
    for config in (plain, real):
        patches = {p["name"]: p["extraArgs"] for p in config["componentsPatches"]}
        assert {"key": "manage-all-nodes", "value": "false"} in patches["kwok-controller"]
        assert {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"} in patches[
            "kwok-controller"
        ]
        assert {"key": "kubelet-client-certificate", "value": str(tmp_path / "pki" / "admin.crt")} in patches[
            "kube-apiserver"
        ]
        assert config["options"]["kubeApiserverCertSANs"] == ["10.96.0.1"]  # the kubernetes Service's ClusterIP
    binds = [
        [a["value"] for a in c["componentsPatches"][0]["extraArgs"] if a["key"] == "bind-address"]
        for c in (plain, real)
    ]
    assert binds == [[], ["0.0.0.0"]]  # only a real node's cluster listens beyond loopback


def test_kwokctl_config_carries_every_stage_kwok_needs(tmp_path: Path):
    stages = {
        d["metadata"]["name"]: d
        for d in _docs(cluster.kwokctl_config(tmp_path, tmp_path / "pki"))
        if d["kind"] == "Stage"
    }
    assert set(stages) == {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-complete",
        "pod-delete",
        "pod-delete-after-pre-stop",
        "pod-container-running-failed",
        "job-pod-simulated-step",
        "pvc-provision",
        "pv-bind",
        "pv-delete",
        "pvc-delete",
    }
    delay = stages["pod-complete"]["spec"]["delay"]["durationFrom"]["expressionFrom"]
    assert "pod-complete.stage.kwok.x-k8s.io/delay" in delay
    # A deleted runtime pod stays (its IP with it) through the pod runner's preStop sleep and the drain after it;
    # every other pod goes at once.
    runtime_delete = stages["pod-delete-after-pre-stop"]["spec"]
    assert runtime_delete["delay"]["durationMilliseconds"] / 1000 >= PRE_STOP_SLEEP_SECONDS + podrunner.SHUTDOWN_SECONDS
    component = '.metadata.labels["app.kubernetes.io/component"]'
    for stage, operator in (("pod-delete", "NotIn"), ("pod-delete-after-pre-stop", "In")):
        expressions = stages[stage]["spec"]["selector"]["matchExpressions"]
        assert {"key": component, "operator": operator, "values": ["runtime", "runtime-canary"]} in expressions


def test_the_simulated_fetch_reports_the_catalogs_facts(tmp_path: Path):
    """pod-complete's template carries, per catalog model, a report that the operator reads back as exactly
    the catalog's facts (and the size its precision gives); the empty table it replaces is gone."""
    from specdec.admission.model_catalog import catalog_facts, hub_ids
    from specdec.admission.model_facts import ModelFacts
    from specdec.status.shared import fetched_status
    from specdec_dev.simulated_fetch import EMPTY_TABLE, simulated_report

    stages = {
        d["metadata"]["name"]: d
        for d in _docs(cluster.kwokctl_config(tmp_path, tmp_path / "pki"))
        if d["kind"] == "Stage"
    }
    template = stages["pod-complete"]["spec"]["next"]["statusTemplate"]
    assert EMPTY_TABLE not in template
    for hub_id in hub_ids():
        report = json.dumps(simulated_report(hub_id))
        assert f"{json.dumps(hub_id.lower())} {json.dumps(report)}" in template
        pod = {
            "metadata": {"name": "p"},
            "status": {
                "containerStatuses": [{"name": "fetch", "state": {"terminated": {"exitCode": 0, "message": report}}}]
            },
        }
        status = fetched_status([pod], {}, f"hf://{hub_id}")
        facts = catalog_facts(hub_id)
        assert ModelFacts.from_status(facts.model, status["facts"], facts.source) == facts
        assert len(report) < 4096
    assert simulated_report("meta-llama/Llama-3.1-8B-Instruct")["sizeBytes"] == 8_030_000_000 * 2
    assert simulated_report("deepseek-ai/DeepSeek-R1")["sizeBytes"] == 685_000_000_000  # stored in FP8


def test_audit_policy_is_passed_on(tmp_path: Path):
    policy = tmp_path / "policy.yaml"
    options = _docs(cluster.kwokctl_config(tmp_path, tmp_path / "pki", policy))[0]["options"]
    assert options["kubeAuditPolicy"] == str(policy)


def test_gpu_nodes_look_like_the_nvidia_gpu_operator_made_them():
    node = nodes.gpu_node(0)
    assert node["status"]["allocatable"][nodes.GPU_RESOURCE] == "8"
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.present"] == "true" and labels["nvidia.com/gpu.product"] == nodes.GPU_PRODUCT
    assert labels["nvidia.com/gpu.memory"] == nodes.GPU_MEMORY_MIB
    assert node["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert nodes.GPU_RESOURCE not in nodes.cpu_node(0)["status"]["allocatable"]
    names = [n["metadata"]["name"] for n in nodes.dev_nodes(2, 3)]
    assert names == ["cpu-0", "cpu-1", "gpu-0", "gpu-1", "gpu-2"]


def test_the_default_gpu_nodes_roll_the_multi_node_examples_group():
    """A spec change surges a whole group on nodes of its own (a group's pods never share a node)."""
    objects = render_objects(deployment(load_example("deepseek-v3-mtp-2x8-h100")["spec"]), SETTINGS)
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")["spec"]
    surge = lws["rolloutStrategy"]["rollingUpdateConfiguration"]["maxSurge"]
    assert (lws["replicas"] + surge) * lws["leaderWorkerTemplate"]["size"] == cluster.DEFAULT_GPU_NODES


def test_cluster_objects_include_a_default_storage_class():
    storage = cluster.cluster_objects(1, 1)[0]
    assert storage["kind"] == "StorageClass"
    assert storage["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"


def test_pinned_versions_meet_what_the_control_plane_needs():
    etcd = tuple(int(x) for x in toolchain.ETCD_VERSION.lstrip("v").split("."))
    assert etcd >= (3, 5, 13)  # watch progress requests
    versions = {g.name: g.version for g in toolchain.GROUPS}
    assert versions == {
        "etcd": toolchain.ETCD_VERSION,
        "kubernetes": toolchain.KUBERNETES_VERSION,
        "kwok": toolchain.KWOK_VERSION,
        "helm": toolchain.HELM_VERSION,
        "lws": toolchain.LWS_VERSION,
    }
    binaries = {b for g in toolchain.GROUPS for b in g.binaries}
    assert binaries == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "kwok",
        "kwokctl",
        "helm",
        "lws-manager",
    }
    # A real node: the kubelet of the control plane's release, and containerd 2.x (the 1.36 kubelet refuses 1.x).
    node = {g.name: g for g in toolchain.NODE_GROUPS}
    assert node["kubelet"].version == toolchain.KUBERNETES_VERSION and node["kubelet"].replace_staging
    assert int(node["containerd"].version.lstrip("v").split(".")[0]) >= 2
    assert set(node["cni-plugins"].binaries) == {"bridge", "loopback", "host-local"} and not node["cni-plugins"].linked


def test_kubernetes_binaries_get_their_version_stamped():
    flags = " ".join(toolchain._k8s_version_ldflags("v1.36.3"))
    assert "k8s.io/component-base/version.gitVersion=v1.36.3" in flags
    assert "k8s.io/component-base/version.gitMinor=36" in flags


def test_a_missing_go_toolchain_is_a_clear_error(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    with pytest.raises(toolchain.ToolchainError, match="Go toolchain is not on PATH"):
        toolchain.ensure_tools()


def test_an_unreachable_module_proxy_is_a_clear_error(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))  # nothing cached: go must ask the proxy
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(toolchain.ToolchainError, match=r"module proxy \(GOPROXY=off\) is not reachable or disabled"):
        toolchain.build_group(toolchain.GROUPS[0])


def test_nodes_get_loopback_pod_networks_of_their_own():
    cidrs = [n["spec"]["podCIDR"] for n in nodes.dev_nodes(2, 3)]
    assert cidrs == ["127.96.0.0/24", "127.96.1.0/24", "127.64.0.0/24", "127.64.1.0/24", "127.64.2.0/24"]
    assert all(n["spec"]["podCIDRs"] == [n["spec"]["podCIDR"]] for n in nodes.dev_nodes(1, 1))
    assert nodes.pod_cidr(nodes.GPU_POD_NETWORK, 300) == "127.65.44.0/24"
    assert nodes.pod_cidr(nodes.GPU_POD_NETWORK, nodes.NODES_PER_NETWORK - 1) == "127.95.255.0/24"
    with pytest.raises(ValueError):
        nodes.pod_cidr(nodes.GPU_POD_NETWORK, nodes.NODES_PER_NETWORK)


def test_a_node_keeps_a_pod_network_it_has_and_gets_ours_when_it_has_none():
    wanted = cluster.cluster_objects(0, 3)
    existing = {"gpu-0": ["127.64.0.0/24"], "gpu-1": ["10.0.0.0/24"], "gpu-2": []}
    applied, notes = nodes.keep_pod_cidrs(wanted, existing)
    by_name = {o["metadata"]["name"]: o for o in applied if o["kind"] == "Node"}
    assert by_name["gpu-0"]["spec"]["podCIDRs"] == ["127.64.0.0/24"]
    assert by_name["gpu-1"]["spec"]["podCIDR"] == "10.0.0.0/24" and by_name["gpu-1"]["spec"]["podCIDRs"] == [
        "10.0.0.0/24"
    ]
    assert by_name["gpu-2"]["spec"]["podCIDR"] == "127.64.2.0/24"
    assert applied[0]["kind"] == "StorageClass"
    assert len(notes) == 2 and "gpu-1 keeps podCIDR 10.0.0.0/24" in notes[0] and "gpu-2" in notes[1]


def test_dev_simulate_writes_a_deployments_profile_and_refuses_what_cannot_be_simulated(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    local = cluster.LocalCluster(name="c")
    assert cli.main(["dev", "simulate", "llama", "--acceptance", "0.9", "--name", "c"]) == 1
    assert "no cluster 'c'" in capsys.readouterr().err
    local.directory.mkdir(parents=True)
    (local.directory / "kwok.yaml").write_text("{}")
    assert cli.main(["dev", "simulate", "llama", "-n", "ns", "--acceptance", "0.9", "--rps", "4", "--name", "c"]) == 0
    assert cli.main(["dev", "simulate", "llama", "-n", "ns", "--noise", "2", "--name", "c"]) == 1
    assert "noise: Input should be less than or equal to 1 (got 2.0)" in capsys.readouterr().err
    assert cli.main(["dev", "simulate", "--show", "--name", "c"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {"deployments": {"ns/llama": {"acceptance": 0.9, "requestsPerSecond": 4.0}}}


def test_dev_simulate_gives_a_canary_arm_its_own_acceptance_over_its_deployments_profile(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    local = cluster.LocalCluster(name="c")
    local.directory.mkdir(parents=True)
    (local.directory / "kwok.yaml").write_text("{}")
    argv = ["dev", "simulate", "llama", "-n", "ns", "--acceptance", "0.55", "--rps", "4"]
    assert cli.main([*argv, "--canary-acceptance", "0.7", "--name", "c"]) == 0
    document = simulation_profile.read(local.simulator_profile)
    assert document["deployments"]["ns/llama/canary"] == {"acceptance": 0.7}
    canary = simulation_profile.resolve(document, simulation_profile.canary_key("ns/llama"))
    current = simulation_profile.resolve(document, "ns/llama")
    assert (current.acceptance, canary.acceptance) == (0.55, 0.7)
    assert canary.requests_per_second == current.requests_per_second == 4.0  # the same traffic
    assert cli.main(["dev", "simulate", "llama", "-n", "ns", "--canary-acceptance", "1.5", "--name", "c"]) == 1
    assert "acceptance: Input should be less than or equal to 1 (got 1.5)" in capsys.readouterr().err
    assert podrunner.profile_key(("ns", "llama-canary-x"), canary_pod("runtime-canary")) == "ns/llama/canary"
    assert podrunner.profile_key(("ns", "llama-x"), canary_pod("runtime")) == "ns/llama"


def canary_pod(component: str) -> dict:
    return {"metadata": {"labels": {"app.kubernetes.io/instance": "llama", "app.kubernetes.io/component": component}}}
