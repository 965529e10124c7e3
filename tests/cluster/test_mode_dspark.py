"""Mode dspark on the local cluster: its example goes Ready with no EngineBuild, the DSpark draft fetched by a
ModelCache of its own, and the runtime's configuration carries the DSpark speculative_config (the Markov
head's settings left to the draft's config); the API server refuses it on backend tensorrt, without a draft
checkpoint, or with a block size other than the draft length."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "qwen3-4b-dspark.yaml"


def test_dspark_example_goes_ready_with_its_speculative_config(kube: Kube, namespace: str, operator):
    sd = SD(kube, namespace, example(EXAMPLE))
    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    config = yaml.safe_load(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["mode"] == "dspark"
    speculative = config["speculation"]["speculativeConfig"]
    assert speculative["speculative_model"].endswith("deepseek-ai--dspark_qwen3_4b_block7/main")
    assert {k: v for k, v in speculative.items() if k != "speculative_model"} == {
        "decoding_type": "DSpark", "max_draft_len": 7, "max_concurrency": 32, "attention_backend": "AUTO"}


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(backend="tensorrt"), "dspark is served by backend pytorch only"),
    (lambda spec: spec["speculation"]["dspark"].pop("draftModel"), "dspark needs its draft checkpoint"),
    (lambda spec: spec["speculation"]["dspark"].update(blockSize=4), "it equals maxDraftLen"),
])
def test_dspark_refused_by_the_api_server(kube: Kube, namespace: str, crds, change, message):
    body = example(EXAMPLE)
    change(body["spec"])
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and message in refused.value.body
