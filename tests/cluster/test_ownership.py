"""A shared cluster: the operator never changes or deletes what it does not own, and one
deployment's build settings never decide another's outcome."""

from __future__ import annotations

import copy

import pytest

from specdec.api.models import GROUP, VERSION
from specdec.builders.engine import job_name
from specdec.plan import Plan, plan
from specdec.settings import Settings
from tests.cluster.test_operator import DRAFT_TARGET, SD, engine_builds, example, jobs
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

FOREIGN = {"app": "someone-else"}


def pytorch(name: str) -> dict:
    """A deployment with no engine builds: the runtime objects are written at once."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": {"backend": "pytorch", "target": {"model": "hf://meta-llama/Llama-3.1-8B-Instruct"}},
    }


def untouched(obj) -> None:
    """No write of ours: no ownerReference, and no field managed by the operator."""
    assert not obj.metadata.owner_references, obj.metadata.name
    assert "specdec-operator" not in {m.manager for m in obj.metadata.managed_fields or []}, obj.metadata.name
    assert obj.metadata.labels == FOREIGN, obj.metadata.name


def reason(sd: SD, reason: str, condition: str = "Ready") -> dict:
    return wait_for(
        lambda: (c := sd.condition(condition)).get("reason") == reason and c, f"{sd.name}: {condition} reason {reason}"
    )


def test_foreign_service_and_config_map_are_left_alone(kube: Kube, namespace: str, operator):
    service = kube.core.create_namespaced_service(
        namespace,
        {
            "metadata": {"name": "api", "labels": FOREIGN},
            "spec": {"selector": FOREIGN, "ports": [{"name": "web", "port": 80}]},
        },
    )
    config_map = kube.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "api-runtime", "labels": FOREIGN}, "data": {"mine": "yes"}}
    )
    sd = SD(kube, namespace, pytorch("api"))
    ready = reason(sd, "NameConflict")
    assert ready["status"] == "False"
    assert "ConfigMap api-runtime already exists" in ready["message"], ready["message"]
    assert sd.get()["status"]["phase"] == "Failed"
    assert kube.apps.list_namespaced_deployment(namespace).items == []  # nothing half-made
    kube.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", "api")
    wait_for(
        lambda: (
            not kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments")["items"]
        ),
        "deployment deleted",
    )
    for kind, before in (("service", service), ("config_map", config_map)):
        after = getattr(kube.core, f"read_namespaced_{kind}")(before.metadata.name, namespace)
        assert after.metadata.resource_version == before.metadata.resource_version, kind
        untouched(after)


def test_a_freed_name_is_taken_up(kube: Kube, namespace: str, operator):
    kube.core.create_namespaced_config_map(namespace, {"metadata": {"name": "api-runtime"}, "data": {}})
    sd = SD(kube, namespace, pytorch("api"))
    reason(sd, "NameConflict")
    kube.core.delete_namespaced_config_map("api-runtime", namespace)
    sd.wait_ready(timeout=60)  # retried with back-off, no event needed


def _engine_names(namespace: str, body: dict, operator_env: dict[str, str]) -> list[str]:
    result = plan({**body, "metadata": {**body["metadata"], "namespace": namespace}}, Settings.from_env(operator_env))
    assert isinstance(result, Plan)
    return result.engine_names


def test_foreign_job_with_the_build_name_is_left_alone(kube: Kube, namespace: str, operator, operator_env):
    body = example(DRAFT_TARGET)
    target = _engine_names(namespace, body, operator_env)[0]
    kube.batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": job_name(target), "labels": FOREIGN},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "registry.invalid/x"}]}
                },
            },
        },
    )
    sd = SD(kube, namespace, body)
    engines = reason(sd, "NameConflict", "EnginesReady")
    assert f"Job {job_name(target)} already exists" in engines["message"]
    build = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "enginebuilds", target)
    assert build["status"]["phase"] == "Failed"
    untouched(kube.batch.read_namespaced_job(job_name(target), namespace))  # its controller writes its status


def test_foreign_engine_build_and_cache_claim_are_left_alone(kube: Kube, namespace: str, operator, operator_env):
    body = example(DRAFT_TARGET)
    kube.core.create_namespaced_persistent_volume_claim(
        namespace,
        {
            "metadata": {"name": "specdec-engine-cache", "labels": FOREIGN},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    )
    sd = SD(kube, namespace, body)
    ready = reason(sd, "NameConflict")
    assert (
        "PersistentVolumeClaim specdec-engine-cache" in ready["message"] and "spec.cache.claimName" in ready["message"]
    )
    assert engine_builds(kube, namespace) == []
    untouched(kube.core.read_namespaced_persistent_volume_claim("specdec-engine-cache", namespace))

    other = copy.deepcopy(body)
    other["metadata"]["name"] = "other"
    other["spec"]["cache"] = {"claimName": "specdec-engine-cache"}  # the user's claim, named on purpose
    target = _engine_names(namespace, other, operator_env)[0]
    taken = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "EngineBuild",
        "metadata": {"name": target},
        "spec": {
            "recipe": {
                "model": "hf://x/y",
                "dtype": "float16",
                "quantization": "none",
                "kvCacheDtype": "auto",
                "tensorParallelSize": 1,
                "image": "x",
            },
            "cacheClaim": "specdec-engine-cache",
            "enginePath": "engines/x",
        },
    }
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "enginebuilds", taken)
    second = SD(kube, namespace, other)
    ready = reason(second, "NameConflict")
    assert f"EngineBuild {target} already exists" in ready["message"]
    kept = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "enginebuilds", target)
    assert kept["spec"]["recipe"]["model"] == "hf://x/y" and not kept.get("status")
    assert not [j for j in jobs(kube, namespace) if j.metadata.name == job_name(target)]


def test_one_deployments_build_placement_does_not_decide_anothers(kube: Kube, namespace: str, operator):
    picky = example(DRAFT_TARGET)
    picky["metadata"]["name"] = "picky"
    picky["spec"]["build"] = {"nodeSelector": {"pool": "nowhere"}}
    plain = example(DRAFT_TARGET)
    plain["metadata"]["name"] = "plain"
    first = SD(kube, namespace, picky)
    wait_for(lambda: len(engine_builds(kube, namespace)) == 2, "picky's builds")
    second = SD(kube, namespace, plain)
    second.wait_ready()
    stuck = reason(first, "BuildUnschedulable", "EnginesReady")
    assert "didn't match Pod's node affinity/selector" in stuck["message"], stuck["message"]
    # Same recipes, other placement: picky's builds are its own, the engine directory is shared.
    builds = engine_builds(kube, namespace)
    assert len(builds) == 4
    assert len({b["spec"]["enginePath"] for b in builds}) == 2


def test_a_refused_job_is_reported_on_its_model_cache_and_its_users(kube: Kube, namespace: str, operator):
    """The first Jobs a deployment needs are its fetch Jobs (no build starts before its checkpoints)."""
    kube.quota(namespace, "count/jobs.batch", "0")
    sd = SD(kube, namespace, example(DRAFT_TARGET))
    engines = reason(sd, "FetchFailed", "EnginesReady")
    assert "HTTP 403" in engines["message"] and "exceeded quota" in engines["message"], engines["message"]
    caches = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "modelcaches")["items"]
    assert caches and all(
        c["status"]["conditions"][0]["reason"] == "JobRejected"
        for c in caches
        if c.get("status", {}).get("phase") == "Failed"
    )
    builds = engine_builds(kube, namespace)  # there, but without a Job: they wait for the checkpoints
    assert builds and all((b.get("status") or {}).get("phase", "Pending") == "Pending" for b in builds), builds
    assert kube.batch.list_namespaced_job(namespace).items == []
    assert sd.get()["status"]["phase"] == "Failed"
    kube.core.delete_namespaced_resource_quota("q-count-jobs-batch", namespace)
    sd.wait_ready(timeout=90)  # retried with back-off: no event is needed once the quota is gone


def test_pods_the_api_server_refuses_are_reported(kube: Kube, namespace: str, operator):
    kube.quota(namespace, "pods", "0")
    sd = SD(kube, namespace, example(DRAFT_TARGET))
    engines = reason(sd, "FetchPodCreationFailed", "EnginesReady")  # fetch pods come first
    assert "exceeded quota" in engines["message"], engines["message"]
    assert sd.condition("Ready")["reason"] == "FetchPodCreationFailed"
