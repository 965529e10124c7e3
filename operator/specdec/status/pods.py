"""What a pod says: its conditions, and a container that will not start (or keeps exiting) without a change.

Read for the Jobs of EngineBuilds and ModelCaches (shared.py) and for a deployment's runtime pods
(deployment.py)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

MESSAGE_TAIL_CHARS = 600
# A container that will not start without a change, by what the kubelet says of it (its waiting reasons:
# pkg/kubelet/images/types.go, CRI's RegistryUnavailable and SignatureValidationFailed; the errors of
# kuberuntime's startContainer). Our reasons: ImagePullFailed, ContainerCannotStart, CrashLoopBackOff.
IMAGE_PULL_FAILED, CANNOT_START, CRASH_LOOP = "ImagePullFailed", "ContainerCannotStart", "CrashLoopBackOff"
KUBELET_PULL_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "ImageInspectError",
        "RegistryUnavailable",
        "SignatureValidationFailed",
    }
)
KUBELET_START_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
# A pending Job that may wait forever (for capacity, for pods the API server refuses to create, for a
# container the kubelet will not start): its reason on the deployment's EnginesReady condition is the Job
# kind's prefix and this.
STUCK_REASONS = frozenset({"Unschedulable", "PodCreationFailed", IMAGE_PULL_FAILED, CANNOT_START, CRASH_LOOP})


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def condition_true(obj: dict[str, Any] | None, kind: str) -> bool:
    c = condition(obj, kind)
    return bool(c and c.get("status") == "True")


def tail(text: str) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_TAIL_CHARS else "…" + text[-MESSAGE_TAIL_CHARS:]


def container_statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def memory_limit(pod: dict[str, Any], container: str) -> str:
    spec = pod.get("spec") or {}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if c.get("name") == container:
            return ((c.get("resources") or {}).get("limits") or {}).get("memory", "no memory limit")
    return "unknown"


@dataclasses.dataclass(frozen=True)
class StuckContainer:
    """A container of a pod that will not start (or keeps exiting) without a change."""

    reason: str  # IMAGE_PULL_FAILED, CANNOT_START or CRASH_LOOP
    container: str
    message: str  # the kubelet's reason and message, and what to do


# kubelet 1.32+ repeats the pull's error in the back-off's message (pkg/kubelet/images/image_manager.go).
_PULL_BACK_OFF = re.compile(r'Back-off pulling image "[^"]*": (\w+): (.+)', re.DOTALL)


def _image(pod: dict[str, Any], container: str) -> str:
    spec = pod.get("spec") or {}
    return next(
        (
            c.get("image", "")
            for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
            if c.get("name") == container
        ),
        "",
    )


def _pull_failure(reason: str, message: str) -> tuple[str, str]:
    """The kubelet's (reason, message) of a failed pull. It alternates ErrImagePull (the registry's error) with
    ImagePullBackOff (the wait before the next try): from 1.32 the back-off's message carries the pull's
    reason and error, which are the verdict then, so a pull failing the same way reads the same on every try."""
    retried = _PULL_BACK_OFF.fullmatch(message) if reason == "ImagePullBackOff" else None
    return (retried.group(1), retried.group(2)) if retried else (reason, message)


def _pull_advice(reason: str) -> str:
    if reason == "InvalidImageName":
        return "fix the image reference"
    if reason == "ErrImageNeverPull":
        return "the node has not got the image and its pull policy is Never: put it on the node or let it be pulled"
    return (
        "check the image reference, that the node can reach its registry, and the pull secrets "
        "(the operator's SPECDEC_IMAGE_PULL_SECRETS)"
    )


def _cannot_start_advice(reason: str, message: str) -> str:
    if "image will run as root" in message:
        return "the image runs as root; build it with a numeric non-root USER (ours: USER 1000:1000)"
    if "non-numeric user" in message:
        return "the kubelet cannot check a user name; give the image's USER as numbers (e.g. USER 1000:1000)"
    if "invalid user id" in message:
        return "give the image a valid numeric non-root USER (e.g. USER 1000:1000)"
    if reason == "CreateContainerConfigError":
        return "fix what the message names (kubectl describe pod shows the kubelet's events)"
    return "check the image's entrypoint and the node's container runtime (kubectl describe pod shows its events)"


def _exit(terminated: dict[str, Any]) -> str:
    if not terminated:
        return ""
    detail = tail(terminated.get("message", ""))
    return f": last exit code {terminated.get('exitCode')} ({terminated.get('reason') or 'Error'})" + (
        f": {detail}" if detail else ""
    )


def _crashed(cs: dict[str, Any]) -> dict[str, Any] | None:
    """The exit of a container the kubelet restarts with a back-off (CrashLoopBackOff), from that back-off until
    it has started again (its startup probe passed): while it waits; once it failed again (restarted before:
    the kubelet backs off next); while it runs again, not yet started, after a back-off (restarted twice).
    The kubelet's back-off message (its delay) is left out, so a loop that exits the same way reads the same."""
    state, restarts = cs.get("state") or {}, cs.get("restartCount") or 0
    last = (cs.get("lastState") or {}).get("terminated")
    if (state.get("waiting") or {}).get("reason") == CRASH_LOOP:
        return last or {}
    if (state.get("terminated") or {}).get("exitCode", 0) != 0 and restarts >= 1:
        return state["terminated"]
    if "running" in state and cs.get("started") is False and restarts >= 2:
        return last
    return None


def stuck_container(pod: dict[str, Any], spec_field: str) -> StuckContainer | None:
    """The first container (init containers first) the kubelet will not start, or restarts in a loop: what it
    says, and what to do (`spec_field`: where the spec sets the pod's resources). None for a pod that is
    leaving (deleted, or done: an evicted pod stays Failed) and for any other container."""
    if (pod.get("metadata") or {}).get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in (
        "Succeeded",
        "Failed",
    ):
        return None
    for cs in container_statuses(pod):
        name = cs.get("name", "")
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason, message = waiting.get("reason", ""), waiting.get("message", "")
        if reason in KUBELET_PULL_REASONS:
            reason, message = _pull_failure(reason, message)
            return StuckContainer(
                IMAGE_PULL_FAILED,
                name,
                f"container {name} cannot pull image "
                f'"{_image(pod, name)}": {reason}: {tail(message)}; {_pull_advice(reason)}',
            )
        if reason in KUBELET_START_REASONS:
            return StuckContainer(
                CANNOT_START,
                name,
                f"container {name} cannot start: {reason}: {tail(message)}; {_cannot_start_advice(reason, message)}",
            )
        crashed = _crashed(cs)
        if crashed is not None:
            meta = pod.get("metadata") or {}
            namespace = f"-n {meta['namespace']} " if meta.get("namespace") else ""
            advice = f"its log: kubectl logs {namespace}{meta.get('name')} -c {name} --previous"
            if crashed.get("reason") == "OOMKilled":
                advice = f"raise {spec_field}.resources.limits.memory (now {memory_limit(pod, name)}); " + advice
            return StuckContainer(
                CRASH_LOOP, name, f"container {name} keeps exiting ({CRASH_LOOP}){_exit(crashed)}; {advice}"
            )
    return None


def by_age(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))
