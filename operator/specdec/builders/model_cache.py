"""ModelCache objects and the Job that fetches each one: an hf:// checkpoint downloaded into the
cache claim on a CPU node, so that no GPU pod waits for a download."""

from __future__ import annotations

import inspect
import shlex
from typing import Any

from specdec.admission import checkpoint_facts
from specdec.admission.gpu_nodes import node_selector
from specdec.api import shared_objects
from specdec.api.runtime_config import CACHE_MOUNT
from specdec.builders import common
from specdec.plan import ModelCachePlan, slug
from specdec.settings import GPU_RESOURCE, Settings

COMPLETE_MARKER = ".specdec-complete"  # in a checkpoint directory: the download finished
# The Hub id the fetch pod downloads; the local cluster's simulated fetch reads it too (dev/simulated_fetch.py).
MODEL_ENV = "SPECDEC_MODEL"


def job_name(model_cache_name: str) -> str:
    return f"{model_cache_name}-fetch"


def build_model_cache(namespace: str, cache: ModelCachePlan) -> dict[str, Any]:
    model = cache.spec.model.split("://", 1)[1]
    return common.shared_object("ModelCache", "model", cache.name, namespace, slug(model, 63), cache.spec)


def fetch_script(name: str, spec: shared_objects.ModelCacheSpec) -> str:
    """Download into a directory of this ModelCache's own, then publish it by a rename under a lock:
    a reader never sees half a checkpoint, and of two fetches of one checkpoint (ModelCaches with
    different placement) the first finished wins. Then specdec.admission.checkpoint_facts (its source, run by the
    image's python3) reports the size and the model's facts in the termination message."""
    target = f"{CACHE_MOUNT}/{spec.path}"
    partial = f"{CACHE_MOUNT}/.work/fetch-{name}"
    marker = shlex.quote(f"{target}/{COMPLETE_MARKER}")
    download = " ".join(
        [
            shlex.join(
                [
                    "python3",
                    "-c",
                    "import sys; from huggingface_hub import snapshot_download; "
                    "snapshot_download(repo_id=sys.argv[1], revision=sys.argv[2], local_dir=sys.argv[3])",
                ]
            ),
            f'"${MODEL_ENV}"',
            shlex.join([spec.revision, partial]),
        ]
    )
    q_target, q_partial = shlex.quote(target), shlex.quote(partial)
    return "\n".join(
        [
            f"if [ -e {marker} ]; then echo 'checkpoint already in the cache'; else",
            f"  rm -rf {q_partial} && mkdir -p {q_partial}",
            f"  {download}",
            f"  touch {shlex.quote(partial + '/' + COMPLETE_MARKER)}",
            f"  mkdir -p {shlex.quote(target.rsplit('/', 1)[0])}",
            f"  (flock 9 && if [ -e {marker} ]; then rm -rf {q_partial}; else rm -rf {q_target} "
            f"&& mv {q_partial} {q_target}; fi) 9>{shlex.quote(target + '.lock')}",
            "fi",
            f"{shlex.join(['python3', '-c', inspect.getsource(checkpoint_facts), target])} > /dev/termination-log",
        ]
    )


def build_fetch_job(model_cache: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """The Job for a ModelCache object (as read from the API server: it owns the Job). No GPU, no
    GPU node selector or toleration: only the placement its spec asks for."""
    meta = model_cache["metadata"]
    name = meta["name"]
    spec = shared_objects.ModelCacheSpec.model_validate(model_cache["spec"])
    pod = spec.pod
    container = {
        "name": "fetch",
        # The build image has huggingface_hub; an operator-wide choice, so a shared cache is fetched
        # the same way whoever asked for it.
        "image": settings.build_image,
        "command": ["/bin/bash", "-euo", "pipefail", "-c", fetch_script(name, spec)],
        "env": [{"name": MODEL_ENV, "value": spec.model.split("://", 1)[1]}, *common.hf_env()],
        "resources": common.resources(pod.resources, 0, GPU_RESOURCE),
        "volumeMounts": [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": common.container_security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    labels = common.labels("model-cache", **{common.LABEL_MODEL_CACHE: name})
    placement = {
        "nodeSelector": node_selector((), pod.node_selector),
        "tolerations": common.tolerations((), pod.tolerations),
    }
    pod_spec = {
        **{k: v for k, v in placement.items() if v},
        "containers": [container],
        "volumes": [
            {"name": "cache", "persistentVolumeClaim": {"claimName": spec.cache_claim}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    return common.job(
        job_name(name),
        meta["namespace"],
        labels,
        common.owner_reference("ModelCache", name, meta["uid"]),
        pod,
        pod_spec,
        settings.image_pull_secrets,
    )
