"""The façade handlers.py calls: work queues, the start lane, resync; it wires the controllers together."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException

from specdec import metrics
from specdec.admission.gpu_nodes import GpuNodeInventory
from specdec.builders.serving import runtime_config_map_name, told_schedule
from specdec.feedback.monitor import SpeculationMonitor
from specdec.kube.client import Kube
from specdec.kube.errors import api_error_message
from specdec.kube.workqueue import DelayQueue, WorkQueue
from specdec.plan import Plan
from specdec.reconcile.bookkeeping.failures import Backoff, ServiceFailures
from specdec.reconcile.bookkeeping.locks import Locks
from specdec.reconcile.bookkeeping.pacing import WritePacing
from specdec.reconcile.bookkeeping.users import Users
from specdec.reconcile.build_and_cache_jobs import SHARED, SharedJobs
from specdec.reconcile.builds_and_caches import SharedController
from specdec.reconcile.collect import GarbageCollector
from specdec.reconcile.deployment import DeploymentController
from specdec.reconcile.deployment_status import DeploymentStatusWriter
from specdec.reconcile.drafter_learning import DrafterLearning
from specdec.reconcile.fanout import UserFanout
from specdec.reconcile.inputs import DeploymentInputs
from specdec.reconcile.ownership import Children
from specdec.reconcile.plans import PlanMemo
from specdec.reconcile.runtime_applier import RuntimeApplier
from specdec.reconcile.service_lane import ServiceLane
from specdec.settings import Settings
from specdec.status.shared import BuildState

log = logging.getLogger("specdec.reconcile")

# Workers per kind: reconciles mostly wait for the API server, so more than there are cores. Each
# kind has its own queue (as controller-runtime has one per controller): the few EngineBuilds that
# every deployment waits for never queue behind a thousand deployments. 16 deployment workers: with 8, a
# fleet of 1000 kept keys waiting 35 s on average for a worker whose requests waited on the API server
# (bench/run.py: all Ready 123 s with 8, 99.5 s with 16, on 2 cores).
# Services have a lane of their own (service_lane.py): a deployment worker that waited for its Service held up
# the rollouts behind it (bench/run.py: Jobs done -> Deployment p50 34 s). While a fleet of 1000 is applied the
# API server serves ~4.5 Service creates/s whether 4 or 8 workers send them (idle: ~37/s from 16 direct
# writers, 27 ms each in turn); 2 workers gave 2.5/s. A deployment is Ready once its Service is.
WORKERS = {"SpeculativeDeployment": 16, "EngineBuild": 2, "ModelCache": 2, "Service": 4}
# A new or changed spec's first step, creating its ModelCaches and EngineBuilds (which start the downloads
# and GPU builds, the long pole), has workers of its own: it never waits behind the rollouts and status
# reports of a thousand deployments (bench/run.py at N=1000: apply -> first Job p95 35 s in one queue).
# It only creates what is missing (and a new ModelCache's fetch Job); the reconcile it hands over to does the
# rest and reports. 8: a burst of 20 new models waited 0.37 s on average for one of 4 (bench/run.py --scales 20).
START_WORKERS = 8


class Reconciler:
    def __init__(self, kube: Kube, settings: Settings, active: Callable[[], bool] = lambda: True):
        """`active`: whether this replica may act (it leads; see specdec.kube.leader). A standby's watches keep
        the cache warm, but it reconciles nothing, writes nothing and posts no Events."""
        self.kube = kube
        self.settings = settings
        self.delays = DelayQueue()  # the one timer thread behind every queue's add_after
        self.active = active
        self.gpu_nodes = GpuNodeInventory(
            lambda selector: kube.list_live("Node", None, selector), settings.read_gpu_nodes
        )  # refreshed by handlers' resync loop
        self.speculation = SpeculationMonitor(
            kube.store,
            kube.event,
            lambda namespace, name: self.enqueue("SpeculativeDeployment", namespace, name),
            settings.speculation_scrape_seconds,
            settings.speculation_refresh_seconds,
            active=active,
            rollout_seconds=settings.draft_len_rollout_seconds,
            told_schedule=lambda namespace, name: told_schedule(
                kube.store.get("ConfigMap", namespace, runtime_config_map_name(name))
            ),
            read_claim=lambda namespace, name: kube.get_live("PersistentVolumeClaim", namespace, name),
        )
        # What the controllers share, each kept in one place.
        self.locks = Locks()
        self.users = Users()
        self.pacing = WritePacing(self.enqueue_after)
        self.backoff = Backoff(self.enqueue_after)
        self.service_failures = ServiceFailures()
        self.plans = PlanMemo(settings, self.gpu_nodes, lambda namespace: kube.list("ModelCache", namespace))
        children = Children(kube)
        self.shared = SharedController(
            kube,
            SharedJobs(kube, settings),
            UserFanout(kube, self.users, self.plans, self.enqueue),
            self.pacing,
            self.backoff,
            self.locks,
            self.enqueue,
            self.enqueue_after,
            active,
        )
        self.inputs = DeploymentInputs(kube, self.users, self.shared.reconcile, self.enqueue)
        self.deployments = DeploymentController(
            kube,
            self.plans,
            self.inputs,
            RuntimeApplier(
                kube,
                settings,
                children,
                self.service_failures,
                self.speculation.draft_len_choice,
                self.enqueue,
                self.speculation.load.config_map_keys,
                self.speculation.schedule_choice,
            ),
            DeploymentStatusWriter(
                kube,
                self.pacing,
                self.speculation.published,
                self.speculation.capture.published,
                self.speculation.drafter.published,
            ),
            self.service_failures,
            self.backoff,
            self.locks,
            self.forget,
            active,
            self.speculation.canary.reading,
            DrafterLearning(kube, settings, self.plans, children),
            self._behind_creates,
        )
        self.services = ServiceLane(
            kube, self.plans, children, self.service_failures, self.backoff, self.enqueue, active
        )
        self.collector = GarbageCollector(kube, settings, self.plans)
        handlers: dict[str, Callable[[Any], object]] = {
            "SpeculativeDeployment": lambda key: self.reconcile_deployment(key[1], key[2]),
            "Service": self.services.reconcile,
        }
        self.queues = {
            kind: WorkQueue(
                handlers.get(kind, lambda key: self.reconcile_shared(*key)),
                workers,
                metrics.QUEUE_WAIT_SECONDS.labels(kind).observe,
                self.delays,
            )
            for kind, workers in WORKERS.items()
        }
        self.starts = WorkQueue(self._start_key, START_WORKERS, metrics.QUEUE_WAIT_SECONDS.labels("start").observe)

    # -- entry points -----------------------------------------------------------------------------

    def reconcile_deployment(self, namespace: str, name: str) -> None:
        self.deployments.reconcile(namespace, name)

    def reconcile_shared(self, kind: str, namespace: str, name: str) -> BuildState | None:
        return self.shared.reconcile(kind, namespace, name)

    def shared_seen(self, kind: str, obj: dict[str, Any]) -> None:
        """A watch event of an EngineBuild or ModelCache."""
        self.shared.seen(kind, obj)

    def shared_gone(self, kind: str, namespace: str, name: str) -> None:
        self.shared.gone(kind, namespace, name)

    def forget(self, namespace: str, name: str) -> None:
        """A deployment is gone: drop what is kept of it."""
        self.users.forget_user(namespace, name)
        self.backoff.settled(("SpeculativeDeployment", namespace, name))
        self.backoff.settled(("Service", namespace, name))
        self.service_failures.clear(namespace, name)
        self.plans.forget(namespace, name)
        self.pacing.forget(("SpeculativeDeployment", namespace, name))

    def collect_unused_engines(self, namespace: str | None, now: datetime.datetime | None = None) -> list[str]:
        return self.collector.collect(namespace, now)

    # -- the work queues --------------------------------------------------------------------------

    def enqueue(self, kind: str, namespace: str, name: str, urgent: bool = False) -> None:
        """Reconcile this SpeculativeDeployment, EngineBuild, ModelCache or Service soon, once however often
        asked; `urgent`: before the others, for there is something to create or apply (see WorkQueue.add)."""
        self.queues[kind].add((kind, namespace, name), urgent)

    def enqueue_after(self, seconds: float, kind: str, namespace: str, name: str, urgent: bool = False) -> None:
        """`enqueue` in `seconds` (back-off, paced writes, looking again later), unless already due sooner."""
        self.queues[kind].add_after(seconds, (kind, namespace, name), urgent)

    def _behind_creates(self, namespace: str, name: str) -> bool:
        """Requeue a deployment (not urgent) if other deployments' creates wait for a worker; whether it did."""
        queue = self.queues["SpeculativeDeployment"]
        if not queue.urgent_waiting():
            return False
        queue.add(("SpeculativeDeployment", namespace, name))
        return True

    @property
    def workers_alive(self) -> bool:
        return self.starts.alive and all(q.alive for q in self.queues.values())

    def start(self, namespace: str, name: str) -> None:
        """A spec not acted on yet (new or changed): create its shared objects first (START_WORKERS), then
        reconcile it."""
        self.starts.add(("SpeculativeDeployment", namespace, name))

    def _start_key(self, key: tuple[str, str, str]) -> None:
        _, namespace, name = key
        try:
            if self.active():
                with self.locks(*key):
                    sd = self.kube.get("SpeculativeDeployment", namespace, name)
                    result = self.plans.plan(sd) if sd and not sd["metadata"].get("deletionTimestamp") else None
                    if sd is not None and isinstance(result, Plan):
                        self.inputs.ensure(sd, result, fetch_now=True)
        except Exception as error:  # noqa: BLE001 — the reconcile below meets it again and reports it
            log.debug("starting %s/%s: %s", namespace, name, error)
        finally:
            self.enqueue("SpeculativeDeployment", namespace, name, urgent=True)

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
                self.reconcile_shared(kind, obj["metadata"]["namespace"], obj["metadata"]["name"])
        for sd in self.kube.list("SpeculativeDeployment", namespace):
            self.reconcile_deployment(sd["metadata"]["namespace"], sd["metadata"]["name"])
        self.collector.collect(namespace)
