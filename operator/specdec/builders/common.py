"""Pieces every child object shares: labels, owner references, the restricted security context."""

from __future__ import annotations

from typing import Any

from specdec.api import drafter, models, pod_fields, shared_objects
from specdec.api.runtime_config import MODELS_MOUNT

MANAGED_BY = "specdec-operator"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_DEPLOYMENT = "specdec.io/deployment"
LABEL_ENGINE_BUILD = "specdec.io/engine-build"
LABEL_MODEL_CACHE = "specdec.io/model-cache"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_INSTANCE = "app.kubernetes.io/instance"  # on runtime objects and pods: the deployment's name
ANNOTATION_CONFIG_HASH = "specdec.io/config-hash"
ANNOTATION_ENGINE_BUILDS = "specdec.io/engine-builds"  # on the Deployment: the engines its pods run
# Our images' group (USER 1000:1000), the group of what the pods write to volumes. The pods run as their image's
# user: no runAsUser, so that the kubelet checks runAsNonRoot against the image and refuses one that runs as root.
RUNTIME_GID = 1000
HF_TOKEN_SECRET = "specdec-hf-token"  # optional Secret with key HF_TOKEN, for gated hub models


def labels(component: str, **extra: str) -> dict[str, str]:
    return {LABEL_MANAGED_BY: MANAGED_BY, "app.kubernetes.io/name": "specdec", LABEL_COMPONENT: component, **extra}


def shared_object(kind: str, component: str, name: str, namespace: str, model_label: str, spec: Any) -> dict[str, Any]:
    """An EngineBuild or ModelCache: content-addressed, shared by deployments, so owned by none; our
    label and its model's (`model_label`: a slug of the checkpoint) on it."""
    return {
        "apiVersion": models.API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels(component, **{"specdec.io/model": model_label}),
        },
        "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def owner_reference(kind: str, name: str, uid: str, api_version: str = models.API_VERSION) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_security_context() -> dict[str, Any]:
    """Passes the `restricted` Pod Security profile (which asks for runAsNonRoot, not for a runAsUser). The
    containers run as their image's numeric non-root USER (ours: 1000:1000); an image that runs as root, or
    names its user, is refused by the kubelet (CreateContainerConfigError, in the status as ContainerCannotStart)."""
    return {"runAsNonRoot": True, "fsGroup": RUNTIME_GID, "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}


def tolerations(settings_tolerations: tuple[dict, ...], extra: list[pod_fields.Toleration] | None) -> list[dict]:
    merged = [dict(t) for t in settings_tolerations]
    for t in extra or []:
        item = t.model_dump(by_alias=True, exclude_none=True)
        if item not in merged:
            merged.append(item)
    return merged


def resources(extra: pod_fields.Resources | None, gpus: int, gpu_resource: str) -> dict[str, Any]:
    """User CPU/memory plus the GPU limit we derive; GPUs are never taken from the user."""
    out: dict[str, dict[str, str]] = {}
    if extra:
        for kind in ("limits", "requests"):
            values = getattr(extra, kind) or {}
            kept = {k: str(v) for k, v in values.items() if k != gpu_resource}
            if kept:
                out[kind] = kept
    if gpus:
        out.setdefault("limits", {})[gpu_resource] = str(gpus)
    return out


def model_volumes(claims: tuple[str, ...]) -> list[dict[str, Any]]:
    """pvc:// model claims, mounted read-only (volume names are indexed: claim names can be long)."""
    return [
        {"name": f"model-{i}", "persistentVolumeClaim": {"claimName": c, "readOnly": True}}
        for i, c in enumerate(claims)
    ]


def model_mounts(claims: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{"name": f"model-{i}", "mountPath": f"{MODELS_MOUNT}/{c}", "readOnly": True} for i, c in enumerate(claims)]


def hf_env() -> list[dict[str, Any]]:
    """Hub access for whatever downloads hf:// models: a writable HOME/HF_HOME and the optional token."""
    return [
        {"name": "HOME", "value": "/tmp"},
        {"name": "HF_HOME", "value": "/tmp/hf"},
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": HF_TOKEN_SECRET, "key": "HF_TOKEN", "optional": True}},
        },
    ]


def image_pull_secrets(names: tuple[str, ...]) -> dict[str, Any]:
    """The pod spec field, only when there are secrets (an empty list would still be a diff)."""
    return {"imagePullSecrets": [{"name": n} for n in names]} if names else {}


def job(
    name: str,
    namespace: str,
    labels: dict[str, str],
    owner: dict[str, Any],
    pod: shared_objects.BuildPodSpec | models.FetchSpec | drafter.TrainerSpec,
    pod_spec: dict[str, Any],
    pull_secrets: tuple[str, ...],
) -> dict[str, Any]:
    """A Job of ours running `pod_spec` once: restricted pods, the spec's extra pod labels and
    annotations (ours win), its retries and deadline; owned by the object it works for."""
    pod_meta: dict[str, Any] = {"labels": {**(pod.pod_labels or {}), **labels}}
    if pod.pod_annotations:
        pod_meta["annotations"] = dict(pod.pod_annotations)
    job_spec: dict[str, Any] = {
        "backoffLimit": pod.backoff_limit,
        "template": {
            "metadata": pod_meta,
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "securityContext": pod_security_context(),
                **image_pull_secrets(pull_secrets),
                **pod_spec,
            },
        },
    }
    if pod.active_deadline_seconds:
        job_spec["activeDeadlineSeconds"] = pod.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "ownerReferences": [owner]},
        "spec": job_spec,
    }
