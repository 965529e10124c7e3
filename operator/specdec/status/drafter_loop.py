"""spec.drafter.learning's loop, one round at a time: what the observed Jobs mean and what comes next (pure).

A round starts once the samples' directory holds `minSamples` samples (of the learning's traffic class) more than
when the last round started: the replay step (a one-replica SaveState server of the target and the replay Job that
sends the samples through it), then the train Job (an EAGLE-3 head trained on the hidden states, evaluated offline
against the running draft on held-out samples), then the decision read from the train Job's result (its
termination message). status.drafter records where the round is, so a restarted operator resumes it; the
condition DraftLearning says it in a word: NotEnoughSamples (Unknown), Replaying and Training (True), Promoted
(True), NotBetter and TrainingFailed (False).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from specdec.conditions import Cond

DRAFT_LEARNING = "DraftLearning"
PENDING, RUNNING, SUCCEEDED, FAILED = "Pending", "Running", "Succeeded", "Failed"
PROMOTED, NOT_BETTER, TRAINING_FAILED = "Promoted", "NotBetter", "TrainingFailed"
# status.drafter's fields the loop writes (the others are the samples' counts, specdec.status.drafter)
LOOP_FIELDS = (
    "round",
    "roundSamples",
    "roundBasis",
    "trainedFor",
    "replayJob",
    "replayPhase",
    "trainJob",
    "trainPhase",
    "acceptanceLength",
    "decision",
    "decidedAt",
    "head",
)


@dataclass(frozen=True)
class JobView:
    """A Job of the loop as observed: its round (annotation) and phase; `message` the termination message of its
    pod that ended last (the train Job's result)."""

    round: int
    phase: str
    message: str = ""


@dataclass(frozen=True)
class LoopView:
    samples: int  # of the learning's traffic class, in the samples' directory
    min_samples: int
    recorded: dict[str, Any]  # status.drafter as written
    replay_server_ready: bool
    replay: JobView | None
    train: JobView | None
    replay_job: str  # the Jobs' names
    train_job: str
    head: str  # where this round's head is written (pvc://<claim>/<path>), the draftModel it would serve as
    basis: str  # what a head is trained for now (specdec.builders.drafter_jobs.trained_for)
    now: str


@dataclass(frozen=True)
class LoopStep:
    fields: dict[str, Any]  # status.drafter's loop fields
    condition: Cond
    replay_server: bool = False  # the round's SaveState server should run
    replay_job: bool = False  # the replay Job should exist (for fields["round"])
    train_job: bool = False
    event: tuple[str, str, bool] | None = None  # reason, message, warning


def job_phase(job: dict[str, Any]) -> str:
    """A Job's phase from its status, as `kubectl get jobs` reads it."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return SUCCEEDED
        if condition.get("status") == "True" and condition.get("type") in ("Failed", "FailureTarget"):
            return FAILED
    if status.get("succeeded"):
        return SUCCEEDED
    return RUNNING if status.get("active") else PENDING


@dataclass(frozen=True)
class TrainResult:
    better: bool
    baseline: float | None
    candidate: float
    samples: int
    reason: str


def train_result(message: str) -> TrainResult | str:
    """The train Job's result (specdec.drafter.train's JSON), or why it is not one."""
    try:
        data = json.loads(message)
    except ValueError:
        return "its termination message is not JSON"
    if not isinstance(data, dict):
        return "its termination message is not a JSON object"
    acceptance = data.get("acceptanceLength")
    candidate = acceptance.get("candidate") if isinstance(acceptance, dict) else None
    baseline = acceptance.get("baseline") if isinstance(acceptance, dict) else None
    better = data.get("better")
    if not isinstance(better, bool) or candidate is None or not _number(candidate):
        return "its result lacks better or acceptanceLength.candidate"
    if not (baseline is None or _number(baseline)):
        return "its acceptanceLength.baseline is not a number"
    samples = data.get("samples")
    return TrainResult(
        better,
        float(baseline) if baseline is not None else None,
        float(candidate),
        samples if isinstance(samples, int) and not isinstance(samples, bool) else 0,
        str(data.get("reason") or ""),
    )


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _acceptance(result: TrainResult) -> dict[str, float]:
    out = {"candidate": round(result.candidate, 4)}
    if result.baseline is not None:
        out["baseline"] = round(result.baseline, 4)
    return out


def _old_new(result: TrainResult) -> str:
    old = "none" if result.baseline is None else f"{result.baseline:.3f}"
    return f"offline acceptance length {old} -> {result.candidate:.3f} on {result.samples} held-out samples"


def next_step(view: LoopView) -> LoopStep:
    recorded = {k: view.recorded[k] for k in LOOP_FIELDS if view.recorded.get(k) is not None}
    number = int(recorded.get("round") or 0)
    over = (
        number == 0 or recorded.get("decision") or FAILED in (recorded.get("replayPhase"), recorded.get("trainPhase"))
    )
    if over:
        return _between_rounds(view, recorded, number)
    if recorded.get("replayPhase") != SUCCEEDED:
        return _replaying(view, recorded, number)
    return _training(view, recorded, number)


def _between_rounds(view: LoopView, recorded: dict[str, Any], number: int) -> LoopStep:
    needed = int(recorded.get("roundSamples") or 0) + view.min_samples
    if view.samples >= needed:
        fields = {
            "round": number + 1,
            "roundSamples": view.samples,
            "roundBasis": view.basis,
            "replayJob": view.replay_job,
            "replayPhase": PENDING,
            **{k: recorded[k] for k in ("head", "trainedFor") if recorded.get(k)},  # the head that serves
        }
        message = f"round {number + 1}: replaying {view.samples} samples through a SaveState server of the target"
        return LoopStep(
            fields,
            Cond(DRAFT_LEARNING, True, "Replaying", message),
            replay_server=True,
            event=("DraftReplayStarted", message, False),
        )
    waiting = f"{view.samples} of {needed} samples for round {number + 1}"
    if number == 0:
        return LoopStep(recorded, Cond(DRAFT_LEARNING, None, "NotEnoughSamples", waiting))
    reason = recorded.get("decision") or TRAINING_FAILED
    last = _last_round_message(recorded)
    return LoopStep(recorded, Cond(DRAFT_LEARNING, reason == PROMOTED, reason, f"{last}; {waiting}"))


def _last_round_message(recorded: dict[str, Any]) -> str:
    number = recorded.get("round")
    decision = recorded.get("decision")
    acceptance = recorded.get("acceptanceLength") or {}
    if decision:
        old = acceptance.get("baseline")
        figures = f"offline acceptance length {'none' if old is None else old} -> {acceptance.get('candidate')}"
        verdict = "promoted" if decision == PROMOTED else "not better by the margin: kept the running draft"
        return f"round {number}: {figures}, {verdict}"
    step = "replay" if recorded.get("replayPhase") == FAILED else "train"
    return f"round {number}: the {step} Job failed"


def _replaying(view: LoopView, recorded: dict[str, Any], number: int) -> LoopStep:
    job = view.replay if view.replay is not None and view.replay.round == number else None
    phase = job.phase if job is not None else PENDING
    if phase == SUCCEEDED:
        fields = {**recorded, "replayPhase": SUCCEEDED, "trainJob": view.train_job, "trainPhase": PENDING}
        message = f"round {number}: training an EAGLE-3 head on the replayed hidden states"
        return LoopStep(
            fields,
            Cond(DRAFT_LEARNING, True, "Training", message),
            train_job=True,
            event=("DraftTrainingStarted", message, False),
        )
    if phase == FAILED:
        fields = {**recorded, "replayPhase": FAILED}
        message = f"round {number}: the replay Job {view.replay_job} failed (kubectl logs job/{view.replay_job})"
        return LoopStep(
            fields, Cond(DRAFT_LEARNING, False, TRAINING_FAILED, message), event=(TRAINING_FAILED, message, True)
        )
    waiting = "the SaveState server to be ready" if not view.replay_server_ready else f"the replay Job ({phase})"
    message = f"round {number}: replaying {recorded.get('roundSamples')} samples; waiting for {waiting}"
    return LoopStep(
        {**recorded, "replayPhase": phase},
        Cond(DRAFT_LEARNING, True, "Replaying", message),
        replay_server=True,
        replay_job=view.replay_server_ready or job is not None,
    )


def _training(view: LoopView, recorded: dict[str, Any], number: int) -> LoopStep:
    job = view.train if view.train is not None and view.train.round == number else None
    phase = job.phase if job is not None else PENDING
    if phase == FAILED:
        message = f"round {number}: the train Job {view.train_job} failed (kubectl logs job/{view.train_job})"
        return LoopStep(
            {**recorded, "trainPhase": FAILED},
            Cond(DRAFT_LEARNING, False, TRAINING_FAILED, message),
            event=(TRAINING_FAILED, message, True),
        )
    if phase != SUCCEEDED or job is None:
        message = f"round {number}: training an EAGLE-3 head ({phase})"
        return LoopStep(
            {**recorded, "trainPhase": phase}, Cond(DRAFT_LEARNING, True, "Training", message), train_job=True
        )
    result = train_result(job.message)
    if isinstance(result, str):
        message = f"round {number}: the train Job {view.train_job} succeeded but {result}"
        return LoopStep(
            {**recorded, "trainPhase": FAILED},
            Cond(DRAFT_LEARNING, False, TRAINING_FAILED, message),
            event=(TRAINING_FAILED, message, True),
        )
    fields = {
        **recorded,
        "trainPhase": SUCCEEDED,
        "acceptanceLength": _acceptance(result),
        "decision": PROMOTED if result.better else NOT_BETTER,
        "decidedAt": view.now,
    }
    if result.better:
        fields["head"], fields["trainedFor"] = view.head, recorded.get("roundBasis")
        message = f"round {number}: {_old_new(result)}: the new head serves as the draft ({view.head})"
        return LoopStep(fields, Cond(DRAFT_LEARNING, True, PROMOTED, message), event=(PROMOTED, message, False))
    why = f": {result.reason}" if result.reason else ""
    message = f"round {number}: {_old_new(result)}, not better by the margin{why}; the running draft serves on"
    return LoopStep(fields, Cond(DRAFT_LEARNING, False, NOT_BETTER, message), event=(NOT_BETTER, message, False))
