"""Mode saveState on the local cluster: its example goes Ready with no EngineBuild and no draft, the runtime's
configuration carries the SaveState speculative_config, and the runtime pod mounts only its capture
directory of the cache claim writable; on backend tensorrt, or with a layer listed twice, the API server
refuses it."""

from __future__ import annotations

import pytest
import yaml
from kubernetes.client.rest import ApiException

from tests.cluster.test_operator import SD, engine_builds, example
from tests.kube_helpers import Kube

pytestmark = pytest.mark.cluster

EXAMPLE = "llama-3.1-8b-save-state.yaml"


def test_save_state_example_goes_ready_and_writes_only_its_capture_directory(kube: Kube, namespace: str, operator):
    sd = SD(kube, namespace, example(EXAMPLE))
    obj = sd.wait_ready()
    assert obj["status"]["phase"] == "Ready" and engine_builds(kube, namespace) == []
    config = yaml.safe_load(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"] == {"mode": "saveState", "speculativeConfig": {
        "decoding_type": "SaveState", "output_directory": "/captures", "write_interval": 20, "file_prefix": "data",
        "eagle3_layers_to_capture": [-1, 1, 15, 28]}}
    pod = kube.apps.read_namespaced_deployment(sd.name, namespace).spec.template.spec
    capture = next(m for m in pod.containers[0].volume_mounts if m.name == "captures")
    assert capture.mount_path == "/captures" and capture.sub_path == f"hidden-states/{sd.name}" and not capture.read_only
    cache = next(m for m in pod.containers[0].volume_mounts if m.name == "cache")
    assert cache.read_only


@pytest.mark.parametrize("change, message", [
    (lambda spec: spec.update(backend="tensorrt"), "saveState is served by backend pytorch only"),
    (lambda spec: spec["speculation"]["saveState"].update(eagle3LayersToCapture=[1, 1]), "lists each layer once"),
])
def test_save_state_refused_by_the_api_server(kube: Kube, namespace: str, crds, change, message):
    body = example(EXAMPLE)
    change(body["spec"])
    with pytest.raises(ApiException) as refused:
        SD(kube, namespace, body)
    assert refused.value.status == 422 and message in refused.value.body
