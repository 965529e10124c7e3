"""The deployment controller: plan -> inputs -> runtime -> status, for one SpeculativeDeployment.

Level-triggered: it re-reads what it needs from the watch cache and the outcome depends only on what it
observed. It never raises: whatever goes wrong is written to the status (reason and message) and the
deployment is reconciled again after a back-off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec import conditions, metrics
from specdec.builders import common
from specdec.builders.drafter_jobs import learned_speculation
from specdec.builders.multinode import is_multi_node
from specdec.builders.serving import endpoint, selector_labels
from specdec.canary import rollout
from specdec.kube.client import Kube
from specdec.plan import Plan, Problem
from specdec.reconcile.bookkeeping.failures import Backoff, ServiceFailures
from specdec.reconcile.bookkeeping.locks import Locks
from specdec.reconcile.deployment_status import DeploymentStatusWriter
from specdec.reconcile.drafter_learning import DrafterLearning
from specdec.reconcile.errors import failure_condition, log_failure
from specdec.reconcile.inputs import DeploymentInputs
from specdec.reconcile.plans import PlanMemo
from specdec.reconcile.runtime_applier import RuntimeApplier
from specdec.status.deployment import DeploymentInput, deployment_conditions, served_this_generation
from specdec.status.shared import BuildState


class DeploymentController:
    """`forget(namespace, name)`: drop what is kept of a deployment that is gone."""

    def __init__(
        self,
        kube: Kube,
        plans: PlanMemo,
        inputs: DeploymentInputs,
        runtime: RuntimeApplier,
        status: DeploymentStatusWriter,
        service_failures: ServiceFailures,
        backoff: Backoff,
        locks: Locks,
        forget: Callable[[str, str], None],
        active: Callable[[], bool],
        canary_reading: Callable[[str, str], rollout.Reading | None] = lambda namespace, name: None,
        learning: DrafterLearning | None = None,
        behind_creates: Callable[[str, str], bool] = lambda namespace, name: False,
    ):
        self.kube = kube
        self.plans = plans
        self.inputs = inputs
        self.runtime = runtime
        self.status = status
        self.service_failures = service_failures
        self.backoff = backoff
        self.locks = locks
        self.forget = forget
        self.active = active
        self.canary_reading = canary_reading  # the monitor's latest reading of a running canary
        self.learning = learning  # spec.drafter.learning's loop
        # Requeue a deployment behind the creates other deployments wait for, if any wait; whether it did.
        self.behind_creates = behind_creates

    def reconcile(self, namespace: str, name: str) -> None:
        key = ("SpeculativeDeployment", namespace, name)
        if not self.active():
            return
        with self.locks(*key):
            sd = self.kube.get("SpeculativeDeployment", namespace, name)
            if sd is None or sd["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)
                return
            try:
                with metrics.reconciling("SpeculativeDeployment"):
                    failed = self._reconcile(sd)
            except Exception as error:  # noqa: BLE001 — the status write itself failed: retry later
                log_failure("SpeculativeDeployment", namespace, name, error)
                failed = True
            if failed:
                self.backoff.retry_later(key)
            else:
                self.backoff.settled(key)

    def _reconcile(self, sd: dict[str, Any]) -> bool:
        """Act on the plan and write the full status; True when something failed (retry later)."""
        meta = sd["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        written = self.plans.plan(sd)  # the spec as written
        learned = learned_speculation(sd) if isinstance(written, Plan) else None
        with_head = self.plans.plan(sd, learned) if learned is not None else None
        sd_served = sd
        if isinstance(with_head, Plan):  # a promoted head serves as the spec's draft (the spec itself is not edited);
            sd_served = {**sd, "spec": {**sd["spec"], "speculation": learned}}  # one admission refuses does not
            written = with_head
        result, canary, stage = self._arms(sd_served, written)
        states: dict[str, BuildState] = {}  # by EngineBuild
        caches: dict[str, BuildState] = {}  # by ModelCache
        deployment = None
        current = service_current = False
        failure = None
        runtime_written = False
        in_use: list[str] = []
        if isinstance(result, Plan):
            try:
                caches, states = self.inputs.ensure(sd, result)
                if canary is not None:
                    canary_caches, canary_states = self.inputs.ensure(sd, canary)
                    caches, states = {**caches, **canary_caches}, {**states, **canary_states}
                deployment, current, service_current, runtime_written = self.runtime.apply(sd, result, states, caches)
                if canary is not None:
                    self.runtime.apply_canary(sd, canary, states, caches)
                elif stage is None or not stage.promoted or (current and rolled_out(deployment)):
                    self.runtime.remove_canary(sd, result)  # a promoted canary serves until the main arm rolled
            except Exception as error:  # noqa: BLE001 — reported in status below, whatever it is
                log_failure("SpeculativeDeployment", namespace, name, error)
                failure = failure_condition(error)
            if runtime_written and failure is None and self.behind_creates(namespace, name):
                # A shared engine's end releases its users at once: each one's status waits for the next
                # pass (nothing to write then but the status), so no Deployment waits behind a status write.
                return False
            deployed = ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(
                common.ANNOTATION_ENGINE_BUILDS, ""
            )
            previous = (sd.get("status") or {}).get("engineBuilds") or [] if failure else []
            in_use = sorted(
                set(result.engine_names)
                | set(canary.engine_names if canary else ())
                | {n for n in deployed.split(",") if n}
                | set(previous)
            )
        pods = []
        if deployment is not None and isinstance(result, Plan):
            # A group's workers too (specdec.status.groups); else the runtime's pods.
            selector = {common.LABEL_INSTANCE: name} if is_multi_node(result) else selector_labels(result)
            pods = self.kube.list("Pod", namespace, ",".join(f"{k}={v}" for k, v in selector.items()))
        failed = failure is not None
        service_failure = self.service_failures.get(namespace, name)
        if not failed and isinstance(result, Plan) and service_failure:  # the Service lane retries it, tells us
            failure = failure_condition(service_failure[1])
        phase, conds = deployment_conditions(
            DeploymentInput(
                result,
                states,
                deployment,
                current,
                endpoint(result) if isinstance(result, Plan) else None,
                failure=failure,
                pods=pods,
                caches=caches,
                service_current=service_current,
                served_before=served_this_generation(sd),
            )
        )
        canary_status = stage.status if stage is not None else None
        canary_condition = rollout.condition(canary_status)
        if canary_condition:
            conds = [*conds, canary_condition]
        loop = None
        if self.learning is not None and isinstance(result, Plan) and failure is None:
            try:
                loop = self.learning.reconcile(sd, result, self.status.drafter_counts(sd))
            except Exception as error:  # noqa: BLE001 — the loop retries after a back-off; the runtime is unaffected
                log_failure("SpeculativeDeployment", namespace, name, error)
                failed = True
        if loop is not None:
            conds = [*conds, loop[1]]
        self.status.write(sd, result, phase, conds, deployment, in_use, canary_status, loop[0] if loop else None)
        return failed

    def _arms(
        self, sd: dict[str, Any], written: Plan | Problem
    ) -> tuple[Plan | Problem, Plan | None, rollout.Stage | None]:
        """(the main runtime's plan, the canary's plan or None, the canary's stage or None without a policy).
        The main runtime serves the speculation status.canary records; the canary the spec as written."""
        if not isinstance(written, Plan):
            return written, None, None
        now = conditions.now()
        stage = rollout.stage(sd, written.spec.rollout.canary, now)
        if stage.status is None:
            return written, None, None
        meta = sd["metadata"]
        reading = self.canary_reading(meta["namespace"], meta["name"])
        stage = rollout.with_reading(stage, reading)
        if stage.canary and reading is not None and reading.decision is not None and stage.status is not None:
            if (reading.generation, reading.retry) == (stage.status.get("generation"), stage.status.get("retry")):
                stage = rollout.apply_decision(sd, stage, reading.decision, now)
        if stage.served == rollout.spec_block(sd):
            return written, None, stage
        return self.plans.plan(sd, stage.served), written if stage.canary else None, stage


def rolled_out(deployment: dict[str, Any] | None) -> bool:
    """Whether a Deployment's rollout is done: every replica updated and ready, as its controller last saw it."""
    if deployment is None:
        return False
    want, status = deployment["spec"].get("replicas", 1), deployment.get("status") or {}
    return (
        status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
        and status.get("updatedReplicas", 0) == want
        and status.get("readyReplicas", 0) >= want
        and status.get("replicas", 0) == want
    )
