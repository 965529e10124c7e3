"""A SpeculativeDeployment's conditions and phase, from one DeploymentInput: what its reconcile observed."""

from __future__ import annotations

import dataclasses
from typing import Any

from specdec.conditions import Cond, aggregate_ready
from specdec.plan import ModelCachePlan, Plan, Problem
from specdec.status.groups import group_shortfall
from specdec.status.pods import STUCK_REASONS, by_age, condition, condition_true, stuck_container
from specdec.status.shared import BUILD, FETCH, FETCHED, WAITING_FOR_CHECKPOINTS, BuildState


def _inputs_condition(
    inputs: tuple[ModelCachePlan, ...],
    caches: dict[str, BuildState],
    fetching: dict[str, None],
    kind: str = "EnginesReady",
) -> Cond | None:
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
            return Cond("EnginesReady", False, state.reason, f"{engine.role} engine {engine.name}: {state.message}")
        if state.reason in STUCK_REASONS:  # waits for something that may never come: say so
            return Cond(
                "EnginesReady",
                False,
                BUILD.prefix + state.reason,
                f"{engine.role} engine {engine.name}: {state.message}",
            )
        # built or not, not the phase: see _inputs_condition
        described.append(f"{engine.role} {engine.name}: {'built' if state.succeeded else 'in progress'}")
    if fetching:
        return Cond(
            "EnginesReady",
            False,
            "Fetching",
            "GPU builds start once their checkpoints are in the "
            "cache; fetching " + "; ".join(fetching) + "".join(f"; {d}" for d in described),
        )
    if engines_built(plan, states):
        return Cond("EnginesReady", True, "EnginesBuilt", "; ".join(described))
    return Cond("EnginesReady", False, "EnginesBuilding", "; ".join(described))


def _runtime_blocked(deployment: dict[str, Any], pods: list[dict[str, Any]]) -> Cond | None:
    """A rollout that waits for something that may never come: pods the API server refuses to
    create (the Deployment's ReplicaFailure), pods no node can take, or containers that will not start."""
    failure = condition(deployment, "ReplicaFailure")
    if failure and failure.get("status") == "True":
        return Cond(
            "RuntimeAvailable",
            False,
            "PodCreationFailed",
            f"runtime pods cannot be created: {failure.get('message', '')}",
        )
    for pod in by_age(pods):
        blocked = runtime_pod_blocked(pod)
        if blocked:
            return blocked
    return None


def _rollout_stuck(deployment: dict[str, Any], pods: list[dict[str, Any]]) -> Cond | None:
    """A blocked rollout (_runtime_blocked), or one past the Deployment's own progress deadline."""
    blocked = _runtime_blocked(deployment, pods)
    if blocked:
        return blocked
    progressing = condition(deployment, "Progressing") or {}
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Cond("RuntimeAvailable", False, "ProgressDeadlineExceeded", progressing.get("message", ""))
    return None


def runtime_pod_blocked(pod: dict[str, Any] | None) -> Cond | None:
    """Why a runtime pod will not become ready without a change: no node can take it (PodsUnschedulable), or a
    container of it will not start (stuck_container's reasons); None for any other pod. All a deployment's
    status reads of its runtime pods (their readiness comes with the Deployment's status): a pod's change
    wakes its deployment only when this changes (not, e.g., a restart count or a probe's result)."""
    if pod is None:
        return None
    name = pod["metadata"]["name"]
    scheduled = condition(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        return Cond(
            "RuntimeAvailable",
            False,
            "PodsUnschedulable",
            f"runtime pod {name} cannot be scheduled: {scheduled.get('message', '')}",
        )
    stuck = stuck_container(pod, "spec.runtime")
    return Cond("RuntimeAvailable", False, stuck.reason, f"runtime pod {name}: {stuck.message}") if stuck else None


def runtime_view(deployment: dict[str, Any] | None) -> tuple | None:
    """What a deployment's reconcile reads of its runtime Deployment: the pod counts and conditions below,
    and what RuntimeApplier.apply compares with what it applies (the spec, through its generation; labels,
    annotations).
    The controller-manager's other status updates (availableReplicas, Progressing's reasons on the way,
    timestamps) wake nobody (~300 reconciles fewer at N=1000)."""
    if deployment is None:
        return None
    meta, status = deployment.get("metadata") or {}, deployment.get("status") or {}
    failure = condition(deployment, "ReplicaFailure") or {}
    progressing = condition(deployment, "Progressing") or {}
    deadline = progressing.get("message") if progressing.get("reason") == "ProgressDeadlineExceeded" else None
    return (
        meta.get("generation"),
        meta.get("labels"),
        meta.get("annotations"),
        status.get("observedGeneration"),
        status.get("replicas"),
        status.get("updatedReplicas"),
        status.get("readyReplicas"),
        condition_true(deployment, "Available"),
        failure.get("status"),
        failure.get("message"),
        deadline,
    )


def engines_built(plan: Plan, states: dict[str, BuildState]) -> bool:
    """Whether every engine of the plan is built (`states` by EngineBuild; some may not exist yet)."""
    return all(e.name in states and states[e.name].succeeded for e in plan.engines)


def runtime_inputs_fetched(plan: Plan, caches: dict[str, BuildState]) -> bool:
    """Backend pytorch: whether every checkpoint the runtime reads is in the cache."""
    return all(c.name in caches and caches[c.name].phase == FETCHED for c in plan.runtime_inputs)


def _runtime_condition(
    plan: Plan,
    deployment: dict[str, Any] | None,
    current: bool,
    pods: list[dict[str, Any]],
    caches: dict[str, BuildState],
    served_before: bool,
) -> Cond:
    if not current and not runtime_inputs_fetched(plan, caches):
        fetching: dict[str, None] = {}
        blocked = _inputs_condition(plan.runtime_inputs, caches, fetching, "RuntimeAvailable")
        if blocked:
            return blocked
        ready = ((deployment or {}).get("status") or {}).get("readyReplicas") or 0
        keep = f"; {ready} pod(s) of the previous version keep serving" if deployment is not None else ""
        return Cond(
            "RuntimeAvailable",
            False,
            "Fetching",
            "the runtime starts once its checkpoints are in the cache; fetching " + "; ".join(fetching) + keep,
        )
    if deployment is None:
        return Cond("RuntimeAvailable", False, "WaitingForEngines", "the runtime starts when every engine is built")
    want = plan.spec.runtime.replicas
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas") or 0
    updated = status.get("updatedReplicas") or 0
    total = status.get("replicas") or 0
    # A LeaderWorkerSet (a target spanning nodes) counts groups, a Deployment pods; LWS releases whose status has no
    # observedGeneration count as having seen the spec.
    groups = "leaderWorkerTemplate" in (deployment.get("spec") or {})
    unit = "groups" if groups else "pods"
    if not current:
        return Cond(
            "RuntimeAvailable",
            False,
            "UpdatePending",
            f"{ready} {unit[:-1]}(s) of the previous version keep serving until the new engines are built",
        )
    seen = (deployment.get("metadata") or {}).get("generation") == status.get("observedGeneration") or (
        groups and "observedGeneration" not in status
    )
    if seen and want == 0:
        return Cond("RuntimeAvailable", True, "ScaledToZero", "replicas is 0")
    if seen and updated == want and ready >= want and total == want and condition_true(deployment, "Available"):
        return Cond("RuntimeAvailable", True, "Available", f"{ready}/{want} {unit} ready")
    if groups:
        return _group_condition(deployment, pods, want, ready, updated, served_before)
    if served_before and want and ready >= want and condition_true(deployment, "Available"):
        # A rollout the operator started on its own (a draft length the autopilot chose, a re-arm, a new
        # operator version) while this generation is served: the pods that serve keep the runtime available,
        # unless the new pods cannot come up (a failure to show, although the old ones serve meanwhile).
        return _rollout_stuck(deployment, pods) or Cond(
            "RuntimeAvailable",
            True,
            "Available",
            f"{ready}/{want} pods ready; rolling out a change the operator "
            f"made: {updated if seen else 0}/{want} pods updated",
        )
    if not seen:
        return Cond("RuntimeAvailable", False, "RollingOut", "the Deployment controller has not seen the change yet")
    return _rollout_stuck(deployment, pods) or Cond(
        "RuntimeAvailable", False, "RollingOut", f"{updated}/{want} pods updated, {ready} ready"
    )


def _group_condition(
    lws: dict[str, Any], pods: list[dict[str, Any]], want: int, ready: int, updated: int, served_before: bool
) -> Cond:
    """A LeaderWorkerSet not all of whose groups are ready: which pod of which group, and why. It stays available
    while as many groups as wanted serve (a rolling update surges a new group before an old one goes)."""
    blocked = _runtime_blocked(lws, pods)
    shortfall = group_shortfall(lws, pods)
    detail = f"{updated}/{want} groups updated, {ready} ready" + (f"; {shortfall}" if shortfall else "")
    if served_before and want and ready >= want and condition_true(lws, "Available"):
        return blocked or Cond("RuntimeAvailable", True, "Available", detail)
    if blocked:
        return Cond("RuntimeAvailable", False, blocked.reason, f"{blocked.message}; {detail}")
    return Cond("RuntimeAvailable", False, "GroupsNotReady" if shortfall else "RollingOut", detail)


@dataclasses.dataclass(frozen=True)
class DeploymentInput:
    """What a deployment's reconcile observed, all its conditions are computed from."""

    plan: Plan | Problem
    engines: dict[str, BuildState]  # the EngineBuilds' states, by name
    deployment: dict[str, Any] | None  # the runtime Deployment, as applied or found
    runtime_current: bool  # the Deployment runs this plan
    endpoint: str | None
    failure: Cond | None = None  # why this reconcile could not finish (an API error, a name taken by another)
    pods: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # the runtime's
    caches: dict[str, BuildState] = dataclasses.field(default_factory=dict)  # the ModelCaches' states, by name
    service_current: bool = True  # the runtime's Service is applied (nothing is served at the endpoint before)
    # RuntimeAvailable was True at this generation: what the user asked for was served, so a rollout now is the
    # operator's own, and the runtime stays available while enough pods are ready.
    served_before: bool = False


def served_this_generation(sd: dict[str, Any]) -> bool:
    """Whether the SpeculativeDeployment's status already says RuntimeAvailable True for its spec as it is."""
    generation = (sd.get("metadata") or {}).get("generation")
    return any(
        c.get("type") == "RuntimeAvailable" and c.get("status") == "True" and c.get("observedGeneration") == generation
        for c in (sd.get("status") or {}).get("conditions") or []
    )


def deployment_conditions(seen: DeploymentInput) -> tuple[str, list[Cond]]:
    """(phase, conditions) of a SpeculativeDeployment; sub-conditions appear only where they apply. A failure
    leaves the sub-conditions saying what was observed; Ready carries it. An engine is created once its
    checkpoints are fetched (the caches)."""
    plan, states, endpoint, failure = seen.plan, seen.engines, seen.endpoint, seen.failure
    if isinstance(plan, Problem):
        valid = Cond("SpecValid", False, plan.reason, plan.message)
        return "Invalid", [valid, aggregate_ready([valid], "")]
    parts = [Cond("SpecValid", True, "Valid", plan.spec_valid_message)]
    if plan.engines:
        parts.append(_engines_condition(plan, states, seen.caches))
    parts.append(
        _runtime_condition(plan, seen.deployment, seen.runtime_current, seen.pods, seen.caches, seen.served_before)
    )
    ready = aggregate_ready(parts, f"serving at {endpoint}")
    if ready.status and not seen.service_current:
        ready = Cond(
            "Ready",
            False,
            "ServicePending",
            f"the runtime is available; the Service behind {endpoint} is "
            "being applied (the API server allocates the cluster's Service IPs one at a time)",
        )
    if failure is not None:
        return "Failed", parts + [Cond("Ready", False, failure.reason, failure.message)]
    if ready.status:
        phase = "Ready"
    elif any(states[e.name].failed for e in plan.engines if e.name in states) or any(
        p.reason == "FetchFailed" for p in parts
    ):
        phase = "Failed"
    elif plan.engines and not parts[1].status or parts[-1].reason.startswith(FETCH.prefix):
        phase = "Building"
    else:
        phase = "RollingOut"
    return phase, parts + [ready]
