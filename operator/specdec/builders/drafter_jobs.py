"""spec.drafter.learning's objects (pure): a round's SaveState server (the target's runtime pods in mode saveState,
built by the serving builders from a derived spec), its replay Job and its train Job, and the promoted head as
the draft the runtime serves.

On the samples' claim: the front's samples under the learning's path; each round's files under
drafter-rounds/<deployment>/<round>/: hidden-states/ (the SaveState server's, one record a file), holdout/ (the
samples the replay held out for the evaluation) and head/ (the trained EAGLE-3 checkpoint). The train Job's
result (specdec.drafter.train's JSON) is its container's termination message.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from typing import Any

from specdec.admission.gpu_nodes import node_selector
from specdec.api.drafter import SAMPLES_MOUNT, LearningSpec, samples_place
from specdec.api.runtime_config import CACHE_MOUNT
from specdec.builders import common
from specdec.builders.serving import build_config_map, build_deployment, build_service, endpoint
from specdec.plan import Plan
from specdec.settings import GPU_RESOURCE, Settings

REPLAY, TRAIN = "drafter-replay", "drafter-train"  # the Jobs' components
REPLAY_SERVER = "drafter-replay-server"  # the SaveState server's objects' component (its pods are runtime pods)
ANNOTATION_ROUND = "specdec.io/drafter-round"  # on the Jobs: the round they work for
ROUND_MOUNT = "/round"
ROUNDS_MOUNT = "/rounds"  # the replay Job's: the deployment's round directories, the older ones deleted
HOLDOUT_FRACTION = 0.1
DRAFT_KEYS = ("speculative_model_dir", "speculative_model")  # the draft's directory in speculative_config


def replay_server_name(deployment: str) -> str:
    return f"{deployment}-replay"  # a Deployment, its ConfigMap (-runtime) and Service; as long as -canary


def replay_job_name(deployment: str) -> str:
    return f"{deployment}-replay"


def train_job_name(deployment: str) -> str:
    return f"{deployment}-train"


def round_path(deployment: str, number: int) -> str:
    return f"{rounds_path(deployment)}/{number}"


def rounds_path(deployment: str) -> str:
    return f"drafter-rounds/{deployment}"


def head_round(head: str | None, deployment: str) -> int | None:
    """The round of a head written by the loop (head_uri's form), None for any other draft."""
    _, found, rest = (head or "").partition(f"/{rounds_path(deployment)}/")
    number = rest.removesuffix("/head")
    return int(number) if found and number.isdecimal() else None


def head_uri(learning: LearningSpec, deployment: str, cache_claim: str, number: int) -> str:
    """The round's head as a draftModel: pvc://<claim>/<path>."""
    claim, _ = samples_place(learning, deployment, cache_claim)
    return f"pvc://{claim}/{round_path(deployment, number)}/head"


def trained_for(spec: dict[str, Any]) -> str:
    """What a head was trained for: the target and the speculation block it was measured against. A promoted
    head serves only while both are what the spec says (a new target or draft starts over)."""
    basis = {"target": spec.get("target"), "speculation": spec.get("speculation")}
    return hashlib.sha256(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:16]


def learned_speculation(sd: dict[str, Any]) -> dict[str, Any] | None:
    """The spec's speculation block with the promoted head as its draft (status.drafter.head), or None when no
    promoted head applies to this spec. The spec itself is never edited: the head is served from status, as
    draftLen: auto's length is."""
    spec = sd.get("spec") or {}
    learning = (spec.get("drafter") or {}).get("learning") or {}
    drafter = (sd.get("status") or {}).get("drafter") or {}
    speculation = spec.get("speculation") or {}
    if not learning.get("enabled") or speculation.get("mode") != "eagle3" or not drafter.get("head"):
        return None
    if drafter.get("trainedFor") != trained_for(spec):
        return None
    block = copy.deepcopy(speculation)
    block.setdefault("eagle3", {})["draftModel"] = drafter["head"]
    block["eagle3"].pop("draftRevision", None)
    return block


def replay_spec(spec: dict[str, Any], learning: LearningSpec, deployment: str, cache_claim: str, number: int) -> dict:
    """The SaveState server's spec: the deployment's target and runtime, one replica, writing every request's
    hidden states (write_interval 1) to the round's directory, at the layers the running EAGLE-3 head reads."""
    claim, _ = samples_place(learning, deployment, cache_claim)
    eagle3 = (spec.get("speculation") or {}).get("eagle3") or {}
    save_state: dict[str, Any] = {
        "output": {"claimName": claim, "path": f"{round_path(deployment, number)}/hidden-states"},
        "writeInterval": 1,
    }
    if eagle3.get("eagle3LayersToCapture"):
        save_state["eagle3LayersToCapture"] = eagle3["eagle3LayersToCapture"]
    derived = {k: v for k, v in spec.items() if k not in ("drafter", "rollout", "speculation")}
    derived["speculation"] = {"mode": "saveState", "saveState": save_state}
    derived["runtime"] = {**(spec.get("runtime") or {}), "replicas": 1}
    return derived


def _owned(obj: dict[str, Any], deployment: str, owner_uid: str) -> dict[str, Any]:
    """A replay server object as the serving builders made it, owned by and labelled for its deployment."""
    meta = obj["metadata"]
    meta["labels"] = {**meta["labels"], common.LABEL_DEPLOYMENT: deployment, common.LABEL_COMPONENT: REPLAY_SERVER}
    meta["ownerReferences"] = [common.owner_reference("SpeculativeDeployment", deployment, owner_uid)]
    return obj


def replay_server(server: Plan, deployment: str, owner_uid: str, settings: Settings) -> list[dict[str, Any]]:
    """The SaveState server's ConfigMap, Deployment and Service (`server`: the plan of replay_spec, named
    replay_server_name). Its pods are runtime pods of their own instance: no Service or monitor of the
    deployment sees them."""
    return [
        _owned(build_config_map(server, owner_uid), deployment, owner_uid),
        _owned(build_deployment(server, owner_uid, settings), deployment, owner_uid),
        _owned(build_service(server, owner_uid), deployment, owner_uid),
    ]


def _job(
    name: str,
    plan: Plan,
    learning: LearningSpec,
    owner_uid: str,
    settings: Settings,
    number: int,
    component: str,
    command: list[str],
    mounts: list[tuple[dict[str, Any], dict[str, Any]]],
    gpus: bool,
) -> dict[str, Any]:
    trainer = learning.trainer
    resources = common.resources(trainer.resources, 0, GPU_RESOURCE)
    limits = trainer.resources.limits if trainer.resources and trainer.resources.limits else {}
    if gpus and GPU_RESOURCE in limits:  # common.resources never takes GPUs from the user: the trainer's are asked
        resources.setdefault("limits", {})[GPU_RESOURCE] = str(limits[GPU_RESOURCE])
    container: dict[str, Any] = {
        "name": "train" if component == TRAIN else "replay",
        "image": trainer.image or settings.runtime_image_for("pytorch"),
        "command": command,
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": resources,
        "volumeMounts": [mount for _, mount in mounts] + [{"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": common.container_security_context(),
        # The train Job's result is its termination message: the operator reads it from the pod's status.
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [volume for volume, _ in mounts] + [{"name": "tmp", "emptyDir": {}}],
    }
    if gpus:
        pod_spec["nodeSelector"] = node_selector(settings.gpu_node_selector, trainer.node_selector)
        pod_spec["tolerations"] = common.tolerations(settings.gpu_tolerations, trainer.tolerations)
    else:
        pod_spec["nodeSelector"] = dict(trainer.node_selector or {})
        pod_spec["tolerations"] = common.tolerations((), trainer.tolerations)
    # No instance label: the runtime Service selects the instance's pods, and these serve nothing.
    labels = common.labels(component, **{common.LABEL_DEPLOYMENT: plan.name})
    job = common.job(
        name,
        plan.namespace,
        labels,
        common.owner_reference("SpeculativeDeployment", plan.name, owner_uid),
        trainer,
        pod_spec,
        settings.image_pull_secrets,
    )
    job["metadata"]["annotations"] = {ANNOTATION_ROUND: str(number)}
    return job


def _round_volume(learning: LearningSpec, plan: Plan, number: int) -> tuple[dict[str, Any], dict[str, Any]]:
    claim, _ = samples_place(learning, plan.name, plan.cache.claim_name)
    return (
        {"name": "round", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "round", "mountPath": ROUND_MOUNT, "subPath": round_path(plan.name, number)},
    )


def replay_job(
    plan: Plan, learning: LearningSpec, owner_uid: str, settings: Settings, number: int, served_round: int | None = None
) -> dict[str, Any]:
    """Sends the samples (of the learning's class) through the round's SaveState server, holding out a tenth
    for the evaluation; first deletes the rounds older than learning.keepRounds, except `served_round` (the served
    head's). No GPU: the server computes."""
    claim, path = samples_place(learning, plan.name, plan.cache.claim_name)
    samples = (
        {"name": "samples", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},
        {"name": "samples", "mountPath": SAMPLES_MOUNT, "subPath": path, "readOnly": True},
    )
    all_rounds = (
        {"name": "rounds", "persistentVolumeClaim": {"claimName": claim}},
        {"name": "rounds", "mountPath": ROUNDS_MOUNT, "subPath": rounds_path(plan.name)},
    )
    server = endpoint_of(plan)
    command = [
        "python", "-m", "specdec.drafter.replay",
        "--samples", SAMPLES_MOUNT,
        "--server", server,
        "--model", plan.runtime.served_model_name,
        "--holdout-fraction", str(HOLDOUT_FRACTION),
        "--holdout-out", f"{ROUND_MOUNT}/holdout",
        "--rounds", ROUNDS_MOUNT,
        "--round", str(number),
        "--keep-rounds", str(learning.keep_rounds),
    ]  # fmt: skip
    if served_round is not None:
        command += ["--served-round", str(served_round)]
    if learning.traffic_class:
        command += ["--class", learning.traffic_class]
    mounts = [samples, _round_volume(learning, plan, number), all_rounds]
    return _job(replay_job_name(plan.name), plan, learning, owner_uid, settings, number, REPLAY, command, mounts, False)


def endpoint_of(plan: Plan) -> str:
    """The round's SaveState server, as the replay Job reaches it (its Service, without /v1)."""
    return endpoint(dataclasses.replace(plan, name=replay_server_name(plan.name))).removesuffix("/v1")


def running_draft(plan: Plan) -> str | None:
    """The running draft's directory as the runtime pods read it (speculative_config)."""
    config = plan.runtime.speculative_config or {}
    return next((str(config[k]) for k in DRAFT_KEYS if config.get(k)), None)


def train_job(plan: Plan, learning: LearningSpec, owner_uid: str, settings: Settings, number: int) -> dict[str, Any]:
    """Trains an EAGLE-3 head on the round's hidden states and evaluates it against the running draft on the
    held-out samples; its result is its termination message. The checkpoints are mounted where the runtime pods
    read them (the cache claim, pvc:// claims), so the target's and the draft's directories are the runtime's."""
    mounts = [_round_volume(learning, plan, number)]
    mounts.append(
        (
            {"name": "cache", "persistentVolumeClaim": {"claimName": plan.cache.claim_name, "readOnly": True}},
            {"name": "cache", "mountPath": CACHE_MOUNT, "readOnly": True},
        )
    )
    mounts += list(zip(common.model_volumes(plan.model_claims), common.model_mounts(plan.model_claims), strict=True))
    command = [
        "python", "-m", "specdec.drafter.train",
        "--hidden-states", f"{ROUND_MOUNT}/hidden-states",
        "--target", plan.runtime.target.checkpoint,
        "--out", f"{ROUND_MOUNT}/head",
        "--eval-samples", f"{ROUND_MOUNT}/holdout",
        "--margin", str(learning.margin),
        "--result", "/dev/termination-log",
    ]  # fmt: skip
    baseline = running_draft(plan)
    if baseline:
        command[command.index("--eval-samples") : command.index("--eval-samples")] = ["--baseline", baseline]
    return _job(train_job_name(plan.name), plan, learning, owner_uid, settings, number, TRAIN, command, mounts, True)
