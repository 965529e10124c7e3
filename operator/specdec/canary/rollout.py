"""Where a deployment's canary stands, from its spec and status.canary. Pure: the controller acts on it.

status.canary.current.speculation records the speculation block the main runtime serves. With
spec.rollout.canary.enabled, a spec whose block differs from it runs that block as a canary beside the main
runtime (which keeps serving the recorded block), until specdec.canary.decision decides: Promoted records the
spec's block (the main runtime rolls to it), Rejected keeps the recorded one and removes the canary. The canary
tests one generation of the spec under one value of the specdec.io/canary-retry annotation: a new generation or a
new value starts it again. A first deployment, or one whose canary is off, serves its spec as written."""

from __future__ import annotations

import dataclasses
from typing import Any

from specdec import conditions
from specdec.api.canary import ANNOTATION_CANARY_RETRY, CanarySpec
from specdec.canary.decision import INCONCLUSIVE, PROMOTED, REJECTED, CanaryPolicy, CanaryState, Decision

IN_PROGRESS = "InProgress"
CANARY = "Canary"  # the condition's type
# status.canary's keys a new test starts without: the last test's arms, window and decision.
PREVIOUS_TEST_ONLY = ("arms", "windowSeconds", "decision")


def policy_of(spec: CanarySpec) -> CanaryPolicy:
    return CanaryPolicy(
        min_effect=spec.min_effect,
        false_promotion=spec.false_promotion,
        missed_promotion=spec.missed_promotion,
        request_budget=spec.request_budget,
        on_inconclusive=spec.on_inconclusive,
        not_serving_seconds=spec.not_serving_seconds,
    )


def spec_block(sd: dict[str, Any]) -> dict[str, Any]:
    return dict((sd.get("spec") or {}).get("speculation") or {})


def retry_of(sd: dict[str, Any]) -> str:
    return (sd["metadata"].get("annotations") or {}).get(ANNOTATION_CANARY_RETRY, "")


@dataclasses.dataclass(frozen=True)
class Stage:
    """What to serve: `served` is the block the main runtime runs (the spec's own when equal); `canary` whether the
    spec's block runs as a canary beside it; `status` the status.canary to write (None: no canary policy)."""

    served: dict[str, Any]
    canary: bool
    status: dict[str, Any] | None

    @property
    def state(self) -> str | None:
        return (self.status or {}).get("state")

    @property
    def promoted(self) -> bool:
        """Decided, and the canary's draft replaces the current one (Promoted, or Inconclusive by the policy)."""
        status = self.status or {}
        return status.get("state") not in (None, IN_PROGRESS) and bool((status.get("decision") or {}).get("promote"))


def stage(sd: dict[str, Any], spec: CanarySpec, now: str) -> Stage:
    """Where the canary stands before this reconcile's decision (see apply_decision)."""
    block = spec_block(sd)
    if not spec.enabled:
        return Stage(block, False, None)
    status = dict((sd.get("status") or {}).get("canary") or {})
    served = (status.get("current") or {}).get("speculation")
    if served is None or served == block:  # a first deployment, or nothing to test: serve the spec
        return Stage(block, False, {**status, "current": {"speculation": block}})
    same_test = status.get("generation") == sd["metadata"].get("generation") and status.get("retry") == retry_of(sd)
    if same_test and status.get("state") != IN_PROGRESS:  # decided, not promoted: the recorded block serves
        return Stage(served, False, status)
    if not same_test:
        status = {
            "current": {"speculation": served},
            "state": IN_PROGRESS,
            "generation": sd["metadata"].get("generation"),
            "retry": retry_of(sd),
            "startedAt": now,
            "test": recorded_test(CanaryState()),
            # The status is merge-patched: a key left out would keep the previous test's value.
            **dict.fromkeys(PREVIOUS_TEST_ONLY),
        }
    return Stage(served, True, status)


def resumed_state(status: dict[str, Any] | None) -> CanaryState:
    """The test's state as status.canary.test recorded it (a restarted operator resumes from there)."""
    test = (status or {}).get("test") or {}
    return CanaryState(
        windows=int(test.get("windows", 0)),
        pairs=int(test.get("pairs", 0)),
        sum_d=float(test.get("sumD", test.get("sum_d", 0.0))),
        sum_d2=float(test.get("sumD2", test.get("sum_d2", 0.0))),
        current_requests=float(test.get("currentRequests", test.get("current_requests", 0.0))),
        canary_requests=float(test.get("canaryRequests", test.get("canary_requests", 0.0))),
    )


def recorded_test(state: CanaryState) -> dict[str, Any]:
    return {
        "windows": state.windows,
        "pairs": state.pairs,
        "sumD": state.sum_d,
        "sumD2": state.sum_d2,
        "currentRequests": state.current_requests,
        "canaryRequests": state.canary_requests,
    }


def apply_decision(sd: dict[str, Any], current: Stage, decision: Decision, now: str) -> Stage:
    """The stage once the running canary is decided: promoted, the spec's block serves; else the recorded one."""
    status = dict(current.status or {})
    status["state"] = REJECTED if decision.outcome == REJECTED else decision.outcome
    status["decision"] = {
        "outcome": decision.outcome,
        "reason": decision.reason,
        "message": decision.message,
        "promote": decision.promote,
        "at": now,
    }
    if decision.promote:
        status["current"] = {"speculation": spec_block(sd)}
        return Stage(spec_block(sd), False, status)
    return Stage(current.served, False, status)


def condition(status: dict[str, Any] | None) -> conditions.Cond | None:
    """The Canary condition: Unknown while in progress, True once promoted, False once not; none without a canary."""
    state = (status or {}).get("state")
    if state is None:
        return None
    decision = status.get("decision") or {} if status else {}
    if state == IN_PROGRESS:
        return conditions.Cond(
            CANARY, None, IN_PROGRESS, "the spec's speculation serves as a canary beside the current"
        )
    return conditions.Cond(CANARY, bool(decision.get("promote")), state, decision.get("message", ""))


def event(before: dict[str, Any] | None, after: dict[str, Any] | None) -> tuple[str, str, bool] | None:
    """The Event a status.canary change calls for: (reason, message, warning), or None."""
    if not after or not after.get("state"):
        return None
    was = before or {}
    started = after["state"] == IN_PROGRESS and (
        was.get("state") != IN_PROGRESS
        or (was.get("generation"), was.get("retry")) != (after.get("generation"), after.get("retry"))
    )
    if started:
        return "CanaryStarted", f"the speculation of generation {after.get('generation')} serves as a canary", False
    if after["state"] != IN_PROGRESS and was.get("state") == IN_PROGRESS:
        decision = after.get("decision") or {}
        reason = {PROMOTED: "CanaryPromoted", REJECTED: "CanaryRejected", INCONCLUSIVE: "CanaryInconclusive"}
        return reason[after["state"]], decision.get("message", ""), not decision.get("promote")
    return None


@dataclasses.dataclass(frozen=True)
class Reading:
    """What the monitor read of a running canary (specdec.feedback.canary_watch), for one test (generation, retry)."""

    generation: int | None
    retry: str
    state: CanaryState
    arms: dict[str, dict[str, Any]]  # "current" and "canary": status.canary.arms
    window_seconds: float
    decision: Decision | None


def with_reading(current: Stage, reading: Reading | None) -> Stage:
    """The running canary's status with what the monitor read of its test (a reading of another test is stale)."""
    status = current.status or {}
    if (
        not current.canary
        or reading is None
        or (reading.generation, reading.retry)
        != (
            status.get("generation"),
            status.get("retry"),
        )
    ):
        return current
    updated = {
        **status,
        "test": recorded_test(reading.state),
        "arms": reading.arms,
        "windowSeconds": reading.window_seconds,
    }
    return dataclasses.replace(current, status=updated)
