"""GPU time of Job pods, from the pod objects alone (pure; bench/gpu_seconds.py reads the pods).

A pod holds its GPUs from the moment it is scheduled (bound to a node) until it ends: the last
container's finishedAt, or its deletion. It holds the pod's effective GPU request, as the scheduler
counts it: the larger of the largest init container's and the sum of the main containers'. A GPU step
is a container that requests GPUs itself (builders/build_steps.Step.uses_gpus); the pod's GPUs are
idle whenever it holds them and no GPU step runs (e.g. during a download in a GPU pod's init container).
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
Interval = tuple[float, float]  # seconds since the epoch, start <= end


def seconds(timestamp: str) -> float:
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def container_gpus(container: dict[str, Any]) -> int:
    resources = container.get("resources") or {}
    return int(
        (resources.get("requests") or {}).get(GPU_RESOURCE) or (resources.get("limits") or {}).get(GPU_RESOURCE) or 0
    )


def pod_gpus(pod: dict[str, Any]) -> int:
    spec = pod["spec"]
    return max(
        [container_gpus(c) for c in spec.get("initContainers") or []]
        + [sum(container_gpus(c) for c in spec.get("containers") or [])]
    )


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def held(pod: dict[str, Any], now: float) -> Interval | None:
    """When the pod held its node's resources (None: never scheduled)."""
    status = pod.get("status") or {}
    scheduled = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled" and c.get("status") == "True"),
        None,
    )
    if scheduled is None:
        return None
    start = seconds(scheduled["lastTransitionTime"])
    if status.get("phase") in ("Succeeded", "Failed"):
        ends = [
            seconds(t["finishedAt"])
            for cs in _statuses(pod)
            if (t := (cs.get("state") or {}).get("terminated")) and t.get("finishedAt")
        ]
        end = max(ends, default=start)
    elif pod["metadata"].get("deletionTimestamp"):
        end = seconds(pod["metadata"]["deletionTimestamp"])
    else:
        end = now
    return start, max(start, end)


def step_intervals(pod: dict[str, Any], now: float) -> dict[str, Interval]:
    """Each container's running interval (still running: until `now`), by container name."""
    out = {}
    for cs in _statuses(pod):
        state = cs.get("state") or {}
        if terminated := state.get("terminated"):
            if terminated.get("startedAt") and terminated.get("finishedAt"):
                out[cs["name"]] = (seconds(terminated["startedAt"]), seconds(terminated["finishedAt"]))
        elif running := state.get("running"):
            out[cs["name"]] = (seconds(running["startedAt"]), now)
    return out


def gpu_steps(pod: dict[str, Any]) -> set[str]:
    spec = pod["spec"]
    return {c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or []) if container_gpus(c)}


def covered(intervals: list[Interval], within: Interval) -> float:
    """Seconds of `within` covered by the union of `intervals`."""
    clipped = sorted((max(a, within[0]), min(b, within[1])) for a, b in intervals)
    total, reach = 0.0, within[0]
    for a, b in clipped:
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


@dataclasses.dataclass(frozen=True)
class PodGpuTime:
    pod: str
    gpus: int
    held_seconds: float
    gpu_step_seconds: float  # of the held time, while a GPU step ran

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.held_seconds

    @property
    def idle_gpu_seconds(self) -> float:
        return self.gpus * (self.held_seconds - self.gpu_step_seconds)


def pod_gpu_time(pod: dict[str, Any], now: float) -> PodGpuTime:
    interval = held(pod, now)
    name = pod["metadata"]["name"]
    if interval is None:
        return PodGpuTime(name, pod_gpus(pod), 0.0, 0.0)
    names = gpu_steps(pod)
    running = [span for step, span in step_intervals(pod, now).items() if step in names]
    return PodGpuTime(name, pod_gpus(pod), interval[1] - interval[0], covered(running, interval))
