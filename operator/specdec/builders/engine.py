"""EngineBuild objects and the Job that builds each one."""

from __future__ import annotations

from typing import Any

from specdec.admission.gpu_nodes import node_selector
from specdec.api import shared_objects
from specdec.api.runtime_config import CACHE_MOUNT
from specdec.builders import common
from specdec.builders.build_steps import build_steps
from specdec.plan import EnginePlan, model_claims, recipe_models, slug
from specdec.settings import GPU_RESOURCE, Settings


def job_name(engine_build_name: str) -> str:
    return f"{engine_build_name}-build"


def build_engine_build(namespace: str, engine: EnginePlan) -> dict[str, Any]:
    model = engine.spec.recipe.model.split("://", 1)[1]
    return common.shared_object("EngineBuild", "engine", engine.name, namespace, slug(model, 63), engine.spec)


def build_job(engine_build: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The Job for an EngineBuild object (as read from the API server: it owns the Job)."""
    meta = engine_build["metadata"]
    name = meta["name"]
    spec = shared_objects.EngineBuildSpec.model_validate(engine_build["spec"])
    recipe, pod = spec.recipe, spec.pod
    gpus = recipe.tensor_parallel_size
    env = [{"name": "TRTLLM_EXAMPLES_DIR", "value": settings.trtllm_examples_dir}, *common.hf_env()]
    claims = model_claims(*(uri for uri, _ in recipe_models(recipe)))
    mounts = [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}]
    mounts += common.model_mounts(claims)
    containers = [
        {
            "name": step.name,
            "image": recipe.image,
            "command": ["/bin/bash", "-euo", "pipefail", "-c", step.script],
            "env": env,
            "resources": common.resources(pod.resources, gpus if step.uses_gpus else 0, GPU_RESOURCE),
            "volumeMounts": mounts,
            "securityContext": common.container_security_context(),
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }
        for step in build_steps(name, spec, settings.calib_size)
    ]
    labels = common.labels("engine-build", **{common.LABEL_ENGINE_BUILD: name})
    pod_spec: dict[str, Any] = {
        "nodeSelector": node_selector(settings.gpu_node_selector, pod.node_selector),
        "tolerations": common.tolerations(settings.gpu_tolerations, pod.tolerations),
        **({"initContainers": containers[:-1]} if containers[:-1] else {}),
        "containers": containers[-1:],
        "volumes": [
            {"name": "cache", "persistentVolumeClaim": {"claimName": spec.cache_claim}},
            {"name": "tmp", "emptyDir": {}},
        ]
        + common.model_volumes(claims),
    }
    return common.job(
        job_name(name),
        meta["namespace"],
        labels,
        common.owner_reference("EngineBuild", name, meta["uid"]),
        pod,
        pod_spec,
        settings.image_pull_secrets,
    )
