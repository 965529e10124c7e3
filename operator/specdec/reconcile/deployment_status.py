"""A deployment's status write: what changed is written (progress alone paced), an Event for what a person acts on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from specdec import conditions
from specdec.api.drafter import enabled_learning
from specdec.builders.serving import endpoint, selector_labels
from specdec.canary import rollout
from specdec.kube.client import Kube
from specdec.modes import save_state
from specdec.plan import Plan, Problem
from specdec.reconcile.bookkeeping.pacing import WritePacing, status_changed
from specdec.status.capture import CAPTURE_SPACE
from specdec.status.drafter import COUNT_FIELDS
from specdec.status.speculation import ACTIVE_NO_TRAFFIC, NO_TRAFFIC, SPECULATION_ACTIVE, SPECULATION_EFFECTIVE

FAILED_PHASES = ("Failed", "Invalid")
PROGRESS_FIELDS = ("replicas", "readyReplicas", "conditions")


def worth_an_event(old_ready: dict[str, Any], ready: conditions.Cond, old_phase: str | None, phase: str) -> bool:
    """A deployment's Events: it became Ready, stopped being Ready, or failed (a Warning per new cause).
    Progress between (fetching, building, rolling out) is in status and in the EngineBuilds' and
    ModelCaches' own Events: an Event per step would be a write per deployment per step of a shared build."""
    if phase in FAILED_PHASES:
        return old_phase != phase or old_ready.get("reason") != ready.reason
    return (old_ready.get("status") == "True") != bool(ready.status)


def progress_only(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether `desired` differs from `current` in a rollout's progress only: counts and condition messages."""

    def state(status: dict[str, Any]) -> tuple:
        return (
            {k: status.get(k) for k in desired if k not in PROGRESS_FIELDS},
            {(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []},
        )

    return state(current) == state(desired)


class DeploymentStatusWriter:
    """`published(namespace, name, generation)`: what the speculation monitor measured for that generation
    (.status, .condition), or None; `captured(...)` the same for a saveState capture
    (specdec.feedback.capture_watch), `drafted(...)` for spec.drafter.learning's samples (.counts,
    specdec.feedback.drafter_watch)."""

    def __init__(
        self,
        kube: Kube,
        pacing: WritePacing,
        published: Callable[[str, str, Any], Any],
        captured: Callable[[str, str, Any], Any] = lambda namespace, name, generation: None,
        drafted: Callable[[str, str, Any], Any] = lambda namespace, name, generation: None,
    ):
        self.kube = kube
        self.pacing = pacing
        self.published = published
        self.captured = captured
        self.drafted = drafted

    def write(
        self,
        sd: dict[str, Any],
        result: Plan | Problem,
        phase: str,
        conds: list[conditions.Cond],
        deployment: dict[str, Any] | None,
        in_use: list[str],
        canary: dict[str, Any] | None = None,
        learning: dict[str, Any] | None = None,
    ) -> None:
        """`deployment` may still run the previous engines: its pods are what serves now. `canary`: status.canary
        (specdec.canary.rollout); a change of its state is an Event. `learning`: status.drafter's fields of the
        learning loop (specdec.reconcile.drafter_learning), beside the samples' counts."""
        meta = sd["metadata"]
        status = sd.get("status") or {}
        generation = meta.get("generation")
        desired: dict[str, Any] = {
            "observedGeneration": generation,
            "phase": phase,
            "engineBuilds": in_use or None,
        }
        if isinstance(result, Plan):
            dstatus = (deployment or {}).get("status") or {}
            desired.update(
                replicas=dstatus.get("replicas", 0),
                readyReplicas=dstatus.get("readyReplicas", 0),
                selector=",".join(f"{k}={v}" for k, v in selector_labels(result).items()),
                endpoint=endpoint(result),
                speculation=None,
                rearm=None,
                capture=None,
                canary=canary,
                drafter=None,
            )
            if result.mode.mode.speculates:
                desired["speculation"], effective, active, desired["rearm"] = self._speculation_status(sd, status)
                conds = [*conds, effective, active]
            if result.mode.mode is save_state.MODE:
                desired["capture"], space = self._capture_status(sd, status)
                conds = [*conds, space] if space else conds
            if enabled_learning(result.spec.drafter) is not None:
                desired["drafter"] = {**self.drafter_counts(sd), **(learning or {})} or None
        desired["conditions"] = conditions.merge(status.get("conditions"), conds, generation, conditions.now())
        if not status_changed(status, desired):
            return
        key = ("SpeculativeDeployment", meta["namespace"], meta["name"])
        if self.pacing.later(key, progress_only(status, desired)):
            return
        try:
            self.kube.patch(
                "SpeculativeDeployment",
                meta["namespace"],
                meta["name"],
                {"status": replacing_drafter(status, desired)},
                subresource="status",
            )
            self.pacing.written(key)
        except ApiException as error:
            if error.status == 404:  # deleted meanwhile (or its namespace is going): nothing to tell
                return
            raise
        said = rollout.event(status.get("canary"), desired.get("canary"))
        if said:
            self.kube.event(sd, said[0], said[1], warning=said[2])
        ready = next(c for c in conds if c.type == "Ready")
        old_ready: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if worth_an_event(old_ready, ready, status.get("phase"), phase):
            self.kube.event(sd, ready.reason, ready.message or phase, warning=phase in FAILED_PHASES)

    def _speculation_status(
        self, sd: dict[str, Any], status: dict[str, Any]
    ) -> tuple[dict | None, conditions.Cond, conditions.Cond, dict | None]:
        """status.speculation, SpeculationEffective, SpeculationActive and status.rearm: what the monitor
        published for this generation; else what status says (a new leader has not measured yet); else Unknown."""
        meta = sd["metadata"]
        published = self.published(meta["namespace"], meta["name"], meta.get("generation"))
        rearm = (published.rearm if published else None) or status.get("rearm")
        if published:
            return published.status, published.condition, published.active, rearm
        said = {c.get("type"): c for c in status.get("conditions") or []}
        active = (
            conditions.Cond.from_dict(said[SPECULATION_ACTIVE]) if SPECULATION_ACTIVE in said else ACTIVE_NO_TRAFFIC
        )
        if SPECULATION_EFFECTIVE in said and status.get("speculation"):
            return status["speculation"], conditions.Cond.from_dict(said[SPECULATION_EFFECTIVE]), active, rearm
        return None, NO_TRAFFIC, active, rearm

    def drafter_counts(self, sd: dict[str, Any]) -> dict[str, Any]:
        """status.drafter's counts: what the monitor published for this generation; else what status says (a new
        leader has not scraped yet)."""
        meta = sd["metadata"]
        drafted = self.drafted(meta["namespace"], meta["name"], meta.get("generation"))
        if drafted:
            return dict(drafted.counts)
        said = (sd.get("status") or {}).get("drafter") or {}
        return {k: said[k] for k in COUNT_FIELDS if said.get(k) is not None}

    def _capture_status(self, sd: dict[str, Any], status: dict[str, Any]) -> tuple[dict | None, conditions.Cond | None]:
        """status.capture and CaptureSpace: what the monitor published for this generation; else what status says
        (a new leader has not scraped yet); else nothing (not capturing, or nothing counted yet)."""
        meta = sd["metadata"]
        captured = self.captured(meta["namespace"], meta["name"], meta.get("generation"))
        if captured:
            return captured.status, captured.condition
        said = {c.get("type"): c for c in status.get("conditions") or []}
        if status.get("capture") and CAPTURE_SPACE in said:
            return status["capture"], conditions.Cond.from_dict(said[CAPTURE_SPACE])
        return None, None


def replacing_drafter(status: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """The status patch with status.drafter replaced, not merged: a merge patch keeps the fields the new one lacks
    (a finished round's decision would outlive it), so those are patched to null."""
    drafter = desired.get("drafter")
    if not isinstance(drafter, dict):
        return desired
    gone = {k: None for k in (status.get("drafter") or {}) if k not in drafter}
    return {**desired, "drafter": {**gone, **drafter}}
