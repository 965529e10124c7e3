"""Simulated nodes for the local cluster: what a real GPU cluster looks like to the scheduler.

kwok manages every Node annotated `kwok.x-k8s.io/node: fake`; the API server keeps the status we
send on create, so capacity and allocatable are set here. GPU nodes carry what the NVIDIA GPU
operator would put on them: the extended resource, its labels and the NoSchedule taint.
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
GPU_MEMORY_MIB = "81559"
GPUS_PER_NODE = 8


def _node(name: str, labels: dict[str, str], capacity: dict[str, str], taints: list[dict]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
                "type": "kwok",
                **labels,
            },
        },
        "spec": {"taints": taints},
        "status": {"allocatable": capacity, "capacity": capacity,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": "fake", "kubeProxyVersion": "fake"}},
    }


def cpu_node(index: int) -> dict:
    return _node(f"cpu-{index}", {}, {"cpu": "32", "memory": "128Gi", "pods": "110",
                                      "ephemeral-storage": "500Gi"}, [])


def gpu_node(index: int) -> dict:
    labels = {
        f"{GPU_RESOURCE}.present": "true",
        f"{GPU_RESOURCE}.product": GPU_PRODUCT,
        f"{GPU_RESOURCE}.memory": GPU_MEMORY_MIB,
        f"{GPU_RESOURCE}.count": str(GPUS_PER_NODE),
    }
    capacity = {"cpu": "192", "memory": "2Ti", "pods": "110", "ephemeral-storage": "8Ti",
                GPU_RESOURCE: str(GPUS_PER_NODE)}
    taint = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
    return _node(f"gpu-{index}", labels, capacity, [taint])


def dev_nodes(cpu_nodes: int, gpu_nodes: int) -> list[dict]:
    return [cpu_node(i) for i in range(cpu_nodes)] + [gpu_node(i) for i in range(gpu_nodes)]
