"""Who hears of a shared object's change: its users (deployments), and the EngineBuilds reading a ModelCache.

Deployments read an EngineBuild's (or ModelCache's) spec, our label and its status (as a BuildState, and a
ModelCache's facts: admission's): they are woken only when one of those changed, not on every Job or pod
event of a build they share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec.api import shared_objects
from specdec.kube.client import Kube
from specdec.plan import Plan, recipe_checkpoints
from specdec.reconcile.bookkeeping.users import Users
from specdec.reconcile.ownership import ours
from specdec.reconcile.plans import PlanMemo
from specdec.status.deployment import engines_built
from specdec.status.shared import build_state_from_status, users_view


class UserFanout:
    def __init__(self, kube: Kube, users: Users, plans: PlanMemo, enqueue: Callable[..., None]):
        self.kube = kube
        self.users = users
        self.plans = plans
        self.enqueue = enqueue

    def tell(self, shared: dict[str, Any]) -> None:
        """Wake the users of `shared` if what they read of it changed (first those with something to create)."""
        meta = shared["metadata"]
        namespace = meta["namespace"]
        state = build_state_from_status(shared)
        heard = (users_view(state), ours(shared), shared.get("spec"), (shared.get("status") or {}).get("facts"))
        users = self.users.to_tell(namespace, meta["name"], heard)
        if users is None:
            return
        for user in users:
            self.enqueue(
                "SpeculativeDeployment",
                namespace,
                user,
                urgent=state.done and self._waits_on(namespace, user, shared),
            )
        if shared.get("kind") == "ModelCache":
            self._wake_builds_reading(shared)

    def forget(self, namespace: str, shared: str) -> None:
        """A shared object deleted: its users hear of one made again."""
        self.users.forget_shared(namespace, shared)

    def _waits_on(self, namespace: str, user: str, shared: dict[str, Any]) -> bool:
        """Whether a deployment has something to create now that `shared` is done: its runtime once every
        engine of its plan is built (a fleet's shared draft engine, done, tells every user, most of them
        still waiting for their own target's); after a ModelCache only its EngineBuilds (models admission
        had no facts of) or a runtime reading checkpoints (backend pytorch), since an EngineBuild starts its
        own Job. Other users only report, after the deployments with work to do. Judged on the plan of the
        spec as written (a canary's or a learned head's engines are its arm's)."""
        result = self.plans.kept(namespace, user)
        if not isinstance(result, Plan):
            return True  # not planned yet: its reconcile finds out
        if shared.get("kind") == "EngineBuild":
            return self._engines_built(namespace, result, shared)
        return bool(result.facts_awaited or result.runtime_inputs)

    def _engines_built(self, namespace: str, result: Plan, done: dict[str, Any]) -> bool:
        """Every engine of the plan built, `done` (an EngineBuild just done) among them as told, the others as
        the watch cache has them."""
        told = done["metadata"]["name"]
        builds = {
            e.name: done if e.name == told else self.kube.get("EngineBuild", namespace, e.name) for e in result.engines
        }
        return engines_built(result, {name: build_state_from_status(b) for name, b in builds.items() if b is not None})

    def _wake_builds_reading(self, model_cache: dict[str, Any]) -> None:
        """A ModelCache's state changed: the EngineBuilds that read its checkpoint may start (or not)."""
        meta, spec = model_cache["metadata"], model_cache.get("spec") or {}
        checkpoint = (spec.get("model"), spec.get("revision"))
        for eb in self.kube.list("EngineBuild", meta["namespace"]):
            build = shared_objects.EngineBuildSpec.model_validate(eb["spec"])
            if build.cache_claim == spec.get("cacheClaim") and checkpoint in recipe_checkpoints(build.recipe):
                self.enqueue("EngineBuild", meta["namespace"], eb["metadata"]["name"], urgent=True)
