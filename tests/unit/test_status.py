"""Status evaluation on hand-written Job and pod objects; condition merging and aggregation."""

from __future__ import annotations

import dataclasses
import json

import pytest

from specdec import conditions
from specdec.admission.model_catalog import catalog_facts, config_excerpt
from specdec.admission.model_facts import ModelFacts
from specdec.conditions import Cond
from specdec.status.deployment import (
    DeploymentInput,
    deployment_conditions,
    runtime_pod_blocked,
    served_this_generation,
)
from specdec.status.shared import FETCH, BuildState, evaluate_build, fetched_status, step_failure
from tests.unit.helpers import EXAMPLE_13B, load_example, make_plan, make_problem
from tests.unit.invalid_specs import spec

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"


# --- builders of observed objects -----------------------------------------------------------------


def job(*conds: dict, **status) -> dict:
    return {"metadata": {"name": "eb-build"}, "status": {**status, "conditions": list(conds)}}


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def running() -> dict:
    return {"running": {"startedAt": T0}}


def waiting(reason: str = "PodInitializing") -> dict:
    return {"waiting": {"reason": reason}}


def terminated(code: int, reason: str = "", message: str = "") -> dict:
    return {
        "terminated": {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "message": message,
        }
    }


def pod(
    name: str = "eb-build-abcde",
    phase: str = "Running",
    init: dict | None = None,
    main: dict | None = None,
    created: str = T0,
    limits: dict | None = None,
    conds: list[dict] | None = None,
) -> dict:
    """A build pod; `init` / `main` map container name -> state."""
    init, main = init or {}, main or {"build": waiting()}

    def spec_of(n: str) -> dict:
        return {"name": n, "resources": {"limits": limits or {}}}

    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"initContainers": [spec_of(n) for n in init], "containers": [spec_of(n) for n in main]},
        "status": {
            "phase": phase,
            "conditions": conds or [cond("PodScheduled")],
            "initContainerStatuses": [{"name": n, "state": s} for n, s in init.items()],
            "containerStatuses": [{"name": n, "state": s} for n, s in main.items()],
        },
    }


# --- evaluate_build -------------------------------------------------------------------------------


def test_no_job_is_pending():
    state = evaluate_build(None, [])
    assert (state.phase, state.reason) == ("Pending", "JobPending")
    assert not state.succeeded and not state.failed


def test_running_quantize_init_container_is_quantizing():
    p = pod(init={"fetch": terminated(0), "quantize": running()})
    state = evaluate_build(job(active=1), [p])
    assert (state.phase, state.reason) == ("Quantizing", "Quantizing")
    assert "quantize" in state.message and "eb-build-abcde" in state.message


def test_phase_follows_the_running_step():
    for init, phase in [
        ({"fetch": running(), "convert": waiting()}, "Fetching"),
        ({"fetch": terminated(0), "convert": running()}, "Converting"),
        ({"convert": terminated(0), "redrafter-convert": running()}, "Converting"),
    ]:
        assert evaluate_build(job(active=1), [pod(init=init)]).phase == phase
    done = pod(init={"fetch": terminated(0), "convert": terminated(0)}, main={"build": running()})
    assert evaluate_build(job(active=1), [done]).phase == "Building"


def test_a_pod_the_kubelet_has_not_reported_is_at_its_first_step():
    fresh = pod(init={"quantize": waiting()})
    del fresh["status"]["initContainerStatuses"], fresh["status"]["containerStatuses"]
    assert evaluate_build(job(active=1), [fresh]).phase == "Quantizing"
    fetch = pod(phase="Pending", main={"fetch": waiting()})
    del fetch["status"]["containerStatuses"]
    assert evaluate_build(job(active=1), [fetch], kind=FETCH).phase == "Fetching"


def test_a_succeeded_pod_of_a_job_not_yet_complete_stays_at_its_last_step():
    done = pod(phase="Succeeded", init={"convert": terminated(0)}, main={"build": terminated(0)})
    state = evaluate_build(job(active=0, succeeded=1), [done])
    assert (state.phase, state.message) == ("Building", "step build done in pod eb-build-abcde")
    fetched = pod(phase="Succeeded", main={"fetch": terminated(0)})
    assert evaluate_build(job(active=0, succeeded=1), [fetched], kind=FETCH).phase == "Fetching"


def test_complete_job_succeeded():
    state = evaluate_build(job(cond("Complete"), succeeded=1), [])
    assert (state.phase, state.reason, state.attempts) == ("Succeeded", "Built", 1)
    assert state.succeeded


def test_failed_quantize_names_the_step_exit_code_and_message():
    failed = pod(
        phase="Failed",
        init={"fetch": terminated(0), "quantize": terminated(1, message="CUDA error")},
        main={"build": waiting()},
    )
    state = evaluate_build(job(cond("Failed", reason="BackoffLimitExceeded"), failed=3), [failed])
    assert state.failed
    assert (state.reason, state.failed_step) == ("QuantizeFailed", "quantize")
    assert "exit code 1" in state.message and "CUDA error" in state.message
    assert "3 attempt" in state.message and state.attempts == 3


def test_the_newest_pod_decides_the_failure():
    old = pod("eb-build-old", "Failed", init={"convert": terminated(2, message="old")}, created=T0)
    new = pod(
        "eb-build-new",
        "Failed",
        init={"convert": terminated(0)},
        main={"build": terminated(1, message="new")},
        created=T1,
    )
    state = evaluate_build(job(cond("Failed"), failed=2), [new, old])
    assert (state.reason, state.failed_step) == ("BuildFailed", "build")
    assert "new" in state.message


def test_oom_killed_build_reports_the_memory_limit():
    oom = pod(
        phase="Failed",
        init={"convert": terminated(0)},
        main={"build": terminated(137, reason="OOMKilled")},
        limits={"memory": "64Gi"},
    )
    state = evaluate_build(job(cond("Failed"), failed=1), [oom])
    assert (state.reason, state.failed_step) == ("BuildOOMKilled", "build")
    assert "64Gi" in state.message and "spec.build.resources.limits.memory" in state.message


def test_a_cached_pod_keeps_what_build_states_read():
    from specdec.kube.cache import slim

    full = pod(
        phase="Failed",
        init={"convert": terminated(0)},
        main={"build": terminated(137, reason="OOMKilled")},
        limits={"memory": "64Gi", "cpu": "8"},
    )
    full["kind"] = "Pod"
    for c in full["spec"]["initContainers"] + full["spec"]["containers"]:
        c.update(image="trtllm:1.2", env=[{"name": "HF_HOME", "value": "/cache"}], volumeMounts=[{"name": "cache"}])
    full["spec"].update(volumes=[{"name": "cache"}], nodeSelector={"gpu": "h100"}, tolerations=[{"key": "gpu"}])
    cached = slim(full)
    assert cached["spec"] == {
        "initContainers": [{"name": "convert", "resources": {"limits": {"memory": "64Gi"}}}],
        "containers": [{"name": "build", "resources": {"limits": {"memory": "64Gi"}}}],
    }
    assert cached["status"] is full["status"] and slim(cached) == cached
    state = evaluate_build(job(cond("Failed"), failed=1), [cached])
    assert state == evaluate_build(job(cond("Failed"), failed=1), [full]) and "64Gi" in state.message


def test_oom_from_last_state_counts_too():
    p = pod(init={"quantize": running()})
    p["status"]["initContainerStatuses"][0]["lastState"] = terminated(137, reason="OOMKilled")
    assert step_failure(p)[:2] == ("quantize", "QuantizeOOMKilled")


def test_deadline_exceeded():
    p = pod(phase="Failed", init={"quantize": terminated(143, message="killed")})
    state = evaluate_build(
        job(
            cond("Failed", reason="DeadlineExceeded", message="Job was active longer than specified deadline"), failed=1
        ),
        [p],
    )
    assert (state.phase, state.reason) == ("Failed", "BuildDeadlineExceeded")
    assert "activeDeadlineSeconds" in state.message and "longer than specified deadline" in state.message
    assert state.failed_step == "quantize"


def test_failed_job_without_pods_is_build_failed():
    state = evaluate_build(job(cond("Failed", reason="PodFailurePolicy", message="policy says no")), [])
    assert (state.phase, state.reason, state.message) == ("Failed", "BuildFailed", "policy says no")


def test_unschedulable_pod_reports_the_scheduler_message():
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    p = pod(phase="Pending", main={"build": waiting()}, conds=[cond("PodScheduled", "False", "Unschedulable", message)])
    p["status"]["containerStatuses"] = []
    state = evaluate_build(job(active=1), [p])
    assert (state.phase, state.reason) == ("Pending", "Unschedulable")
    assert message in state.message


def test_retry_after_a_failure_is_noted():
    failed = pod("eb-build-1", "Failed", init={"convert": terminated(1, message="disk full")}, created=T0)
    retry = pod("eb-build-2", "Running", init={"convert": running()}, created=T1)
    state = evaluate_build(job(active=1, failed=1), [failed, retry])
    assert state.phase == "Converting" and "retrying after" in state.message and "disk full" in state.message


def test_long_messages_keep_their_tail():
    log = "x" * 5000 + "the real error"
    p = pod(phase="Failed", init={"convert": terminated(1, message=log)})
    state = evaluate_build(job(cond("Failed"), failed=1), [p])
    assert state.message.count("x") < 1000 and "the real error" in state.message


# --- conditions.merge -----------------------------------------------------------------------------


def test_merge_keeps_transition_time_when_status_is_unchanged():
    old = conditions.merge(None, [Cond("Ready", False, "EnginesBuilding", "a")], 1, T0)
    assert old[0]["lastTransitionTime"] == T0
    again = conditions.merge(old, [Cond("Ready", False, "RollingOut", "b")], 2, T1)
    assert again[0]["lastTransitionTime"] == T0
    assert (again[0]["reason"], again[0]["message"], again[0]["observedGeneration"]) == ("RollingOut", "b", 2)


def test_merge_changes_transition_time_when_status_flips():
    old = conditions.merge(None, [Cond("Ready", False, "EnginesBuilding")], 1, T0)
    flipped = conditions.merge(old, [Cond("Ready", True, "Ready")], 1, T1)
    assert (flipped[0]["status"], flipped[0]["lastTransitionTime"]) == ("True", T1)


def test_merge_is_per_type_and_stable():
    new = [Cond("SpecValid", True, "Valid"), Cond("Ready", False, "X")]
    first = conditions.merge(None, new, 3, T0)
    assert [c["type"] for c in first] == ["SpecValid", "Ready"]
    assert conditions.merge(first, new, 3, T1) == first  # recomputing the same conditions writes nothing new


# --- deployment_conditions ------------------------------------------------------------------------


def plan13b():
    return make_plan(load_example(EXAMPLE_13B)["spec"], "llama2-13b-spec")


def built(p) -> dict[str, BuildState]:
    return {e.name: BuildState("Succeeded", "Built", "engine built") for e in p.engines}


def available_deployment(replicas: int = 1) -> dict:
    return {
        "metadata": {"generation": 2},
        "status": {
            "observedGeneration": 2,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "conditions": [cond("Available")],
        },
    }


def by_type(conds: list[Cond]) -> dict[str, Cond]:
    return {c.type: c for c in conds}


def test_ready_when_everything_is():
    p = plan13b()
    phase, conds = deployment_conditions(DeploymentInput(p, built(p), available_deployment(), True, "http://x/v1"))
    c = by_type(conds)
    assert phase == "Ready"
    assert [x.type for x in conds] == ["SpecValid", "EnginesReady", "RuntimeAvailable", "Ready"]
    assert c["Ready"].status and c["Ready"].message == "serving at http://x/v1"


def test_ready_waits_for_the_service_behind_the_endpoint():
    p = plan13b()
    phase, conds = deployment_conditions(
        DeploymentInput(p, built(p), available_deployment(), True, "http://x/v1", service_current=False)
    )
    c = by_type(conds)
    assert phase == "RollingOut" and c["RuntimeAvailable"].status
    assert not c["Ready"].status and c["Ready"].reason == "ServicePending" and "http://x/v1" in c["Ready"].message


def test_failed_engine_decides_ready():
    p = plan13b()
    states = built(p)
    draft = next(e for e in p.engines if e.role == "draft")
    states[draft.name] = BuildState("Failed", "QuantizeFailed", "step quantize failed with exit code 1", "quantize")
    phase, conds = deployment_conditions(DeploymentInput(p, states, None, False, "http://x/v1"))
    c = by_type(conds)
    assert phase == "Failed"
    assert (c["EnginesReady"].status, c["EnginesReady"].reason) == (False, "QuantizeFailed")
    assert (c["Ready"].status, c["Ready"].reason) == (False, "QuantizeFailed")
    assert draft.name in c["Ready"].message and "exit code 1" in c["Ready"].message


def fetched(p) -> dict[str, BuildState]:
    return {c.name: BuildState("Fetched", "Fetched", "checkpoint in the cache") for c in p.model_caches}


def test_first_false_sub_condition_decides():
    p = plan13b()
    building = {p.engines[0].name: BuildState("Quantizing", "Quantizing", "step quantize running")}
    phase, conds = deployment_conditions(DeploymentInput(p, building, None, False, None, caches=fetched(p)))
    c = by_type(conds)
    assert phase == "Building"
    assert not c["EnginesReady"].status and not c["RuntimeAvailable"].status
    assert c["Ready"].reason == c["EnginesReady"].reason == "EnginesBuilding"


def test_rolling_out_when_engines_are_built():
    p = plan13b()
    rolling = available_deployment()
    rolling["status"].update(readyReplicas=0, conditions=[])
    phase, conds = deployment_conditions(DeploymentInput(p, built(p), rolling, True, None))
    assert phase == "RollingOut"
    assert by_type(conds)["EnginesReady"].status
    assert by_type(conds)["Ready"].reason == "RollingOut"


def surging(replicas: int = 1, ready: int | None = None, seen: bool = True) -> dict:
    """A runtime Deployment rolling out a new template: none of its pods updated yet, the old ones ready."""
    d = available_deployment(replicas)
    d["status"].update(updatedReplicas=0, replicas=replicas + 1, readyReplicas=replicas if ready is None else ready)
    if not seen:
        d["metadata"]["generation"] = 3
    return d


@pytest.mark.parametrize("seen", [True, False])
def test_a_rollout_the_operator_started_keeps_the_runtime_available_while_its_pods_serve(seen):
    p = plan13b()
    phase, conds = deployment_conditions(
        DeploymentInput(p, built(p), surging(1, seen=seen), True, "http://x/v1", served_before=True)
    )
    c = by_type(conds)
    assert phase == "Ready" and c["Ready"].status
    assert (c["RuntimeAvailable"].status, c["RuntimeAvailable"].reason) == (True, "Available")
    assert c["RuntimeAvailable"].message == ("1/1 pods ready; rolling out a change the operator made: 0/1 pods updated")


def test_a_rollout_of_the_users_change_or_short_of_pods_is_not_available():
    p = plan13b()
    unavailable = surging(1)
    unavailable["status"]["conditions"] = []  # the Deployment controller says it is not Available
    for served_before, deployment in ((False, surging(1)), (True, surging(1, ready=0)), (True, unavailable)):
        phase, conds = deployment_conditions(
            DeploymentInput(p, built(p), deployment, True, "http://x/v1", served_before=served_before)
        )
        c = by_type(conds)
        assert phase == "RollingOut" and not c["Ready"].status, (served_before, deployment)
        assert (c["RuntimeAvailable"].status, c["RuntimeAvailable"].reason) == (False, "RollingOut")


def test_a_new_pod_that_cannot_start_shows_although_the_old_ones_serve():
    p = plan13b()
    crashing = runtime_pod(rt_waiting("CrashLoopBackOff", "back-off 10s"), restarts=1, last=rt_exit(1, "Error"))
    phase, conds = deployment_conditions(
        DeploymentInput(p, built(p), surging(1), True, "http://x/v1", pods=[crashing], served_before=True)
    )
    c = by_type(conds)["RuntimeAvailable"]
    assert phase == "RollingOut" and (c.status, c.reason) == (False, "CrashLoopBackOff") and RT_POD in c.message
    stalled = surging(1)
    stalled["status"]["conditions"].append(cond("Progressing", "False", "ProgressDeadlineExceeded", "timed out"))
    _, conds = deployment_conditions(DeploymentInput(p, built(p), stalled, True, "http://x/v1", served_before=True))
    assert (by_type(conds)["RuntimeAvailable"].reason, by_type(conds)["RuntimeAvailable"].message) == (
        "ProgressDeadlineExceeded",
        "timed out",
    )


def test_served_this_generation_reads_runtime_available_at_the_objects_generation():
    def sd(status: str, generation: int) -> dict:
        return {
            "metadata": {"generation": 4},
            "status": {
                "conditions": [{"type": "RuntimeAvailable", "status": status, "observedGeneration": generation}]
            },
        }

    assert served_this_generation(sd("True", 4))
    assert not served_this_generation(sd("True", 3))  # the user changed the spec since
    assert not served_this_generation(sd("False", 4))
    assert not served_this_generation({"metadata": {"generation": 1}})


def test_invalid_spec_is_reported_in_ready():
    problem = make_problem(spec(runtime={"replicas": -1}))
    phase, conds = deployment_conditions(DeploymentInput(problem, {}, None, False, None))
    assert phase == "Invalid"
    assert [(c.type, c.status, c.reason) for c in conds] == [
        ("SpecValid", False, "InvalidSpec"),
        ("Ready", False, "InvalidSpec"),
    ]
    assert "replicas" in conds[-1].message


def test_no_engines_condition_for_pytorch():
    p = make_plan(spec(backend="pytorch"))
    phase, conds = deployment_conditions(DeploymentInput(p, {}, available_deployment(), True, "http://x/v1"))
    assert phase == "Ready" and "EnginesReady" not in by_type(conds)


def test_aggregate_ready():
    parts = [Cond("A", True, "Fine"), Cond("B", False, "BReason", "b msg"), Cond("C", False, "CReason")]
    assert conditions.aggregate_ready(parts, "ok") == Cond("Ready", False, "BReason", "b msg")
    assert conditions.aggregate_ready(parts[:1], "ok") == Cond("Ready", True, "Ready", "ok")


def test_an_unschedulable_build_is_named_in_the_deployment_condition():
    p = make_plan(spec(target={"model": "hf://meta-llama/Llama-3.1-405B-Instruct", "tensorParallelSize": 16}))
    blocked = BuildState("Pending", "Unschedulable", "build pod cannot be scheduled: 3 Insufficient nvidia.com/gpu")
    _, conds = deployment_conditions(DeploymentInput(p, {p.engines[0].name: blocked}, None, False, None))
    ready = conds[-1]
    assert (ready.type, ready.status, ready.reason) == ("Ready", False, "BuildUnschedulable")
    assert "Insufficient nvidia.com/gpu" in ready.message and p.engines[0].name in ready.message


def test_build_pods_the_api_server_refuses_are_named():
    state = evaluate_build(job(active=0), [], 'pods "eb-build-x" is forbidden: exceeded quota: no-pods')
    assert (state.phase, state.reason) == ("Pending", "PodCreationFailed")
    assert "exceeded quota" in state.message
    assert evaluate_build(job(active=0), []).reason == "JobPending"  # no FailedCreate seen: still waiting
    p = plan13b()
    _, conds = deployment_conditions(DeploymentInput(p, {p.engines[0].name: state}, None, False, None))
    assert (conds[-1].reason, conds[-1].status) == ("BuildPodCreationFailed", False)


def test_runtime_pods_that_cannot_be_created_or_scheduled_are_named():
    p = plan13b()
    refused = available_deployment()
    refused["status"].update(
        readyReplicas=0,
        conditions=[cond("ReplicaFailure", "True", "FailedCreate", 'pods "x" is forbidden: violates PodSecurity')],
    )
    _, conds = deployment_conditions(DeploymentInput(p, built(p), refused, True, None))
    assert by_type(conds)["RuntimeAvailable"].reason == "PodCreationFailed"
    assert "violates PodSecurity" in conds[-1].message

    pending = available_deployment()
    pending["status"].update(readyReplicas=0, conditions=[])
    unschedulable = pod(
        name="rt-1",
        phase="Pending",
        conds=[
            cond("PodScheduled", "False", "Unschedulable", "0/5 nodes are available: 5 Insufficient nvidia.com/gpu")
        ],
    )
    _, conds = deployment_conditions(DeploymentInput(p, built(p), pending, True, None, pods=[unschedulable]))
    assert (conds[-1].reason, conds[-1].status) == ("PodsUnschedulable", False)
    assert "rt-1" in conds[-1].message and "Insufficient nvidia.com/gpu" in conds[-1].message


# --- runtime pods whose containers will not start (as a kubelet writes their status) --------------------

RT_POD, RT_UID = "llama2-13b-spec-runtime-7d4b9c6f5-x2k4p", "0b7c9a2e-5f1d-4e8a-9c3b-2d6f8e1a4b70"
RT_IMAGE = "registry.example.com/specdec/specdec-runtime:0.1.0"
KUBELET_POD = f"{RT_POD}_ns({RT_UID})"  # the kubelet's format.Pod
# the kubelet's verifyRunAsNonRoot (pkg/kubelet/kuberuntime/security_context_others.go)
AS_ROOT = f'container has runAsNonRoot and image will run as root (pod: "{KUBELET_POD}", container: runtime)'
NOT_FOUND = (
    f'rpc error: code = NotFound desc = failed to pull and unpack image "{RT_IMAGE}": failed to resolve '
    f'reference "{RT_IMAGE}": {RT_IMAGE}: not found'
)  # containerd's, through the CRI


def rt_waiting(reason: str, message: str) -> dict:
    return {"waiting": {"reason": reason, "message": message}}


def rt_exit(code: int, reason: str, message: str = "") -> dict:
    return {
        "exitCode": code,
        "reason": reason,
        "startedAt": T0,
        "finishedAt": T1,
        "containerID": "containerd://4f3c",
        **({"message": message} if message else {}),
    }


def runtime_pod(
    state: dict,
    *,
    restarts: int = 0,
    last: dict | None = None,
    ready: bool = False,
    started: bool = False,
    phase: str = "Running",
    deleting: bool = False,
    memory: str | None = None,
) -> dict:
    """A runtime pod as the kubelet reports it: one container, `runtime`."""
    meta = {"name": RT_POD, "namespace": "ns", "uid": RT_UID, "creationTimestamp": T0}
    if deleting:
        meta["deletionTimestamp"] = T1
    ready_cond = "True" if ready else "False"
    return {
        "metadata": meta,
        "spec": {
            "containers": [
                {"name": "runtime", "image": RT_IMAGE, "resources": {"limits": {"memory": memory} if memory else {}}}
            ]
        },
        "status": {
            "phase": phase,
            "conditions": [
                cond("PodScheduled"),
                cond("Initialized"),
                cond("ContainersReady", ready_cond),
                cond("Ready", ready_cond),
            ],
            "containerStatuses": [
                {
                    "name": "runtime",
                    "image": RT_IMAGE,
                    "imageID": "",
                    "ready": ready,
                    "restartCount": restarts,
                    "started": started,
                    "state": state,
                    "lastState": {"terminated": last} if last else {},
                }
            ],
        },
    }


def rolling_out() -> dict:
    pending = available_deployment()
    pending["status"].update(
        readyReplicas=0,
        conditions=[
            cond("Available", "False", "MinimumReplicasUnavailable"),
            cond("Progressing", reason="ReplicaSetUpdated"),
        ],
    )
    return pending


def runtime_condition(*pods: dict) -> Cond:
    p = plan13b()
    phase, conds = deployment_conditions(DeploymentInput(p, built(p), rolling_out(), True, None, pods=list(pods)))
    c = by_type(conds)
    assert phase == "RollingOut" and c["Ready"].reason == c["RuntimeAvailable"].reason
    return c["RuntimeAvailable"]


def test_an_image_that_runs_as_root_is_named_with_the_kubelet_s_words_and_the_fix():
    c = runtime_condition(runtime_pod(rt_waiting("CreateContainerConfigError", AS_ROOT), phase="Pending"))
    assert (c.status, c.reason) == (False, "ContainerCannotStart")
    assert c.message == (
        f"runtime pod {RT_POD}: container runtime cannot start: CreateContainerConfigError: "
        f"{AS_ROOT}; the image runs as root; build it with a numeric non-root USER "
        "(ours: USER 1000:1000)"
    )
    named = (
        "container has runAsNonRoot and image has non-numeric user (specdec), cannot verify user is non-root "
        f'(pod: "{KUBELET_POD}", container: runtime)'
    )
    c = runtime_condition(runtime_pod(rt_waiting("CreateContainerConfigError", named), phase="Pending"))
    assert c.reason == "ContainerCannotStart" and "give the image's USER as numbers" in c.message
    missing = "couldn't find key HF_TOKEN in Secret ns/specdec-hf-token"
    c = runtime_condition(runtime_pod(rt_waiting("CreateContainerConfigError", missing), phase="Pending"))
    assert c.reason == "ContainerCannotStart" and missing in c.message and "kubectl describe pod" in c.message
    exec_failed = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        'runc create failed: unable to start container process: exec: "specdec-runtime": executable '
        "file not found in $PATH: unknown"
    )
    c = runtime_condition(runtime_pod(rt_waiting("RunContainerError", exec_failed)))
    assert c.reason == "ContainerCannotStart" and "RunContainerError: failed to create containerd task" in c.message
    assert "entrypoint" in c.message


def test_a_failing_pull_reads_the_same_on_every_retry():
    pulling = runtime_pod(rt_waiting("ErrImagePull", NOT_FOUND), phase="Pending")
    # kubelet 1.32+: the back-off repeats the pull's reason and error (pkg/kubelet/images/image_manager.go)
    backing_off = runtime_pod(
        rt_waiting("ImagePullBackOff", f'Back-off pulling image "{RT_IMAGE}": ErrImagePull: {NOT_FOUND}'),
        phase="Pending",
    )
    c = runtime_condition(pulling)
    assert (c.reason, c.message) == (
        "ImagePullFailed",
        f"runtime pod {RT_POD}: container runtime cannot pull image "
        f'"{RT_IMAGE}": ErrImagePull: {NOT_FOUND}; check the image reference, that the '
        "node can reach its registry, and the pull secrets (the operator's "
        "SPECDEC_IMAGE_PULL_SECRETS)",
    )
    assert runtime_condition(backing_off) == c
    assert runtime_pod_blocked(backing_off) == runtime_pod_blocked(pulling)  # so the pod watch wakes nobody
    # before 1.32 the back-off says only that
    old = runtime_condition(runtime_pod(rt_waiting("ImagePullBackOff", f'Back-off pulling image "{RT_IMAGE}"')))
    assert old.reason == "ImagePullFailed" and f'ImagePullBackOff: Back-off pulling image "{RT_IMAGE}"' in old.message
    never = runtime_condition(
        runtime_pod(
            rt_waiting("ErrImageNeverPull", f'Container image "{RT_IMAGE}" is not present with pull policy of Never')
        )
    )
    assert never.reason == "ImagePullFailed" and "pull policy is Never" in never.message
    invalid = runtime_condition(
        runtime_pod(
            rt_waiting(
                "InvalidImageName", 'Failed to apply default image tag "Registry/X:": couldn\'t parse image name'
            )
        )
    )
    assert invalid.reason == "ImagePullFailed" and "fix the image reference" in invalid.message


def test_a_crash_loop_names_the_last_exit_and_reads_the_same_through_the_loop():
    """The kubelet restarts at once after a first exit, then backs off; between back-offs the container runs
    (its startup probe not passed): one verdict from the first back-off until it has started."""
    error = rt_exit(1, "Error")

    def back_off(delay: str) -> dict:
        return rt_waiting("CrashLoopBackOff", f"back-off {delay} restarting failed container=runtime pod={KUBELET_POD}")

    first_exit = runtime_pod({"terminated": error})
    restarted_once = runtime_pod({"running": {"startedAt": T1}}, restarts=1, last=error)
    loop = [
        runtime_pod(back_off("10s"), restarts=1, last=error),
        runtime_pod({"running": {"startedAt": T1}}, restarts=2, last=error),
        runtime_pod({"terminated": error}, restarts=2, last=error),
        runtime_pod(back_off("20s"), restarts=2, last=error),
        runtime_pod(back_off("5m0s"), restarts=9, last=error),
    ]
    assert runtime_pod_blocked(first_exit) is None and runtime_pod_blocked(restarted_once) is None
    verdicts = {runtime_pod_blocked(p) for p in loop}
    assert len(verdicts) == 1
    c = runtime_condition(loop[0])
    assert c == verdicts.pop()
    assert (c.reason, c.message) == (
        "CrashLoopBackOff",
        f"runtime pod {RT_POD}: container runtime keeps exiting "
        "(CrashLoopBackOff): last exit code 1 (Error); its log: kubectl logs -n ns "
        f"{RT_POD} -c runtime --previous",
    )
    # started again (the startup probe passed), ready or not: no longer blocked
    assert (
        runtime_pod_blocked(runtime_pod({"running": {"startedAt": T1}}, restarts=2, last=error, started=True)) is None
    )
    oom = runtime_condition(runtime_pod(back_off("40s"), restarts=3, last=rt_exit(137, "OOMKilled"), memory="64Gi"))
    assert "last exit code 137 (OOMKilled)" in oom.message
    assert "raise spec.runtime.resources.limits.memory (now 64Gi)" in oom.message
    written = runtime_condition(
        runtime_pod(back_off("10s"), restarts=1, last=rt_exit(2, "Error", "engine dir /cache/engines/x missing"))
    )
    assert "last exit code 2 (Error): engine dir /cache/engines/x missing" in written.message


def test_a_running_ready_pod_is_not_blocked_whatever_its_restarts():
    """The pod watch wakes a deployment only when runtime_pod_blocked changes: a restart count or a previous exit
    of a pod that runs (or a deleted or evicted pod's containers) changes nothing."""
    crashed = rt_exit(137, "OOMKilled")
    quiet = [
        None,
        runtime_pod({"running": {"startedAt": T0}}, ready=True, started=True),
        runtime_pod({"running": {"startedAt": T1}}, restarts=4, last=crashed, ready=True, started=True),
        runtime_pod({"running": {"startedAt": T1}}, restarts=5, last=crashed, started=True),  # probe failing
        runtime_pod(rt_waiting("ContainerCreating", "")),
        runtime_pod({"terminated": rt_exit(143, "Error")}, restarts=3, deleting=True),
        runtime_pod({"terminated": rt_exit(137, "Error")}, restarts=3, phase="Failed"),
    ]  # evicted
    assert {runtime_pod_blocked(p) for p in quiet} == {None}


def test_runtime_pod_blocked_holds_all_a_deployment_reads_of_its_runtime_pods():
    """Pods with the same runtime_pod_blocked give the same conditions: the pod watch's view is enough."""
    error = rt_exit(1, "Error")
    variants = [
        runtime_pod({"running": {"startedAt": T0}}, ready=True, started=True),
        runtime_pod({"running": {"startedAt": T1}}, restarts=3, last=error, ready=True, started=True),
        runtime_pod(rt_waiting("ErrImagePull", NOT_FOUND)),
        runtime_pod(rt_waiting("ImagePullBackOff", f'Back-off pulling image "{RT_IMAGE}": ErrImagePull: {NOT_FOUND}')),
        runtime_pod(rt_waiting("CreateContainerConfigError", AS_ROOT), phase="Pending"),
        runtime_pod(rt_waiting("CrashLoopBackOff", "back-off 10s"), restarts=1, last=error),
        runtime_pod(rt_waiting("CrashLoopBackOff", "back-off 5m0s"), restarts=7, last=error),
        runtime_pod({"running": {"startedAt": T1}}, restarts=7, last=error),
        pod(name=RT_POD, phase="Pending", conds=[cond("PodScheduled", "False", "Unschedulable", "0/5 nodes")]),
    ]
    p = plan13b()
    same = 0
    for a in variants:
        for b in variants:
            if runtime_pod_blocked(a) == runtime_pod_blocked(b):
                assert deployment_conditions(
                    DeploymentInput(p, built(p), rolling_out(), True, None, pods=[a])
                ) == deployment_conditions(DeploymentInput(p, built(p), rolling_out(), True, None, pods=[b])), (a, b)
                same += a is not b
    assert same >= 6


def test_build_and_fetch_pods_whose_containers_will_not_start_are_named():
    """The same kubelet verdicts in a Job's pod: stuck (the Job would wait until its deadline), so a user's
    EnginesReady names them with the Job kind's prefix."""
    as_root = AS_ROOT.replace(RT_POD, "eb-build-abcde").replace("container: runtime", "container: convert")
    stuck = pod(
        phase="Pending", init={"convert": rt_waiting("CreateContainerConfigError", as_root)}, main={"build": waiting()}
    )
    state = evaluate_build(job(active=1), [stuck])
    assert (state.phase, state.reason) == ("Pending", "ContainerCannotStart")
    assert state.message.startswith(
        "build pod eb-build-abcde: container convert cannot start: "
        f"CreateContainerConfigError: {as_root}; the image runs as root"
    )
    p = plan13b()
    _, conds = deployment_conditions(DeploymentInput(p, {p.engines[0].name: state}, None, False, None))
    assert (conds[-1].reason, conds[-1].status) == ("BuildContainerCannotStart", False)
    assert p.engines[0].name in conds[-1].message

    pulling = pod(name="mc-fetch-abcde", phase="Pending", main={"fetch": rt_waiting("ErrImagePull", NOT_FOUND)})
    fetch = evaluate_build(job(active=1), [pulling], kind=FETCH)
    assert (fetch.phase, fetch.reason) == ("Pending", "ImagePullFailed")
    caches = {c.name: fetch for c in p.model_caches}
    _, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=caches))
    assert by_type(conds)["EnginesReady"].reason == "FetchImagePullFailed"


def test_a_failed_reconcile_keeps_the_observed_conditions_and_fails_ready():
    p = plan13b()
    failure = Cond("Ready", False, "NameConflict", "Service x already exists")
    phase, conds = deployment_conditions(DeploymentInput(p, built(p), None, False, None, failure))
    c = by_type(conds)
    assert phase == "Failed" and c["Ready"] == failure
    assert c["SpecValid"].status and c["EnginesReady"].status and not c["RuntimeAvailable"].status


# --- ModelCaches: checkpoints fetched before any GPU build ------------------------------------------


def test_engines_wait_for_their_checkpoints_naming_models():
    p = plan13b()
    target, draft = p.model_caches  # in the engines' order: target first
    caches = {
        target.name: BuildState("Fetching", "Fetching", "step fetch running"),
        draft.name: BuildState("Fetched", "Fetched", "checkpoint in the cache"),
    }
    phase, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=caches))
    c = by_type(conds)
    assert phase == "Building"
    assert (c["EnginesReady"].status, c["EnginesReady"].reason) == (False, "Fetching")
    assert f"fetching hf://meta-llama/Llama-2-13b-hf@main (ModelCache {target.name})" in c["EnginesReady"].message
    assert "Llama-2-7b" not in c["EnginesReady"].message  # fetched: its engine is being built, not waiting


def test_failed_fetch_is_fetch_failed_with_the_jobs_message():
    p = plan13b()
    caches = {
        c.name: BuildState("Failed", "FetchFailed", "step fetch failed with exit code 1: 401 Unauthorized")
        for c in p.model_caches
    }
    phase, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=caches))
    c = by_type(conds)
    assert phase == "Failed"
    assert (c["Ready"].status, c["Ready"].reason) == (False, "FetchFailed")
    assert "401 Unauthorized" in c["EnginesReady"].message and p.model_caches[0].name in c["EnginesReady"].message


def test_an_engine_already_built_does_not_wait_for_a_fetch():
    """A ModelCache made again (collected while unused) fetches while the engines it once fed are built."""
    p = plan13b()
    caches = {c.name: BuildState("Fetching", "Fetching", "step fetch running") for c in p.model_caches}
    _, conds = deployment_conditions(
        DeploymentInput(p, built(p), available_deployment(), True, "http://x/v1", caches=caches)
    )
    assert by_type(conds)["EnginesReady"].reason == "EnginesBuilt"


def test_unschedulable_fetch_says_so():
    p = plan13b()
    caches = {
        c.name: BuildState("Pending", "Unschedulable", "fetch pod cannot be scheduled: 0/3 nodes")
        for c in p.model_caches
    }
    _, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=caches))
    assert by_type(conds)["EnginesReady"].reason == "FetchUnschedulable"


def test_fetch_job_states():
    assert evaluate_build(job(cond("Complete"), succeeded=1), [], kind=FETCH).phase == "Fetched"
    # the Job is complete, but the pod (and its report) as we last saw it still runs: not Fetched yet
    lagging = evaluate_build(job(cond("Complete"), succeeded=1), [pod(main={"fetch": running()})], kind=FETCH)
    assert (lagging.phase, lagging.reason) == ("Fetching", "Fetching")
    assert evaluate_build(job(cond("Complete"), succeeded=1), [fetched_pod("{}")], kind=FETCH).phase == "Fetched"
    assert evaluate_build(job(active=1), [pod(main={"fetch": running()})], kind=FETCH).phase == "Fetching"
    failed = pod(phase="Failed", main={"fetch": {"terminated": {"exitCode": 1, "message": "404"}}})
    state = evaluate_build(job(cond("Failed"), failed=1), [failed], kind=FETCH)
    assert (state.phase, state.reason) == ("Failed", "FetchFailed") and "404" in state.message
    late = evaluate_build(job(cond("Failed", reason="DeadlineExceeded", message="too long")), [], kind=FETCH)
    assert late.reason == "FetchDeadlineExceeded" and "spec.cache.fetch.activeDeadlineSeconds" in late.message


def fetched_pod(message: str | None) -> dict:
    return pod(phase="Succeeded", main={"fetch": {"terminated": {"exitCode": 0, "message": message}}})


def test_size_and_facts_are_read_from_the_termination_message():
    """The fetch's report (specdec.admission.checkpoint_facts) becomes status.sizeBytes and status.facts; a report
    without all the facts need, or none, gives the size alone; pods gone, the status keeps what it had."""
    llama = catalog_facts("meta-llama/Llama-3.1-8B-Instruct")
    report = {
        "sizeBytes": 1234,
        "config": config_excerpt("meta-llama/Llama-3.1-8B-Instruct"),
        "parameters": llama.parameters,
        "tokenizer": "vocab-sha256:ab12",
    }
    status = fetched_status([fetched_pod(json.dumps(report))], {}, "hf://meta-llama/Llama-3.1-8B-Instruct")
    assert status["sizeBytes"] == 1234
    assert status["facts"] == {
        "architecture": "LlamaForCausalLM",
        "vocabSize": 128256,
        "hiddenSize": 4096,
        "layers": 32,
        "attentionHeads": 32,
        "kvHeads": 8,
        "headDim": 128,
        "dtype": "bfloat16",
        "parameters": 8_030_000_000,
        "tokenizer": "vocab-sha256:ab12",
        "tiedEmbeddings": False,
        "maxPositionEmbeddings": 131072,
    }
    assert ModelFacts.from_status(llama.model, status["facts"], llama.source) == dataclasses.replace(
        llama, tokenizer="vocab-sha256:ab12"
    )
    no_tokenizer = {k: v for k, v in report.items() if k != "tokenizer"}
    assert fetched_status([fetched_pod(json.dumps(no_tokenizer))], {}, "hf://x/y") == {"sizeBytes": 1234, "facts": None}
    broken = {**report, "config": {"vocab_size": 1}}
    assert fetched_status([fetched_pod(json.dumps(broken))], {}, "hf://x/y")["facts"] is None
    kept = {"sizeBytes": 1, "facts": status["facts"]}
    assert fetched_status([fetched_pod(None)], kept, "hf://x/y") == kept == fetched_status([], kept, "hf://x/y")


def test_a_shared_objects_progress_does_not_rewrite_its_users_status():
    """A ModelCache or EngineBuild moving from phase to phase leaves its users' conditions as they were:
    with a thousand users, each step would otherwise be a thousand status writes."""
    p = plan13b()
    target, draft = p.model_caches

    def conds_with(cache_phase: str, engine_phase: str) -> dict:
        caches = {
            target.name: BuildState(cache_phase, cache_phase, f"{cache_phase} now"),
            draft.name: BuildState("Fetched", "Fetched", "checkpoint in the cache"),
        }
        draft_engine = next(e for e in p.engines if e.role == "draft")
        states = {draft_engine.name: BuildState(engine_phase, engine_phase, f"step {engine_phase} running")}
        return {
            c.type: (c.status, c.reason, c.message)
            for c in deployment_conditions(DeploymentInput(p, states, None, False, None, caches=caches))[1]
        }

    assert (
        conds_with("Pending", "Pending") == conds_with("Fetching", "Converting") == conds_with("Fetching", "Building")
    )
    assert conds_with("Fetching", "Building")["EnginesReady"][2].endswith(": in progress")
    assert conds_with("Fetching", "Building") != conds_with("Fetching", "Succeeded")  # built: a change worth a write


def test_users_view_holds_all_a_deployment_reads_of_a_shared_object():
    """Users are woken only when users_view changes: two states with the same view must give the same
    conditions, whichever of the engines or checkpoints they are."""
    from specdec.status.shared import users_view

    p = plan13b()
    target_cache, _ = p.model_caches
    engine = next(e for e in p.engines if e.role == "target")
    anyone = [
        BuildState("Pending", "JobPending", "a"),
        BuildState("Failed", "BuildFailed", "h"),
        BuildState("Failed", "BuildFailed", "i"),
        BuildState("Failed", "FetchFailed", "i"),
        BuildState("Pending", "Unschedulable", "j"),
        BuildState("Pending", "Unschedulable", "k"),
    ]
    engine_states = [
        *anyone,
        BuildState("Pending", "WaitingForCheckpoints", "b"),
        BuildState("Converting", "Converting", "c"),
        BuildState("Building", "Building", "d"),
        BuildState("Succeeded", "Built", "g"),
    ]
    cache_states = [*anyone, BuildState("Fetching", "Fetching", "e"), BuildState("Fetched", "Fetched", "f")]
    fetched = BuildState("Fetched", "Fetched", "in the cache")
    everything_fetched = {c.name: fetched for c in p.model_caches}
    built = {e.name: BuildState("Succeeded", "Built", "built") for e in p.engines}

    def as_engine(s: BuildState):
        return deployment_conditions(
            DeploymentInput(p, {**built, engine.name: s}, None, False, None, caches=everything_fetched)
        )

    def as_cache(s: BuildState):
        return deployment_conditions(
            DeploymentInput(p, {}, None, False, None, caches={**everything_fetched, target_cache.name: s})
        )

    for states, conditions_with in ((engine_states, as_engine), (cache_states, as_cache)):
        for a in states:
            for b in states:
                if users_view(a) == users_view(b):
                    assert conditions_with(a) == conditions_with(b), (a, b)


def test_runtime_view_holds_all_a_deployment_reads_of_its_runtime_deployment():
    """Its Deployment's events wake a deployment only when runtime_view changes: Deployments with the same
    view must give the same conditions and pod counts. The controller-manager's updates along a rollout
    that change nothing of that (availableReplicas, Progressing's reasons) are part of the set."""
    from specdec.status.deployment import runtime_view

    p = plan13b()

    def deployment(generation=2, observed=2, replicas=1, updated=1, ready=0, available=0, conds=(), annotations=None):
        return {
            "metadata": {"generation": generation, "labels": {"app": "x"}, "annotations": annotations or {}},
            "status": {
                "observedGeneration": observed,
                "replicas": replicas,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": available,
                "conditions": list(conds),
            },
        }

    progressing = [
        cond("Progressing", reason=r, message=f"ReplicaSet x {r}")
        for r in ("NewReplicaSetCreated", "ReplicaSetUpdated", "NewReplicaSetAvailable")
    ]
    deadline = cond("Progressing", "False", "ProgressDeadlineExceeded", "ReplicaSet x has timed out progressing.")
    unavailable, available = cond("Available", "False", "MinimumReplicasUnavailable"), cond("Available")
    failure = cond("ReplicaFailure", "True", "FailedCreate", 'pods "x" is forbidden: exceeded quota')
    variants = [
        None,
        deployment(observed=1, replicas=0, updated=0),
        *(deployment(conds=[unavailable, pr]) for pr in progressing),
        *(deployment(ready=1, available=a, conds=[available, pr]) for pr in progressing for a in (0, 1)),
        deployment(ready=1, conds=[unavailable, progressing[1]]),  # ready, not yet available
        deployment(conds=[unavailable, deadline]),
        deployment(conds=[unavailable, failure]),
        deployment(ready=1, conds=[available], annotations={"specdec.io/engine-builds": "a,b"}),
        deployment(generation=3, ready=1, conds=[available]),
        deployment(replicas=2, ready=1),
    ]

    def reads(d):
        status = (d or {}).get("status") or {}
        return (
            deployment_conditions(DeploymentInput(p, built(p), d, True, "http://x/v1")),
            status.get("replicas"),
            status.get("readyReplicas"),
            ((d or {}).get("metadata") or {}).get("annotations"),
        )

    same = 0
    for a in variants:
        for b in variants:
            if runtime_view(a) == runtime_view(b):
                assert reads(a) == reads(b), (a, b)
                same += a is not b
    assert same >= 10  # the controller-manager's updates that change none of it wake nobody
