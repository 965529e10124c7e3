"""GPU nodes: labels to GpuNode, which nodes a pod may land on, and reading them (or not) from the API server."""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from specdec.admission.gpu_nodes import LABEL_MEMORY, GpuNodeInventory, candidates, gpu_node
from specdec.settings import Settings
from specdec_dev import nodes as dev_nodes


def test_simulated_gpu_nodes_read_as_h100s_and_cpu_nodes_are_skipped():
    read = [gpu_node(n) for n in dev_nodes.dev_nodes(cpu_nodes=1, gpu_nodes=1)]
    assert read[0] is None
    assert (read[1].name, read[1].gpus, read[1].memory_mib, read[1].product) == (
        "gpu-0",
        8,
        81559,
        "NVIDIA-H100-80GB-HBM3",
    )


def test_candidates_match_the_pods_node_selector_and_gpu_count():
    small = dev_nodes.gpu_node(1)
    small["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    small["metadata"]["labels"]["pool"] = "small"
    nodes = tuple(gpu_node(n) for n in (dev_nodes.gpu_node(0), small))
    assert [n.name for n in candidates(nodes, {"nvidia.com/gpu.present": "true"}, 1)] == ["gpu-0", "gpu-1"]
    assert [n.name for n in candidates(nodes, {"nvidia.com/gpu.present": "true"}, 4)] == ["gpu-0"]
    assert [n.name for n in candidates(nodes, {"pool": "small"}, 1)] == ["gpu-1"]
    assert [n.name for n in candidates(nodes, {}, 1)] == ["gpu-0", "gpu-1"]
    assert candidates(nodes, {"pool": ""}, 1) == []  # a nodeSelector value must equal the label's, "" too


class FakeNodes:
    """Stands in for `Kube.list_live("Node", None, selector)`: answers, or raises, what it is told."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.selectors: list[str] = []

    def __call__(self, selector: str):
        self.selectors.append(selector)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_inventory_reads_labelled_nodes_and_keeps_them_through_a_transient_failure():
    listing = FakeNodes([dev_nodes.gpu_node(0)], ApiException(status=503))
    inventory = GpuNodeInventory(listing, enabled=True)
    assert inventory.snapshot().nodes is None
    assert inventory.snapshot().why_unknown == "the operator has not read Nodes yet"
    inventory.refresh()
    assert [n.name for n in inventory.snapshot().nodes] == ["gpu-0"] and listing.selectors == [LABEL_MEMORY]
    inventory.refresh()  # 503: what was read stays
    assert [n.name for n in inventory.snapshot().nodes] == ["gpu-0"]


def test_inventory_without_the_right_to_list_nodes_says_so():
    inventory = GpuNodeInventory(FakeNodes(ApiException(status=403)), enabled=True)
    inventory.refresh()
    assert inventory.snapshot().nodes is None
    assert inventory.snapshot().why_unknown == "the operator may not list Nodes (RBAC: list nodes)"


def test_inventory_switched_off_never_asks():
    listing = FakeNodes()
    inventory = GpuNodeInventory(listing, enabled=False)
    inventory.refresh()
    assert listing.selectors == [] and "SPECDEC_READ_GPU_NODES=false" in inventory.snapshot().why_unknown
    assert Settings.from_env({"SPECDEC_READ_GPU_NODES": "false"}).read_gpu_nodes is False
    assert Settings.from_env({}).read_gpu_nodes is True
