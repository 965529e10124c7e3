"""The controller of the shared objects, EngineBuilds and ModelCaches: one of ours, its Job, and its status.

Gather (the object, its Job and pods) -> evaluate (a BuildState) -> write the status only if it changed,
and tell its users only if what they read changed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec import conditions, metrics
from specdec.kube.client import Kube
from specdec.reconcile.bookkeeping.failures import Backoff
from specdec.reconcile.bookkeeping.locks import Locks
from specdec.reconcile.bookkeeping.pacing import WritePacing, status_changed
from specdec.reconcile.build_and_cache_jobs import POD_CREATION_GRACE_SECONDS, SHARED, SharedJobs
from specdec.reconcile.errors import log_failure
from specdec.reconcile.fanout import UserFanout
from specdec.reconcile.ownership import ours
from specdec.status.pods import STUCK_REASONS
from specdec.status.shared import BuildState, build_state_from_status, fetched_status, users_view

REFUSED_BUILD_REASONS = ("JobRejected", "NameConflict")  # the build (or fetch) Job could not be had


class SharedController:
    def __init__(
        self,
        kube: Kube,
        jobs: SharedJobs,
        fanout: UserFanout,
        pacing: WritePacing,
        backoff: Backoff,
        locks: Locks,
        enqueue: Callable[..., None],
        enqueue_after: Callable[..., None],
        active: Callable[[], bool],
    ):
        self.kube = kube
        self.jobs = jobs
        self.fanout = fanout
        self.pacing = pacing
        self.backoff = backoff
        self.locks = locks
        self.enqueue = enqueue
        self.enqueue_after = enqueue_after
        self.active = active

    def reconcile(self, kind: str, namespace: str, name: str) -> BuildState | None:
        key = (kind, namespace, name)
        if not self.active():
            return None
        with self.locks(*key):
            obj = self.kube.get(kind, namespace, name)
            if obj is None or obj["metadata"].get("deletionTimestamp") or not ours(obj):
                return None
            try:
                with metrics.reconciling(kind):
                    state, look_again = self._reconcile(kind, obj)
            except Exception as error:  # noqa: BLE001 — whatever it is, log it and retry later
                log_failure(kind, namespace, name, error)
                self.backoff.retry_later(key)
                return None
            if state.reason in REFUSED_BUILD_REASONS:  # may clear up (a quota, a foreign Job): back off
                self.backoff.retry_later(key)
                return state
            self.backoff.settled(key)
            if look_again:
                self.enqueue_after(POD_CREATION_GRACE_SECONDS, *key)
            return state

    def seen(self, kind: str, obj: dict[str, Any]) -> None:
        """A watch event: reconcile it, and wake its users if what they read changed."""
        meta = obj["metadata"]
        self.enqueue(kind, meta["namespace"], meta["name"])
        self.fanout.tell(obj)

    def gone(self, kind: str, namespace: str, name: str) -> None:
        self.fanout.forget(namespace, name)
        self.pacing.forget((kind, namespace, name))

    def _reconcile(self, kind: str, obj: dict[str, Any]) -> tuple[BuildState, bool]:
        """(state, look again later): a Job without pods is watched for FailedCreate Events."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        shared = SHARED[kind]
        state, look_again, pods = self.jobs.observe(kind, obj)
        status = obj.get("status") or {}
        done = state.phase == shared.job_kind.done[0]
        ready = conditions.Cond("Ready", done, state.reason, state.message)
        desired: dict[str, Any] = {
            "observedGeneration": meta.get("generation"),
            "phase": state.phase,
            "jobName": shared.job_name(name),
            "attempts": state.attempts,
            "message": state.message,
            "conditions": conditions.merge(status.get("conditions"), [ready], meta.get("generation"), conditions.now()),
        }
        if kind == "EngineBuild":
            desired["failedStep"] = state.failed_step
        else:  # the size and the model's facts, once a fetch reported them (kept after its pods are gone)
            desired.update(
                fetched_status(pods, status, obj["spec"]["model"]) if done else {"sizeBytes": None, "facts": None}
            )
        if status_changed(status, desired):
            key = (kind, namespace, name)  # a step of its Job, an attempt: nothing its users read
            if self.pacing.later(key, users_view(state) == users_view(build_state_from_status(obj))):
                return state, look_again
            self.fanout.tell(self.kube.patch(kind, namespace, name, {"status": desired}, subresource="status"))
            self.pacing.written(key)
            old_ready: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {}
            )
            if status.get("phase") != state.phase or old_ready.get("reason") != state.reason:
                self.kube.event(obj, state.reason, state.message, warning=state.failed or state.reason in STUCK_REASONS)
        return state, look_again
