"""Mode pard on the local cluster: its example goes Ready with no EngineBuild, the PARD draft fetched by a
ModelCache of its own, and the runtime's configuration carries the PARD speculative_config; on backend
tensorrt, or without a draft checkpoint, the API server refuses it."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "llama-3.1-8b-pard.yaml"


def test_pard_example_goes_ready_with_its_speculative_config(kube: Kube, namespace: str, operator):
    body = example(EXAMPLE)
    sd = SD(kube, namespace, body)
    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    config = yaml.safe_load(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["mode"] == "pard"
    speculative = config["speculation"]["speculativeConfig"]
    assert speculative == {"decoding_type": "PARD", "max_draft_len": 4,
                           "speculative_model": speculative["speculative_model"], "max_concurrency": 32}
    assert speculative["speculative_model"].endswith("amd--PARD-Llama-3.2-1B/main")


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(backend="tensorrt"), "pard is served by backend pytorch only"),
    (lambda spec: spec["speculation"]["pard"].pop("draftModel"), "pard needs its parallel draft checkpoint"),
])
def test_pard_refused_by_the_api_server(kube: Kube, namespace: str, crds, change, message):
    body = example(EXAMPLE)
    change(body["spec"])
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and message in refused.value.body
