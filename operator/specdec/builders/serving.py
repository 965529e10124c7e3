"""The serving side of a SpeculativeDeployment: the runtime pods' ConfigMap, Deployment, Service and cache claim."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from specdec.admission.gpu_nodes import node_selector
from specdec.api.runtime_config import (
    CACHE_MOUNT,
    DRAFT_LEN_KEY,
    DRAFT_LEN_SCHEDULE_KEY,
    RUNTIME_CONFIG_DIR,
    RUNTIME_CONFIG_KEY,
)
from specdec.builders import common
from specdec.plan import Plan, content_hash
from specdec.settings import GPU_RESOURCE, Settings
from specdec.speculation import trtllm_schedule

# Bump when the pod template's shape changes in a way that must restart pods; anything else that
# changes (e.g. a new operator version with the same template) leaves running pods alone.
POD_TEMPLATE_VERSION = 1
# A pod being deleted keeps serving PRE_STOP_SLEEP_SECONDS (its Service stops sending it requests meanwhile),
# then specdec-runtime lets the front's requests finish (up to its --grace-seconds, 25) before it stops the
# server (25 more at most); the kubelet's kill comes after all of that.
PRE_STOP_SLEEP_SECONDS = 5
TERMINATION_GRACE_SECONDS = 60
# The runtime's two arms while a canary runs (specdec.canary.rollout): the main Deployment serves the recorded
# speculation, `<name>-canary` the spec's; the Service selects both. The main Deployment's selector is unchanged.
RUNTIME, RUNTIME_CANARY = "runtime", "runtime-canary"
# Set by LeaderWorkerSet on every pod of a multi-node group, 0 on the leader (api/leaderworkerset/v1): the Service
# selects the leaders only (specdec.builders.multinode).
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def runtime_name(plan: Plan, canary: bool = False) -> str:
    return f"{plan.name}-canary" if canary else plan.name


def config_map_name(plan: Plan, canary: bool = False) -> str:
    return runtime_config_map_name(runtime_name(plan, canary))


def runtime_config_map_name(deployment: str) -> str:
    return f"{deployment}-runtime"


def told_schedule(config_map: dict[str, Any] | None) -> trtllm_schedule.Schedule | None:
    """The draft_len_schedule the runtime ConfigMap records (build_config_map), if any."""
    text = ((config_map or {}).get("data") or {}).get(DRAFT_LEN_SCHEDULE_KEY)
    try:
        found = json.loads(text) if text else None
        return {int(n): int(k) for n, k in found.items()} if isinstance(found, dict) and found else None
    except (ValueError, TypeError, AttributeError):
        return None


def selector_labels(plan: Plan, canary: bool = False) -> dict[str, str]:
    return {common.LABEL_INSTANCE: plan.name, common.LABEL_COMPONENT: RUNTIME_CANARY if canary else RUNTIME}


def _metadata(plan: Plan, name: str, owner_uid: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": plan.namespace,
        "labels": {**common.labels(component), common.LABEL_INSTANCE: plan.name, common.LABEL_DEPLOYMENT: plan.name},
        "ownerReferences": [common.owner_reference("SpeculativeDeployment", plan.name, owner_uid)],
    }


def runtime_config_json(plan: Plan) -> str:
    return json.dumps(plan.runtime.model_dump(mode="json", by_alias=True, exclude_none=True), indent=2, sort_keys=True)


def live_draft_len(plan: Plan, chosen: int | None) -> int | None:
    """The ConfigMap's draft length with draftLen: auto (None without): `chosen` (the operator's choice,
    or what the pods were last told) within the engine's range; at first, where auto starts."""
    auto = plan.mode.auto_draft_len()
    if auto is None:
        return None
    lo, hi = auto.range(plan.mode.block)
    return min(max(chosen or plan.mode.draft_len() or lo, lo), hi)


def served_plan(plan: Plan, chosen_draft_len: int | None, schedule: trtllm_schedule.Schedule | None = None) -> Plan:
    """The plan the pods run, given draftLen: auto's choices. trtllm-serve takes its draft length and its
    draft_len_schedule at start, so there they go into the runtime config itself (speculative_config): a new
    one is a new config, and the Deployment rolls its pods by surge (a new pod ready before an old one
    goes). On the Triton route the length is a ConfigMap key of its own that the front re-reads: the
    runtime config keeps where auto starts, and nothing restarts."""
    draft_len = live_draft_len(plan, chosen_draft_len)
    auto = plan.mode.auto_draft_len()
    runtime = plan.runtime
    if draft_len is None or auto is None or runtime.speculative_config is None:
        return plan
    speculation = auto.served_at(runtime.speculation, draft_len, trtllm_schedule.clamped(schedule, draft_len))
    return dataclasses.replace(plan, runtime=runtime.model_copy(update={"speculation": speculation}))


def build_config_map(
    plan: Plan,
    owner_uid: str,
    chosen_draft_len: int | None = None,
    load_keys: dict[str, str] | None = None,
    canary: bool = False,
) -> dict[str, Any]:
    """The draft length (live_draft_len) and the load model's keys
    (specdec.feedback.load_schedules.LoadSchedules.config_map_keys: the break-even and the draft lengths by load)
    are outside the rollout hash: changing them restarts nothing."""
    data = {RUNTIME_CONFIG_KEY: runtime_config_json(plan)}
    draft_len = live_draft_len(plan, chosen_draft_len)
    if draft_len is not None:
        data[DRAFT_LEN_KEY] = str(draft_len)
    schedule = (plan.runtime.speculative_config or {}).get("draft_len_schedule") if draft_len is not None else None
    if schedule:  # served_plan's: a record of what the pods were started with
        data[DRAFT_LEN_SCHEDULE_KEY] = json.dumps({str(n): k for n, k in schedule.items()}, sort_keys=True)
    data.update(load_keys or {})
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(plan, config_map_name(plan, canary), owner_uid, RUNTIME_CANARY if canary else RUNTIME),
        "data": data,
    }


def build_cache_claim(plan: Plan) -> dict[str, Any]:
    """The engine cache the operator creates when none is given; not owned, so engines outlive deployments."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": plan.cache.size}}}
    if plan.cache.storage_class_name:
        spec["storageClassName"] = plan.cache.storage_class_name
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": plan.cache.claim_name,
            "namespace": plan.namespace,
            "labels": common.labels("engine-cache"),
        },
        "spec": spec,
    }


def runtime_pod_spec(plan: Plan, settings: Settings, canary: bool = False) -> dict[str, Any]:
    """The runtime pod's spec (one container, `runtime`), for the Deployment and a multi-node group's leader."""
    spec = plan.spec
    runtime = spec.runtime
    mounts = [
        {"name": "config", "mountPath": RUNTIME_CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": config_map_name(plan, canary)}},
        {"name": "tmp", "emptyDir": {}},
        # Triton's Python backend and NCCL need far more shared memory than the default 64 MiB.
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
    ]
    if spec.backend == "tensorrt" or plan.runtime_inputs:  # engines, or (pytorch) the fetched checkpoints
        mounts.append({"name": "cache", "mountPath": CACHE_MOUNT, "readOnly": True})
        volumes.append(
            {"name": "cache", "persistentVolumeClaim": {"claimName": plan.cache.claim_name, "readOnly": True}}
        )
    mounts += common.model_mounts(plan.model_claims)
    volumes += common.model_volumes(plan.model_claims)
    for volume, mount in plan.mode.writable_volumes(plan.name, plan.cache.claim_name):
        volumes.append(volume)
        mounts.append(mount)
    container = {
        "name": "runtime",
        "image": runtime.image or settings.runtime_image_for(spec.backend),
        "args": ["--config", f"{RUNTIME_CONFIG_DIR}/{RUNTIME_CONFIG_KEY}"],
        "ports": [{"name": "http", "containerPort": runtime.port, "protocol": "TCP"}],
        "env": common.hf_env(),
        "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 3},
        # Loading engines takes minutes; the startup probe keeps liveness from killing a slow start.
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10, "failureThreshold": 180},
        # Endpoints drop a terminating pod asynchronously: serve on until they have, so no request is refused.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
        "resources": common.resources(runtime.resources, plan.gpus, GPU_RESOURCE),
        "volumeMounts": mounts,
        "securityContext": common.container_security_context(),
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        "securityContext": common.pod_security_context(),
        **common.image_pull_secrets(settings.image_pull_secrets),
        "nodeSelector": node_selector(settings.gpu_node_selector, runtime.node_selector),
        "tolerations": common.tolerations(settings.gpu_tolerations, runtime.tolerations),
        "containers": [container],
        "volumes": volumes,
    }
    if runtime.affinity:
        pod_spec["affinity"] = runtime.affinity
    return pod_spec


def pod_template(plan: Plan, labels: dict[str, str], pod_spec: dict[str, Any]) -> dict[str, Any]:
    """A pod template whose config-hash annotation rolls the pods when it or the runtime config changes (the
    ConfigMap keeps its name)."""
    template = {"metadata": {"labels": labels}, "spec": pod_spec}
    rollout_hash = content_hash([POD_TEMPLATE_VERSION, template, runtime_config_json(plan)])
    template["metadata"]["annotations"] = {common.ANNOTATION_CONFIG_HASH: rollout_hash}
    return template


def build_deployment(plan: Plan, owner_uid: str, settings: Settings, canary: bool = False) -> dict[str, Any]:
    """`canary`: the canary arm (its own name, ConfigMap, pod labels and spec.rollout.canary.replicas)."""
    component = RUNTIME_CANARY if canary else RUNTIME
    selector = selector_labels(plan, canary)
    template = pod_template(plan, {**common.labels(component), **selector}, runtime_pod_spec(plan, settings, canary))
    metadata = _metadata(plan, runtime_name(plan, canary), owner_uid, component)
    metadata["annotations"] = {common.ANNOTATION_ENGINE_BUILDS: ",".join(plan.engine_names)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": plan.spec.rollout.canary.replicas if canary else plan.spec.runtime.replicas,
            "selector": {"matchLabels": selector},
            # Surge one pod and never drop one: the old engines keep serving until the new pod is ready.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": template,
        },
    }


def build_service(plan: Plan, owner_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(plan, runtime_name(plan), owner_uid, "runtime"),
        "spec": {
            "type": "ClusterIP",
            # Both arms' pods while a canary runs, and only ours: a Helm release of the same name sets the same
            # instance label on its pods; the pods carry managed-by already, so no pod restarts for this selector.
            "selector": {
                common.LABEL_INSTANCE: plan.name,
                common.LABEL_MANAGED_BY: common.MANAGED_BY,
                **({LWS_WORKER_INDEX_LABEL: "0"} if plan.runtime.multi_node else {}),
            },
            "ports": [{"name": "http", "port": plan.spec.runtime.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def endpoint(plan: Plan) -> str:
    return f"http://{runtime_name(plan)}.{plan.namespace}.svc:{plan.spec.runtime.port}/v1"
