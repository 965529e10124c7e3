"""A deployment's inputs: its cache claim, ModelCaches and EngineBuilds, created where missing.

A deployment creates its ModelCaches (hf:// checkpoints fetched into the cache on CPU nodes) and EngineBuilds
at once; an EngineBuild starts its own Job once its checkpoints are fetched (see shared_jobs). One exception
keeps "refused before any GPU Job" true: a deployment with a model whose facts only its fetch can tell (an
hf:// model the catalog does not know, Plan.facts_awaited) creates its EngineBuilds only once admission ran
on the facts of its fetched files: an EngineBuild, once created, would start its GPU Job at the fetch's end."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec.builders.engine import build_engine_build
from specdec.builders.model_cache import build_model_cache
from specdec.builders.serving import build_cache_claim
from specdec.kube.apply import contains
from specdec.kube.client import Kube
from specdec.plan import Plan
from specdec.reconcile.bookkeeping.users import Users
from specdec.reconcile.errors import NameConflict
from specdec.reconcile.ownership import ours
from specdec.status.shared import BuildState, build_state_from_status


class DeploymentInputs:
    """`reconcile_shared(kind, namespace, name)`: reconcile a shared object now, on this worker."""

    def __init__(
        self, kube: Kube, users: Users, reconcile_shared: Callable[[str, str, str], Any], enqueue: Callable[..., None]
    ):
        self.kube = kube
        self.users = users
        self.reconcile_shared = reconcile_shared
        self.enqueue = enqueue

    def ensure(
        self, sd: dict[str, Any], p: Plan, fetch_now: bool = False
    ) -> tuple[dict[str, BuildState], dict[str, BuildState]]:
        """The cache claim, ModelCaches and EngineBuilds of this plan, created where missing; their states
        (ModelCaches', EngineBuilds') by name. `fetch_now` (the start lane): a ModelCache just created gets
        its fetch Job from this worker, at once: that Job is the first a new deployment waits for, and a hop
        through the ModelCache queue cost up to 0.37 s of it at N=1000 (p95, from the API server's audit log)."""
        namespace, name = p.namespace, p.name
        self._ensure_cache_claim(p)
        caches, states = {}, {}
        for cache in p.model_caches:
            self.users.use(namespace, cache.name, name)
            caches[cache.name] = build_state_from_status(
                self._ensure_shared(
                    sd,
                    build_model_cache(namespace, cache),
                    f"checkpoint {cache.spec.model}@{cache.spec.revision}",
                    reconcile_now=fetch_now,
                )
            )
        for engine in () if p.facts_awaited else p.engines:
            self.users.use(namespace, engine.name, name)
            states[engine.name] = build_state_from_status(
                self._ensure_shared(sd, build_engine_build(namespace, engine), f"{engine.role} engine {engine.name}")
            )
        return caches, states

    def _ensure_cache_claim(self, p: Plan) -> None:
        if not p.cache.managed:
            return
        claim = self.kube.get("PersistentVolumeClaim", p.namespace, p.cache.claim_name)  # cached: ours only
        if claim is None:
            claim, _ = self.kube.create(build_cache_claim(p))
        if not ours(claim):
            raise NameConflict(
                "PersistentVolumeClaim",
                p.cache.claim_name,
                "was not created by specdec-operator (to use it as the engine cache, set spec.cache.claimName)",
                "claim",
            )

    def _ensure_shared(
        self, sd: dict[str, Any], desired: dict[str, Any], what: str, reconcile_now: bool = False
    ) -> dict[str, Any]:
        """The EngineBuild or ModelCache `desired`, created if missing; one just created is reconciled next
        (its Job), by this worker if `reconcile_now`, else by its queue, before the keys that only report."""
        kind, namespace, name = desired["kind"], desired["metadata"]["namespace"], desired["metadata"]["name"]
        obj = self.kube.get(kind, namespace, name)
        if obj is None:
            obj, created = self.kube.create(desired)
            if created:
                self.kube.event(sd, f"{kind}Created", what)
                if reconcile_now:
                    self.reconcile_shared(kind, namespace, name)
                    obj = self.kube.get(kind, namespace, name) or obj  # with the status it just wrote
                else:  # without waiting for the watch to report the new object
                    self.enqueue(kind, namespace, name, urgent=True)
        if not (ours(obj) and contains(obj.get("spec"), desired["spec"])):
            raise NameConflict(
                kind,
                name,
                f"was not created by specdec-operator for this {'recipe' if kind == 'EngineBuild' else 'checkpoint'}",
                "SpeculativeDeployment",
            )
        return obj
