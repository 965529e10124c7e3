"""An EngineBuild's or ModelCache's Job: created once it may start, then read for the object's state.

An EngineBuild's Job holds GPUs: it is created only once every checkpoint it reads is Fetched (a ModelCache
fetches it on a CPU node)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from specdec.api import shared_objects
from specdec.builders import common
from specdec.builders import engine as engine_builders
from specdec.builders import model_cache as cache_builders
from specdec.kube.client import Kube
from specdec.kube.errors import api_error_message, permanent
from specdec.plan import recipe_checkpoints
from specdec.reconcile.errors import NameConflict
from specdec.reconcile.ownership import controlled_by
from specdec.reconcile.plans import fetched
from specdec.settings import Settings
from specdec.status.shared import BUILD, FETCH, WAITING_FOR_CHECKPOINTS, BuildState, JobKind, evaluate_build

# A Job without pods this long may have pods the API server refuses: look at its FailedCreate Events.
POD_CREATION_GRACE_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class SharedKind:
    """A shared, content-addressed kind of ours and the Job that does its work."""

    build_job: Callable[[dict[str, Any], Settings], dict[str, Any]]
    job_name: Callable[[str], str]
    pod_label: str  # on its Job's pods: which object they work for
    job_kind: JobKind
    started: str  # Event reason when its Job is created


SHARED = {
    "EngineBuild": SharedKind(
        engine_builders.build_job, engine_builders.job_name, common.LABEL_ENGINE_BUILD, BUILD, "BuildStarted"
    ),
    "ModelCache": SharedKind(
        cache_builders.build_fetch_job, cache_builders.job_name, common.LABEL_MODEL_CACHE, FETCH, "FetchStarted"
    ),
}


def _age_seconds(obj: dict[str, Any]) -> float:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return 0.0
    then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return (datetime.datetime.now(datetime.UTC) - then).total_seconds()


class SharedJobs:
    def __init__(self, kube: Kube, settings: Settings):
        self.kube = kube
        self.settings = settings

    def observe(self, kind: str, obj: dict[str, Any]) -> tuple[BuildState, bool, list[dict[str, Any]]]:
        """(state, look again later, the Job's pods); the Job created if it may start. A Job without pods
        is looked at again for FailedCreate Events."""
        namespace, name, uid = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["metadata"]["uid"]
        shared = SHARED[kind]
        job_name = shared.job_name(name)
        job = self.kube.get("Job", namespace, job_name)
        if job is None:
            awaited = self.checkpoints_awaited(obj) if kind == "EngineBuild" else []
            if awaited:  # its Job holds GPUs: none while a download runs
                return (
                    BuildState(
                        "Pending",
                        WAITING_FOR_CHECKPOINTS,
                        f"the build Job starts once "
                        f"{', '.join(awaited)} is in the cache (a ModelCache fetches it on a CPU "
                        "node)",
                    ),
                    False,
                    [],
                )
            try:
                job, created = self.kube.create(shared.build_job(obj, self.settings))
            except ApiException as error:
                if not permanent(error):
                    raise
                return (
                    BuildState(
                        "Failed",
                        "JobRejected",
                        f"the API server refused the {shared.job_kind.noun} Job {job_name}: {api_error_message(error)}",
                    ),
                    False,
                    [],
                )
            if created:
                self.kube.event(obj, shared.started, f"created Job {job_name}")
        if not controlled_by(job, uid):
            return (
                BuildState(
                    "Failed",
                    "NameConflict",
                    str(NameConflict("Job", job_name, f"is not controlled by this {kind}", kind)),
                ),
                False,
                [],
            )
        pods = self.kube.list("Pod", namespace, f"{shared.pod_label}={name}")
        state = evaluate_build(job, pods, kind=shared.job_kind)
        if state.reason != "JobPending":
            return state, False, pods
        if _age_seconds(job) >= POD_CREATION_GRACE_SECONDS:
            refused = self.kube.list_live(
                "Event", namespace, field_selector=(f"involvedObject.uid={job['metadata']['uid']},reason=FailedCreate")
            )
            if refused:
                latest = max(refused, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
                state = evaluate_build(job, pods, latest.get("message") or "FailedCreate", kind=shared.job_kind)
        return state, True, pods

    def checkpoints_awaited(self, eb: dict[str, Any]) -> list[str]:
        """The checkpoints this EngineBuild reads that are not in the cache yet, as uri@revision."""
        spec = shared_objects.EngineBuildSpec.model_validate(eb["spec"])
        cached = self._fetched_checkpoints(eb["metadata"]["namespace"], spec.cache_claim)
        return [f"{uri}@{rev}" for uri, rev in recipe_checkpoints(spec.recipe) if (uri, rev) not in cached]

    def _fetched_checkpoints(self, namespace: str, claim: str) -> set[tuple[str, str]]:
        """(uri, revision) of the checkpoints in cache claim `claim`: ModelCaches of one checkpoint with
        different fetch placement write the same directory, so any one of them Fetched will do."""
        return {
            (mc["spec"]["model"], mc["spec"]["revision"])
            for mc in self.kube.list("ModelCache", namespace)
            if fetched(mc) and mc["spec"].get("cacheClaim") == claim
        }
