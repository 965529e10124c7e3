"""The chart on a real API server: install, least privilege, restricted pods, upgrade, uninstall.

Pods never run here (kwok plays the kubelets), so the operator runs as a local process, but with
exactly what the chart gives its pod: the Deployment's args and env, and a token of the chart's
ServiceAccount (TokenRequest), never admin credentials. A missing RBAC rule therefore fails the
SpeculativeDeployment's way to Ready. Every namespace involved enforces Pod Security `restricted`,
so the API server refuses any pod of the chart (operator, helm test) or of the operator (build
Jobs, runtime Deployment) that does not pass it.

Deviation, on purpose: the cluster-wide install's operator is started with `--namespace <test
namespace>` added, so that it does not reconcile other namespaces of a shared cluster (e.g. `make
up`'s sample, with its own operator). Its cluster-scope list/watch rights are checked separately
with SelfSubjectAccessReviews made with its token.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec.api.models import GROUP, VERSION
from specdec.builders.common import LABEL_ENGINE_BUILD, LABEL_MODEL_CACHE
from specdec.kube.leader import ElectionSettings, Leadership
from tests.chart.cluster_helpers import SD, ChartOperator, allowed, can_i_list, client_for, service_account_kubeconfig
from tests.chart.expected import CLUSTER_RULES, FORBIDDEN, OPERATOR_RULES, WATCHED
from tests.chart.tools import CHART, CRDS, kubectl
from tests.conftest import free_port
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

# Ready needs the build Jobs, the runtime rollout and kopf's watches (no resync pass within this time
# with the chart's default resyncSeconds: 300). kopf first retries its refused namespace listing for
# about a minute (see ChartOperator.forbidden), hence the margin.
READY_TIMEOUT = 120
CRD_NAMES = ["enginebuilds.specdec.io", "modelcaches.specdec.io", "speculativedeployments.specdec.io"]


def fullname(release: str) -> str:
    return f"{release}-specdec-operator"


def start_operator(
    kube: Kube,
    kubeconfig: Path,
    release: str,
    namespace: str,
    tmp_path: Path,
    chart_operators: list,
    extra_args: list[str] | None = None,
    name: str = "operator",
) -> ChartOperator:
    deployment = kube.apps.read_namespaced_deployment(fullname(release), namespace)
    sa_kubeconfig = service_account_kubeconfig(
        kube,
        kubeconfig,
        namespace,
        deployment.spec.template.spec.service_account_name,
        tmp_path / f"{name}-kubeconfig.yaml",
    )
    runner = ChartOperator(deployment, sa_kubeconfig, tmp_path / f"{name}.log", free_port(), extra_args)
    chart_operators.append(runner)
    runner.start()
    return runner


def assert_pod_security_enforced(kube: Kube, namespace: str) -> None:
    """Sanity: the API server really refuses a non-restricted pod here (else the tests prove nothing)."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]},
    }
    # On a fresh cluster the namespace's default ServiceAccount may not exist yet: the pod would be
    # refused for that (also a 403) before Pod Security is asked.
    wait_for(
        lambda: kube.core.list_namespaced_service_account(namespace, field_selector="metadata.name=default").items,
        f"ServiceAccount default in {namespace}",
    )
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(namespace, pod)
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body


def assert_crds_match_the_repository(kube: Kube, release: str, namespace: str) -> None:
    for path in sorted(CRDS.glob("*.yaml")):
        want = yaml.safe_load(path.read_text())
        crd = kube.api.sanitize_for_serialization(kube.apiext.read_custom_resource_definition(want["metadata"]["name"]))
        annotations = crd["metadata"]["annotations"]
        assert annotations["helm.sh/resource-policy"] == "keep"
        assert annotations["meta.helm.sh/release-name"] == release
        assert annotations["meta.helm.sh/release-namespace"] == namespace
        for version, served in zip(want["spec"]["versions"], crd["spec"]["versions"], strict=True):
            assert served["additionalPrinterColumns"] == version["additionalPrinterColumns"]
            assert (
                served["schema"]["openAPIV3Schema"]["properties"]["spec"]
                == version["schema"]["openAPIV3Schema"]["properties"]["spec"]
            )
        assert any(c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])


def jobs(kube: Kube, namespace: str, label: str) -> list:
    return kube.batch.list_namespaced_job(namespace, label_selector=label).items


def assert_runtime_is_up(kube: Kube, namespace: str, sd: SD) -> None:
    """The operator's pods exist and passed `restricted`: fetches and builds completed, the runtime is ready."""
    for label in (LABEL_MODEL_CACHE, LABEL_ENGINE_BUILD):  # target and draft: two of each
        found = jobs(kube, namespace, label)
        assert len(found) == 2 and all(j.status.succeeded == 1 for j in found), label
    deployment = kube.apps.read_namespaced_deployment(sd.name, namespace)
    assert deployment.status.ready_replicas == 1
    selector = ",".join(f"{k}={v}" for k, v in deployment.spec.selector.match_labels.items())
    pods = kube.core.list_namespaced_pod(namespace, label_selector=selector).items
    assert len(pods) == 1 and pods[0].status.phase == "Running"
    assert pods[0].spec.security_context.run_as_non_root is True


def test_cluster_wide_install_reconciles_with_the_charts_own_credentials(
    kube: Kube, kubeconfig: Path, namespace: str, releases, restricted_namespace, chart_operators, tmp_path
):
    ops = restricted_namespace(prefix="ops")
    work = restricted_namespace(namespace)
    assert_pod_security_enforced(kube, ops)
    assert_pod_security_enforced(kube, work)
    release = "cw"

    installed = releases.install(release, ops)
    assert f'installed as release "{release}" in namespace "{ops}"' in installed.stdout  # NOTES.txt
    assert f"helm test {release} -n {ops}" in installed.stdout
    assert "It watches SpeculativeDeployments in every namespace" in installed.stdout
    assert_crds_match_the_repository(kube, release, ops)
    deployment = kube.apps.read_namespaced_deployment(fullname(release), ops)
    assert deployment.status.ready_replicas == 1  # its pod passed `restricted` (kwok then marks it ready)
    assert kube.rbac.read_cluster_role(fullname(release)).rules

    # helm test: the hook Job's pod passes `restricted` and completes (kwok completes Job pods) ...
    tested = releases.helm("test", release, "--namespace", ops, "--timeout", "120s")
    assert tested.stdout.count("Phase:          Succeeded") == 2, tested.stdout
    # ... and what its containers would run works with a ServiceAccount that has no RBAC rules at all.
    hooks = [d for d in yaml.safe_load_all(releases.helm("get", "hooks", release, "-n", ops).stdout) if d]
    job = next(d for d in hooks if d["kind"] == "Job")
    kube.core.create_namespaced_service_account(ops, {"metadata": {"name": "no-rights"}})
    probe = service_account_kubeconfig(kube, kubeconfig, ops, "no-rights", tmp_path / "no-rights.yaml")
    for container in job["spec"]["template"]["spec"]["containers"]:
        args = [a.replace("/tmp/", f"{tmp_path}/") for a in container["args"]]
        out = kubectl(*args, kubeconfig=probe).stdout
        assert "GROUP:      specdec.io" in out and "FIELD: spec <Object>" in out

    sd = SD(kube, work)
    sd.assert_untouched()

    # least privilege, checked with the operator's own token
    operator = start_operator(kube, kubeconfig, release, ops, tmp_path, chart_operators, ["--namespace", work])
    api = client_for(operator.kubeconfig)
    for (group, resource), verbs in OPERATOR_RULES.items():
        for verb in verbs:
            assert allowed(api, group, resource, verb, work), (group, resource, verb)
    for group, resource in WATCHED:  # kopf's cluster-wide watches, the resync pass's cluster-wide lists
        assert allowed(api, group, resource, "list", None) and allowed(api, group, resource, "watch", None)
    for group, resource, verb in FORBIDDEN:
        assert not allowed(api, group, resource, verb, work), (group, resource, verb)
        assert not allowed(api, group, resource, verb, None), (group, resource, verb)
    assert allowed(api, "", "nodes", "list", None)  # their GPU labels, for admission
    table, rows = can_i_list(kubeconfig, work, f"system:serviceaccount:{ops}:{fullname(release)}")
    assert rows == CLUSTER_RULES, table
    assert "*" not in table.replace("[*]", "").split("Non-Resource URLs")[0]  # no wildcard resource or verb
    assert not any(r[1].startswith("pods/") for r in rows)
    # Secrets: create only (a multi-node group's SSH keys), never read
    assert [verbs for (_, resource), verbs in rows.items() if resource.startswith("secrets")] == [{"create"}]

    obj = sd.wait_ready(timeout=READY_TIMEOUT)
    assert obj["status"]["phase"] == "Ready" and obj["status"]["readyReplicas"] == 1
    assert sorted(b["status"]["phase"] for b in sd.engine_builds()) == ["Succeeded", "Succeeded"]
    assert_runtime_is_up(kube, work, sd)
    wanted = {"EngineBuildCreated", "RuntimeApplied", "Ready"}  # posted from a queue, after the status
    wait_for(lambda: {e.reason for e in kube.events_for(work, sd.name)} >= wanted, f"Events {sorted(wanted)}")
    assert operator.forbidden() == []


def test_namespaced_install_needs_no_cluster_wide_rights(
    kube: Kube, kubeconfig: Path, namespace: str, releases, restricted_namespace, chart_operators, tmp_path
):
    ops = restricted_namespace(prefix="ops")
    work = restricted_namespace(namespace)
    other = restricted_namespace(prefix="other")
    unwatched = restricted_namespace(prefix="unwatched")
    release = "ns"

    installed = releases.install(release, ops, {"watchNamespaces": [work, other]})
    assert (
        f"It watches only these namespaces (Roles there, no cluster-wide rights): {work}, {other}." in installed.stdout
    )
    assert f"kubectl -n {work} apply -f examples/llama-2-13b-draft-7b-logits.yaml" in installed.stdout
    subject = f"system:serviceaccount:{ops}:{fullname(release)}"
    cluster_bindings = kube.rbac.list_cluster_role_binding().items
    assert not [
        b for b in cluster_bindings if any(s.kind == "ServiceAccount" and s.namespace == ops for s in b.subjects or [])
    ]
    for ns in (work, other):
        assert kube.rbac.read_namespaced_role(fullname(release), ns).rules
    with pytest.raises(ApiException) as missing:
        kube.rbac.read_namespaced_role(fullname(release), unwatched)
    assert missing.value.status == 404

    deployment = kube.apps.read_namespaced_deployment(fullname(release), ops)
    args = deployment.spec.template.spec.containers[0].args
    assert args[-4:] == ["--namespace", work, "--namespace", other]
    sd = SD(kube, work)
    sd.assert_untouched()
    operator = start_operator(kube, kubeconfig, release, ops, tmp_path, chart_operators)  # the chart's args as-is
    api = client_for(operator.kubeconfig)
    for ns in (work, other):
        assert allowed(api, "specdec.io", "speculativedeployments", "watch", ns)
        assert allowed(api, "apps", "deployments", "create", ns)
    assert not allowed(api, "", "nodes", "list", None)  # so the operator does not try (SPECDEC_READ_GPU_NODES)
    for group, resource in WATCHED:
        assert not allowed(api, group, resource, "list", None), (group, resource)  # no cluster scope
        assert not allowed(api, group, resource, "list", unwatched), (group, resource)
    for group, resource, verb in FORBIDDEN:
        assert not allowed(api, group, resource, verb, work), (group, resource, verb)
    table, rows = can_i_list(kubeconfig, work, subject)
    assert rows == OPERATOR_RULES, table
    _, unwatched_rows = can_i_list(kubeconfig, unwatched, subject)
    assert unwatched_rows == {}

    sd.wait_ready(timeout=READY_TIMEOUT)
    assert_runtime_is_up(kube, work, sd)
    assert operator.forbidden() == []


def previous_chart(tmp_path: Path) -> Path:
    """Stand-in for the previous chart release (there is none yet: 0.1.0 is the first).

    The chart as it is, relabelled 0.0.9 (so its default operator image is the 0.0.9 tag), with an older
    SpeculativeDeployment CRD that lacks the `Reason` printer column. Upgrading must bring the
    column back, which only happens because the CRDs are templates (Helm never upgrades crds/)."""
    chart = tmp_path / "previous" / "specdec-operator"
    shutil.copytree(CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    meta.update(version="0.0.9", appVersion="0.0.9")
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    crd_path = chart / "files" / "crds" / "specdec.io_speculativedeployments.yaml"
    crd = yaml.safe_load(crd_path.read_text())
    for version in crd["spec"]["versions"]:
        version["additionalPrinterColumns"] = [c for c in version["additionalPrinterColumns"] if c["name"] != "Reason"]
    crd_path.write_text(yaml.safe_dump(crd, sort_keys=False))
    return chart


def printer_columns(kube: Kube) -> list[str]:
    crd = kube.apiext.read_custom_resource_definition("speculativedeployments.specdec.io")
    return [c.name for c in crd.spec.versions[0].additional_printer_columns]


def test_upgrade_from_the_previous_version_keeps_deployments_ready(
    kube: Kube, kubeconfig: Path, namespace: str, releases, restricted_namespace, chart_operators, tmp_path
):
    ops = restricted_namespace(prefix="ops")
    work = restricted_namespace(namespace)
    release = "up"
    values = {"resyncSeconds": 5}  # the resync pass drives this test; watches are the other tests' concern

    releases.install(release, ops, values, chart=previous_chart(tmp_path))
    assert "Reason" not in printer_columns(kube)  # the old CRD is what the cluster serves now
    before_image = kube.apps.read_namespaced_deployment(fullname(release), ops).spec.template.spec.containers[0].image
    assert before_image.endswith(":0.0.9")
    sd = SD(kube, work)
    sd.assert_untouched()
    old = start_operator(kube, kubeconfig, release, ops, tmp_path, chart_operators, ["--namespace", work], name="old")
    sd.wait_ready(timeout=READY_TIMEOUT)
    runtime = kube.apps.read_namespaced_deployment(sd.name, work)
    builds = sorted(b["metadata"]["name"] for b in sd.engine_builds())
    old.stop()  # as Recreate would (without leader election, two operators must not overlap)

    releases.upgrade(release, ops, values)
    history = releases.helm("history", release, "-n", ops, "-o", "yaml").stdout
    assert [(h["revision"], h["chart"], h["status"]) for h in yaml.safe_load(history)] == [
        (1, "specdec-operator-0.0.9", "superseded"),
        (2, "specdec-operator-0.1.0", "deployed"),
    ]
    assert printer_columns(kube) == [
        c["name"]
        for c in yaml.safe_load((CRDS / "specdec.io_speculativedeployments.yaml").read_text())["spec"]["versions"][0][
            "additionalPrinterColumns"
        ]
    ]
    assert_crds_match_the_repository(kube, release, ops)
    operator_deployment = kube.apps.read_namespaced_deployment(fullname(release), ops)
    assert operator_deployment.spec.template.spec.containers[0].image.endswith(":0.1.0")
    assert operator_deployment.status.ready_replicas == 1
    # the user's deployment was not touched by the upgrade and is still Ready
    assert sd.ready()
    after = kube.apps.read_namespaced_deployment(sd.name, work)
    assert (after.metadata.uid, after.metadata.generation) == (runtime.metadata.uid, runtime.metadata.generation)
    assert after.status.ready_replicas == 1

    # the upgraded operator (new args/env, same ServiceAccount) carries on: same engines, a change applies
    new = start_operator(kube, kubeconfig, release, ops, tmp_path, chart_operators, ["--namespace", work], name="new")
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, work, "speculativedeployments", sd.name, {"spec": {"runtime": {"replicas": 2}}}
    )
    obj = sd.wait_ready(timeout=READY_TIMEOUT)
    assert obj["status"]["readyReplicas"] == 2
    assert sorted(b["metadata"]["name"] for b in sd.engine_builds()) == builds  # nothing rebuilt
    assert len(jobs(kube, work, LABEL_ENGINE_BUILD)) == 2
    assert kube.apps.read_namespaced_deployment(sd.name, work).metadata.uid == runtime.metadata.uid
    assert old.forbidden() == [] and new.forbidden() == []


def test_uninstall_keeps_crds_and_user_objects(
    kube: Kube, kubeconfig: Path, namespace: str, releases, restricted_namespace, chart_operators, tmp_path
):
    ops = restricted_namespace(prefix="ops")
    work = restricted_namespace(namespace)
    release = "un"
    releases.install(release, ops, {"resyncSeconds": 5})
    sd = SD(kube, work)
    sd.assert_untouched()
    operator = start_operator(kube, kubeconfig, release, ops, tmp_path, chart_operators, ["--namespace", work])
    sd.wait_ready(timeout=READY_TIMEOUT)
    builds = sorted(b["metadata"]["name"] for b in sd.engine_builds())
    operator.stop()
    assert operator.forbidden() == []

    removed = releases.uninstall(release, ops)
    assert "These resources were kept due to the resource policy" in removed.stdout
    for name in CRD_NAMES:
        assert f"[CustomResourceDefinition] {name}" in removed.stdout
    # the chart's own objects are gone ...
    for read in (
        lambda: kube.apps.read_namespaced_deployment(fullname(release), ops),
        lambda: kube.core.read_namespaced_service_account(fullname(release), ops),
        lambda: kube.core.read_namespaced_service(f"{fullname(release)}-metrics", ops),
        lambda: kube.rbac.read_cluster_role(fullname(release)),
        lambda: kube.rbac.read_cluster_role_binding(fullname(release)),
    ):
        with pytest.raises(ApiException) as gone:
            read()
        assert gone.value.status == 404
    assert releases.helm("list", "-n", ops, "-q").stdout.strip() == ""
    # ... the CRDs and everything of the user's stay
    for name in CRD_NAMES:
        crd = kube.apiext.read_custom_resource_definition(name)
        assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    assert sd.ready()
    assert sorted(b["metadata"]["name"] for b in sd.engine_builds()) == builds
    assert kube.apps.read_namespaced_deployment(sd.name, work).status.ready_replicas == 1
    assert kube.core.read_namespaced_service(sd.name, work)
    assert kube.core.read_namespaced_config_map(f"{sd.name}-runtime", work)
    assert len(jobs(kube, work, LABEL_ENGINE_BUILD)) == 2
    # and a later install of the chart takes the kept CRDs over again
    wait_for(lambda: releases.helm("status", release, "-n", ops, check=False).returncode != 0, "release gone")
    releases.install(release, ops)
    assert_crds_match_the_repository(kube, release, ops)


def test_two_replicas_elect_one_leader_on_the_charts_lease_rights(
    kube: Kube, kubeconfig: Path, releases, restricted_namespace, tmp_path
):
    """Two candidates with the chart pod's leader-election env and its ServiceAccount's token: the Role
    lets them create, renew, take over and release the release's Lease, and nothing else."""
    ops = restricted_namespace(prefix="ops")
    release = "ha"
    releases.install(release, ops, {"replicas": 2})
    deployment = kube.apps.read_namespaced_deployment(fullname(release), ops)
    assert deployment.status.ready_replicas == 2
    pdb = kube.api.sanitize_for_serialization(
        client_policy(kube).read_namespaced_pod_disruption_budget(fullname(release), ops)
    )
    assert pdb["spec"]["minAvailable"] == 1
    wait_for(
        lambda: (
            client_policy(kube).read_namespaced_pod_disruption_budget(fullname(release), ops).status.disruptions_allowed
            == 1
        ),
        "the PDB to allow one disruption of two pods",
    )

    (container,) = deployment.spec.template.spec.containers
    sa_kubeconfig = service_account_kubeconfig(
        kube, kubeconfig, ops, deployment.spec.template.spec.service_account_name, tmp_path / "sa.yaml"
    )
    candidates = []
    for pod in ("a", "b"):
        fields = {"metadata.namespace": ops, "metadata.name": f"{fullname(release)}-{pod}"}
        env = {
            e.name: e.value if e.value_from is None else fields[e.value_from.field_ref.field_path]
            for e in container.env
        }
        settings = ElectionSettings.from_env(env)
        assert (settings.enabled, settings.namespace, settings.name) == (True, ops, fullname(release))
        candidates.append(
            Leadership(
                client_for(sa_kubeconfig),
                settings.namespace,
                settings.name,
                settings.identity,
                settings.lease_seconds,
                settings.renew_deadline,
                settings.retry_period,
            )
        )
    try:
        for candidate in candidates:
            candidate.start()
        leader = wait_for(lambda: [c for c in candidates if c.is_leader()], "a leader", timeout=20)
        assert len(leader) == 1
        standby = next(c for c in candidates if c is not leader[0])
        stopped = time.monotonic()
        leader[0].stop()  # released: the standby takes over within a retry period, not a lease duration
        wait_for(standby.is_leader, "the standby to lead", timeout=settings.lease_seconds)
        assert time.monotonic() - stopped < settings.retry_period + 2
    finally:
        for candidate in candidates:
            candidate.stop()

    api = client_for(sa_kubeconfig)
    for verb in ("get", "update"):
        assert allowed_named(api, "leases", verb, ops, fullname(release))
        assert not allowed_named(api, "leases", verb, ops, "someone-elses-lease")
    for verb in ("list", "watch", "patch", "delete"):
        assert not allowed_named(api, "leases", verb, ops, fullname(release)), verb
    assert allowed(api, "coordination.k8s.io", "leases", "create", ops)
    assert kube.api.sanitize_for_serialization(
        kube.rbac.read_namespaced_role(f"{fullname(release)}-leader-election", ops)
    )["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [fullname(release)],
            "verbs": ["get", "update"],
        },
    ]


def client_policy(kube: Kube) -> client.PolicyV1Api:
    return client.PolicyV1Api(kube.api)


def allowed_named(api: client.ApiClient, resource: str, verb: str, namespace: str, name: str) -> bool:
    """SelfSubjectAccessReview on one named Lease (`allowed` asks about any object of a resource)."""
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "group": "coordination.k8s.io",
                    "resource": resource,
                    "verb": verb,
                    "namespace": namespace,
                    "name": name,
                }
            },
        }
    )
    return bool(review.status.allowed)
