"""The trtllm-serve modes on the local cluster: each example goes Ready with no EngineBuild (its checkpoints
fetched by ModelCaches), and the runtime's configuration carries its speculative_config with TensorRT-LLM's
defaults; what a mode cannot serve, the API server refuses with the CRD's message."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

# example -> (mode, its speculative_config; a speculative_model is named by the end of its path in the cache)
CONFIGS = {
    "llama-3.1-8b-sa.yaml": (
        "sa",
        {
            "decoding_type": "SA",
            "max_draft_len": 4,
            "max_matching_ngram_size": -1,
            "enable_global_pool": False,
            "max_concurrency": 32,
        },
    ),
    "qwen2.5-7b-auto.yaml": ("auto", {"decoding_type": "AUTO"}),
    "llama-3.1-8b-pard.yaml": (
        "pard",
        {
            "decoding_type": "PARD",
            "max_draft_len": 4,
            "speculative_model": "amd--PARD-Llama-3.2-1B/main",
            "max_concurrency": 32,
        },
    ),
    "llama-3.1-8b-dflash.yaml": (
        "dflash",
        {
            "decoding_type": "DFlash",
            "max_draft_len": 4,
            "max_concurrency": 32,
            "context_recompute_tail": 0,
            "speculative_model": "z-lab--LLaMA3.1-8B-Instruct-DFlash-UltraChat/main",
            "attention_backend": "VANILLA",
            "skip_ctx_buffer_budget_check": False,
        },
    ),
    "qwen3-4b-dspark.yaml": (
        "dspark",
        {
            "decoding_type": "DSpark",
            "max_draft_len": 7,
            "max_concurrency": 32,
            "attention_backend": "AUTO",
            "speculative_model": "deepseek-ai--dspark_qwen3_4b_block7/main",
        },
    ),
    "llama-3.1-8b-save-state.yaml": (
        "saveState",
        {
            "decoding_type": "SaveState",
            "output_directory": "/captures",
            "write_interval": 20,
            "file_prefix": "data",
            "eagle3_layers_to_capture": [-1, 1, 15, 28],
        },
    ),
}

REFUSED = [
    (name, lambda spec: spec.update(backend="tensorrt"), f"{mode} is served by backend pytorch only")
    for name, (mode, _) in CONFIGS.items()
] + [
    (
        "llama-3.1-8b-pard.yaml",
        lambda spec: spec["speculation"]["pard"].pop("draftModel"),
        "pard needs its parallel draft checkpoint",
    ),
    (
        "llama-3.1-8b-dflash.yaml",
        lambda spec: spec["speculation"]["dflash"].pop("draftModel"),
        "dflash needs its draft checkpoint",
    ),
    (
        "llama-3.1-8b-dflash.yaml",
        lambda spec: spec["speculation"]["dflash"].update(attentionBackend="CUTEDSL"),
        "attentionBackend",
    ),
    (
        "qwen3-4b-dspark.yaml",
        lambda spec: spec["speculation"]["dspark"].pop("draftModel"),
        "dspark needs its draft checkpoint",
    ),
    ("qwen3-4b-dspark.yaml", lambda spec: spec["speculation"]["dspark"].update(blockSize=4), "it equals maxDraftLen"),
    (
        "llama-3.1-8b-save-state.yaml",
        lambda spec: spec["speculation"]["saveState"].update(eagle3LayersToCapture=[1, 1]),
        "lists each layer once",
    ),
    (
        "llama-3.1-8b-save-state.yaml",
        lambda spec: spec["runtime"].update(replicas=2),
        "saveState serves one runtime replica",
    ),
]


def ready(kube: Kube, namespace: str, name: str) -> tuple[SD, dict]:
    """The example Ready, with no EngineBuild, and its runtime configuration."""
    sd = SD(kube, namespace, example(name))
    assert sd.wait_ready()["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    data = kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data
    return sd, yaml.safe_load(data["runtime.json"])


@pytest.mark.parametrize("name", CONFIGS)
def test_example_goes_ready_with_its_speculative_config(kube: Kube, namespace: str, operator, name):
    mode, expected = CONFIGS[name]
    _, config = ready(kube, namespace, name)
    assert config["speculation"]["mode"] == mode
    speculative = dict(config["speculation"]["speculativeConfig"])
    if "speculative_model" in expected:
        model = speculative.pop("speculative_model")
        assert model.endswith(expected["speculative_model"]), model
        speculative["speculative_model"] = expected["speculative_model"]
    assert speculative == expected


def test_save_state_writes_only_its_capture_directory(kube: Kube, namespace: str, operator):
    sd, _ = ready(kube, namespace, "llama-3.1-8b-save-state.yaml")
    mounts = {
        m.name: m
        for m in kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.spec.containers[0].volume_mounts
    }
    capture = mounts["captures"]
    assert (
        capture.mount_path == "/captures" and capture.sub_path == f"hidden-states/{sd.name}" and not capture.read_only
    )
    assert mounts["cache"].read_only


@pytest.mark.parametrize("name, change, message", REFUSED)
def test_refused_by_the_api_server(kube: Kube, namespace: str, crds, name, change, message):
    body = example(name)
    change(body["spec"])
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and message in refused.value.body
