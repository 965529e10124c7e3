"""The status of a shared object (EngineBuild, ModelCache): what its Job and the Job's pods mean."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from specdec.admission.model_facts import ModelFacts
from specdec.builders.build_steps import STEP_PHASES, STEP_REASONS
from specdec.status.pods import (
    STUCK_REASONS,
    by_age,
    condition,
    condition_true,
    container_statuses,
    memory_limit,
    stuck_container,
    tail,
)

FETCHED = "Fetched"
WAITING_FOR_CHECKPOINTS = "WaitingForCheckpoints"  # an EngineBuild's, before its Job: see the ModelCaches


@dataclasses.dataclass(frozen=True)
class JobKind:
    """What a Job of ours does, for the words of its status: an EngineBuild's build or a ModelCache's fetch."""

    noun: str  # "build" or "fetch"
    prefix: str  # of Job-level reasons: BuildDeadlineExceeded, FetchUnschedulable ...
    spec_field: str  # where the user places its pods
    done: tuple[str, str, str]  # phase, reason and message once the Job completed


BUILD = JobKind("build", "Build", "spec.build", ("Succeeded", "Built", "engine built"))
FETCH = JobKind("fetch", "Fetch", "spec.cache.fetch", (FETCHED, FETCHED, "checkpoint in the cache"))


@dataclasses.dataclass(frozen=True)
class BuildState:
    phase: str  # Pending, Fetching, Converting, Quantizing, Building, Succeeded, Failed
    reason: str
    message: str
    failed_step: str | None = None
    attempts: int = 0

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def done(self) -> bool:
        """The Job completed: an engine built or a checkpoint fetched."""
        return self.phase in (BUILD.done[0], FETCH.done[0])


def step_failure(pod: dict[str, Any], kind: JobKind = BUILD) -> tuple[str, str, str] | None:
    """(step, reason, message) of the step that failed in this pod, if one did."""
    for cs in container_statuses(pod):
        state = cs.get("state") or {}
        terminated = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if not terminated or terminated.get("exitCode", 0) == 0:
            continue
        step = cs.get("name", "build")
        prefix = STEP_REASONS.get(step, "Build")
        if terminated.get("reason") == "OOMKilled":
            return (
                step,
                f"{prefix}OOMKilled",
                (
                    f"step {step} was OOMKilled (memory limit {memory_limit(pod, step)}); "
                    f"raise {kind.spec_field}.resources.limits.memory"
                ),
            )
        detail = tail(terminated.get("message", ""))
        message = f"step {step} failed with exit code {terminated.get('exitCode')}"
        return step, f"{prefix}Failed", message + (f": {detail}" if detail else "")
    return None


def _current_step(pod: dict[str, Any]) -> str | None:
    """The step a live pod is at: its first container not yet ended (init containers first, as the
    kubelet runs them); before the kubelet reports any, the first it will run; once all ended (the pod
    succeeded, its Job is not yet marked complete), the last."""
    statuses = container_statuses(pod)
    for cs in statuses:
        state = cs.get("state") or {}
        if "running" in state or "waiting" in state:
            return cs.get("name")
    if statuses:
        return statuses[-1].get("name")
    spec = pod.get("spec") or {}
    return next((c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])), None)


def evaluate_build(
    job: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    pod_creation_failure: str | None = None,
    kind: JobKind = BUILD,
) -> BuildState:
    """The phase of an EngineBuild (or, with kind FETCH, a ModelCache), from its Job, the Job's pods,
    and the message of the Job controller's latest FailedCreate Event (the only place a pod the API
    server refuses shows up)."""
    noun = kind.noun
    if job is None:
        return BuildState("Pending", "JobPending", f"creating the {noun} Job")
    status = job.get("status") or {}
    attempts = (status.get("failed") or 0) + (status.get("succeeded") or 0) + (status.get("active") or 0)
    if condition_true(job, "Complete"):
        if kind is FETCH and any((p.get("status") or {}).get("phase") in ("Pending", "Running") for p in pods):
            # Our pod watch lags the Job controller's: the pod's termination message (the checkpoint's
            # facts, which admission waits for) is not here yet. Fetched without them would let builds start.
            return BuildState(
                "Fetching", "Fetching", "the fetch finished; waiting for its pod's report", attempts=attempts
            )
        return BuildState(*kind.done, attempts=attempts)
    failures = [f for f in (step_failure(p, kind) for p in by_age(pods)) if f]
    if condition_true(job, "Failed"):
        job_failed = condition(job, "Failed") or {}
        if job_failed.get("reason") == "DeadlineExceeded":
            return BuildState(
                "Failed",
                f"{kind.prefix}DeadlineExceeded",
                f"the {noun} Job exceeded {kind.spec_field}.activeDeadlineSeconds: {job_failed.get('message', '')}",
                failed_step=failures[-1][0] if failures else None,
                attempts=attempts,
            )
        if failures:
            step, reason, message = failures[-1]
            return BuildState(
                "Failed",
                reason,
                f"{message} (after {status.get('failed', 1)} attempt(s))",
                failed_step=step,
                attempts=attempts,
            )
        return BuildState(
            "Failed", f"{kind.prefix}Failed", job_failed.get("message") or f"the {noun} Job failed", attempts=attempts
        )
    retry_note = ""
    if failures:
        retry_note = f"; retrying after: {failures[-1][2]}"
    live = [p for p in by_age(pods) if (p.get("status") or {}).get("phase") in ("Pending", "Running", "Succeeded")]
    if not live:
        if pod_creation_failure:
            return BuildState(
                "Pending",
                "PodCreationFailed",
                f"the Job controller cannot create the {noun} pod: {pod_creation_failure}",
                attempts=attempts,
            )
        return BuildState("Pending", "JobPending", f"waiting for the {noun} pod" + retry_note, attempts=attempts)
    pod = live[-1]
    scheduled = condition(pod, "PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        return BuildState(
            "Pending",
            "Unschedulable",
            f"{noun} pod cannot be scheduled: {scheduled.get('message', '')}" + retry_note,
            attempts=attempts,
        )
    stuck = stuck_container(pod, kind.spec_field)
    if stuck:  # e.g. an image that runs as root: the pods run as the image's user, which must not be root
        return BuildState(
            "Pending",
            stuck.reason,
            f"{noun} pod {pod['metadata']['name']}: {stuck.message}" + retry_note,
            attempts=attempts,
        )
    step = _current_step(pod) or noun
    phase = STEP_PHASES.get(step, "Building")
    doing = "done" if pod["status"]["phase"] == "Succeeded" else "running"
    return BuildState(
        phase, phase, f"step {step} {doing} in pod {pod['metadata']['name']}" + retry_note, attempts=attempts
    )


def _fetch_report(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report (specdec.admission.checkpoint_facts) in the termination message of the fetch that succeeded."""
    for pod in reversed(by_age(pods)):
        for cs in container_statuses(pod):
            terminated = (cs.get("state") or {}).get("terminated") or {}
            if cs.get("name") == "fetch" and terminated.get("exitCode") == 0:
                try:
                    report = json.loads(terminated.get("message") or "")
                except ValueError:
                    continue
                if isinstance(report, dict):
                    return report
    return None


def fetched_status(pods: list[dict[str, Any]], status: dict[str, Any], model: str) -> dict[str, Any]:
    """sizeBytes and facts of a Fetched ModelCache: what its fetch reported, or (its pods are gone) what
    its status kept. Facts only from a report with all they need (config.json, safetensors, tokenizer)."""
    report = _fetch_report(pods)
    if report is None:
        return {"sizeBytes": status.get("sizeBytes"), "facts": status.get("facts")}
    size = report.get("sizeBytes")
    try:
        facts = ModelFacts.from_config(
            model, report["config"], parameters=report["parameters"], tokenizer=report["tokenizer"], source=""
        ).to_status()
    except (KeyError, IndexError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        facts = None
    return {"sizeBytes": size if isinstance(size, int) and size >= 0 else None, "facts": facts}


def build_state_from_status(engine_build: dict[str, Any]) -> BuildState:
    """The BuildState an EngineBuild's (or a ModelCache's) status records (for deployments reading
    shared objects)."""
    status = engine_build.get("status") or {}
    ready = condition(engine_build, "Ready") or {}
    return BuildState(
        status.get("phase") or "Pending",
        ready.get("reason") or "JobPending",
        ready.get("message") or status.get("message") or "",
        status.get("failedStep"),
        status.get("attempts") or 0,
    )


def users_view(state: BuildState) -> tuple:
    """What a deployment's status reads of a shared EngineBuild's or ModelCache's state (status.deployment's
    conditions): done or not, waiting for checkpoints, and the reason and message of a failure or of a stuck
    Job. A change of anything else (the step running, an attempt) wakes none of its users."""
    if state.failed or state.reason in STUCK_REASONS:
        return state.phase, state.reason, state.message
    return state.done, state.reason == WAITING_FOR_CHECKPOINTS
