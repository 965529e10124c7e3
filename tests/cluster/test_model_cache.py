"""Checkpoints are fetched by ModelCaches on CPU nodes before any GPU build starts."""

from __future__ import annotations

import pytest

from specdec.admission.model_catalog import catalog_facts
from specdec.api.models import GROUP, VERSION
from tests.cluster.test_operator import BUILD_DELAY, FAIL_LABEL, SD, engine_builds, example
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"


def build_jobs(kube: Kube, namespace: str) -> list:
    return kube.batch.list_namespaced_job(namespace, label_selector="specdec.io/engine-build").items


def waiting_for_checkpoints(kube: Kube, namespace: str) -> bool:
    """Every EngineBuild exists and waits, Job-less, for its checkpoints."""
    builds = engine_builds(kube, namespace)
    return bool(builds) and all(
        (b.get("status") or {}).get("phase") == "Pending"
        and {c["type"]: c["reason"] for c in b["status"]["conditions"]}.get("Ready") == "WaitingForCheckpoints"
        for b in builds
    )


def model_caches(kube: Kube, namespace: str) -> list[dict]:
    return kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "modelcaches")["items"]


def fetch_jobs(kube: Kube, namespace: str) -> dict:
    jobs = kube.batch.list_namespaced_job(namespace, label_selector="specdec.io/model-cache").items
    return {j.metadata.labels["specdec.io/model-cache"]: j for j in jobs}


def test_sample_fetches_on_cpu_nodes_before_any_build_job(kube: Kube, namespace: str, operator):
    body = example(SAMPLE)
    body["spec"]["cache"] = {"fetch": {"podAnnotations": {BUILD_DELAY: "3s"}}}  # a download that takes a while
    sd = SD(kube, namespace, body)
    fetching = wait_for(
        lambda: (c := sd.condition("EnginesReady")).get("reason") == "Fetching" and c,
        "EnginesReady=False with reason Fetching",
    )
    # Names what is still downloading (one fetch may already have finished when we look).
    assert (
        "hf://meta-llama/Llama-3.1-70B-Instruct@main" in fetching["message"]
        or "hf://meta-llama/Llama-3.2-1B-Instruct@main" in fetching["message"]
    ), fetching["message"]

    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready"
    caches = {c["metadata"]["name"]: c for c in model_caches(kube, namespace)}
    assert sorted(c["spec"]["model"] for c in caches.values()) == [
        "hf://meta-llama/Llama-3.1-70B-Instruct",
        "hf://meta-llama/Llama-3.2-1B-Instruct",
    ]
    assert all(c["status"]["phase"] == "Fetched" for c in caches.values())
    for cache in caches.values():  # the simulated fetch reports the catalog's facts, as a real one reads them
        facts = catalog_facts(cache["spec"]["model"].split("://", 1)[1])
        assert cache["status"]["facts"] == facts.to_status(), cache["status"]
        assert cache["status"]["sizeBytes"] > 0
    spec_valid = next(c for c in obj["status"]["conditions"] if c["type"] == "SpecValid")
    assert spec_valid["message"] == "spec accepted"  # every check ran, on the fetched facts
    jobs = fetch_jobs(kube, namespace)
    assert set(jobs) == set(caches)
    fetched_at = {caches[name]["spec"]["model"]: job.status.completion_time for name, job in jobs.items()}
    built = build_jobs(kube, namespace)
    assert len(built) == 2
    builds = {b["metadata"]["name"]: b for b in engine_builds(kube, namespace)}
    for job in built:  # each GPU Job created once the checkpoint it reads was in the cache
        model = builds[job.metadata.labels["specdec.io/engine-build"]]["spec"]["recipe"]["model"]
        assert job.metadata.creation_timestamp >= fetched_at[model], (job.metadata.name, fetched_at)
    for name, job in jobs.items():
        assert job.metadata.owner_references[0].kind == "ModelCache" and job.metadata.owner_references[0].name == name
        pods = kube.core.list_namespaced_pod(namespace, label_selector=f"specdec.io/model-cache={name}").items
        assert pods and all(p.spec.node_name.startswith("cpu-") for p in pods), [p.spec.node_name for p in pods]
        assert all("nvidia.com/gpu" not in (c.resources.limits or {}) for p in pods for c in p.spec.containers)


def test_failed_fetch_is_reported_and_builds_nothing(kube: Kube, namespace: str, operator):
    body = example(SAMPLE)
    annotations = {
        f"{FAIL_LABEL}/container-name": "fetch",
        f"{FAIL_LABEL}/exit-code": "1",
        f"{FAIL_LABEL}/delay": "0s",
        f"{FAIL_LABEL}/jitter-delay": "0s",
        f"{FAIL_LABEL}/message": "simulated-401-gated-repo",
    }
    body["spec"]["cache"] = {
        "fetch": {"backoffLimit": 0, "podLabels": {FAIL_LABEL: "true"}, "podAnnotations": annotations}
    }
    sd = SD(kube, namespace, body)
    ready = wait_for(
        lambda: (c := sd.condition("Ready")).get("reason") == "FetchFailed" and c, "Ready=False with reason FetchFailed"
    )
    assert "simulated-401-gated-repo" in ready["message"] and "step fetch failed with exit code 1" in ready["message"]
    obj = sd.get()
    assert obj["status"]["phase"] == "Failed"
    assert {c["type"]: c["reason"] for c in obj["status"]["conditions"]}["EnginesReady"] == "FetchFailed"
    assert any(c.get("status", {}).get("phase") == "Failed" for c in model_caches(kube, namespace))
    assert waiting_for_checkpoints(kube, namespace) and build_jobs(kube, namespace) == []
    assert kube.apps.list_namespaced_deployment(namespace).items == []
