"""Mode auto on the local cluster: its example goes Ready with no EngineBuild, and the runtime's
configuration carries the AUTO speculative_config; on backend tensorrt the API server refuses it."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "qwen2.5-7b-auto.yaml"


def test_auto_example_goes_ready_with_its_speculative_config(kube: Kube, namespace: str, operator):
    sd = SD(kube, namespace, example(EXAMPLE))
    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    config = yaml.safe_load(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["mode"] == "auto"
    assert config["speculation"]["speculativeConfig"] == {"decoding_type": "AUTO"}


def test_auto_on_tensorrt_is_refused_by_the_api_server(kube: Kube, namespace: str, crds):
    body = example(EXAMPLE)
    body["spec"]["backend"] = "tensorrt"
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and "auto is served by backend pytorch only" in refused.value.body
