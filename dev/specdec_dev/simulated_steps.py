"""Simulated step durations for the Job pods of the local cluster.

No container runs under kwok, so a fetch or build step would end the moment it starts. The kwok
stages that move Job pods (stages/job-pod-simulated-step.yaml: one init container after another;
stages/pod-complete.yaml: the main container, then Succeeded) wait, for the container that runs,
until its `startedAt` plus its step's simulated seconds. The seconds come from the pod's annotation
`simulation.specdec.io/<step>-seconds` (set through spec.build.podAnnotations or
spec.cache.fetch.podAnnotations), else from the cluster's defaults (`specdec dev up --step-seconds`,
written into the stages when the cluster is created), else 0.

The delay is an absolute time, not a duration: kwok recomputes a stage's delay on every update of
the pod, and a duration would restart each time.
"""

import copy
import json
from collections.abc import Mapping
from typing import Any

from specdec.builders.build_steps import STEP_PHASES

ANNOTATION_PREFIX = "simulation.specdec.io/"
# kwok's own per-pod delay of pod-complete, which tests already use: it wins over the simulated
# seconds of the main container.
POD_COMPLETE_DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"
# kwok's failure stage (stages/pod-container-running-failed.yaml): a pod with this label fails the container its
# annotations name.
FAILURE = "pod-container-running-failed.stage.kwok.x-k8s.io"
# stage name -> the container statuses whose running container it waits for
STAGE_STATUSES = {"job-pod-simulated-step": "initContainerStatuses", "pod-complete": "containerStatuses"}


class StepSecondsError(ValueError):
    """--step-seconds was not a list of known step=seconds; the message says which part."""


def annotation(step: str) -> str:
    return f"{ANNOTATION_PREFIX}{step}-seconds"


def annotations(step_seconds: Mapping[str, float]) -> dict[str, str]:
    """Pod annotations that give these steps these simulated seconds (for spec.*.podAnnotations)."""
    return {annotation(step): str(seconds) for step, seconds in step_seconds.items()}


def deployment_with_step_seconds(
    body: dict[str, Any], step_seconds: Mapping[str, float], fetch_pods: bool = True
) -> dict[str, Any]:
    """A SpeculativeDeployment whose build pods (and fetch pods, unless its API has none) get these
    simulated seconds."""
    body["spec"].setdefault("build", {})["podAnnotations"] = annotations(step_seconds)
    if fetch_pods:
        body["spec"].setdefault("cache", {})["fetch"] = {"podAnnotations": annotations(step_seconds)}
    return body


def failing(step: str, exit_code: int = 1, message: str = "simulated failure") -> dict[str, dict[str, str]]:
    """podLabels and podAnnotations (of spec.build or spec.cache.fetch) whose pods' `step` fails as soon as it
    runs, with this exit code and termination message: a simulated failing build or fetch."""
    if step not in STEP_PHASES:
        raise ValueError(f"{step!r} is not a step; steps are {', '.join(STEP_PHASES)}")
    return {
        "podLabels": {FAILURE: "true"},
        "podAnnotations": {
            f"{FAILURE}/container-name": step,
            f"{FAILURE}/exit-code": str(exit_code),
            f"{FAILURE}/message": message,
            f"{FAILURE}/delay": "0s",
            f"{FAILURE}/jitter-delay": "0s",
        },
    }


def parse(text: str) -> dict[str, float]:
    """`fetch=20,convert=10` -> {"fetch": 20.0, "convert": 10.0}; steps are those of build_steps."""
    seconds: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        step, sep, value = item.partition("=")
        if not sep or step not in STEP_PHASES:
            raise StepSecondsError(f"{item!r}: expected STEP=SECONDS with STEP one of {', '.join(STEP_PHASES)}")
        try:
            seconds[step] = float(value)
        except ValueError:
            raise StepSecondsError(f"{item!r}: {value!r} is not a number of seconds") from None
        if seconds[step] < 0:
            raise StepSecondsError(f"{item!r}: seconds cannot be negative")
    return seconds


def step_end(statuses: str, defaults: Mapping[str, float]) -> str:
    """A jq expression: when the running container of `.status.<statuses>` ends (RFC 3339), or
    nothing when none runs (kwok then waits no time)."""
    return (
        f". as $pod | $pod.status.{statuses} // [] | map(select(.state.running))[0] | select(.) "
        f"| (.state.running.startedAt | fromdate) + "
        f'(($pod.metadata.annotations["{ANNOTATION_PREFIX}" + .name + "-seconds"] '
        f"// {json.dumps(dict(defaults), sort_keys=True)}[.name] // 0) | tonumber) | todate"
    )


def with_step_delays(stage: dict[str, Any], defaults: Mapping[str, float]) -> dict[str, Any]:
    """The stage with its delay set, if it is one that runs a simulated step."""
    statuses = STAGE_STATUSES.get(stage["metadata"]["name"])
    if statuses is None:
        return stage
    expression = step_end(statuses, defaults)
    if statuses == "containerStatuses":
        expression = f'.metadata.annotations["{POD_COMPLETE_DELAY}"] // ({expression})'
    stage = copy.deepcopy(stage)
    stage["spec"]["delay"] = {"durationMilliseconds": 0, "durationFrom": {"expressionFrom": expression}}
    return stage


TRAIN_RESULT = f"{ANNOTATION_PREFIX}train-result"  # stages/pod-complete.yaml: a train pod's termination message


def simulated_train_result(better: bool, baseline: float, candidate: float, samples: int) -> dict[str, str]:
    """SIMULATED DATA: pod annotations (spec.drafter.learning.trainer.podAnnotations) whose train pod ends with this
    result as its termination message, in specdec.drafter.train's shape; no training runs under kwok."""
    result = {
        "samples": samples,
        "acceptanceLength": {"baseline": baseline, "candidate": candidate},
        "better": better,
        "margin": 0.1,
        "seconds": {"simulated": 0},
        "reason": "simulated train result",
    }
    return {TRAIN_RESULT: json.dumps(result)}
