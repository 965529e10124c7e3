"""The chart offline: lint, the rendered objects for the values matrix, the values schema, the CRD copy."""

from __future__ import annotations

import dataclasses
import json
import re
import tarfile

import pytest
import yaml

from specdec.api.crd import render_crds
from specdec.kube.leader import ElectionSettings
from specdec.settings import Settings
from tests.chart.expected import (
    CLUSTER_RULES,
    LEASE_RULES,
    OPERATOR_RULES,
    WATCHED,
    flatten,
    flatten_named,
    lease_rules,
)
from tests.chart.tools import (
    CHART,
    CRDS,
    ROOT,
    env_of,
    helm,
    kinds,
    only,
    render,
    restricted_violations,
    set_args,
    template,
)

NAMESPACED = {"watchNamespaces": ["team-a", "team-b"]}
CUSTOM_IMAGES = {
    "image": {"repository": "registry.example.com/ml/specdec-operator", "tag": "0.1.0-rc.2", "pullPolicy": "Always"},
    "runtimeImage": "registry.example.com/ml/specdec-runtime:24.10",
    "buildImage": "registry.example.com/ml/trtllm-build:24.10",
    "imagePullSecrets": [{"name": "regcred"}],
    "workloadImagePullSecrets": ["team-registry"],
}
CUSTOM_GPU = {
    "gpu": {
        "tolerations": [{"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}],
        # maps merge with the chart's defaults: null drops the default label
        "nodeSelector": {"cloud.example.com/accelerator": "h100", "pool": "inference", "nvidia.com/gpu.present": None},
    },
    "engineRetentionSeconds": 3600,
    "resyncSeconds": 60,
    "calibSize": 256,
    "logLevel": "DEBUG",
    "speculation": {"scrapeSeconds": 5, "refreshSeconds": 120},
}


def operator_container(docs):
    deployment = only(docs, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


# -- helm lint ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        {},
        NAMESPACED,
        CUSTOM_IMAGES,
        CUSTOM_GPU,
        {"metrics": {"serviceMonitor": {"enabled": True}}},
        {"replicas": 3},
        {
            "leaderElection": {
                "enabled": False,
                "leaseDurationSeconds": 15,
                "renewDeadlineSeconds": 10,
                "retryPeriodSeconds": 2,
            }
        },
    ],
    ids=["defaults", "namespaced", "custom-images", "custom-gpu", "servicemonitor", "ha", "no-leader-election"],
)
def test_helm_lint_strict(values):
    result = helm("lint", "--strict", str(CHART), *set_args(values))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert "[ERROR]" not in result.stdout and "[WARNING]" not in result.stdout


# -- defaults -------------------------------------------------------------------------------------


def test_defaults_render_cluster_wide_operator():
    docs = render()
    assert kinds(docs) == sorted(
        [
            "ServiceAccount",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "Service",
            "Deployment",
            "Role",
            "RoleBinding",  # leader election, on by default
            "ServiceAccount",
            "Job",
        ]
    )  # the last two: the helm test hooks
    deployment = only(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    assert deployment["metadata"]["namespace"] == "ops"
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-specdec-operator" and pod["automountServiceAccountToken"] is True
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    container = operator_container(docs)
    assert container["image"] == "ghcr.io/specdec-io/specdec-operator:0.1.0"  # appVersion
    assert container["command"] == ["specdec"]
    assert container["args"] == [
        "operator",
        "--liveness",
        "http://0.0.0.0:8080/healthz",
        "--metrics-port",
        "9090",
        "--log-level",
        "INFO",
    ]
    assert container["ports"] == [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert container["resources"]["limits"] == {"memory": "512Mi"}


def test_default_settings_are_the_operators_defaults():
    """The chart's defaults, read back the way the operator reads them, are the operator's own defaults."""
    env = env_of(operator_container(render()))
    assert set(env) >= {
        "SPECDEC_RUNTIME_IMAGE",
        "SPECDEC_BUILD_IMAGE",
        "SPECDEC_GPU_TOLERATIONS",
        "SPECDEC_GPU_NODE_SELECTOR",
        "SPECDEC_ENGINE_RETENTION_SECONDS",
    }
    assert Settings.from_env(env) == Settings()
    # leader election: on, with the operator's default timings, the Lease named like the release
    election = ElectionSettings.from_env(env)
    assert dataclasses.replace(election, identity="") == ElectionSettings(
        enabled=True, namespace="ops", name="rel-specdec-operator"
    )
    assert election.identity.startswith("rel-specdec-operator-6c9f7d5b4-x2x7q_")  # the pod name
    assert json.loads(env["SPECDEC_GPU_TOLERATIONS"]) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert json.loads(env["SPECDEC_GPU_NODE_SELECTOR"]) == {"nvidia.com/gpu.present": "true"}


def test_cluster_role_grants_exactly_what_the_operator_calls():
    docs = render()
    role = only(docs, "ClusterRole")
    assert flatten(role["rules"]) == CLUSTER_RULES
    binding = only(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-specdec-operator", "namespace": "ops"}]
    assert [d["metadata"]["name"] for d in docs if d["kind"] in ("Role", "RoleBinding")] == [
        "rel-specdec-operator-leader-election"
    ] * 2  # only leader election's


@pytest.mark.parametrize("template_file, rules", [("templates/rbac.yaml", 15), ("templates/leader-election.yaml", 2)])
def test_every_rbac_rule_says_why(template_file, rules):
    """Each rule in the rendered ClusterRole and the leader-election Role is preceded by a comment line."""
    text = template(None, "--show-only", template_file).stdout
    lines = text.splitlines()
    rule_lines = [i for i, line in enumerate(lines) if line.lstrip().startswith("- apiGroups:")]
    assert len(rule_lines) == rules
    for i in rule_lines:
        assert lines[i - 1].lstrip().startswith("#"), f"rule without a comment: {lines[i]!r} (after {lines[i - 1]!r})"


def test_operator_pod_is_restricted():
    docs = render()
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    container = operator_container(docs)
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]  # the only writable path


def test_metrics_service_selects_the_operator_pod_only():
    docs = render({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    service = only(docs, "Service")
    pod_labels = only(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]
    monitor = only(docs, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    ]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    test_pod = only(docs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert not service["spec"]["selector"].items() <= test_pod.items()  # the helm test pod is not selected
    assert "ServiceMonitor" not in kinds(render())  # optional: off by default
    assert "Service" not in kinds(render({"metrics": {"service": {"enabled": False}}}))
    failed = template({"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}}, check=False)
    assert failed.returncode != 0 and "metrics.serviceMonitor.enabled needs metrics.service.enabled" in failed.stderr


def test_helm_test_job_is_restricted_and_needs_no_rbac():
    docs = render()
    job = only(docs, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "test"
    sa = only(docs, "ServiceAccount", "rel-specdec-operator-test")
    assert sa["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert int(sa["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        job["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "rel-specdec-operator-test"
    assert restricted_violations(pod) == []
    assert [c["args"][:2] for c in pod["containers"]] == [
        ["explain", "speculativedeployments.spec"],
        ["explain", "enginebuilds.spec"],
        ["explain", "modelcaches.spec"],
    ]
    assert {c["image"] for c in pod["containers"]} == {"registry.k8s.io/kubectl:v1.36.3"}
    # no Role or binding is rendered for the test's ServiceAccount: discovery is open to every account
    assert not [
        d
        for d in docs
        if d["kind"].endswith("Binding") and any(s["name"] == "rel-specdec-operator-test" for s in d["subjects"])
    ]


# -- namespace-scoped -----------------------------------------------------------------------------


def test_namespaced_mode_has_roles_per_namespace_and_no_cluster_rights():
    docs = render(NAMESPACED)
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    # leader election's Role is in the release namespace, as in cluster-wide mode (the Lease is there)
    lease_role = only(docs, "Role", "rel-specdec-operator-leader-election")
    assert lease_role["metadata"]["namespace"] == "ops" and flatten_named(lease_role["rules"]) == LEASE_RULES
    docs = [d for d in docs if not d["metadata"]["name"].endswith("-leader-election")]
    roles = sorted((d for d in docs if d["kind"] == "Role"), key=lambda d: d["metadata"]["namespace"])
    bindings = sorted((d for d in docs if d["kind"] == "RoleBinding"), key=lambda d: d["metadata"]["namespace"])
    assert [r["metadata"]["namespace"] for r in roles] == ["team-a", "team-b"]
    assert [b["metadata"]["namespace"] for b in bindings] == ["team-a", "team-b"]
    for role, binding in zip(roles, bindings, strict=True):
        assert flatten(role["rules"]) == OPERATOR_RULES
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-specdec-operator", "namespace": "ops"}]
    assert operator_container(docs)["args"] == [
        "operator",
        "--liveness",
        "http://0.0.0.0:8080/healthz",
        "--metrics-port",
        "9090",
        "--log-level",
        "INFO",
        "--namespace",
        "team-a",
        "--namespace",
        "team-b",
    ]


def test_gpu_node_labels_are_read_only_where_the_operator_may_list_nodes():
    """Cluster-wide: `list nodes` and SPECDEC_READ_GPU_NODES=true; switched off, or namespaced: neither."""
    for values, reads in (({}, True), ({"gpu": {"readNodeLabels": False}}, False), (NAMESPACED, False)):
        docs = render(values)
        assert Settings.from_env(env_of(operator_container(docs))).read_gpu_nodes is reads, values
        cluster_roles = [d for d in docs if d["kind"] == "ClusterRole"]
        assert any(("", "nodes") in flatten(r["rules"]) for r in cluster_roles) is reads, values


def test_rbac_can_be_left_to_the_cluster_admin():
    docs = render({"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "specdec"}})
    assert not [d for d in docs if "Role" in d["kind"]]
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "specdec"
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"] == ["rel-specdec-operator-test"]


# -- custom images and settings -------------------------------------------------------------------


def test_custom_images_reach_the_operator():
    docs = render(CUSTOM_IMAGES)
    container = operator_container(docs)
    assert container["image"] == "registry.example.com/ml/specdec-operator:0.1.0-rc.2"
    assert container["imagePullPolicy"] == "Always"
    assert only(docs, "Deployment")["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    settings = Settings.from_env(env_of(container))
    assert settings.runtime_image == "registry.example.com/ml/specdec-runtime:24.10"
    assert settings.build_image == "registry.example.com/ml/trtllm-build:24.10"
    assert settings.image_pull_secrets == ("team-registry",)


def test_build_image_defaults_to_the_runtime_image():
    env = env_of(operator_container(render({"runtimeImage": "registry.example.com/rt:1"})))
    assert Settings.from_env(env).build_image == "registry.example.com/rt:1"
    assert Settings.from_env(env).runtime_image_for("pytorch") == "registry.example.com/rt:1-pytorch"
    env = env_of(operator_container(render({"pytorchRuntimeImage": "registry.example.com/trtllm-serve:2"})))
    assert Settings.from_env(env).runtime_image_for("pytorch") == "registry.example.com/trtllm-serve:2"


def test_gpu_placement_and_operator_settings_reach_the_operator():
    container = operator_container(render(CUSTOM_GPU))
    settings = Settings.from_env(env_of(container))
    assert settings.gpu_tolerations == ({"key": "gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"},)
    assert dict(settings.gpu_node_selector) == {"cloud.example.com/accelerator": "h100", "pool": "inference"}
    assert settings.engine_retention_seconds == 3600
    assert settings.resync_seconds == 60
    assert (settings.speculation_scrape_seconds, settings.speculation_refresh_seconds) == (5, 120)
    assert settings.calib_size == 256
    assert container["args"][container["args"].index("--log-level") + 1] == "DEBUG"


def test_large_retention_renders_as_an_integer():
    env = env_of(operator_container(render({"engineRetentionSeconds": 30 * 24 * 3600})))
    assert env["SPECDEC_ENGINE_RETENTION_SECONDS"] == "2592000"  # not 2.592e+06


# -- values.schema.json ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, complaint",
    [
        ({"replicaCount": 2}, "additional properties 'replicaCount' not allowed"),
        (
            {"image": {"repository": "x", "tag": "1", "pullPolicy": "IfNotPresent", "digest": "sha256:0"}},
            "additional properties 'digest' not allowed",
        ),
        (
            {"gpu": {"tolerations": [], "nodeSelector": {}, "resources": {}}},
            "additional properties 'resources' not allowed",
        ),
        (
            {"metrics": {"serviceMonitor": {"enabled": True, "namespace": "monitoring"}}},
            "additional properties 'namespace' not allowed",
        ),
        (
            {"securityContext": {"runAsNonRoot": True, "procMount": "Unmasked"}},
            "additional properties 'procMount' not allowed",
        ),
        (
            {"gpu": {"tolerations": [{"key": "a", "operator": "Exists", "weight": 1}]}},
            "additional properties 'weight' not allowed",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpression": []}]
                        }
                    }
                }
            },
            "additional properties 'matchExpression' not allowed",
        ),
    ],
    ids=["top-level", "image", "gpu", "serviceMonitor", "securityContext", "toleration", "affinity-typo"],
)
def test_schema_rejects_unknown_keys(values, complaint):
    result = template(values, check=False)
    assert result.returncode != 0
    assert complaint in result.stderr


@pytest.mark.parametrize(
    "values, where",
    [
        ({"watchNamespaces": "team-a"}, "/watchNamespaces"),
        ({"watchNamespaces": ["Team_A"]}, "/watchNamespaces/0"),
        ({"engineRetentionSeconds": "1d"}, "/engineRetentionSeconds"),
        ({"engineRetentionSeconds": 1.5}, "/engineRetentionSeconds"),
        ({"image": {"tag": 1}}, "/image/tag"),
        ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
        ({"runtimeImage": ""}, "/runtimeImage"),
        ({"gpu": {"nodeSelector": {"pool": 1}}}, "/gpu/nodeSelector/pool"),
        ({"gpu": {"tolerations": {"key": "a"}}}, "/gpu/tolerations"),
        ({"crds": {"install": "yes"}}, "/crds/install"),
        ({"logLevel": "TRACE"}, "/logLevel"),
        ({"healthPort": 70000}, "/healthPort"),
        ({"resources": {"limits": {"memory": True}}}, "/resources/limits/memory"),
    ],
)
def test_schema_rejects_wrong_types(values, where):
    result = template(values, check=False)
    assert result.returncode != 0, f"{values} was accepted"
    assert f"at '{where}'" in result.stderr, result.stderr


# Values that are Kubernetes objects, passed through whole: documented as one value each (their schema
# still types every field and refuses unknown ones).
KUBERNETES_OBJECTS = {"affinity", "podSecurityContext", "securityContext", "resources"}


def _schema_paths(schema: dict, prefix: tuple = ()) -> set[tuple]:
    """Paths of documented values: properties of objects that refuse unknown keys (free-form maps are leaves)."""
    paths = set()
    for key, sub in schema.get("properties", {}).items():
        paths.add(prefix + (key,))
        if sub.get("type") == "object" and sub.get("additionalProperties") is False and key not in KUBERNETES_OBJECTS:
            paths |= _schema_paths(sub, prefix + (key,))
    return paths


def test_schema_is_strict_everywhere():
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node, where):
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert "additionalProperties" in node, f"{where}: object without additionalProperties"
                assert (
                    node["additionalProperties"] is False
                    or "type" in node["additionalProperties"]
                    or "anyOf" in node["additionalProperties"]
                ), where
            if "properties" in node:
                assert node.get("additionalProperties") is False, (
                    f"{where}: properties without additionalProperties: false"
                )
                for key, sub in node["properties"].items():
                    assert "type" in sub or "anyOf" in sub, f"{where}.{key}: no type"
            for key, sub in node.items():
                walk(sub, f"{where}.{key}")
        elif isinstance(node, list):
            for i, sub in enumerate(node):
                walk(sub, f"{where}[{i}]")

    walk(schema, "$")


def test_values_yaml_and_schema_describe_the_same_values_and_each_is_documented():
    schema = json.loads((CHART / "values.schema.json").read_text())
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)

    def value_paths(node, schema_node, prefix=()):
        paths = set()
        for key, value in node.items():
            paths.add(prefix + (key,))
            sub = schema_node["properties"].get(key, {})
            if isinstance(value, dict) and sub.get("additionalProperties") is False and key not in KUBERNETES_OBJECTS:
                paths |= value_paths(value, sub, prefix + (key,))
        return paths

    assert value_paths(values, schema) == _schema_paths(schema)
    # every documented path has a comment right above its key (a block comment for its parent counts
    # for the parent only)
    lines = text.splitlines()
    for path in sorted(_schema_paths(schema)):
        indent = "  " * (len(path) - 1)
        pattern = re.compile(rf"^{indent}{re.escape(path[-1])}:")
        # the key's line within its parent's block
        start = 0
        for depth, key in enumerate(path[:-1]):
            start = next(
                i for i in range(start, len(lines)) if re.match(rf"^{'  ' * depth}{re.escape(key)}:", lines[i])
            )
        index = next(i for i in range(start, len(lines)) if pattern.match(lines[i]))
        above = lines[index - 1].strip()
        assert above.startswith("#"), f"values.yaml: {'.'.join(path)} has no comment above it"


def test_valid_custom_values_pass_the_schema():
    values = {
        **CUSTOM_IMAGES,
        **CUSTOM_GPU,
        **NAMESPACED,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]}]
                }
            }
        },
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "resources": {"requests": {"cpu": 0.5, "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
        "podAnnotations": {"a": "b"},
        "serviceAccount": {"annotations": {"iam": "role"}},
    }
    docs = render(values)
    pod = only(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["affinity"] == values["affinity"] and pod["tolerations"] == values["tolerations"]


# -- CRDs -----------------------------------------------------------------------------------------


def test_chart_crd_copy_matches_crds_and_the_models():
    """files/crds is crds/ byte for byte, and both are what `specdec crds` generates from the models.
    Refresh with `specdec crds -o charts/specdec-operator/files/crds`."""
    copy = {p.name: p.read_text() for p in sorted((CHART / "files" / "crds").glob("*.yaml"))}
    source = {p.name: p.read_text() for p in sorted(CRDS.glob("*.yaml"))}
    assert copy == source, (
        "charts/specdec-operator/files/crds drifted from crds/: run "
        "`specdec crds && specdec crds -o charts/specdec-operator/files/crds`"
    )
    assert copy == render_crds()


def test_rendered_crds_are_the_files_plus_the_keep_policy():
    docs = render()
    rendered = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    assert len(rendered) == 3
    for path in sorted(CRDS.glob("*.yaml")):
        original = yaml.safe_load(path.read_text())
        crd = rendered.pop(original["metadata"]["name"])
        assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
        assert crd == original
    assert not rendered


def test_crds_can_be_left_out():
    assert "CustomResourceDefinition" not in kinds(render({"crds": {"install": False}}))


def test_packaged_chart_carries_the_crds(tmp_path):
    helm("package", str(CHART), "--destination", str(tmp_path))
    package = tmp_path / "specdec-operator-0.1.0.tgz"
    with tarfile.open(package) as tar:
        names = tar.getnames()
    assert "specdec-operator/files/crds/specdec.io_speculativedeployments.yaml" in names
    assert "specdec-operator/values.schema.json" in names
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == ("0.1.0", "0.1.0")


# -- RBAC against the operator's code -------------------------------------------------------------


def _kopf_watched() -> set[tuple[str, str]]:
    import kopf

    import specdec.handlers  # noqa: F401  (registers the handlers in kopf's default registry)

    handlers = kopf.get_default_registry()._watching.get_all_handlers()
    return {(h.selector.group or "", h.selector.plural or h.selector.any_name) for h in handlers}


def test_rbac_covers_every_watch_the_operator_registers():
    """kopf lists and watches each resource the operator has a handler for: the ClusterRole must allow
    exactly those (a new watch in handlers.py without a rule here fails this test, not a cluster)."""
    rules = flatten(only(render(), "ClusterRole")["rules"])
    watched = _kopf_watched()
    assert watched == set(WATCHED)
    for resource in watched:
        assert {"list", "watch"} <= rules.get(resource, set()), resource
    assert {r for r, verbs in rules.items() if "watch" in verbs} == watched


def test_rbac_covers_every_kind_the_operator_calls():
    from specdec.kube.client import KINDS

    rules = flatten(only(render(), "ClusterRole")["rules"])
    for kind, where in KINDS.items():
        group = where.api_version.rpartition("/")[0]
        assert (group, where.plural) in rules, f"{kind}: no rule for {group or 'core'}/{where.plural}"


def test_the_operator_log_check_flags_every_refusal(tmp_path):
    """The cluster tests' 403 check (ChartOperator.forbidden) must flag any refused operator call."""
    from tests.chart.cluster_helpers import ChartOperator

    log = tmp_path / "operator.log"
    log.write_text(
        "ERROR specdec: resync pass failed\n"
        "kubernetes.client.exceptions.ForbiddenException: (403)\n"
        'HTTP response body: {"message":"configmaps is forbidden: cannot list resource \\"configmaps\\""}\n'
        "INFO kopf.objects: Handler 'engine_build_event' succeeded.\n"
        "2026-11-26 04:48:13,403 INFO specdec.kube.leader: released Lease ops/up-specdec-operator\n"
    )
    runner = ChartOperator.__new__(ChartOperator)
    runner.log_path = log
    assert runner.forbidden() == [
        "kubernetes.client.exceptions.ForbiddenException: (403)",
        'HTTP response body: {"message":"configmaps is forbidden: cannot list resource \\"configmaps\\""}',
    ]


# -- high availability: replicas, leader election, PodDisruptionBudget ----------------------------

HA = {"replicas": 2}
NO_ELECTION = {
    "leaderElection": {
        "enabled": False,
        "leaseDurationSeconds": 15,
        "renewDeadlineSeconds": 10,
        "retryPeriodSeconds": 2,
    }
}


def test_two_replicas_elect_a_leader_and_keep_one_pod_through_drains():
    docs = render(
        {
            **HA,
            "leaderElection": {
                "enabled": True,
                "leaseDurationSeconds": 30,
                "renewDeadlineSeconds": 20,
                "retryPeriodSeconds": 5,
            },
        }
    )
    deployment = only(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pdb = only(docs, "PodDisruptionBudget")
    assert pdb["metadata"]["namespace"] == "ops"
    assert pdb["spec"]["minAvailable"] == 1 and "maxUnavailable" not in pdb["spec"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert (
        not pdb["spec"]["selector"]["matchLabels"].items()
        <= only(docs, "Job")["spec"]["template"]["metadata"]["labels"].items()
    )  # not the helm test pod
    container = operator_container(docs)
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in container["env"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]
    election = ElectionSettings.from_env(env_of(container))
    assert (election.enabled, election.namespace, election.name) == (True, "ops", "rel-specdec-operator")
    assert (election.lease_seconds, election.renew_deadline, election.retry_period) == (30, 20, 5)
    # the Lease the operator uses is the one its Role names, in the namespace the Role is in
    role = only(docs, "Role", "rel-specdec-operator-leader-election")
    assert role["metadata"]["namespace"] == election.namespace
    assert flatten_named(role["rules"]) == lease_rules(election.name)
    binding = only(docs, "RoleBinding", "rel-specdec-operator-leader-election")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "rel-specdec-operator-leader-election",
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "rel-specdec-operator", "namespace": "ops"}]


@pytest.mark.parametrize("replicas", [0, 1])
def test_no_disruption_budget_without_standbys(replicas):
    """With one pod, minAvailable 1 would block every node drain."""
    docs = render({"replicas": replicas})
    assert "PodDisruptionBudget" not in kinds(docs)
    assert only(docs, "Deployment")["spec"]["replicas"] == replicas


def test_without_leader_election_one_replica_recreated_and_no_lease_rights():
    docs = render(NO_ELECTION)
    spec = only(docs, "Deployment")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding", "PodDisruptionBudget")]
    env = env_of(operator_container(docs))
    assert env["SPECDEC_LEADER_ELECTION"] == "false" and not ElectionSettings.from_env(env).enabled
    assert not [k for k in env if k.startswith("SPECDEC_LEADER_ELECTION_")]


def test_replicas_above_one_need_leader_election():
    refused = template({**HA, **NO_ELECTION}, check=False)
    assert refused.returncode != 0
    assert "replicas: 2 needs leaderElection.enabled=true" in refused.stderr, refused.stderr


@pytest.mark.parametrize(
    "timing, complaint",
    [
        (
            {"leaseDurationSeconds": 10, "renewDeadlineSeconds": 10, "retryPeriodSeconds": 2},
            "leaderElection.leaseDurationSeconds (10) must be greater than leaderElection.renewDeadlineSeconds (10)",
        ),
        (
            {"leaseDurationSeconds": 15, "renewDeadlineSeconds": 6, "retryPeriodSeconds": 5},
            "leaderElection.renewDeadlineSeconds (6) must be greater than 1.2 × leaderElection.retryPeriodSeconds (5)",
        ),
    ],
)
def test_lease_timings_the_operator_would_refuse_are_refused_at_install(timing, complaint):
    result = template({"leaderElection": {"enabled": True, **timing}}, check=False)
    assert result.returncode != 0 and complaint in result.stderr, result.stderr
    with pytest.raises(ValueError):  # the operator's own check agrees
        ElectionSettings.from_env(
            {
                "SPECDEC_LEADER_ELECTION": "true",
                "POD_NAMESPACE": "ops",
                "SPECDEC_LEADER_ELECTION_LEASE_SECONDS": str(timing["leaseDurationSeconds"]),
                "SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": str(timing["renewDeadlineSeconds"]),
                "SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS": str(timing["retryPeriodSeconds"]),
            }
        )


@pytest.mark.parametrize(
    "values, where",
    [
        ({"replicas": -1}, "/replicas"),
        ({"replicas": "2"}, "/replicas"),
        ({"leaderElection": {"enabled": "true"}}, "/leaderElection/enabled"),
        ({"leaderElection": {"leaseDurationSeconds": 1.5}}, "/leaderElection/leaseDurationSeconds"),
        ({"leaderElection": {"retryPeriodSeconds": 0}}, "/leaderElection/retryPeriodSeconds"),
    ],
)
def test_schema_types_the_ha_values(values, where):
    result = template(values, check=False)
    assert result.returncode != 0, f"{values} was accepted"
    assert f"at '{where}'" in result.stderr, result.stderr


def test_schema_refuses_unknown_leader_election_keys():
    result = template({"leaderElection": {"enabled": True, "leaseName": "x"}}, check=False)
    assert result.returncode != 0 and "additional properties 'leaseName' not allowed" in result.stderr


def test_lease_rules_are_the_calls_of_the_leader_election_code():
    """The Role allows exactly the Lease calls made by the library's LeaseLock (as installed) and by
    specdec.kube.leader (the release on shutdown): a new call in either fails here, not in a cluster."""
    import inspect

    from kubernetes.leaderelection.resourcelock import leaselock

    verb_of = {
        "read": "get",
        "create": "create",
        "replace": "update",
        "patch": "patch",
        "delete": "delete",
        "list": "list",
        "watch": "watch",
        "delete_collection": "deletecollection",
    }
    sources = inspect.getsource(leaselock) + (ROOT / "operator" / "specdec" / "kube" / "leader.py").read_text()
    calls = set(
        re.findall(r"\b(read|create|replace|patch|delete_collection|delete|list|watch)_namespaced_lease\b", sources)
    )
    assert calls == {"read", "create", "replace"}
    granted = set().union(*flatten_named(only(render(), "Role")["rules"]).values())
    assert granted == {verb_of[c] for c in calls}


@pytest.mark.parametrize("values", [None, NAMESPACED], ids=["cluster-wide", "namespaced"])
def test_no_role_grants_a_remote_shell_into_pods(values):
    """Multi-node targets start MPI over SSH between their own pods: no Role or ClusterRole the chart renders
    allows pods/exec (or attach), nor a wildcard that would."""
    roles = [d for d in render(values) if d["kind"] in ("Role", "ClusterRole")]
    assert roles
    for role in roles:
        for rule in role.get("rules") or []:
            resources = set(rule.get("resources") or [])
            assert not resources & {"pods/exec", "pods/attach", "*"}, (role["metadata"]["name"], rule)
