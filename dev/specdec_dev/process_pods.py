"""The pod runner's stand-in of a kubelet for pods whose work runs on this machine as processes, on CPU:

- **Job pods labelled RUN_LABEL** (spec.drafter.learning's replay and train Jobs, through trainer.podLabels): their
  container's own command line (`python -m specdec.drafter.replay ...`, `python -m specdec.drafter.train ...`, as
  the Jobs render them) runs as a process, with every path under a volume's mount at the directory standing for
  it (a claim's: <cluster dir>/claims/<namespace>/<claim>/<subPath>; an emptyDir's: under the pod's directory),
  the termination message file at one of the pod's, and a Service's URL at a Ready pod of that Service (no
  kube-proxy or cluster DNS here). When it exits, the pod's status says so as a kubelet's would: phase
  Succeeded or Failed, the container terminated with its exit code and its termination message (the file's, or
  its log's tail on a failure: FallbackToLogsOnError), so the Job controller completes the Job and the operator
  reads the train Job's result. kwok's pod-complete stage leaves these pods alone (stages/pod-complete.yaml).
- **Runtime pods whose target is a real model on disk** (a checkpoint directory with a config.json, such as
  specdec_dev.tiny_target's, placed where the cache claim stands): their trtllm-serve is the transformers
  stand-in (specdec_dev.transformers_serve), a process on the pod's IP at trtllm-serve's port, with the pod's
  speculative_config (a SaveState server's capture writes the target's real hidden states).

TensorRT-LLM and GPUs cannot run here: these processes stand for the containers, nothing more.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit, urlunsplit

RUN_LABEL = "simulation.specdec.io/run-command"  # "true": the pod runner runs the Job pod's command as a process
TERMINATION_LOG = "/dev/termination-log"  # the kubelet's default terminationMessagePath
LOG_TAIL_BYTES = 4096  # FallbackToLogsOnError: the kubelet keeps at most the log's last 4 KiB (or 80 lines)
LOG_TAIL_LINES = 80
START_SECONDS = 120.0  # for the transformers stand-in to load its model and answer /health

Obj = dict[str, Any]


class PodRunError(ValueError):
    """A pod whose command cannot run here; the message says why."""


def process_env() -> dict[str, str]:
    """The processes' environment: torch on one thread (the machine is shared, as a Job's CPU limit would)."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def volume_directories(pod: Obj, claims_dir: Path, pod_dir: Path) -> dict[str, Path]:
    """Each mount path of the pod's first container -> the directory standing for it here."""
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    namespace = pod["metadata"]["namespace"]
    directories: dict[str, Path] = {}
    for mount in pod["spec"]["containers"][0].get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if claim:
            base = claims_dir / namespace / claim
        elif "emptyDir" in volume:
            base = pod_dir / "volumes" / mount["name"]
        else:
            continue  # a ConfigMap or Secret: the pod runner's other part, or none of these commands' business
        directories[mount["mountPath"].rstrip("/") or "/"] = base / mount.get("subPath", "")
    return directories


def host_path(path: str, directories: dict[str, Path]) -> Path | None:
    """Where the pod's absolute `path` is here: under the deepest mount that holds it; None outside every mount."""
    pure = PurePosixPath(path)
    for mount in sorted(directories, key=len, reverse=True):
        if pure == PurePosixPath(mount) or PurePosixPath(mount) in pure.parents:
            return directories[mount] / pure.relative_to(mount)
    return None


def service_host(url: str) -> tuple[str, str] | None:
    """(service, namespace) of a cluster-local Service URL (http://<service>.<namespace>.svc[...]:port), else None."""
    host = urlsplit(url).hostname or ""
    labels = host.split(".")
    if len(labels) >= 3 and labels[2] == "svc":
        return labels[0], labels[1]
    return None


def at_pod(url: str, pod_ip: str) -> str:
    """The Service URL with its host replaced by the Ready pod's IP (the Service's port is the pod's: targetPort
    "http" of the runtime Service)."""
    parts = urlsplit(url)
    netloc = pod_ip + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def host_command(pod: Obj, directories: dict[str, Path], termination_log: Path, services: dict[str, str]) -> list[str]:
    """The container's command as it runs here: `python` this interpreter, paths under mounts at their
    directories, the termination message file at `termination_log`, Service URLs at `services` (URL -> a pod's)."""
    container = pod["spec"]["containers"][0]
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not command:
        raise PodRunError("its container has no command (the image's entrypoint cannot run here)")
    if command[0] not in ("python", "python3"):
        raise PodRunError(f"its command runs {command[0]!r}, not python: only the drafter's entrypoints run here")
    argv = [sys.executable]
    for arg in command[1:]:
        if arg == container.get("terminationMessagePath", TERMINATION_LOG):
            argv.append(str(termination_log))
        elif arg in services:
            argv.append(services[arg])
        elif arg.startswith("/") and (mapped := host_path(arg, directories)) is not None:
            argv.append(str(mapped))
        else:
            argv.append(arg)
    return argv


def termination_message(termination_log: Path, log: Path, exit_code: int) -> str:
    """What the kubelet reports as the container's message: the file's text, or with FallbackToLogsOnError the
    log's tail when the file is empty and the container failed."""
    text = termination_log.read_text(errors="replace") if termination_log.is_file() else ""
    if text or exit_code == 0 or not log.is_file():
        return text[-LOG_TAIL_BYTES:]
    lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
    return "\n".join(lines)[-LOG_TAIL_BYTES:]


def terminated_status(pod: Obj, exit_code: int, message: str, started_at: str, finished_at: str) -> Obj:
    """The pod status patch a kubelet writes when its only container has ended (restartPolicy Never)."""
    container = pod["spec"]["containers"][0]
    terminated: Obj = {
        "exitCode": exit_code,
        "reason": "Completed" if exit_code == 0 else "Error",
        "startedAt": started_at,
        "finishedAt": finished_at,
    }
    if message:
        terminated["message"] = message
    return {
        "status": {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "conditions": [
                {"type": kind, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished_at}
                for kind in ("Ready", "ContainersReady")
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
    }


def runs_command(pod: Obj) -> bool:
    """A Job pod the pod runner runs: labelled RUN_LABEL=true, Running (kwok started its container), not deleted."""
    labels = pod["metadata"].get("labels") or {}
    return (
        labels.get(RUN_LABEL) == "true"
        and (pod.get("status") or {}).get("phase") == "Running"
        and not pod["metadata"].get("deletionTimestamp")
    )


def real_model(checkpoint: str, directories: dict[str, Path]) -> Path | None:
    """The target's checkpoint directory here when it holds a real model (a config.json), else None."""
    directory = host_path(checkpoint, directories)
    return directory if directory is not None and (directory / "config.json").is_file() else None


def transformers_serve_argv(model: Path, host: str, port: int, options: Path, speculative: dict[str, Any]) -> list[str]:
    """The transformers stand-in of trtllm-serve for `model` on host:port, its speculative_config written to
    `options` (YAML is a superset of JSON)."""
    options.parent.mkdir(parents=True, exist_ok=True)
    options.write_text(json.dumps({"speculative_config": speculative}))
    return [
        sys.executable, "-m", "specdec_dev.transformers_serve", str(model),
        "--host", host, "--port", str(port), "--extra_llm_api_options", str(options),
    ]  # fmt: skip
