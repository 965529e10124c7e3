"""Mode dflash on the local cluster: its example goes Ready with no EngineBuild, the DFlash draft fetched by a
ModelCache of its own, and the runtime's configuration carries the DFlash speculative_config with
TensorRT-LLM's defaults; on backend tensorrt, or without a draft checkpoint, the API server refuses it."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "llama-3.1-8b-dflash.yaml"


def test_dflash_example_goes_ready_with_its_speculative_config(kube: Kube, namespace: str, operator):
    sd = SD(kube, namespace, example(EXAMPLE))
    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    config = yaml.safe_load(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["mode"] == "dflash"
    speculative = config["speculation"]["speculativeConfig"]
    assert speculative["speculative_model"].endswith("z-lab--LLaMA3.1-8B-Instruct-DFlash-UltraChat/main")
    assert {k: v for k, v in speculative.items() if k != "speculative_model"} == {
        "decoding_type": "DFlash", "max_draft_len": 4, "max_concurrency": 32, "context_recompute_tail": 0,
        "attention_backend": "VANILLA", "skip_ctx_buffer_budget_check": False}


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(backend="tensorrt"), "dflash is served by backend pytorch only"),
    (lambda spec: spec["speculation"]["dflash"].pop("draftModel"), "dflash needs its draft checkpoint"),
    (lambda spec: spec["speculation"]["dflash"].update(attentionBackend="CUTEDSL"), "attentionBackend"),
])
def test_dflash_refused_by_the_api_server(kube: Kube, namespace: str, crds, change, message):
    body = example(EXAMPLE)
    change(body["spec"])
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and message in refused.value.body
