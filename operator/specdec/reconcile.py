"""Reconcile = observe -> decide (pure: plan, builders, status) -> apply -> write status.

Level-triggered: every entry point re-reads what it needs (from the watch cache, see store.py) and
the outcome depends only on the observed state, never on which event woke us. One lock per object serializes concurrent triggers.
"""

from __future__ import annotations

import collections
import datetime
import logging
import threading
from typing import Any

from kubernetes.client.rest import ApiException

from specdec import conditions, metrics
from specdec.builders import common
from specdec.builders.engine import build_engine_build, build_job, job_name
from specdec.builders.runtime import (build_cache_claim, build_config_map, build_deployment, build_service,
                                      endpoint, runtime_name, selector_labels)
from specdec.kube import Kube, api_error_message
from specdec.plan import Plan, Problem, plan
from specdec.settings import Settings
from specdec.status import BuildState, build_state_from_status, deployment_conditions, evaluate_build

log = logging.getLogger(__name__)

ANNOTATION_UNUSED_SINCE = "specdec.io/unused-since"  # on an EngineBuild no deployment needs


def _status_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    return any((current or {}).get(k) != v for k, v in desired.items())


class Reconciler:
    def __init__(self, kube: Kube, settings: Settings):
        self.kube = kube
        self.settings = settings
        self._locks: dict[tuple, threading.Lock] = collections.defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        self._users: dict[tuple[str, str], set[str]] = collections.defaultdict(set)  # (ns, eb) -> sds

    def _lock(self, *key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[key]

    def users_of(self, namespace: str, engine_build: str) -> list[str]:
        return sorted(self._users.get((namespace, engine_build), ()))

    def forget(self, namespace: str, name: str) -> None:
        for (ns, _), users in list(self._users.items()):  # other threads may add keys meanwhile
            if ns == namespace:
                users.discard(name)

    # -- EngineBuild ------------------------------------------------------------------------------

    def engine_build(self, namespace: str, name: str) -> BuildState | None:
        with self._lock("EngineBuild", namespace, name):
            eb = self.kube.get("EngineBuild", namespace, name)
            if eb is None or eb["metadata"].get("deletionTimestamp"):
                return None
            try:
                with metrics.reconciling("EngineBuild"):
                    return self._reconcile_engine_build(eb)
            except ApiException as error:  # retries are spent; the next event or resync tries again
                log.warning("reconciling EngineBuild %s/%s failed: %s", namespace, name, api_error_message(error))
                return None

    def _reconcile_engine_build(self, eb: dict[str, Any]) -> BuildState:
        namespace, name = eb["metadata"]["namespace"], eb["metadata"]["name"]
        job = self.kube.get("Job", namespace, job_name(name))
        if job is None:
            job = self.kube.create(build_job(eb, self.settings))
            self.kube.event(eb, "BuildStarted", f"created Job {job_name(name)}")
        pods = self.kube.list("Pod", namespace, f"{common.LABEL_ENGINE_BUILD}={name}")
        state = evaluate_build(job, pods)
        status = eb.get("status") or {}
        ready = conditions.Cond("Ready", state.succeeded, state.reason, state.message)
        desired = {
            "observedGeneration": eb["metadata"].get("generation"),
            "phase": state.phase,
            "jobName": job_name(name),
            "failedStep": state.failed_step,
            "attempts": state.attempts,
            "message": state.message,
            "conditions": conditions.merge(status.get("conditions"), [ready],
                                           eb["metadata"].get("generation"), conditions.now()),
        }
        if _status_changed(status, desired):
            self.kube.patch("EngineBuild", namespace, name, {"status": desired}, subresource="status")
            if status.get("phase") != state.phase:
                self.kube.event(eb, state.reason, state.message, warning=state.failed)
        return state

    # -- SpeculativeDeployment --------------------------------------------------------------------

    def deployment(self, namespace: str, name: str) -> None:
        with self._lock("SpeculativeDeployment", namespace, name):
            sd = self.kube.get("SpeculativeDeployment", namespace, name)
            if sd is None or sd["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)
                return
            try:
                with metrics.reconciling("SpeculativeDeployment"):
                    self._reconcile_deployment(sd)
            except ApiException as error:  # retries are spent: tell the user, retry at the next event
                log.warning("reconciling %s/%s failed: %s", namespace, name, api_error_message(error))
                self._report_failure(sd, api_error_message(error))

    def _report_failure(self, sd: dict[str, Any], message: str) -> None:
        """Ready=False/ReconcileFailed; the other conditions stay as they were."""
        meta = sd["metadata"]
        old = (sd.get("status") or {}).get("conditions") or []
        ready = conditions.merge(old, [conditions.Cond("Ready", False, "ReconcileFailed", message)],
                                 meta.get("generation"), conditions.now())
        merged = [c for c in old if c.get("type") != "Ready"] + ready
        if merged != old:
            self.kube.patch("SpeculativeDeployment", meta["namespace"], meta["name"],
                            {"status": {"conditions": merged}}, subresource="status")

    def _reconcile_deployment(self, sd: dict[str, Any]) -> None:
        meta = sd["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        result = plan(sd, self.settings)
        states: dict[str, BuildState] = {}
        deployment = None
        current = False
        in_use: list[str] = []
        if isinstance(result, Plan):
            if result.cache.managed:
                if self.kube.get("PersistentVolumeClaim", namespace, result.cache.claim_name) is None:
                    self.kube.create(build_cache_claim(result))
            for engine in result.engines:
                self._users[(namespace, engine.name)].add(name)
                eb = self.kube.get("EngineBuild", namespace, engine.name)
                if eb is None:
                    eb = self.kube.create(build_engine_build(namespace, engine))
                    self.kube.event(sd, "EngineBuildCreated", f"{engine.role} engine {engine.name}")
                states[engine.name] = build_state_from_status(eb)
            deployment, current = self._runtime(sd, result, states)
            deployed = ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(common.ANNOTATION_ENGINE_BUILDS, "")
            in_use = sorted(set(result.engine_names) | {n for n in deployed.split(",") if n})
        phase, conds = deployment_conditions(result, states, deployment, current,
                                             endpoint(result) if isinstance(result, Plan) else None)
        self._write_status(sd, result, phase, conds, deployment, in_use)

    def _runtime(self, sd: dict[str, Any], p: Plan, states: dict[str, BuildState]) -> tuple[dict | None, bool]:
        """Apply the runtime once every engine is built; until then, touch only the replica count."""
        uid = sd["metadata"]["uid"]
        existing = self.kube.get("Deployment", p.namespace, runtime_name(p))
        if not all(s.succeeded for s in states.values()):
            if existing and existing["spec"].get("replicas") != p.spec.runtime.replicas:
                existing = self.kube.patch("Deployment", p.namespace, runtime_name(p),
                                           {"spec": {"replicas": p.spec.runtime.replicas}})
            return existing, False
        self.kube.apply(build_config_map(p, uid))
        deployment, written = self.kube.apply(build_deployment(p, uid, self.settings), existing)
        if written:
            self.kube.event(sd, "RuntimeApplied", f"{'updated' if existing else 'created'} Deployment "
                            f"{runtime_name(p)} ({p.gpus} GPU(s) per pod)")
        self.kube.apply(build_service(p, uid))
        return deployment, True

    def _write_status(self, sd: dict[str, Any], result: Plan | Problem, phase: str,
                      conds: list[conditions.Cond], deployment: dict[str, Any] | None,
                      in_use: list[str]) -> None:
        """`deployment` may still run the previous engines: its pods are what serves now."""
        meta = sd["metadata"]
        status = sd.get("status") or {}
        generation = meta.get("generation")
        desired: dict[str, Any] = {
            "observedGeneration": generation,
            "phase": phase,
            "conditions": conditions.merge(status.get("conditions"), conds, generation, conditions.now()),
            "engineBuilds": in_use or None,
        }
        if isinstance(result, Plan):
            dstatus = (deployment or {}).get("status") or {}
            desired.update(
                replicas=dstatus.get("replicas", 0), readyReplicas=dstatus.get("readyReplicas", 0),
                selector=",".join(f"{k}={v}" for k, v in selector_labels(result).items()),
                endpoint=endpoint(result))
        if not _status_changed(status, desired):
            return
        self.kube.patch("SpeculativeDeployment", meta["namespace"], meta["name"], {"status": desired},
                        subresource="status")
        ready = next(c for c in conds if c.type == "Ready")
        old_ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if old_ready.get("reason") != ready.reason or status.get("phase") != phase:
            self.kube.event(sd, ready.reason, ready.message or phase,
                            warning=phase in ("Failed", "Invalid"))

    # -- garbage collection of unused engines -----------------------------------------------------

    def collect_unused_engines(self, namespace: str | None, now: datetime.datetime | None = None) -> list[str]:
        """Mark EngineBuilds no deployment uses; delete those unused for longer than the retention."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        used: set[tuple[str, str]] = set()
        for sd in self.kube.list("SpeculativeDeployment", namespace):
            ns = sd["metadata"]["namespace"]
            result = plan(sd, self.settings)
            names = set((sd.get("status") or {}).get("engineBuilds") or [])
            if isinstance(result, Plan):
                names |= set(result.engine_names)
            used |= {(ns, n) for n in names}
        deleted = []
        for eb in self.kube.list("EngineBuild", namespace):
            meta = eb["metadata"]
            key = (meta["namespace"], meta["name"])
            since = (meta.get("annotations") or {}).get(ANNOTATION_UNUSED_SINCE)
            if key in used:
                if since:
                    self.kube.patch("EngineBuild", *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: None}}})
                continue
            if not since:
                stamp = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
                self.kube.patch("EngineBuild", *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: stamp}}})
                continue
            unused_for = now - datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
            if unused_for.total_seconds() >= self.settings.engine_retention_seconds:
                self.kube.delete("EngineBuild", *key)
                deleted.append(meta["name"])
                log.info("deleted EngineBuild %s/%s, unused for %s", key[0], key[1], unused_for)
        return deleted
