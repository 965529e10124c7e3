"""Admission against a real API server: the operator reads the simulated GPU nodes (H100 80 GB, see
specdec_dev.nodes) and refuses what cannot work before any EngineBuild, Job or Deployment exists."""

from __future__ import annotations

import copy
import json

import pytest

from specdec_dev.simulated_fetch import REPORT_ANNOTATION, simulated_report
from tests.cluster.test_model_cache import model_caches
from tests.cluster.test_operator import BUILD_DELAY, SD, engine_builds, example, jobs
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster


def named(name: str, spec: dict) -> dict:
    return {
        "apiVersion": "specdec.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name},
        "spec": spec,
    }


def blog(name: str, **changes) -> dict:
    body = copy.deepcopy(example("llama-3.1-70b-fp8-draft-1b.yaml"))
    body["metadata"]["name"] = name
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = body["spec"]
        for key in parents:
            node = node[key]
        node[leaf] = value
    return body


REFUSED = {
    # name: (body, reason, numbers the message must name)
    "fp16-70b-one-gpu": (
        named("fp16-70b-one-gpu", {"target": {"model": "hf://meta-llama/Llama-3.1-70B-Instruct"}}),
        "ModelDoesNotFitGpu",
        ["70.6B parameters × 2 bytes (float16)", "131.5 GiB", "NVIDIA-H100-80GB-HBM3 GPU (81559 MiB"],
    ),
    "qwen-draft": (
        blog("qwen-draft", **{"speculation.draftTarget.draft.model": "hf://Qwen/Qwen2.5-0.5B-Instruct"}),
        "VocabularyMismatch",
        ["vocab_size 151936", "vocab_size 128256"],
    ),
    "tp3": (
        blog("tp3", **{"target.tensorParallelSize": 3, "target.devices": [0, 1, 2]}),
        "TensorParallelDoesNotDivideHeads",
        ["tensorParallelSize 3", "64 attention heads"],
    ),
    "deepseek-r1-mtp": (
        example("deepseek-r1-mtp.yaml"),
        "ModelDoesNotFitGpu",
        ["685B parameters × 1 byte (fp8, embeddings bfloat16) / tensorParallelSize 8 = 80.0 GiB"],
    ),
}


def test_impossible_deployments_are_refused_before_any_gpu_work(kube: Kube, namespace: str, operator):
    refused = {name: SD(kube, namespace, body) for name, (body, _, _) in REFUSED.items()}
    for name, sd in refused.items():
        cond = wait_for(
            lambda sd=sd: (c := sd.condition("SpecValid")).get("status") == "False" and c, f"{name}: SpecValid=False"
        )
        _, reason, numbers = REFUSED[name]
        assert cond["reason"] == reason, cond
        assert all(n in cond["message"] for n in numbers), cond["message"]
        assert sd.get()["status"]["phase"] == "Invalid" and sd.condition("Ready")["reason"] == reason
    assert engine_builds(kube, namespace) == [] and jobs(kube, namespace) == []
    assert kube.apps.list_namespaced_deployment(namespace).items == []


def test_a_model_without_facts_is_built_and_says_what_was_not_checked(kube: Kube, namespace: str, operator):
    sd = SD(kube, namespace, named("unknown-model", {"target": {"model": "pvc://models/my-llama"}}))
    cond = wait_for(lambda: (c := sd.condition("SpecValid")).get("status") == "True" and c, "SpecValid=True")
    assert cond["message"] == (
        "spec accepted; not checked: the vocabulary, attention heads and GPU memory of "
        "pvc://models/my-llama (the operator reads the files of the hf:// checkpoints it "
        "fetches, not of pvc:// ones)"
    )
    builds = wait_for(lambda: engine_builds(kube, namespace), "its EngineBuild")
    assert [b["spec"]["recipe"]["model"] for b in builds] == ["pvc://models/my-llama"]


UNKNOWN = "hf://example-org/llama-70b-finetune"  # not in the catalog: its facts come with its fetch


def test_a_model_the_catalog_lacks_is_checked_on_its_fetched_facts_before_any_build(
    kube: Kube, namespace: str, operator
):
    """The fetch (simulated: it reports Llama-3.1-70B's config.json for this model) puts the facts in the
    ModelCache's status; until then no EngineBuild exists; then TP 3 is refused on those facts, naming them,
    and no build Job is ever created."""
    report = {**simulated_report("meta-llama/Llama-3.1-70B-Instruct"), "tokenizer": "vocab-sha256:0123"}
    body = named(
        "finetune-tp3",
        {
            "target": {"model": UNKNOWN, "tensorParallelSize": 3},
            "cache": {"fetch": {"podAnnotations": {BUILD_DELAY: "3s", REPORT_ANNOTATION: json.dumps(report)}}},
        },
    )
    sd = SD(kube, namespace, body)
    fetching = wait_for(
        lambda: (c := sd.condition("EnginesReady")).get("reason") == "Fetching" and c,
        "EnginesReady=False with reason Fetching",
    )
    assert f"{UNKNOWN}@main" in fetching["message"], fetching["message"]
    assert (
        "read from its files when its fetch finishes; no GPU work starts before" in sd.condition("SpecValid")["message"]
    )
    assert engine_builds(kube, namespace) == []  # while the fetch runs

    cond = wait_for(lambda: (c := sd.condition("SpecValid")).get("status") == "False" and c, "SpecValid=False")
    [cache] = model_caches(kube, namespace)
    assert cond["reason"] == "TensorParallelDoesNotDivideHeads", cond
    assert (
        "tensorParallelSize 3 does not divide the 64 attention heads of example-org/llama-70b-finetune"
        in cond["message"]
    ), cond["message"]
    assert cond["message"].endswith(
        f"(facts of example-org/llama-70b-finetune: the files its fetch read ({UNKNOWN}"
        f"@main, ModelCache {cache['metadata']['name']}))"
    ), cond["message"]
    assert cache["status"]["phase"] == "Fetched" and cache["status"]["facts"]["attentionHeads"] == 64
    assert cache["status"]["facts"]["tokenizer"] == "vocab-sha256:0123"
    assert sd.get()["status"]["phase"] == "Invalid"
    assert engine_builds(kube, namespace) == [] and jobs(kube, namespace) == []
    assert kube.apps.list_namespaced_deployment(namespace).items == []


def test_a_fetch_that_reports_no_facts_ends_the_wait_and_the_model_is_built_unchecked(
    kube: Kube, namespace: str, operator
):
    """A model neither the catalog nor the simulated fetch knows: Fetched without facts, then built, and
    SpecValid says what was not checked."""
    sd = SD(kube, namespace, named("no-facts", {"target": {"model": UNKNOWN}}))
    builds = wait_for(lambda: engine_builds(kube, namespace), "its EngineBuild, after the fetch")
    [cache] = model_caches(kube, namespace)
    assert cache["status"]["phase"] == "Fetched" and "facts" not in cache["status"], cache["status"]
    assert [b["spec"]["recipe"]["model"] for b in builds] == [UNKNOWN]
    assert sd.condition("SpecValid")["message"] == (
        f"spec accepted; not checked: the vocabulary, attention heads and GPU memory of {UNKNOWN} (not in the "
        "operator's catalog, and its fetch found no config.json, safetensors or tokenizer to read)"
    )
