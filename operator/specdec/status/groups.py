"""A multi-node deployment's groups (LeaderWorkerSet, specdec.builders.multinode): which pod of which group keeps it
from being ready, and why. Pure: from the LeaderWorkerSet and the deployment's pods, labelled by LWS with their
group and worker index (api/leaderworkerset/v1: leaderworkerset.sigs.k8s.io/group-index, worker-index)."""

from __future__ import annotations

from typing import Any

from specdec.status.pods import condition

GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def _index(pod: dict[str, Any], label: str) -> int | None:
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(label)
    return int(value) if value is not None and value.isdigit() else None


def _not_ready(pod: dict[str, Any]) -> str | None:
    """Why a pod is not ready, or None when it is."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "terminating"
    ready = condition(pod, "Ready") or {}
    if ready.get("status") == "True":
        return None
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"container {status.get('name')}: {waiting['reason']}"
    scheduled = condition(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False":
        return f"not scheduled ({scheduled.get('reason', '')}: {scheduled.get('message', '')})"
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    return f"{phase}, not ready" + (f" ({ready['reason']})" if ready.get("reason") else "")


def _role(worker: int) -> str:
    return "leader" if worker == 0 else f"worker {worker}"


def group_shortfall(lws: dict[str, Any], pods: list[dict[str, Any]]) -> str | None:
    """The groups that are not whole and ready: each one's missing pods and the pods not ready with why; None when
    every group is."""
    spec = lws.get("spec") or {}
    groups = int(spec.get("replicas", 1))
    size = int((spec.get("leaderWorkerTemplate") or {}).get("size", 1))
    members: dict[int, dict[int, dict[str, Any]]] = {}
    for pod in pods:
        group, worker = _index(pod, GROUP_INDEX_LABEL), _index(pod, WORKER_INDEX_LABEL)
        if group is not None and worker is not None:
            members.setdefault(group, {})[worker] = pod
    shortfalls = []
    for group in range(groups):
        present = members.get(group, {})
        missing = [_role(w) for w in range(size) if w not in present]
        waiting = [
            f"{_role(w)} {present[w]['metadata']['name']} {why}"
            for w in sorted(present)
            if (why := _not_ready(present[w])) is not None
        ]
        if missing or waiting:
            parts = ([f"{', '.join(missing)} missing"] if missing else []) + waiting
            shortfalls.append(f"group {group}: " + "; ".join(parts))
    return "; ".join(shortfalls) or None


def group_pod_view(pod: dict[str, Any] | None) -> tuple | None:
    """What group_shortfall reads of a pod of a group: a change of it wakes the deployment."""
    if pod is None:
        return None
    return (_index(pod, GROUP_INDEX_LABEL), _index(pod, WORKER_INDEX_LABEL), _not_ready(pod))
