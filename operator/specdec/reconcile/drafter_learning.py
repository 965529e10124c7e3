"""spec.drafter.learning's loop for one deployment: observe its round's objects, decide the next step
(specdec.status.drafter_loop, pure), apply it (the SaveState server, the replay Job, the train Job, each owned by
the deployment and written only if it controls it), and hand status.drafter's loop fields and the condition
DraftLearning to the status write. The runtime Deployment and its pods are never touched here: a promoted head
reaches them through the plan (specdec.builders.drafter_jobs.learned_speculation)."""

from __future__ import annotations

from typing import Any

from specdec import conditions
from specdec.admission.checks import Observed
from specdec.api.drafter import LearningSpec, enabled_learning
from specdec.builders import drafter_jobs
from specdec.builders.serving import runtime_config_map_name
from specdec.kube.client import Kube
from specdec.plan import Plan, Problem, plan
from specdec.reconcile.ownership import Children, controlled_by
from specdec.reconcile.plans import PlanMemo
from specdec.settings import Settings
from specdec.status.drafter import class_samples
from specdec.status.drafter_loop import (
    DRAFT_LEARNING,
    FAILED,
    TRAINING_FAILED,
    JobView,
    LoopStep,
    LoopView,
    job_phase,
    next_step,
)
from specdec.status.pods import by_age, container_statuses

Cond = conditions.Cond


class DrafterLearning:
    def __init__(self, kube: Kube, settings: Settings, plans: PlanMemo, children: Children):
        self.kube = kube
        self.settings = settings
        self.plans = plans
        self.children = children

    def reconcile(self, sd: dict[str, Any], served: Plan, counts: dict[str, Any]) -> tuple[dict[str, Any], Cond] | None:
        """status.drafter's loop fields and the condition DraftLearning; None (and the loop's objects removed)
        when the deployment does not learn. `served`: the plan the runtime runs (its draft is the baseline)."""
        learning = enabled_learning(served.spec.drafter)
        if learning is None:
            self.remove(sd, served.namespace, jobs=True)
            return None
        meta = sd["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
        recorded = (sd.get("status") or {}).get("drafter") or {}
        number = int(recorded.get("round") or 0)
        view = LoopView(
            samples=class_samples(counts, learning.traffic_class),
            min_samples=learning.min_samples,
            recorded=recorded,
            replay_server_ready=self._server_ready(namespace, name, uid),
            replay=self._job(namespace, drafter_jobs.replay_job_name(name), uid),
            train=self._job(namespace, drafter_jobs.train_job_name(name), uid),
            replay_job=drafter_jobs.replay_job_name(name),
            train_job=drafter_jobs.train_job_name(name),
            head=drafter_jobs.head_uri(learning, name, served.cache.claim_name, number),
            basis=drafter_jobs.trained_for(sd.get("spec") or {}),
            now=conditions.now(),
        )
        step = next_step(view)
        round_number = int(step.fields.get("round") or 0)
        if step.replay_server:
            problem = self._apply_server(sd, served, learning, round_number)
            if problem is not None:
                step = _server_refused(step, problem)
        if not step.replay_server:
            self.remove(sd, namespace, jobs=False)
        if step.replay_job:
            served_round = drafter_jobs.head_round(recorded.get("head"), name)
            replay = drafter_jobs.replay_job(served, learning, uid, self.settings, round_number, served_round)
            self._apply_job(sd, replay)
        if step.train_job:
            self._apply_job(sd, drafter_jobs.train_job(served, learning, uid, self.settings, round_number))
        if step.event is not None:
            reason, message, warning = step.event
            self.kube.event(sd, reason, message, warning=warning)
        return step.fields, step.condition

    # --- observe ------------------------------------------------------------------------------------------------

    def _job(self, namespace: str, name: str, uid: str) -> JobView | None:
        job = self.kube.get("Job", namespace, name)
        if job is None or not controlled_by(job, uid) or job["metadata"].get("deletionTimestamp"):
            return None
        annotations = job["metadata"].get("annotations") or {}
        number = annotations.get(drafter_jobs.ANNOTATION_ROUND, "")
        return JobView(int(number) if number.isdigit() else 0, job_phase(job), self._message(namespace, name))

    def _message(self, namespace: str, job: str) -> str:
        """The termination message of the Job's pod that ended last (the train Job's result)."""
        for pod in reversed(by_age(self.kube.list("Pod", namespace, f"job-name={job}"))):
            for status in container_statuses(pod):
                terminated = (status.get("state") or {}).get("terminated") or {}
                if terminated.get("exitCode") == 0 and terminated.get("message"):
                    return str(terminated["message"])
        return ""

    def _server_ready(self, namespace: str, name: str, uid: str) -> bool:
        server = self.kube.get("Deployment", namespace, drafter_jobs.replay_server_name(name))
        if server is None or not controlled_by(server, uid):
            return False
        status = server.get("status") or {}
        return (
            status.get("observedGeneration", 0) >= server["metadata"].get("generation", 0)
            and status.get("readyReplicas", 0) >= 1
            and status.get("updatedReplicas", 0) >= 1
        )

    # --- apply --------------------------------------------------------------------------------------------------

    def _apply_server(self, sd: dict[str, Any], served: Plan, learning: LearningSpec, number: int) -> str | None:
        """The round's SaveState server, or why it cannot be planned."""
        meta = sd["metadata"]
        server = plan(
            {
                "metadata": {**meta, "name": drafter_jobs.replay_server_name(meta["name"])},
                "spec": drafter_jobs.replay_spec(
                    sd.get("spec") or {}, learning, meta["name"], served.cache.claim_name, number
                ),
            },
            self.settings,
            Observed(self.plans.fetched_facts(meta["namespace"]), self.plans.gpu_nodes.snapshot()),
        )
        if isinstance(server, Problem):
            return f"{server.reason}: {server.message}"
        for obj in drafter_jobs.replay_server(server, meta["name"], meta["uid"], self.settings):
            cached = self.children.get(obj["kind"], meta["namespace"], obj["metadata"]["name"], meta["uid"])
            self.children.write(obj, cached, meta["uid"])
        return None

    def _apply_job(self, sd: dict[str, Any], job: dict[str, Any]) -> None:
        """Create the round's Job; one of another round goes first (a Job's pod template cannot change)."""
        meta = job["metadata"]
        uid = sd["metadata"]["uid"]
        existing = self.children.get("Job", meta["namespace"], meta["name"], uid)
        if existing is not None:
            if existing["metadata"].get("deletionTimestamp"):
                return  # going: created once it is gone (its deletion wakes the deployment)
            if (existing["metadata"].get("annotations") or {}).get(drafter_jobs.ANNOTATION_ROUND) == meta[
                "annotations"
            ][drafter_jobs.ANNOTATION_ROUND]:
                return
            self.kube.delete("Job", meta["namespace"], meta["name"])
            return
        self.children.write(job, None, uid)

    def remove(self, sd: dict[str, Any], namespace: str, jobs: bool) -> None:
        """Delete the SaveState server (and, with `jobs`, the loop's Jobs) where this deployment controls them."""
        name, uid = sd["metadata"]["name"], sd["metadata"]["uid"]
        server = drafter_jobs.replay_server_name(name)
        objects = [("Deployment", server), ("ConfigMap", runtime_config_map_name(server)), ("Service", server)]
        if jobs:
            objects += [("Job", drafter_jobs.replay_job_name(name)), ("Job", drafter_jobs.train_job_name(name))]
        for kind, object_name in objects:
            found = self.kube.get(kind, namespace, object_name)
            if found is not None and controlled_by(found, uid) and not found["metadata"].get("deletionTimestamp"):
                self.kube.delete(kind, namespace, object_name)


def _server_refused(step: LoopStep, problem: str) -> LoopStep:
    number = step.fields.get("round")
    message = f"round {number}: the SaveState server for the replay cannot run: {problem}"
    return LoopStep(
        {**step.fields, "replayPhase": FAILED},
        Cond(DRAFT_LEARNING, False, TRAINING_FAILED, message),
        event=(TRAINING_FAILED, message, True),
    )
