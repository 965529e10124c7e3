"""The Service lane: a deployment's Service, applied on workers of its own.

kube-apiserver allocates every ClusterIP of the cluster under one lock held across the create of its IPAddress
object (MetaAllocator.AllocateNextService, 1.36), so Service creates are served one at a time, ~2 s each beside
a fleet of 1000: a deployment worker that waited for its Service held up the rollouts behind it. A deployment's
reconcile queues its Service here once its Deployment is ours; its Ready waits for the Service, and a failure
is reported in its status."""

from __future__ import annotations

from collections.abc import Callable

from specdec import metrics
from specdec.builders.serving import build_service, runtime_name
from specdec.kube.client import Kube
from specdec.plan import Plan
from specdec.reconcile.bookkeeping.failures import Backoff, ServiceFailures
from specdec.reconcile.errors import log_failure
from specdec.reconcile.ownership import Children
from specdec.reconcile.plans import PlanMemo


class ServiceLane:
    def __init__(
        self,
        kube: Kube,
        plans: PlanMemo,
        children: Children,
        failures: ServiceFailures,
        backoff: Backoff,
        enqueue: Callable[..., None],
        active: Callable[[], bool],
    ):
        self.kube = kube
        self.plans = plans
        self.children = children
        self.failures = failures
        self.backoff = backoff
        self.enqueue = enqueue
        self.active = active

    def reconcile(self, key: tuple[str, str, str]) -> None:
        """Apply a deployment's Service, then tell the deployment."""
        _, namespace, name = key
        if not self.active():
            return
        sd = self.kube.get("SpeculativeDeployment", namespace, name)
        result = self.plans.plan(sd) if sd and not sd["metadata"].get("deletionTimestamp") else None
        if sd is None or not isinstance(result, Plan):
            return
        uid = sd["metadata"]["uid"]
        try:
            with metrics.reconciling("Service"):
                self.children.write(
                    build_service(result, uid), self.children.get("Service", namespace, runtime_name(result), uid), uid
                )
        except Exception as error:  # noqa: BLE001 — reported in the deployment's status, retried with back-off
            log_failure("Service", namespace, name, error)
            self.failures.record(namespace, name, sd["metadata"].get("generation"), error)
            self.backoff.retry_later(key)
        else:
            self.failures.clear(namespace, name)
            self.backoff.settled(key)
        self.enqueue("SpeculativeDeployment", namespace, name)
