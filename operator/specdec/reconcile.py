"""Reconcile = observe -> decide (pure: plan, builders, status) -> apply -> write status.

Level-triggered: every entry point re-reads what it needs (from the watch cache, see store.py) and
the outcome depends only on the observed state, never on which event woke us. One lock per object
serializes concurrent triggers. Watch events only add keys to a work queue (workqueue.py), so
a burst of events for one object costs one reconcile. Entry points never raise: whatever goes wrong is written to the
object's status (reason and message) and the object is reconciled again after a back-off.

Ownership: the operator writes only objects it controls. A child of a deployment must carry that
deployment's controller ownerReference (UID); an EngineBuild or a ModelCache (the shared objects) must
carry our label and the spec we want; a Job its EngineBuild's or ModelCache's ownerReference; the
managed cache claim our label. A name taken by anything else is a `NameConflict` in status, and the
object is left untouched: a first write is a create, which the API server refuses for a taken name.

Order: a deployment creates its ModelCaches (hf:// checkpoints fetched into the cache on CPU nodes) and
EngineBuilds at once; an EngineBuild creates its Job, which holds GPUs, only once every checkpoint it
reads is Fetched, and a ModelCache's change wakes the EngineBuilds that read it: a build starts without
waiting for one of its thousand users to be reconciled. One exception keeps "refused before any GPU
Job" true: a deployment with a model whose facts only its fetch can tell (an hf:// model the catalog
does not know, Plan.facts_awaited) creates its EngineBuilds (and runtime) only once admission ran on the
facts of its fetched files: an EngineBuild, once created, would start its GPU Job at the fetch's end.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

from kubernetes.client.rest import ApiException

from specdec import conditions, metrics
from specdec.admission import Observed
from specdec.api import models
from specdec.api.runtime_config import DRAFT_LEN_KEY
from specdec.builders import common
from specdec.builders import engine as engine_builders
from specdec.builders import model_cache as cache_builders
from specdec.builders.engine import build_engine_build
from specdec.builders.model_cache import build_model_cache
from specdec.builders.runtime import (build_cache_claim, build_config_map, build_deployment, build_service,
                                      config_map_name, endpoint, runtime_name, selector_labels)
from specdec.gpu_nodes import GpuNodeInventory, GpuNodes
from specdec.kube import Kube, api_error_message, contains, permanent
from specdec.model_facts import ModelFacts
from specdec.monitor import SpeculationMonitor
from specdec.plan import Plan, Problem, plan, recipe_checkpoints
from specdec.requeue import DelayQueue, backoff
from specdec.settings import Settings
from specdec.status import (BUILD, FETCH, FETCHED, NO_TRAFFIC, SPECULATION_EFFECTIVE, STUCK_REASONS,
                            WAITING_FOR_CHECKPOINTS, BuildState, JobKind, build_state_from_status,
                            deployment_conditions, evaluate_build, fetched_status, runtime_inputs_fetched,
                            users_view)
from specdec.workqueue import WorkQueue

log = logging.getLogger(__name__)

ANNOTATION_UNUSED_SINCE = "specdec.io/unused-since"  # on an EngineBuild or ModelCache no deployment needs
# Workers per kind: reconciles mostly wait for the API server, so more than there are cores. Each
# kind has its own queue (as controller-runtime has one per controller): the few EngineBuilds that
# every deployment waits for never queue behind a thousand deployments. 16 deployment workers: with 8, a
# fleet of 1000 kept keys waiting 35 s on average for a worker whose requests waited on the API server
# (bench/run.py: all Ready 123 s with 8, 99.5 s with 16, on 2 cores).
# Services have a lane of their own: kube-apiserver allocates every ClusterIP of the cluster under one lock held
# across the create of its IPAddress object (MetaAllocator.AllocateNextService, 1.36), so Service creates are
# served one at a time, ~2 s each beside a fleet of 1000 with 16 in flight: a deployment worker that waited for
# its Service held up the rollouts behind it (bench/run.py: Jobs done -> Deployment p50 34 s). While a fleet of
# 1000 is applied the API server serves ~4.5 Service creates/s whether 4 or 8 workers send them (idle: ~37/s
# from 16 direct writers, 27 ms each in turn); 2 workers gave 2.5/s. A deployment is Ready once its Service is.
WORKERS = {"SpeculativeDeployment": 16, "EngineBuild": 2, "ModelCache": 2, "Service": 4}
# A new or changed spec's first step, creating its ModelCaches and EngineBuilds (which start the downloads
# and GPU builds, the long pole), has workers of its own: it never waits behind the rollouts and status
# reports of a thousand deployments (bench/run.py at N=1000: apply -> first Job p95 35 s in one queue).
# It only creates what is missing (and a new ModelCache's fetch Job); the reconcile it hands over to does the
# rest and reports. 8: a burst of 20 new models waited 0.37 s on average for one of 4 (bench/run.py --scales 20).
START_WORKERS = 8
# A Job without pods this long may have pods the API server refuses: look at its FailedCreate Events.
POD_CREATION_GRACE_SECONDS = 10.0
REFUSED_BUILD_REASONS = ("JobRejected", "NameConflict")  # the build (or fetch) Job could not be had
# A deployment's status write that only moves a rollout's progress (pod counts, condition messages; no phase,
# condition status or reason) waits this long after its last write, and writes what is current then: a pod
# event each was a status write each (3.6 per deployment in a fleet of 1000, bench/run.py). So does an
# EngineBuild's or ModelCache's that none of its users reads (users_view: the step its Job runs, an attempt;
# 6 writes per shared object at N=1000, its Job's steps a second or less apart). A new state (Ready, done, a
# failure, a new generation) is written at once.
PROGRESS_WRITE_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class SharedKind:
    """A shared, content-addressed kind of ours and the Job that does its work."""

    build_job: Callable[[dict[str, Any], Settings], dict[str, Any]]
    job_name: Callable[[str], str]
    pod_label: str  # on its Job's pods: which object they work for
    job_kind: JobKind
    started: str  # Event reason when its Job is created


SHARED = {
    "EngineBuild": SharedKind(engine_builders.build_job, engine_builders.job_name, common.LABEL_ENGINE_BUILD,
                              BUILD, "BuildStarted"),
    "ModelCache": SharedKind(cache_builders.build_fetch_job, cache_builders.job_name, common.LABEL_MODEL_CACHE,
                             FETCH, "FetchStarted"),
}


_ABSENT = object()  # a checkpoint not fetched (None: fetched, no facts)


class _LookUps(Mapping):
    """The namespace's fetched facts, recording the checkpoints read. plan() looks them up by key; going over
    them all (iterating, counting) would make a kept plan depend on checkpoints fetched later: refused, loudly."""

    def __init__(self, fetched: Mapping[tuple[str, str], ModelFacts | None]):
        self._fetched = fetched
        self.read: dict[tuple[str, str], object] = {}

    def __getitem__(self, checkpoint: tuple[str, str]) -> ModelFacts | None:
        self.read[checkpoint] = self._fetched.get(checkpoint, _ABSENT)
        return self._fetched[checkpoint]

    def __iter__(self):
        raise TypeError("plan() looks the fetched facts up by checkpoint (see Reconciler._plan)")

    def __len__(self) -> int:
        raise TypeError("plan() looks the fetched facts up by checkpoint (see Reconciler._plan)")


class NameConflict(Exception):
    """A name the operator needs is taken by an object it does not control."""

    def __init__(self, kind: str, name: str, why: str, owner: str):
        super().__init__(f"{kind} {name} already exists and {why}; the operator leaves it untouched: "
                         f"delete or rename it, or give this {owner} another name")


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("controller") and ref.get("uid") == uid
               for ref in obj["metadata"].get("ownerReferences") or [])


def _controlled(kind: str, child: dict[str, Any], uid: str) -> dict[str, Any]:
    """`child` if the deployment `uid` controls it, else a NameConflict."""
    if not controlled_by(child, uid):
        raise NameConflict(kind, child["metadata"]["name"], "is not controlled by this SpeculativeDeployment",
                           "SpeculativeDeployment")
    return child


def _ours(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(common.LABEL_MANAGED_BY) == common.MANAGED_BY


def _fetched(model_cache: dict[str, Any]) -> bool:
    """A ModelCache of ours whose checkpoint is in the cache."""
    return _ours(model_cache) and build_state_from_status(model_cache).phase == FETCHED


def _age_seconds(obj: dict[str, Any]) -> float:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return 0.0
    then = datetime.datetime.fromisoformat(created.replace("Z", "+00:00"))
    return (datetime.datetime.now(datetime.timezone.utc) - then).total_seconds()


def _failure(error: Exception) -> conditions.Cond:
    """Ready=False for a reconcile that could not finish, with a reason a person can act on."""
    if isinstance(error, NameConflict):
        return conditions.Cond("Ready", False, "NameConflict", str(error))
    if isinstance(error, ApiException):
        if permanent(error):
            return conditions.Cond("Ready", False, "RequestRejected",
                                   f"the API server refused a request: {api_error_message(error)}; "
                                   "retried with back-off")
        return conditions.Cond("Ready", False, "ApiUnavailable",
                               f"{api_error_message(error)}; retried with back-off")
    return conditions.Cond("Ready", False, "InternalError",
                           f"{type(error).__name__}: {error} (an operator bug: please report it)")


FAILED_PHASES = ("Failed", "Invalid")


def _worth_an_event(old_ready: dict[str, Any], ready: conditions.Cond, old_phase: str | None, phase: str) -> bool:
    """A deployment's Events: it became Ready, stopped being Ready, or failed (a Warning per new cause).
    Progress between (fetching, building, rolling out) is in status and in the EngineBuilds' and
    ModelCaches' own Events: an Event per step would be a write per deployment per step of a shared build."""
    if phase in FAILED_PHASES:
        return old_phase != phase or old_ready.get("reason") != ready.reason
    return (old_ready.get("status") == "True") != bool(ready.status)


def _status_changed(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    return any((current or {}).get(k) != v for k, v in desired.items())


PROGRESS_FIELDS = ("replicas", "readyReplicas", "conditions")


def _progress_only(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether `desired` differs from `current` in a rollout's progress only: counts and condition messages."""
    def state(status: dict[str, Any]) -> tuple:
        return ({k: status.get(k) for k in desired if k not in PROGRESS_FIELDS},
                {(c.get("type"), c.get("status"), c.get("reason")) for c in status.get("conditions") or []})
    return state(current) == state(desired)


class Reconciler:
    def __init__(self, kube: Kube, settings: Settings, requeue: DelayQueue | None = None,
                 active: Callable[[], bool] = lambda: True):
        """`active`: whether this replica may act (it leads; see leader.py). A standby's watches keep
        the cache warm, but it reconciles nothing, writes nothing and posts no Events."""
        self.kube = kube
        self.settings = settings
        self.requeue = requeue or DelayQueue()
        self.active = active
        handlers = {"SpeculativeDeployment": self._deployment_key, "Service": self._service_key}
        self.queues = {kind: WorkQueue(handlers.get(kind, self._shared_key), workers,
                                       metrics.QUEUE_WAIT_SECONDS.labels(kind).observe)
                       for kind, workers in WORKERS.items()}
        self.starts = WorkQueue(self._start_key, START_WORKERS, metrics.QUEUE_WAIT_SECONDS.labels("start").observe)
        # The work queue never runs one key twice at once; a resync pass runs beside it.
        self._locks: dict[tuple, threading.Lock] = collections.defaultdict(threading.Lock)
        self._locks_guard = threading.Lock()
        # (ns, EngineBuild or ModelCache) -> sds; their names are content hashes of different inputs
        self._users: dict[tuple[str, str], set[str]] = collections.defaultdict(set)
        # What each shared object's users last heard (see _tell_users); guarded with _users.
        self._told: dict[tuple[str, str], tuple] = {}
        self._users_guard = threading.Lock()
        self._failures: dict[tuple[str, str, str], int] = {}  # consecutive failed reconciles, by key
        # By deployment: why the Service lane could not apply its Service, for which generation.
        self._service_failures: dict[tuple[str, str], tuple[int | None, Exception]] = {}
        self._plans: dict[tuple[str, str], tuple[tuple, GpuNodes, dict, Plan | Problem]] = {}  # see _plan
        self._status_written: dict[tuple[str, str, str], float] = {}  # by key, monotonic: see _write_later
        self._facts_by_namespace: dict[str, tuple[tuple, dict]] = {}  # see _fetched_facts
        self.gpu_nodes = GpuNodeInventory(lambda selector: kube.list_live("Node", None, selector),
                                          settings.read_gpu_nodes)  # refreshed by handlers' resync loop
        self.speculation = SpeculationMonitor(
            kube.store, kube.event, lambda namespace, name: self.enqueue("SpeculativeDeployment", namespace, name),
            settings.speculation_scrape_seconds, settings.speculation_refresh_seconds, active=active)

    def _lock(self, *key: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks[key]

    def users_of(self, namespace: str, engine_build: str) -> list[str]:
        with self._users_guard:
            return sorted(self._users.get((namespace, engine_build), ()))

    def _use(self, namespace: str, engine_build: str, user: str) -> None:
        with self._users_guard:
            self._users[(namespace, engine_build)].add(user)

    def forget(self, namespace: str, name: str) -> None:
        with self._users_guard:
            for (ns, _), users in self._users.items():
                if ns == namespace:
                    users.discard(name)
        self._failures.pop(("SpeculativeDeployment", namespace, name), None)
        self._failures.pop(("Service", namespace, name), None)
        self._service_failures.pop((namespace, name), None)
        self._plans.pop((namespace, name), None)
        self._status_written.pop(("SpeculativeDeployment", namespace, name), None)

    def _plan(self, sd: dict[str, Any]) -> Plan | Problem:
        """plan() of this deployment, kept while its spec (uid, generation), the GPU nodes and the facts of
        the checkpoints it looked up are the same: plan() is pure and costs ~2 ms (its models' validation
        rules), a shared build's change wakes all of its users at once, and a fleet's namespace gets the
        facts of another fetched checkpoint a hundred times (re-planning every deployment each time was a
        tenth of the operator's Python CPU at N=300, py-spy)."""
        meta = sd["metadata"]
        nodes = self.gpu_nodes.snapshot()
        key, version = (meta["namespace"], meta["name"]), (meta.get("uid"), meta.get("generation"))
        fetched = self._fetched_facts(meta["namespace"])
        known = self._plans.get(key)
        if (known is not None and known[0] == version and known[1] is nodes
                and all(fetched.get(checkpoint, _ABSENT) == facts for checkpoint, facts in known[2].items())):
            return known[3]
        looked_up = _LookUps(fetched)
        result = plan(sd, self.settings, Observed(looked_up, nodes))
        self._plans[key] = (version, nodes, looked_up.read, result)
        return result

    def _fetched_facts(self, namespace: str) -> dict[tuple[str, str], ModelFacts | None]:
        """Admission's facts of the namespace's Fetched ModelCaches, by checkpoint (uri, revision); None:
        fetched, no facts. Of ModelCaches of one checkpoint (different fetch placement), one with facts.
        One dict per namespace while its ModelCaches are unchanged."""
        caches = sorted(self.kube.list("ModelCache", namespace), key=lambda mc: mc["metadata"]["name"])
        version = tuple((mc["metadata"]["name"], mc["metadata"].get("resourceVersion")) for mc in caches)
        known = self._facts_by_namespace.get(namespace)
        if known is not None and known[0] == version:
            return known[1]
        fetched: dict[tuple[str, str], ModelFacts | None] = {}
        for mc in filter(_fetched, caches):
            key, facts = (mc["spec"]["model"], mc["spec"]["revision"]), (mc.get("status") or {}).get("facts")
            if facts and fetched.get(key) is None:
                fetched[key] = ModelFacts.from_status(
                    key[0].split("://", 1)[1], facts,
                    f"the files its fetch read ({key[0]}@{key[1]}, ModelCache {mc['metadata']['name']})")
            fetched.setdefault(key, None)
        self._facts_by_namespace[namespace] = (version, fetched)
        return fetched

    # -- the work queue ---------------------------------------------------------------------------

    def enqueue(self, kind: str, namespace: str, name: str, urgent: bool = False) -> None:
        """Reconcile this SpeculativeDeployment, EngineBuild or ModelCache soon, once however often asked;
        `urgent`: before the others, for there is something to create or apply (see WorkQueue.add)."""
        self.queues[kind].add((kind, namespace, name), urgent)

    @property
    def workers_alive(self) -> bool:
        return self.starts.alive and all(q.alive for q in self.queues.values())

    def _shared_key(self, key: tuple[str, str, str]) -> None:
        self.shared(*key)

    def _deployment_key(self, key: tuple[str, str, str]) -> None:
        self.deployment(key[1], key[2])

    def start(self, namespace: str, name: str) -> None:
        """A spec not acted on yet (new or changed): create its shared objects first (START_WORKERS), then
        reconcile it."""
        self.starts.add(("SpeculativeDeployment", namespace, name))

    def _start_key(self, key: tuple[str, str, str]) -> None:
        _, namespace, name = key
        try:
            if self.active():
                with self._lock(*key):
                    sd = self.kube.get("SpeculativeDeployment", namespace, name)
                    result = self._plan(sd) if sd and not sd["metadata"].get("deletionTimestamp") else None
                    if isinstance(result, Plan):
                        self._ensure_inputs(sd, result, fetch_now=True)
        except Exception as error:  # noqa: BLE001 — the reconcile below meets it again and reports it
            log.debug("starting %s/%s: %s", namespace, name, error)
        finally:
            self.enqueue("SpeculativeDeployment", namespace, name, urgent=True)

    def _retry_later(self, key: tuple[str, str, str]) -> None:
        failures = self._failures[key] = self._failures.get(key, 0) + 1
        self.requeue.after(backoff(failures), key, lambda: self.enqueue(*key, urgent=True))

    def _settled(self, key: tuple[str, str, str]) -> None:
        self._failures.pop(key, None)

    def shared_seen(self, kind: str, obj: dict[str, Any]) -> None:
        """A watch event of an EngineBuild or ModelCache: reconcile it, and wake its users if what they
        read changed."""
        meta = obj["metadata"]
        self.enqueue(kind, meta["namespace"], meta["name"])
        self._tell_users(obj)

    def shared_gone(self, kind: str, namespace: str, name: str) -> None:
        with self._users_guard:
            self._told.pop((namespace, name), None)
        self._status_written.pop((kind, namespace, name), None)

    def _tell_users(self, eb: dict[str, Any]) -> None:
        """Deployments read an EngineBuild's (or ModelCache's) spec, our label and its status (as a
        BuildState, and a ModelCache's facts: admission's): wake them only when one of those changed, not
        on every Job or pod event of a build they share."""
        meta = eb["metadata"]
        key = (meta["namespace"], meta["name"])
        state = build_state_from_status(eb)
        heard = (users_view(state), _ours(eb), eb.get("spec"), (eb.get("status") or {}).get("facts"))
        with self._users_guard:
            if self._told.get(key) == heard:
                return
            self._told[key] = heard
            users = list(self._users.get(key, ()))
        for user in users:
            self.enqueue("SpeculativeDeployment", key[0], user,
                         urgent=state.done and self._waits_on(key[0], user, eb.get("kind")))
        if eb.get("kind") == "ModelCache":
            self._wake_builds_reading(eb)

    def _waits_on(self, namespace: str, user: str, kind: str | None) -> bool:
        """Whether a deployment has something to create once a shared object of `kind` is done: its runtime
        after an EngineBuild; after a ModelCache only its EngineBuilds (models admission had no facts of)
        or a runtime reading checkpoints (backend pytorch), since an EngineBuild starts its own Job. Other
        users only report, after the deployments with work to do."""
        if kind == "EngineBuild":
            return True
        kept = self._plans.get((namespace, user))
        result = kept[3] if kept else None
        return not isinstance(result, Plan) or bool(result.facts_awaited or result.runtime_inputs)

    # -- EngineBuild and ModelCache: an object of ours and its Job ---------------------------------

    def engine_build(self, namespace: str, name: str) -> BuildState | None:
        return self.shared("EngineBuild", namespace, name)

    def model_cache(self, namespace: str, name: str) -> BuildState | None:
        return self.shared("ModelCache", namespace, name)

    def shared(self, kind: str, namespace: str, name: str) -> BuildState | None:
        key = (kind, namespace, name)
        if not self.active():
            return None
        with self._lock(*key):
            obj = self.kube.get(kind, namespace, name)
            if obj is None or obj["metadata"].get("deletionTimestamp") or not _ours(obj):
                return None
            try:
                with metrics.reconciling(kind):
                    state, look_again = self._reconcile_shared(kind, obj)
            except Exception as error:  # noqa: BLE001 — whatever it is, log it and retry later
                self._log_failure(kind, namespace, name, error)
                self._retry_later(key)
                return None
            if state.reason in REFUSED_BUILD_REASONS:  # may clear up (a quota, a foreign Job): back off
                self._retry_later(key)
                return state
            self._settled(key)
            if look_again:
                self.requeue.after(POD_CREATION_GRACE_SECONDS, key, lambda: self.enqueue(*key))
            return state

    def _reconcile_shared(self, kind: str, obj: dict[str, Any]) -> tuple[BuildState, bool]:
        """(state, look again later): a Job without pods is watched for FailedCreate Events."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        shared = SHARED[kind]
        state, look_again, pods = self._observe_job(kind, obj)
        status = obj.get("status") or {}
        done = state.phase == shared.job_kind.done[0]
        ready = conditions.Cond("Ready", done, state.reason, state.message)
        desired: dict[str, Any] = {
            "observedGeneration": meta.get("generation"),
            "phase": state.phase,
            "jobName": shared.job_name(name),
            "attempts": state.attempts,
            "message": state.message,
            "conditions": conditions.merge(status.get("conditions"), [ready], meta.get("generation"),
                                           conditions.now()),
        }
        if kind == "EngineBuild":
            desired["failedStep"] = state.failed_step
        else:  # the size and the model's facts, once a fetch reported them (kept after its pods are gone)
            desired.update(fetched_status(pods, status, obj["spec"]["model"]) if done
                           else {"sizeBytes": None, "facts": None})
        if _status_changed(status, desired):
            key = (kind, namespace, name)  # a step of its Job, an attempt: nothing its users read
            if self._write_later(key, users_view(state) == users_view(build_state_from_status(obj))):
                return state, look_again
            self._tell_users(self.kube.patch(kind, namespace, name, {"status": desired}, subresource="status"))
            self._status_written[key] = time.monotonic()
            old_ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
            if status.get("phase") != state.phase or old_ready.get("reason") != state.reason:
                self.kube.event(obj, state.reason, state.message,
                                warning=state.failed or state.reason in STUCK_REASONS)
        return state, look_again

    def _observe_job(self, kind: str, obj: dict[str, Any]) -> tuple[BuildState, bool, list[dict[str, Any]]]:
        namespace, name, uid = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["metadata"]["uid"]
        shared = SHARED[kind]
        job_name = shared.job_name(name)
        job = self.kube.get("Job", namespace, job_name)
        if job is None:
            awaited = self._checkpoints_awaited(obj) if kind == "EngineBuild" else []
            if awaited:  # its Job holds GPUs: none while a download runs
                return BuildState("Pending", WAITING_FOR_CHECKPOINTS, f"the build Job starts once "
                                  f"{', '.join(awaited)} is in the cache (a ModelCache fetches it on a CPU "
                                  "node)"), False, []
            try:
                job, created = self.kube.create(shared.build_job(obj, self.settings))
            except ApiException as error:
                if not permanent(error):
                    raise
                return BuildState("Failed", "JobRejected", f"the API server refused the {shared.job_kind.noun} "
                                  f"Job {job_name}: {api_error_message(error)}"), False, []
            if created:
                self.kube.event(obj, shared.started, f"created Job {job_name}")
        if not controlled_by(job, uid):
            return BuildState("Failed", "NameConflict", str(NameConflict(
                "Job", job_name, f"is not controlled by this {kind}", kind))), False, []
        pods = self.kube.list("Pod", namespace, f"{shared.pod_label}={name}")
        state = evaluate_build(job, pods, kind=shared.job_kind)
        if state.reason != "JobPending":
            return state, False, pods
        if _age_seconds(job) >= POD_CREATION_GRACE_SECONDS:
            refused = self.kube.list_live("Event", namespace, field_selector=(
                f"involvedObject.uid={job['metadata']['uid']},reason=FailedCreate"))
            if refused:
                latest = max(refused, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
                state = evaluate_build(job, pods, latest.get("message") or "FailedCreate", kind=shared.job_kind)
        return state, True, pods

    def _fetched_checkpoints(self, namespace: str, claim: str) -> set[tuple[str, str]]:
        """(uri, revision) of the checkpoints in cache claim `claim`: ModelCaches of one checkpoint with
        different fetch placement write the same directory, so any one of them Fetched will do."""
        return {(mc["spec"]["model"], mc["spec"]["revision"]) for mc in self.kube.list("ModelCache", namespace)
                if _fetched(mc) and mc["spec"].get("cacheClaim") == claim}

    def _checkpoints_awaited(self, eb: dict[str, Any]) -> list[str]:
        """The checkpoints this EngineBuild reads that are not in the cache yet, as uri@revision."""
        spec = models.EngineBuildSpec.model_validate(eb["spec"])
        fetched = self._fetched_checkpoints(eb["metadata"]["namespace"], spec.cache_claim)
        return [f"{uri}@{rev}" for uri, rev in recipe_checkpoints(spec.recipe) if (uri, rev) not in fetched]

    def _wake_builds_reading(self, model_cache: dict[str, Any]) -> None:
        """A ModelCache's state changed: the EngineBuilds that read its checkpoint may start (or not)."""
        meta, spec = model_cache["metadata"], model_cache.get("spec") or {}
        checkpoint = (spec.get("model"), spec.get("revision"))
        for eb in self.kube.list("EngineBuild", meta["namespace"]):
            build = models.EngineBuildSpec.model_validate(eb["spec"])
            if build.cache_claim == spec.get("cacheClaim") and checkpoint in recipe_checkpoints(build.recipe):
                self.enqueue("EngineBuild", meta["namespace"], eb["metadata"]["name"], urgent=True)

    # -- SpeculativeDeployment --------------------------------------------------------------------

    def deployment(self, namespace: str, name: str) -> None:
        key = ("SpeculativeDeployment", namespace, name)
        if not self.active():
            return
        with self._lock(*key):
            sd = self.kube.get("SpeculativeDeployment", namespace, name)
            if sd is None or sd["metadata"].get("deletionTimestamp"):
                self.forget(namespace, name)
                return
            try:
                with metrics.reconciling("SpeculativeDeployment"):
                    failed = self._reconcile_deployment(sd)
            except Exception as error:  # noqa: BLE001 — the status write itself failed: retry later
                self._log_failure("SpeculativeDeployment", namespace, name, error)
                failed = True
            if failed:
                self._retry_later(key)
            else:
                self._settled(key)

    @staticmethod
    def _log_failure(kind: str, namespace: str, name: str, error: Exception) -> None:
        if isinstance(error, (ApiException, NameConflict)):
            log.warning("reconciling %s %s/%s: %s", kind, namespace, name,
                        api_error_message(error) if isinstance(error, ApiException) else error)
        else:
            log.exception("reconciling %s %s/%s failed", kind, namespace, name)

    def _reconcile_deployment(self, sd: dict[str, Any]) -> bool:
        """Act on the plan and write the full status; True when something failed (retry later)."""
        meta = sd["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        result = self._plan(sd)
        states: dict[str, BuildState] = {}  # by EngineBuild
        caches: dict[str, BuildState] = {}  # by ModelCache
        deployment = None
        current = service_current = False
        failure = None
        in_use: list[str] = []
        if isinstance(result, Plan):
            try:
                caches, states = self._ensure_inputs(sd, result)
                deployment, current, service_current = self._runtime(sd, result, states, caches)
            except Exception as error:  # noqa: BLE001 — reported in status below, whatever it is
                self._log_failure("SpeculativeDeployment", namespace, name, error)
                failure = _failure(error)
            deployed = ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(
                common.ANNOTATION_ENGINE_BUILDS, "")
            previous = (sd.get("status") or {}).get("engineBuilds") or [] if failure else []
            in_use = sorted(set(result.engine_names) | {n for n in deployed.split(",") if n} | set(previous))
        pods = []
        if deployment is not None and isinstance(result, Plan):
            pods = self.kube.list("Pod", namespace, ",".join(f"{k}={v}" for k, v in selector_labels(result).items()))
        failed = failure is not None
        service_failure = self._service_failures.get((namespace, name))
        if not failed and isinstance(result, Plan) and service_failure:  # the Service lane retries it, tells us
            failure = _failure(service_failure[1])
        phase, conds = deployment_conditions(result, states, deployment, current,
                                             endpoint(result) if isinstance(result, Plan) else None, failure, pods,
                                             caches, service_current)
        self._write_status(sd, result, phase, conds, deployment, in_use)
        return failed

    def _ensure_inputs(self, sd: dict[str, Any], p: Plan,
                       fetch_now: bool = False) -> tuple[dict[str, BuildState], dict[str, BuildState]]:
        """The cache claim, ModelCaches and EngineBuilds of this plan, created where missing; their states
        (ModelCaches', EngineBuilds') by name. `fetch_now` (the start lane): a ModelCache just created gets
        its fetch Job from this worker, at once: that Job is the first a new deployment waits for, and a hop
        through the ModelCache queue cost up to 0.37 s of it at N=1000 (p95, from the API server's audit log)."""
        namespace, name = p.namespace, p.name
        self._ensure_cache_claim(p)
        caches, states = {}, {}
        for cache in p.model_caches:
            self._use(namespace, cache.name, name)
            caches[cache.name] = build_state_from_status(self._ensure_shared(
                sd, build_model_cache(namespace, cache), f"checkpoint {cache.spec.model}@{cache.spec.revision}",
                reconcile_now=fetch_now))
        # Its Job waits for the checkpoints (_checkpoints_awaited); the EngineBuild itself waits for
        # admission's facts (see the module's docstring).
        for engine in () if p.facts_awaited else p.engines:
            self._use(namespace, engine.name, name)
            states[engine.name] = build_state_from_status(self._ensure_shared(
                sd, build_engine_build(namespace, engine), f"{engine.role} engine {engine.name}"))
        return caches, states

    def _ensure_cache_claim(self, p: Plan) -> None:
        if not p.cache.managed:
            return
        claim = self.kube.get("PersistentVolumeClaim", p.namespace, p.cache.claim_name)  # cached: ours only
        if claim is None:
            claim, _ = self.kube.create(build_cache_claim(p))
        if not _ours(claim):
            raise NameConflict("PersistentVolumeClaim", p.cache.claim_name,
                               "was not created by specdec-operator (to use it as the engine cache, set "
                               "spec.cache.claimName)", "claim")

    def _ensure_shared(self, sd: dict[str, Any], desired: dict[str, Any], what: str,
                       reconcile_now: bool = False) -> dict[str, Any]:
        """The EngineBuild or ModelCache `desired`, created if missing; one just created is reconciled next
        (its Job), by this worker if `reconcile_now`, else by its queue, before the keys that only report."""
        kind, namespace, name = desired["kind"], desired["metadata"]["namespace"], desired["metadata"]["name"]
        obj = self.kube.get(kind, namespace, name)
        if obj is None:
            obj, created = self.kube.create(desired)
            if created:
                self.kube.event(sd, f"{kind}Created", what)
                if reconcile_now:
                    self.shared(kind, namespace, name)
                    obj = self.kube.get(kind, namespace, name) or obj  # with the status it just wrote
                else:  # without waiting for the watch to report the new object
                    self.enqueue(kind, namespace, name, urgent=True)
        if not (_ours(obj) and contains(obj.get("spec"), desired["spec"])):
            raise NameConflict(kind, name, f"was not created by specdec-operator for this "
                               f"{'recipe' if kind == 'EngineBuild' else 'checkpoint'}", "SpeculativeDeployment")
        return obj

    def _owned(self, kind: str, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The child `name` as cached if this deployment controls it, None if the cache has none (the cache
        holds only objects with our label: a name taken by another is found by the create, see _write)."""
        obj = self.kube.get(kind, namespace, name)
        return obj if obj is None else _controlled(kind, obj, uid)

    def _write(self, desired: dict[str, Any], cached: dict[str, Any] | None, uid: str) -> tuple[dict[str, Any], bool]:
        """Write one of the deployment's children (`cached`: as _owned found it): a create when the cache has
        none, which the API server refuses if the name is taken — nothing of another's is changed, and no
        lookup comes first; else an apply where it differs. (object, written)."""
        obj, written = self.kube.apply(desired, cached)
        if cached is None and not written:  # the name is taken: by this deployment, before the cache knew it?
            obj, written = self.kube.apply(desired, _controlled(desired["kind"], obj, uid))
        return obj, written

    def _runtime(self, sd: dict[str, Any], p: Plan, states: dict[str, BuildState],
                 caches: dict[str, BuildState]) -> tuple[dict | None, bool, bool]:
        """Apply the runtime once every engine is built and (backend pytorch) every checkpoint it reads is
        fetched and admitted on its facts; until then, touch only the replica count. (Deployment, whether
        it runs this plan, whether its Service is ours and current); the Service lane applies the Service."""
        uid = sd["metadata"]["uid"]
        existing = self._owned("Deployment", p.namespace, runtime_name(p), uid)
        if not (all(e.name in states and states[e.name].succeeded for e in p.engines)  # some may not exist yet
                and runtime_inputs_fetched(p, caches) and not p.facts_awaited):
            if existing and existing["spec"].get("replicas") != p.spec.runtime.replicas:
                existing = self.kube.patch("Deployment", p.namespace, runtime_name(p),
                                           {"spec": {"replicas": p.spec.runtime.replicas}})
            return existing, False, False
        # The ConfigMap first: new pods must read the new configuration, and pods must never start with
        # another's ConfigMap of that name (a first create of it refused stops here). The Service after the
        # Deployment is ours, by the Service lane (kube-apiserver allocates ClusterIPs one at a time).
        config_map = self._owned("ConfigMap", p.namespace, config_map_name(p), uid)
        self._write(build_config_map(p, uid, self._chosen_draft_len(p, config_map)), config_map, uid)
        deployment, written = self._write(build_deployment(p, uid, self.settings), existing, uid)
        if written:
            self.kube.event(sd, "RuntimeApplied", f"{'updated' if existing else 'created'} Deployment "
                            f"{runtime_name(p)} ({p.gpus} GPU(s) per pod)")
        service = self._owned("Service", p.namespace, runtime_name(p), uid)
        service_current = service is not None and contains(service, build_service(p, uid))
        failed = self._service_failures.get((p.namespace, p.name))
        if not service_current and not (failed and failed[0] == sd["metadata"].get("generation")):  # else its
            self.enqueue("Service", p.namespace, p.name, urgent=True)  # back-off retries: no loop with the lane
        return deployment, True, service_current

    def _service_key(self, key: tuple[str, str, str]) -> None:
        """Apply a deployment's Service (queued by _runtime once its Deployment is ours), then tell the
        deployment: its Ready waits for the Service, and a failure is reported in its status."""
        _, namespace, name = key
        if not self.active():
            return
        sd = self.kube.get("SpeculativeDeployment", namespace, name)
        result = self._plan(sd) if sd and not sd["metadata"].get("deletionTimestamp") else None
        if not isinstance(result, Plan):
            return
        uid = sd["metadata"]["uid"]
        try:
            with metrics.reconciling("Service"):
                self._write(build_service(result, uid), self._owned("Service", namespace, runtime_name(result), uid),
                            uid)
        except Exception as error:  # noqa: BLE001 — reported in the deployment's status, retried with back-off
            self._log_failure("Service", namespace, name, error)
            self._service_failures[(namespace, name)] = (sd["metadata"].get("generation"), error)
            self._retry_later(key)
        else:
            self._service_failures.pop((namespace, name), None)
            self._settled(key)
        self.enqueue("SpeculativeDeployment", namespace, name)

    def _chosen_draft_len(self, p: Plan, config_map: dict[str, Any] | None) -> int | None:
        """draftLen: auto: the monitor's choice; after a restart of the operator, what the pods were last
        told (the ConfigMap)."""
        chosen = self.speculation.draft_len_choice(p.namespace, p.name)
        told = ((config_map or {}).get("data") or {}).get(DRAFT_LEN_KEY, "")
        return chosen if chosen is not None else int(told) if told.isdigit() else None

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
            "engineBuilds": in_use or None,
        }
        if isinstance(result, Plan):
            dstatus = (deployment or {}).get("status") or {}
            desired.update(
                replicas=dstatus.get("replicas", 0), readyReplicas=dstatus.get("readyReplicas", 0),
                selector=",".join(f"{k}={v}" for k, v in selector_labels(result).items()),
                endpoint=endpoint(result), speculation=None)
            if result.spec.speculation.mode != "none":
                desired["speculation"], effective = self._speculation_status(sd, status)
                conds = [*conds, effective]
        desired["conditions"] = conditions.merge(status.get("conditions"), conds, generation, conditions.now())
        if not _status_changed(status, desired):
            return
        key = ("SpeculativeDeployment", meta["namespace"], meta["name"])
        if self._write_later(key, _progress_only(status, desired)):
            return
        try:
            self.kube.patch("SpeculativeDeployment", meta["namespace"], meta["name"], {"status": desired},
                            subresource="status")
            self._status_written[key] = time.monotonic()
        except ApiException as error:
            if error.status == 404:  # deleted meanwhile (or its namespace is going): nothing to tell
                return
            raise
        ready = next(c for c in conds if c.type == "Ready")
        old_ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
        if _worth_an_event(old_ready, ready, status.get("phase"), phase):
            self.kube.event(sd, ready.reason, ready.message or phase, warning=phase in FAILED_PHASES)

    def _write_later(self, key: tuple[str, str, str], progress_only: bool) -> bool:
        """Whether a status write that only moves progress waits (the key requeued) until PROGRESS_WRITE_SECONDS
        after the object's last one: a fleet's rollouts and builds change such fields many times a second;
        a new state is written at once."""
        last = self._status_written.get(key)
        wait = 0.0 if last is None else last + PROGRESS_WRITE_SECONDS - time.monotonic()
        if wait > 0 and progress_only:
            self.requeue.after(wait, key, lambda: self.enqueue(*key))
            return True
        return False

    def _speculation_status(self, sd: dict[str, Any], status: dict[str, Any]) -> tuple[dict | None, conditions.Cond]:
        """What the monitor published for this generation; else what status says (a new leader has not
        measured yet); else Unknown."""
        meta = sd["metadata"]
        published = self.speculation.published(meta["namespace"], meta["name"], meta.get("generation"))
        if published:
            return published.status, published.condition
        before = next((c for c in status.get("conditions") or [] if c.get("type") == SPECULATION_EFFECTIVE), None)
        if before and status.get("speculation"):
            return status["speculation"], conditions.Cond.from_dict(before)
        return None, NO_TRAFFIC

    # -- garbage collection of unused engines -----------------------------------------------------

    def resync(self, namespace: str | None, refreshes: list[tuple[str, str | None]]) -> None:
        """A full level-triggered pass: re-list the cached kinds (`refreshes`: kind and label selector),
        reconcile every object, collect unused engines. One object's failure never skips the rest."""
        if not self.active():
            return
        for kind, selector in refreshes:
            try:
                self.kube.refresh(kind, namespace, selector)
            except ApiException as error:  # the watch keeps the cache; the next pass re-lists
                log.warning("resync: listing %s failed: %s", kind, api_error_message(error))
        for kind in SHARED:
            for obj in self.kube.list(kind, namespace):
                self.shared(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
        for sd in self.kube.list("SpeculativeDeployment", namespace):
            self.deployment(sd["metadata"]["namespace"], sd["metadata"]["name"])
        self.collect_unused_engines(namespace)

    def collect_unused_engines(self, namespace: str | None, now: datetime.datetime | None = None) -> list[str]:
        """Mark EngineBuilds and ModelCaches no deployment uses; delete those unused for longer than the
        retention. Deleting a ModelCache removes the object and its Job, not the checkpoint's files
        (engines are kept the same way): a ModelCache made again finds them and finishes at once."""
        now = now or datetime.datetime.now(datetime.timezone.utc)
        used: set[tuple[str, str, str]] = set()
        for sd in self.kube.list("SpeculativeDeployment", namespace):
            ns = sd["metadata"]["namespace"]
            result = self._plan(sd)
            names = set((sd.get("status") or {}).get("engineBuilds") or [])
            if isinstance(result, Plan):
                names |= set(result.engine_names)
            used |= {("ModelCache", ns, c.name) for c in result.model_caches}  # a refusal's too: see Problem
            used |= {("EngineBuild", ns, n) for n in names}
        deleted = []
        for kind in SHARED:
            for obj in self.kube.list(kind, namespace):
                meta = obj["metadata"]
                key = (kind, meta["namespace"], meta["name"])
                if not _ours(obj):
                    continue
                try:
                    if self._collect(kind, obj, key in used, now):
                        deleted.append(meta["name"])
                except ApiException as error:  # the next pass tries again
                    log.warning("collecting %s %s/%s: %s", *key, api_error_message(error))
        return deleted

    def _collect(self, kind: str, obj: dict[str, Any], used: bool, now: datetime.datetime) -> bool:
        """Mark, unmark or delete one EngineBuild or ModelCache; True when deleted."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        since = (meta.get("annotations") or {}).get(ANNOTATION_UNUSED_SINCE)
        if used:
            if since:
                self.kube.patch(kind, *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: None}}})
            return False
        if not since:
            stamp = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
            self.kube.patch(kind, *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: stamp}}})
            return False
        unused_for = now - datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
        if unused_for.total_seconds() < self.settings.engine_retention_seconds:
            return False
        self.kube.delete(kind, *key)
        log.info("deleted %s %s/%s, unused for %s", kind, key[0], key[1], unused_for)
        return True
