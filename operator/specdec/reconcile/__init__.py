"""Reconcile = observe -> decide (pure: plan, builders, status) -> apply -> write status.

Level-triggered: every entry point re-reads what it needs (from the watch cache, specdec.kube.cache) and the
outcome depends only on the observed state, never on which event woke us. One lock per object serializes
concurrent triggers. Watch events only add keys to a work queue (specdec.kube.workqueue), so a burst of events for one
object costs one reconcile. Entry points never raise: whatever goes wrong is written to the object's status
(reason and message) and the object is reconciled again after a back-off.

One concern per module, each controller a class whose fields name its collaborators:
- reconciler.py: the façade handlers.py calls (work queues, the start lane, resync); it wires the rest.
- builds_and_caches.py (build_and_cache_jobs.py, fanout.py): an EngineBuild or ModelCache, its Job, and who
  hears of it.
- deployment.py: a SpeculativeDeployment, plan -> inputs.py -> runtime_applier.py ->
  deployment_status.py;
  service_lane.py applies its Service on workers of its own.
- collect.py: garbage collection of unused shared objects. ownership.py: what the operator may write.
- plans.py: the plan memo; bookkeeping/: users and what each last heard, write pacing, back-off, locks.
Imports run one way: the façade imports the controllers, the controllers import the bookkeeping.
"""

from specdec.reconcile.bookkeeping.pacing import PROGRESS_WRITE_SECONDS
from specdec.reconcile.reconciler import START_WORKERS, WORKERS, Reconciler

__all__ = ["PROGRESS_WRITE_SECONDS", "START_WORKERS", "WORKERS", "Reconciler"]
