"""The GPUs a runtime pod can get, from the labels NVIDIA's GPU feature discovery puts on nodes.

Pure: `GpuNode` from a Node object, and which nodes can take a pod (`candidates`). I/O:
`GpuNodeInventory` lists the labelled nodes (`list nodes`, cluster-scoped) when the operator starts
and on every resync pass. A LIST every resync rather than a watch: GPU labels change when nodes come
and go, not every few seconds as node status does, and the resync re-plans every deployment anyway.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from specdec.settings import GPU_RESOURCE

LABEL_MEMORY = f"{GPU_RESOURCE}.memory"  # MiB per GPU
LABEL_PRODUCT = f"{GPU_RESOURCE}.product"
NOT_READ = "the operator does not read Nodes here (offline plan)"

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GpuNode:
    name: str
    labels: tuple[tuple[str, str], ...]
    gpus: int  # allocatable
    memory_mib: int
    product: str


@dataclasses.dataclass(frozen=True)
class GpuNodes:
    """The labelled GPU nodes as last read; `nodes` None when they could not be read, and why."""

    nodes: tuple[GpuNode, ...] | None = None
    why_unknown: str = NOT_READ


def gpu_node(node: dict) -> GpuNode | None:
    """None for a node without a readable GPU memory label."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    try:
        memory = int(labels.get(LABEL_MEMORY, ""))
        gpus = int(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    except ValueError:
        return None
    return GpuNode(
        node["metadata"]["name"], tuple(sorted(labels.items())), gpus, memory, labels.get(LABEL_PRODUCT, "GPU")
    )


def node_selector(settings_selector: tuple[tuple[str, str], ...], extra: dict[str, str] | None) -> dict[str, str]:
    """A pod's node selector: the operator's, then the spec's (which wins on a shared key)."""
    return {**dict(settings_selector), **(extra or {})}


def candidates(nodes: tuple[GpuNode, ...], node_selector: dict[str, str], gpus: int) -> list[GpuNode]:
    """The nodes a pod with this node selector and GPU count may be scheduled on (taints and affinity
    are not evaluated). Every plan asks it of every GPU node: no selector parsed, no dict built per node."""
    wanted = node_selector.items()
    return [n for n in nodes if n.gpus >= gpus and all(pair in n.labels for pair in wanted)]


class GpuNodeInventory:
    """What the API server says about GPU nodes, refreshed on demand; `enabled` False: never asks
    (a namespaced install has no right to list Nodes, see the chart's gpu.readNodeLabels)."""

    def __init__(self, list_nodes: Callable[[str], list[Any]], enabled: bool) -> None:
        self._list_nodes = list_nodes  # (label_selector) -> list of Node objects
        self._enabled = enabled
        self._lock = threading.Lock()
        self._nodes = GpuNodes(
            None,
            "the operator is set not to read Nodes (SPECDEC_READ_GPU_NODES=false: a "
            "namespaced install has no right to list them)"
            if not enabled
            else "the operator has not read Nodes yet",
        )

    def refresh(self) -> None:
        if not self._enabled:
            return
        try:
            listed = self._list_nodes(LABEL_MEMORY)
            read = GpuNodes(tuple(n for n in map(gpu_node, listed) if n is not None), "")
        except ApiException as error:
            if error.status != 403 and self.snapshot().nodes is not None:
                log.warning("listing Nodes failed (HTTP %s); keeping the GPU nodes read before", error.status)
                return
            reason = (
                "the operator may not list Nodes (RBAC: list nodes)"
                if error.status == 403
                else f"listing Nodes failed (HTTP {error.status})"
            )
            log.warning("GPU memory checks skipped: %s", reason)
            read = GpuNodes(None, reason)
        except Exception:  # noqa: BLE001 — a bug here must not stop the resync loop: keep what was read
            log.exception("reading GPU nodes failed")
            return
        with self._lock:
            if read != self._nodes:  # the same snapshot object while nothing changed: plans keyed on it stay
                self._nodes = read

    def snapshot(self) -> GpuNodes:
        with self._lock:
            return self._nodes
