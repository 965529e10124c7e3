"""The test bed is a real cluster: controllers, scheduler, admission, RBAC and GC all act."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec_dev.nodes import GPU_RESOURCE, GPUS_PER_NODE
from tests.kube_helpers import Kube, condition, wait_for

pytestmark = pytest.mark.cluster

GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def _pod(name: str, **spec) -> dict:
    container = {"name": "main", "image": "registry.invalid/app:1", **spec.pop("container", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container], **spec}}


def test_deployment_becomes_available(kube: Kube, namespace: str):
    labels = {"app": "web"}
    kube.apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "web", "image": "registry.invalid/web:1"}]},
                },
            },
        },
    )
    deployment = wait_for(
        lambda: (
            (d := kube.apps.read_namespaced_deployment("web", namespace))
            and condition(d, "Available") == "True"
            and d.status.ready_replicas == 2
            and d
        ),
        "Deployment web Available with 2 ready replicas",
    )
    assert deployment.status.available_replicas == 2


def test_job_completes(kube: Kube, namespace: str):
    kube.batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "once"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "registry.invalid/job:1"}],
                    }
                },
            },
        },
    )
    job = wait_for(
        lambda: (j := kube.batch.read_namespaced_job("once", namespace)) and condition(j, "Complete") == "True" and j,
        "Job once Complete",
    )
    assert job.status.succeeded == 1


def test_gpu_pod_lands_on_gpu_node(kube: Kube, namespace: str):
    kube.core.create_namespaced_pod(
        namespace, _pod("gpu", tolerations=[GPU_TOLERATION], container={"resources": {"limits": {GPU_RESOURCE: "2"}}})
    )
    pod = wait_for(
        lambda: (p := kube.core.read_namespaced_pod("gpu", namespace)).spec.node_name and p, "pod gpu scheduled"
    )
    node = kube.core.read_node(pod.spec.node_name)
    assert node.status.allocatable[GPU_RESOURCE] == str(GPUS_PER_NODE)
    assert node.metadata.labels[f"{GPU_RESOURCE}.present"] == "true"
    wait_for(lambda: kube.core.read_namespaced_pod("gpu", namespace).status.phase == "Running", "pod gpu Running")


def test_gpu_pod_without_toleration_or_with_too_many_gpus_stays_pending(kube: Kube, namespace: str):
    kube.core.create_namespaced_pod(
        namespace,
        _pod(
            "too-many",
            tolerations=[GPU_TOLERATION],
            container={"resources": {"limits": {GPU_RESOURCE: str(GPUS_PER_NODE + 1)}}},
        ),
    )
    kube.core.create_namespaced_pod(
        namespace, _pod("untolerated", container={"resources": {"limits": {GPU_RESOURCE: "1"}}})
    )
    for name, why in (("too-many", f"Insufficient {GPU_RESOURCE}"), ("untolerated", "untolerated taint")):
        event = wait_for(
            lambda name=name: next(
                (e for e in kube.events_for(namespace, name) if e.reason == "FailedScheduling"), None
            ),
            f"FailedScheduling event for pod {name}",
        )
        assert why in event.message, event.message
        pod = kube.core.read_namespaced_pod(name, namespace)
        assert pod.status.phase == "Pending" and not pod.spec.node_name


def test_restricted_pod_security_refuses_privileged_pod(kube: Kube, namespace: str):
    kube.core.patch_namespace(namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    with pytest.raises(ApiException) as refused:
        kube.core.create_namespaced_pod(namespace, _pod("root", container={"securityContext": {"privileged": True}}))
    assert refused.value.status == 403
    assert 'violates PodSecurity "restricted' in json.loads(refused.value.body)["message"]


def test_service_account_without_rights_is_forbidden(kube: Kube, kubeconfig, namespace: str):
    kube.core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = kube.core.create_namespaced_service_account_token(
        "nobody", namespace, {"spec": {"expirationSeconds": 600}}
    ).status.token
    configuration = client.Configuration()
    configuration.host = kube.api.configuration.host
    configuration.ssl_ca_cert = kube.api.configuration.ssl_ca_cert
    configuration.verify_ssl = kube.api.configuration.verify_ssl
    configuration.api_key = {"authorization": f"Bearer {token}"}
    as_nobody = client.CoreV1Api(client.ApiClient(configuration))
    with pytest.raises(ApiException) as refused:
        as_nobody.list_namespaced_pod(namespace)
    assert refused.value.status == 403
    assert f"system:serviceaccount:{namespace}:nobody" in refused.value.body


def test_deleting_owner_collects_dependents(kube: Kube, namespace: str):
    owner = kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    kube.core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "dependent",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
                ],
            }
        },
    )
    kube.core.delete_namespaced_config_map("owner", namespace)

    def dependent_gone():
        try:
            kube.core.read_namespaced_config_map("dependent", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(dependent_gone, "garbage collection of ConfigMap dependent")


def test_claim_on_default_storage_class_binds(kube: Kube, namespace: str):
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "data"},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
        },
    )
    claim = wait_for(
        lambda: (
            (c := kube.core.read_namespaced_persistent_volume_claim("data", namespace)).status.phase == "Bound" and c
        ),
        "PVC data Bound",
    )
    assert claim.spec.storage_class_name  # filled in by the DefaultStorageClass admission plugin
