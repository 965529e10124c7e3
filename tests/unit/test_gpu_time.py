"""The GPU-time arithmetic of bench/gpu_seconds.py, on hand-written pods."""

from __future__ import annotations

from bench.gpu_time import GPU_RESOURCE, covered, pod_gpu_time, pod_gpus, seconds

T0 = seconds("2026-01-01T00:00:00Z")


def at(offset: int) -> str:
    return f"2026-01-01T00:{offset // 60:02d}:{offset % 60:02d}Z"


def container(name: str, gpus: int = 0) -> dict:
    return {"name": name, "resources": {"limits": {GPU_RESOURCE: str(gpus)}} if gpus else {}}


def ran(name: str, start: int, end: int | None) -> dict:
    state = (
        {"terminated": {"startedAt": at(start), "finishedAt": at(end)}}
        if end is not None
        else {"running": {"startedAt": at(start)}}
    )
    return {"name": name, "state": state}


def build_pod(
    init: list[tuple[str, int, int, int | None]],
    main: tuple[str, int, int, int | None] | None,
    phase: str = "Succeeded",
    scheduled: int | None = 0,
) -> dict:
    """init/main: (name, gpus, started, finished or None while running); main None: not started."""
    main_spec = main or ("build", 1, 0, None)
    conditions = (
        [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(scheduled)}]
        if scheduled is not None
        else [{"type": "PodScheduled", "status": "False"}]
    )
    return {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [container(n, g) for n, g, *_ in init],
            "containers": [container(main_spec[0], main_spec[1])],
        },
        "status": {
            "phase": phase,
            "conditions": conditions,
            "initContainerStatuses": [ran(n, s, e) for n, _, s, e in init],
            "containerStatuses": [ran(*main[:1], *main[2:])] if main else [],
        },
    }


def test_a_pod_holds_its_largest_init_container_or_the_sum_of_its_containers():
    pod = build_pod([("fetch", 0, 0, 1), ("convert", 2, 1, 2)], ("build", 2, 2, 3))
    assert pod_gpus(pod) == 2
    pod["spec"]["containers"].append(container("sidecar", 1))
    assert pod_gpus(pod) == 3
    pod["spec"]["initContainers"][0] = container("fetch", 4)
    assert pod_gpus(pod) == 4


def test_covered_is_the_union_clipped_to_the_window():
    assert covered([(0, 10), (5, 15), (20, 30)], (0, 40)) == 25
    assert covered([(20, 30), (0, 10)], (5, 25)) == 10
    assert covered([(0, 5)], (10, 20)) == 0
    assert covered([], (0, 10)) == 0


def test_a_download_in_a_gpu_pods_init_container_holds_its_gpus_idle():
    before = build_pod([("fetch", 0, 0, 20), ("quantize", 1, 20, 30)], ("build", 1, 30, 60))
    time = pod_gpu_time(before, now=T0 + 999)
    assert (time.gpus, time.held_seconds, time.gpu_step_seconds) == (1, 60, 40)
    assert (time.gpu_seconds, time.idle_gpu_seconds) == (60, 20)


def test_a_build_pod_without_a_download_is_never_idle_and_a_cpu_pod_holds_no_gpu():
    after = build_pod([("quantize", 2, 0, 10)], ("build", 2, 10, 40))
    assert (pod_gpu_time(after, T0 + 999).gpu_seconds, pod_gpu_time(after, T0 + 999).idle_gpu_seconds) == (80, 0)
    fetch = build_pod([], ("fetch", 0, 0, 20))
    assert (pod_gpu_time(fetch, T0 + 999).held_seconds, pod_gpu_time(fetch, T0 + 999).gpu_seconds) == (20, 0)


def test_running_pods_hold_until_now_deleted_ones_until_deletion_unscheduled_ones_never():
    running = build_pod([("fetch", 0, 0, 20), ("convert", 1, 20, None)], None, phase="Pending")
    assert pod_gpu_time(running, now=T0 + 25).held_seconds == 25
    assert pod_gpu_time(running, now=T0 + 25).idle_gpu_seconds == 20
    running["metadata"]["deletionTimestamp"] = at(22)
    assert pod_gpu_time(running, now=T0 + 25).held_seconds == 22
    pending = build_pod([], None, phase="Pending", scheduled=None)
    assert pod_gpu_time(pending, now=T0 + 25).gpu_seconds == 0
