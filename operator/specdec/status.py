"""Pure status evaluation: what observed Jobs, pods and Deployments mean for our resources."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from specdec.builders.build_steps import STEP_PHASES, STEP_REASONS
from specdec.conditions import Cond, aggregate_ready
from specdec.model_facts import ModelFacts
from specdec.plan import ModelCachePlan, Plan, Problem
from specdec.speculation import Measurement

MESSAGE_TAIL_CHARS = 600
# A container that will not start without a change, by what the kubelet says of it (its waiting reasons:
# pkg/kubelet/images/types.go, CRI's RegistryUnavailable and SignatureValidationFailed; the errors of
# kuberuntime's startContainer). Our reasons: ImagePullFailed, ContainerCannotStart, CrashLoopBackOff.
IMAGE_PULL_FAILED, CANNOT_START, CRASH_LOOP = "ImagePullFailed", "ContainerCannotStart", "CrashLoopBackOff"
KUBELET_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName",
                                  "ImageInspectError", "RegistryUnavailable", "SignatureValidationFailed"})
KUBELET_START_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
# A pending Job that may wait forever (for capacity, for pods the API server refuses to create, for a
# container the kubelet will not start): its reason on the deployment's EnginesReady condition is the Job
# kind's prefix and this.
STUCK_REASONS = frozenset({"Unschedulable", "PodCreationFailed", IMAGE_PULL_FAILED, CANNOT_START, CRASH_LOOP})
FETCHED = "Fetched"


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


def _condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return c
    return None


def condition_true(obj: dict[str, Any] | None, kind: str) -> bool:
    c = _condition(obj, kind)
    return bool(c and c.get("status") == "True")


def _tail(text: str) -> str:
    text = (text or "").strip()
    return text if len(text) <= MESSAGE_TAIL_CHARS else "…" + text[-MESSAGE_TAIL_CHARS:]


def _statuses(pod: dict[str, Any]) -> list[dict[str, Any]]:
    status = pod.get("status") or {}
    return (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or [])


def _memory_limit(pod: dict[str, Any], container: str) -> str:
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
    return next((c.get("image", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                 if c.get("name") == container), "")


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
    return ("check the image reference, that the node can reach its registry, and the pull secrets "
            "(the operator's SPECDEC_IMAGE_PULL_SECRETS)")


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
    detail = _tail(terminated.get("message", ""))
    return (f": last exit code {terminated.get('exitCode')} ({terminated.get('reason') or 'Error'})"
            + (f": {detail}" if detail else ""))


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
            "Succeeded", "Failed"):
        return None
    for cs in _statuses(pod):
        name = cs.get("name", "")
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason, message = waiting.get("reason", ""), waiting.get("message", "")
        if reason in KUBELET_PULL_REASONS:
            reason, message = _pull_failure(reason, message)
            return StuckContainer(IMAGE_PULL_FAILED, name, f"container {name} cannot pull image "
                                  f"\"{_image(pod, name)}\": {reason}: {_tail(message)}; {_pull_advice(reason)}")
        if reason in KUBELET_START_REASONS:
            return StuckContainer(CANNOT_START, name, f"container {name} cannot start: {reason}: {_tail(message)}; "
                                  f"{_cannot_start_advice(reason, message)}")
        crashed = _crashed(cs)
        if crashed is not None:
            meta = pod.get("metadata") or {}
            namespace = f"-n {meta['namespace']} " if meta.get("namespace") else ""
            advice = f"its log: kubectl logs {namespace}{meta.get('name')} -c {name} --previous"
            if crashed.get("reason") == "OOMKilled":
                advice = (f"raise {spec_field}.resources.limits.memory (now {_memory_limit(pod, name)}); "
                          + advice)
            return StuckContainer(CRASH_LOOP, name, f"container {name} keeps exiting ({CRASH_LOOP})"
                                  f"{_exit(crashed)}; {advice}")
    return None


def step_failure(pod: dict[str, Any], kind: JobKind = BUILD) -> tuple[str, str, str] | None:
    """(step, reason, message) of the step that failed in this pod, if one did."""
    for cs in _statuses(pod):
        state = cs.get("state") or {}
        terminated = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if not terminated or terminated.get("exitCode", 0) == 0:
            continue
        step = cs.get("name", "build")
        prefix = STEP_REASONS.get(step, "Build")
        if terminated.get("reason") == "OOMKilled":
            return step, f"{prefix}OOMKilled", (
                f"step {step} was OOMKilled (memory limit {_memory_limit(pod, step)}); "
                f"raise {kind.spec_field}.resources.limits.memory")
        detail = _tail(terminated.get("message", ""))
        message = f"step {step} failed with exit code {terminated.get('exitCode')}"
        return step, f"{prefix}Failed", message + (f": {detail}" if detail else "")
    return None


def _current_step(pod: dict[str, Any]) -> str | None:
    """The step a live pod is at: its first container not yet ended (init containers first, as the
    kubelet runs them); before the kubelet reports any, the first it will run; once all ended (the pod
    succeeded, its Job is not yet marked complete), the last."""
    statuses = _statuses(pod)
    for cs in statuses:
        state = cs.get("state") or {}
        if "running" in state or "waiting" in state:
            return cs.get("name")
    if statuses:
        return statuses[-1].get("name")
    spec = pod.get("spec") or {}
    return next((c.get("name") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])), None)


def _by_age(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


def evaluate_build(job: dict[str, Any] | None, pods: list[dict[str, Any]],
                   pod_creation_failure: str | None = None, kind: JobKind = BUILD) -> BuildState:
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
            return BuildState("Fetching", "Fetching", "the fetch finished; waiting for its pod's report",
                              attempts=attempts)
        return BuildState(*kind.done, attempts=attempts)
    failures = [f for f in (step_failure(p, kind) for p in _by_age(pods)) if f]
    if condition_true(job, "Failed"):
        job_failed = _condition(job, "Failed") or {}
        if job_failed.get("reason") == "DeadlineExceeded":
            return BuildState("Failed", f"{kind.prefix}DeadlineExceeded",
                              f"the {noun} Job exceeded {kind.spec_field}.activeDeadlineSeconds: "
                              f"{job_failed.get('message', '')}",
                              failed_step=failures[-1][0] if failures else None, attempts=attempts)
        if failures:
            step, reason, message = failures[-1]
            return BuildState("Failed", reason, f"{message} (after {status.get('failed', 1)} attempt(s))",
                              failed_step=step, attempts=attempts)
        return BuildState("Failed", f"{kind.prefix}Failed", job_failed.get("message") or f"the {noun} Job failed",
                          attempts=attempts)
    retry_note = ""
    if failures:
        retry_note = f"; retrying after: {failures[-1][2]}"
    live = [p for p in _by_age(pods) if (p.get("status") or {}).get("phase") in ("Pending", "Running", "Succeeded")]
    if not live:
        if pod_creation_failure:
            return BuildState("Pending", "PodCreationFailed",
                              f"the Job controller cannot create the {noun} pod: {pod_creation_failure}",
                              attempts=attempts)
        return BuildState("Pending", "JobPending", f"waiting for the {noun} pod" + retry_note, attempts=attempts)
    pod = live[-1]
    scheduled = _condition(pod, "PodScheduled")
    if scheduled and scheduled.get("status") == "False":
        return BuildState("Pending", "Unschedulable",
                          f"{noun} pod cannot be scheduled: {scheduled.get('message', '')}" + retry_note,
                          attempts=attempts)
    stuck = stuck_container(pod, kind.spec_field)
    if stuck:  # e.g. an image that runs as root: the pods run as the image's user, which must not be root
        return BuildState("Pending", stuck.reason,
                          f"{noun} pod {pod['metadata']['name']}: {stuck.message}"
                          + retry_note, attempts=attempts)
    step = _current_step(pod) or noun
    phase = STEP_PHASES.get(step, "Building")
    doing = "done" if pod["status"]["phase"] == "Succeeded" else "running"
    return BuildState(phase, phase, f"step {step} {doing} in pod {pod['metadata']['name']}" + retry_note,
                      attempts=attempts)


def _fetch_report(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The report (specdec.checkpoint_facts) in the termination message of the fetch that succeeded."""
    for pod in reversed(_by_age(pods)):
        for cs in _statuses(pod):
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
        facts = ModelFacts.from_config(model, report["config"], parameters=report["parameters"],
                                       tokenizer=report["tokenizer"], source="").to_status()
    except (KeyError, IndexError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        facts = None
    return {"sizeBytes": size if isinstance(size, int) and size >= 0 else None, "facts": facts}


def build_state_from_status(engine_build: dict[str, Any]) -> BuildState:
    """The BuildState an EngineBuild's (or a ModelCache's) status records (for deployments reading
    shared objects)."""
    status = engine_build.get("status") or {}
    ready = _condition(engine_build, "Ready") or {}
    return BuildState(status.get("phase") or "Pending", ready.get("reason") or "JobPending",
                      ready.get("message") or status.get("message") or "", status.get("failedStep"),
                      status.get("attempts") or 0)


# --- SpeculativeDeployment ----------------------------------------------------------------------

WAITING_FOR_CHECKPOINTS = "WaitingForCheckpoints"  # an EngineBuild's, before its Job: see the ModelCaches


def users_view(state: BuildState) -> tuple:
    """What a deployment's status reads of a shared EngineBuild's or ModelCache's state (the conditions
    below): done or not, waiting for checkpoints, and the reason and message of a failure or of a
    stuck Job. A change of anything else (the step running, an attempt) wakes none of its users."""
    if state.failed or state.reason in STUCK_REASONS:
        return state.phase, state.reason, state.message
    return state.done, state.reason == WAITING_FOR_CHECKPOINTS


def _inputs_condition(inputs: tuple[ModelCachePlan, ...], caches: dict[str, BuildState], fetching: dict[str, None],
                      kind: str = "EnginesReady") -> Cond | None:
    """An engine without its EngineBuild (or, on backend pytorch, the runtime) waits for its checkpoints:
    a failed or stuck fetch decides (a `kind` condition); fetches under way are added to `fetching`.
    Messages name what is awaited, not its current phase (`kubectl get mc` shows that): a shared
    object's every phase change would otherwise rewrite the status of each of its users."""
    for cache in inputs:
        state = caches.get(cache.name, BuildState("Pending", "ModelCachePending", "creating the ModelCache"))
        what = f"{cache.spec.model}@{cache.spec.revision} (ModelCache {cache.name})"
        if state.failed:
            return Cond(kind, False, "FetchFailed", f"{what}: {state.message}")
        if state.reason in STUCK_REASONS:
            return Cond(kind, False, FETCH.prefix + state.reason, f"{what}: {state.message}")
        if state.phase != FETCHED:
            fetching[what] = None
    return None


def _engines_condition(plan: Plan, states: dict[str, BuildState], caches: dict[str, BuildState]) -> Cond:
    described = []
    fetching: dict[str, None] = {}  # ordered set
    for engine in plan.engines:
        if engine.name not in states or states[engine.name].reason == WAITING_FOR_CHECKPOINTS:
            blocked = _inputs_condition(engine.inputs, caches, fetching)
            if blocked:
                return blocked
            if fetching:
                continue
        state = states.get(engine.name, BuildState("Pending", "EngineBuildPending", "creating the EngineBuild"))
        if state.failed:
            return Cond("EnginesReady", False, state.reason,
                        f"{engine.role} engine {engine.name}: {state.message}")
        if state.reason in STUCK_REASONS:  # waits for something that may never come: say so
            return Cond("EnginesReady", False, BUILD.prefix + state.reason,
                        f"{engine.role} engine {engine.name}: {state.message}")
        # built or not, not the phase: see _inputs_condition
        described.append(f"{engine.role} {engine.name}: {'built' if state.succeeded else 'in progress'}")
    if fetching:
        return Cond("EnginesReady", False, "Fetching", "GPU builds start once their checkpoints are in the "
                    "cache; fetching " + "; ".join(fetching) + "".join(f"; {d}" for d in described))
    if all(states.get(e.name) and states[e.name].succeeded for e in plan.engines):
        return Cond("EnginesReady", True, "EnginesBuilt", "; ".join(described))
    return Cond("EnginesReady", False, "EnginesBuilding", "; ".join(described))


def _runtime_blocked(deployment: dict[str, Any], pods: list[dict[str, Any]]) -> Cond | None:
    """A rollout that waits for something that may never come: pods the API server refuses to
    create (the Deployment's ReplicaFailure), pods no node can take, or containers that will not start."""
    failure = _condition(deployment, "ReplicaFailure")
    if failure and failure.get("status") == "True":
        return Cond("RuntimeAvailable", False, "PodCreationFailed",
                    f"runtime pods cannot be created: {failure.get('message', '')}")
    for pod in _by_age(pods):
        blocked = runtime_pod_blocked(pod)
        if blocked:
            return blocked
    return None


def runtime_pod_blocked(pod: dict[str, Any] | None) -> Cond | None:
    """Why a runtime pod will not become ready without a change: no node can take it (PodsUnschedulable), or a
    container of it will not start (stuck_container's reasons); None for any other pod. All a deployment's
    status reads of its runtime pods (their readiness comes with the Deployment's status): a pod's change
    wakes its deployment only when this changes (not, e.g., a restart count or a probe's result)."""
    if pod is None:
        return None
    name = pod["metadata"]["name"]
    scheduled = _condition(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return Cond("RuntimeAvailable", False, "PodsUnschedulable",
                    f"runtime pod {name} cannot be scheduled: {scheduled.get('message', '')}")
    stuck = stuck_container(pod, "spec.runtime")
    return Cond("RuntimeAvailable", False, stuck.reason, f"runtime pod {name}: {stuck.message}") if stuck else None


def runtime_view(deployment: dict[str, Any] | None) -> tuple | None:
    """What a deployment's reconcile reads of its runtime Deployment: the pod counts and conditions below,
    and what _runtime compares with what it applies (the spec, through its generation; labels, annotations).
    The controller-manager's other status updates (availableReplicas, Progressing's reasons on the way,
    timestamps) wake nobody (~300 reconciles fewer at N=1000)."""
    if deployment is None:
        return None
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    failure = _condition(deployment, "ReplicaFailure") or {}
    progressing = _condition(deployment, "Progressing") or {}
    deadline = progressing.get("message") if progressing.get("reason") == "ProgressDeadlineExceeded" else None
    return (meta.get("generation"), meta.get("labels"), meta.get("annotations"), status.get("observedGeneration"),
            status.get("replicas"), status.get("updatedReplicas"), status.get("readyReplicas"),
            condition_true(deployment, "Available"), failure.get("status"), failure.get("message"), deadline)


def runtime_inputs_fetched(plan: Plan, caches: dict[str, BuildState]) -> bool:
    """Backend pytorch: whether every checkpoint the runtime reads is in the cache."""
    return all(c.name in caches and caches[c.name].phase == FETCHED for c in plan.runtime_inputs)


def _runtime_condition(plan: Plan, deployment: dict[str, Any] | None, current: bool,
                       pods: list[dict[str, Any]], caches: dict[str, BuildState]) -> Cond:
    if not current and not runtime_inputs_fetched(plan, caches):
        fetching: dict[str, None] = {}
        blocked = _inputs_condition(plan.runtime_inputs, caches, fetching, "RuntimeAvailable")
        if blocked:
            return blocked
        ready = ((deployment or {}).get("status") or {}).get("readyReplicas") or 0
        keep = f"; {ready} pod(s) of the previous version keep serving" if deployment is not None else ""
        return Cond("RuntimeAvailable", False, "Fetching", "the runtime starts once its checkpoints are in the "
                    "cache; fetching " + "; ".join(fetching) + keep)
    if deployment is None:
        return Cond("RuntimeAvailable", False, "WaitingForEngines", "the runtime starts when every engine is built")
    want = plan.spec.runtime.replicas
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas") or 0
    updated = status.get("updatedReplicas") or 0
    total = status.get("replicas") or 0
    if not current:
        return Cond("RuntimeAvailable", False, "UpdatePending",
                    f"{ready} pod(s) of the previous version keep serving until the new engines are built")
    if (deployment.get("metadata") or {}).get("generation") != status.get("observedGeneration"):
        return Cond("RuntimeAvailable", False, "RollingOut", "the Deployment controller has not seen the change yet")
    if want == 0:
        return Cond("RuntimeAvailable", True, "ScaledToZero", "replicas is 0")
    if updated == want and ready >= want and total == want and condition_true(deployment, "Available"):
        return Cond("RuntimeAvailable", True, "Available", f"{ready}/{want} pods ready")
    blocked = _runtime_blocked(deployment, pods)
    if blocked:
        return blocked
    progressing = _condition(deployment, "Progressing") or {}
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Cond("RuntimeAvailable", False, "ProgressDeadlineExceeded", progressing.get("message", ""))
    return Cond("RuntimeAvailable", False, "RollingOut",
                f"{updated}/{want} pods updated, {ready} ready")


def deployment_conditions(plan: Plan | Problem, states: dict[str, BuildState],
                          deployment: dict[str, Any] | None, runtime_current: bool,
                          endpoint: str | None, failure: Cond | None = None,
                          pods: list[dict[str, Any]] | None = None,
                          caches: dict[str, BuildState] | None = None,
                          service_current: bool = True) -> tuple[str, list[Cond]]:
    """(phase, conditions) of a SpeculativeDeployment; sub-conditions appear only where they apply.

    `failure`: why this reconcile could not finish (an API error, a name taken by a foreign object).
    The sub-conditions still say what was observed; Ready carries the failure. `pods`: the runtime's;
    `caches`: the ModelCaches' states, by name (an engine is created once its checkpoints are fetched);
    `service_current`: the runtime's Service is applied (nothing is served at the endpoint before)."""
    if isinstance(plan, Problem):
        valid = Cond("SpecValid", False, plan.reason, plan.message)
        return "Invalid", [valid, aggregate_ready([valid], "")]
    parts = [Cond("SpecValid", True, "Valid", plan.spec_valid_message)]
    if plan.engines:
        parts.append(_engines_condition(plan, states, caches or {}))
    parts.append(_runtime_condition(plan, deployment, runtime_current, pods or [], caches or {}))
    ready = aggregate_ready(parts, f"serving at {endpoint}")
    if ready.status and not service_current:
        ready = Cond("Ready", False, "ServicePending", f"the runtime is available; the Service behind {endpoint} is "
                     "being applied (the API server allocates the cluster's Service IPs one at a time)")
    if failure is not None:
        return "Failed", parts + [Cond("Ready", False, failure.reason, failure.message)]
    if ready.status:
        phase = "Ready"
    elif any(states[e.name].failed for e in plan.engines if e.name in states) or any(
            p.reason == "FetchFailed" for p in parts):
        phase = "Failed"
    elif plan.engines and not parts[1].status or parts[-1].reason.startswith(FETCH.prefix):
        phase = "Building"
    else:
        phase = "RollingOut"
    return phase, parts + [ready]


# --- speculation (specdec.speculation) ---------------------------------------------------------------

SPECULATION_EFFECTIVE = "SpeculationEffective"
NO_TRAFFIC = Cond(SPECULATION_EFFECTIVE, None, "NoTraffic",
                  "no speculative traffic measured yet: the runtime pods' metrics are read every scrape interval")
SUGGESTED_GAIN = 0.03  # a better draft length is worth mentioning from this predicted gain


def speculation_condition(m: Measurement, auto: bool) -> Cond:
    """Does the window show a gain? If not, what to change."""
    numbers = (f"acceptance {m.acceptance_rate:.2f}, {m.tokens_per_step:.2f} tokens per target step at draftLen "
               f"{m.draft_len}, draft cost {m.cost_ratio:.3f} of a target step ({m.cost_source})")
    better = m.best_draft_len != m.draft_len and m.best_speedup > m.speedup * (1 + SUGGESTED_GAIN)
    if better:
        advice = (f"draftLen: auto is moving to {m.best_draft_len}" if auto else
                  f"draftLen {m.best_draft_len} would give an estimated {m.best_speedup:.2f}x")
    if m.speedup > 1.0:
        return Cond(SPECULATION_EFFECTIVE, True, "SpeculationPaysOff",
                    f"estimated speedup {m.speedup:.2f}x: {numbers}" + (f"; {advice}" if better else ""))
    if not (better and m.best_speedup > 1.0):
        advice = ("no draft length pays off at this acceptance: use a draft model closer to the target (same "
                  "tokenizer and family, or one fine-tuned on this traffic), or serve without speculation "
                  "(on the PyTorch path, maxConcurrency turns it off under load)")
    return Cond(SPECULATION_EFFECTIVE, False, "LowAcceptance",
                f"estimated speedup {m.speedup:.2f}x, slower than the target alone: {numbers}; {advice}")


def speculation_status(m: Measurement, measured_at: str, window_seconds: float) -> dict[str, Any]:
    """status.speculation, rounded: what a person reads, and what decides whether it is rewritten."""
    return {"acceptanceRate": round(m.acceptance_rate, 2), "acceptedTokensPerStep": round(m.tokens_per_step, 2),
            "draftLen": m.draft_len, "estimatedSpeedup": round(m.speedup, 2), "costRatio": round(m.cost_ratio, 3),
            "costRatioSource": m.cost_source, "recommendedDraftLen": m.best_draft_len,
            "draftTokens": m.draft_tokens, "pods": m.pods, "windowSeconds": round(window_seconds, 1),
            "measuredAt": measured_at}
