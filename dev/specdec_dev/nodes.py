"""Simulated nodes for the local cluster: what a real GPU cluster looks like to the scheduler.

kwok manages every Node annotated `kwok.x-k8s.io/node: fake` and no other (the cluster's kwok runs with
that annotation selector, so a real node beside them stays its kubelet's); the API server keeps the status we
send on create, so capacity and allocatable are set here. GPU nodes carry what the NVIDIA GPU
operator would put on them: the extended resource, its labels and the NoSchedule taint.

kwok gives each pod an IP from its node's podCIDR. Ours are loopback ranges (all of 127.0.0.0/8 is
loopback on Linux), so the pod runner (specdec_dev.podrunner) can serve on a pod's IP and whatever
scrapes or calls the pod from this machine reaches it there, as it would in a cluster.
"""

from __future__ import annotations

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
GPU_MEMORY_MIB = "81559"
GPUS_PER_NODE = 8
# Second octets of the pod networks: GPU node i gets 127.(64 + i // 256).(i % 256).0/24, CPU nodes
# start at 127.96; 32 second octets each, so 8192 nodes of a kind.
GPU_POD_NETWORK = 64
CPU_POD_NETWORK = 96
NODES_PER_NETWORK = 32 * 256


def pod_cidr(network: int, index: int) -> str:
    if not 0 <= index < NODES_PER_NETWORK:
        raise ValueError(f"node index {index} is outside 0..{NODES_PER_NETWORK - 1}")
    return f"127.{network + index // 256}.{index % 256}.0/24"


def _node(name: str, labels: dict[str, str], capacity: dict[str, str], taints: list[dict], cidr: str) -> dict:
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
        "spec": {"taints": taints, "podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
            },
        },
    }


def cpu_node(index: int) -> dict:
    return _node(
        f"cpu-{index}",
        {},
        {"cpu": "32", "memory": "128Gi", "pods": "110", "ephemeral-storage": "500Gi"},
        [],
        pod_cidr(CPU_POD_NETWORK, index),
    )


def gpu_labels(count: int) -> dict[str, str]:
    """What NVIDIA's GPU feature discovery labels a node of `count` GPUs with."""
    return {
        f"{GPU_RESOURCE}.present": "true",
        f"{GPU_RESOURCE}.product": GPU_PRODUCT,
        f"{GPU_RESOURCE}.memory": GPU_MEMORY_MIB,
        f"{GPU_RESOURCE}.count": str(count),
    }


def gpu_node(index: int) -> dict:
    labels = gpu_labels(GPUS_PER_NODE)
    capacity = {
        "cpu": "192",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "8Ti",
        GPU_RESOURCE: str(GPUS_PER_NODE),
    }
    taint = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
    return _node(f"gpu-{index}", labels, capacity, [taint], pod_cidr(GPU_POD_NETWORK, index))


def dev_nodes(cpu_nodes: int, gpu_nodes: int) -> list[dict]:
    return [cpu_node(i) for i in range(cpu_nodes)] + [gpu_node(i) for i in range(gpu_nodes)]


def keep_pod_cidrs(objects: list[dict], existing: dict[str, list[str]]) -> tuple[list[dict], list[str]]:
    """Nodes to apply over `existing` (node name -> its podCIDRs, [] when unset): podCIDRs cannot change
    once set (nor be unset, which leaving them out of an apply would do), so a node that has others keeps
    them. A node without any gets ours; its pods created before keep their IPs until they are recreated."""
    kept, notes = [], []
    for obj in objects:
        name = obj["metadata"]["name"]
        current, wanted = existing.get(name) or [], obj.get("spec", {}).get("podCIDRs")
        if obj["kind"] == "Node" and name in existing and current != wanted:
            if current:
                obj = {**obj, "spec": {**obj["spec"], "podCIDR": current[0], "podCIDRs": current}}
                notes.append(
                    f"node {name} keeps podCIDR {current[0]}: a podCIDR cannot change (`specdec dev "
                    f"down` and `up` again for {wanted[0]})"
                )
            else:
                notes.append(
                    f"node {name} (made before nodes had pod networks) gets podCIDR {wanted[0]}; its "
                    "pods keep their old IPs, which the pod runner cannot serve on, until recreated"
                )
        kept.append(obj)
    return kept, notes
