"""kopf wiring: thin adapters from watch events to the cache and the Reconciler.

Only `on.event` handlers: they keep no state on the objects (kopf's create/update handlers would
write progress annotations), so reconciliation stays level-triggered and an idle operator writes
nothing. Every watched object lands in the Store first; reconciles read from it. A handler only
adds keys to the Reconciler's work queue: kopf's event loop never waits for a reconcile. Children are
watched with server-side label selectors, so the operator never lists every pod of the cluster.
A background loop re-lists (in case a watch missed something), resyncs and collects unused engines.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, TypeVar

import kopf
import yaml

from specdec import metrics
from specdec.api.models import GROUP, VERSION
from specdec.builders.common import (
    LABEL_COMPONENT,
    LABEL_DEPLOYMENT,
    LABEL_ENGINE_BUILD,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_MODEL_CACHE,
    MANAGED_BY,
)
from specdec.builders.multinode import RUNTIME_WORKER
from specdec.builders.serving import RUNTIME, RUNTIME_CANARY
from specdec.kube import gc_pacing, kopf_patches
from specdec.kube.cache import Store
from specdec.kube.client import KINDS, Kube
from specdec.kube.leader import Leadership
from specdec.plan import plan
from specdec.reconcile import Reconciler
from specdec.settings import Settings
from specdec.status.deployment import runtime_pod_blocked, runtime_view
from specdec.status.groups import GROUP_INDEX_LABEL, group_pod_view

log = logging.getLogger("specdec")

MANAGED = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


@dataclasses.dataclass(frozen=True)
class Watched:
    """A kind the operator caches (its API names: specdec.kube.client.KINDS) and which objects of it we watch."""

    kind: str
    label_selector: str | None = None

    @property
    def group_version(self) -> tuple[str, str]:
        """(group, version); the core group is ""."""
        group, _, version = KINDS[self.kind].api_version.rpartition("/")
        return group, version

    @property
    def plural(self) -> str:
        return KINDS[self.kind].plural


# Every kind the operator watches, and so caches; its kopf handlers are registered from here (_on_event).
WATCHED = (
    Watched("SpeculativeDeployment"),
    Watched("EngineBuild"),
    Watched("ModelCache"),
    Watched("Job", MANAGED),  # build and fetch Jobs
    Watched("Pod", MANAGED),  # build, fetch and runtime pods
    Watched("Deployment", MANAGED),
    # A target spanning nodes (specdec.builders.multinode); where the cluster serves no LeaderWorkerSet, kopf
    # watches nothing and the deployments that need one say so (LeaderWorkerSetNotInstalled).
    Watched("LeaderWorkerSet", MANAGED),
    Watched("ConfigMap", MANAGED),
    Watched("Service", MANAGED),
    Watched("PersistentVolumeClaim", MANAGED),
)

_Handler = TypeVar("_Handler", bound=Callable[..., Awaitable[None]])


def _on_event(kind: str) -> Callable[[_Handler], _Handler]:
    """kopf's event handler for a watched kind, filtered on our label where its watch selects by it."""
    watched = next(w for w in WATCHED if w.kind == kind)
    group, version = watched.group_version
    resource = (group, version, watched.plural) if group else (version, watched.plural)
    labels = {LABEL_MANAGED_BY: MANAGED_BY} if watched.label_selector else None

    def register(handler: _Handler) -> _Handler:
        kopf.on.event(*resource, labels=labels)(handler)
        return handler

    return register


@dataclasses.dataclass
class Running:
    """What the operator's start left running, kept in kopf's memo for the handlers, the probes and the stop."""

    reconciler: Reconciler
    wake: threading.Event  # a resync pass now, not at the next interval
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    resync: threading.Thread | None = None
    leadership: Leadership | None = None


def running(memo: kopf.Memo) -> Running:
    """What `configure` started (kopf hands each object's handlers a copy of the operator's memo)."""
    found: Running = memo["running"]
    return found


def reconciler(memo: kopf.Memo) -> Reconciler:
    return running(memo).reconciler


def _observe(memo: kopf.Memo, kind: str, event) -> bool:
    """Cache the event's object; False for the echo of our own write: no reconcile needed for it
    (a deployment's status writes would otherwise each cost a second, idle reconcile)."""
    return reconciler(memo).kube.store.observe(kind, event)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
    ours = Settings.from_env()
    settings.posting.enabled = False  # we post our own Events, only when something changes
    # No namespace or CRD scanning: it needs cluster-wide list/watch rights a namespaced install does not
    # have (kopf retries for a minute before watching). The namespaces and resources are known.
    settings.scanning.disabled = True
    settings.execution.max_workers = 2  # for the sync handlers: this one, the probe, the cleanup
    kopf_patches.install(settings)
    gc_pacing.install()
    for watched in WATCHED:
        if watched.label_selector:
            group, version = watched.group_version
            settings.watching.label_selectors[group or version, watched.plural] = watched.label_selector
    store = Store(
        (w.kind for w in WATCHED),
        indexed_labels=(LABEL_INSTANCE, LABEL_ENGINE_BUILD, LABEL_MODEL_CACHE),
        selectors={w.kind: w.label_selector for w in WATCHED if w.label_selector},
    )
    kube = Kube.from_environment(store)
    # With scanning off, kopf would wait silently for CRDs that appear later: say what is missing instead.
    missing = {w.plural for w in WATCHED if w.group_version == (GROUP, VERSION)} - kube.served_resources(
        f"{GROUP}/{VERSION}"
    )
    if missing:
        raise kopf.PermanentError(
            f"the API server does not serve {', '.join(sorted(missing))} ({GROUP}/{VERSION}): install the CRDs "
            "first (kubectl apply -f crds/, or the Helm chart)"
        )
    wake = threading.Event()
    try:
        leadership = Leadership.from_env(
            kube.api, on_started=lambda: _started_leading(wake), on_stopped=_stopped_leading
        )
    except ValueError as error:
        raise kopf.PermanentError(f"leader election: {error}") from error
    state = Running(Reconciler(kube, ours, active=leadership.is_leader if leadership else lambda: True), wake)
    memo["running"] = state
    state.reconciler.gpu_nodes.refresh()  # before the first reconcile, so that admission sees the GPUs
    _warm_up(ours)
    state.reconciler.speculation.start()
    if memo.get("metrics_port"):
        metrics.serve(memo["metrics_port"], lambda kind: store.list(kind, None))
    # None = all namespaces; else only the watched ones (a namespaced install has no cluster-wide rights).
    namespaces = list(memo.get("namespaces") or []) or [None]
    state.resync = threading.Thread(
        target=_resync_loop, args=(state, ours.resync_seconds, namespaces), daemon=True, name="specdec-resync"
    )
    state.resync.start()
    if leadership:
        state.leadership = leadership
        leadership.start()


def _warm_up(settings: Settings) -> None:
    """Plan each embedded example once, before the watches start: a process's first plan() builds the CEL
    parser and compiles the rules it meets (0.22 s of CPU, which a fleet's first deployment waited for); later
    ones take milliseconds. Only a head start: a failure is logged, never in the way of the operator's start."""
    try:
        for example in sorted(resources.files("specdec").joinpath("examples").iterdir(), key=lambda p: p.name):
            if example.name.endswith(".yaml"):
                plan(yaml.safe_load(example.read_text()), settings)
    except Exception:  # noqa: BLE001 — the first deployment pays instead, and meets the same bug in its status
        log.exception("warming up plan() on the embedded examples failed")


def _started_leading(wake: threading.Event) -> None:
    log.info("leading: reconciling everything now")
    wake.set()  # a standby ignored every event: catch up at once


def _stopped_leading() -> None:
    log.warning("no longer leading: standing by (watching, not reconciling)")


@kopf.on.cleanup()
def shutdown(memo: kopf.Memo, **_) -> None:
    if "running" not in memo:
        return
    state = running(memo)
    state.stop.set()
    state.wake.set()
    state.reconciler.speculation.stop()
    if state.leadership:
        state.leadership.stop()  # release the Lease: a standby takes over at once


def _resync_loop(state: Running, interval: float, namespaces: list[str | None]) -> None:
    """Periodic level-triggered pass: catches anything a lost watch event would have missed."""
    refreshes = [(w.kind, w.label_selector) for w in WATCHED]
    while True:
        state.wake.wait(interval)
        state.wake.clear()
        if state.stop.is_set():
            return
        with metrics.RESYNC_SECONDS.time():
            state.reconciler.gpu_nodes.refresh()
            for namespace in namespaces:
                try:
                    state.reconciler.resync(namespace, refreshes)
                except Exception:  # resync isolates objects; this is a bug, and the next pass tries again
                    log.exception("resync pass failed (namespace %s)", namespace or "all")


@kopf.on.probe(id="workers")
def workers_alive(memo: kopf.Memo, **_) -> str:
    """Liveness: kopf's own /healthz answers while its loop runs; our threads must be alive too."""
    state = running(memo) if "running" in memo else None
    r = state.reconciler if state else None
    dead = [
        name
        for name, alive in (
            ("event poster", r is None or r.kube.events.alive),
            ("delayed reconciles", r is None or r.delays.alive),
            ("reconcile workers", r is None or r.workers_alive),
            ("resync", state is None or state.resync is None or state.resync.is_alive()),
            ("speculation monitor", r is None or r.speculation.alive),
            ("leader election", state is None or state.leadership is None or state.leadership.alive),
        )
        if not alive
    ]
    if dead:
        raise kopf.PermanentError(f"worker thread(s) died: {', '.join(dead)}")
    return "ok"


# The watch handlers are coroutines that never await: each caches the event and adds keys to a work queue
# (microseconds, under locks held as briefly), so kopf runs them on its event loop. As plain functions each
# event went through kopf's thread pool and back: two GIL hand-offs among busy reconcile threads per event.
@_on_event("SpeculativeDeployment")
async def speculative_deployment_event(event, namespace, name, memo: kopf.Memo, **_) -> None:
    if not _observe(memo, "SpeculativeDeployment", event):
        return
    if event.get("type") == "DELETED":
        reconciler(memo).forget(namespace, name)
        return
    obj = event["object"]  # a spec not acted on yet (new or changed) is work, not a status refresh
    if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation"):
        reconciler(memo).enqueue("SpeculativeDeployment", namespace, name)
    else:
        reconciler(memo).start(namespace, name)


@_on_event("EngineBuild")
async def engine_build_event(event, namespace, name, memo: kopf.Memo, **_) -> None:
    _shared_event(reconciler(memo), "EngineBuild", event, namespace, name)


@_on_event("ModelCache")
async def model_cache_event(event, namespace, name, memo: kopf.Memo, **_) -> None:
    _shared_event(reconciler(memo), "ModelCache", event, namespace, name)


def _shared_event(r: Reconciler, kind: str, event, namespace: str, name: str) -> None:
    if not r.kube.store.observe(kind, event):
        return
    if event.get("type") == "DELETED":
        r.shared_gone(kind, namespace, name)
        return
    r.shared_seen(kind, event["object"])


def _view_changed(view: Callable[[dict[str, Any] | None], object], before: dict[str, Any] | None, event) -> bool:
    """Whether the event changes what `view` reads of the object (cached `before` it; None once deleted)."""
    return view(before) != view(None if event.get("type") == "DELETED" else event["object"])


def _worker_of(labels) -> tuple[str, str] | None:
    """The EngineBuild or ModelCache a Job or pod of ours works for."""
    if LABEL_ENGINE_BUILD in labels:
        return "EngineBuild", labels[LABEL_ENGINE_BUILD]
    if LABEL_MODEL_CACHE in labels:
        return "ModelCache", labels[LABEL_MODEL_CACHE]
    return None


@_on_event("Job")
async def job_event(event, namespace, labels, memo: kopf.Memo, **_) -> None:
    if not _observe(memo, "Job", event):
        return
    owner = _worker_of(labels)
    if owner:
        reconciler(memo).enqueue(owner[0], namespace, owner[1])  # its users hear from it


@_on_event("Pod")
async def pod_event(event, namespace, name, labels, memo: kopf.Memo, **_) -> None:
    before = reconciler(memo).kube.store.get("Pod", namespace, name)
    if not _observe(memo, "Pod", event):
        return
    owner = _worker_of(labels)
    if owner:
        reconciler(memo).enqueue(owner[0], namespace, owner[1])
    elif labels.get(LABEL_COMPONENT) in (RUNTIME, RUNTIME_CANARY, RUNTIME_WORKER) and LABEL_INSTANCE in labels:
        # Only why a runtime pod is blocked (unschedulable, a container that will not start or keeps exiting): its
        # readiness wakes the deployment through its Deployment's status, and a reconcile per pod event was 2-3
        # more per deployment in a fleet (bench/run.py).
        # A group's pods (a target spanning nodes) also when one comes, goes or changes readiness: the status says
        # which pod of which group is missing and why (specdec.status.groups).
        group = GROUP_INDEX_LABEL in labels and _view_changed(group_pod_view, before, event)
        if group or _view_changed(runtime_pod_blocked, before, event):
            reconciler(memo).enqueue("SpeculativeDeployment", namespace, labels[LABEL_INSTANCE])


@_on_event("Deployment")
@_on_event("LeaderWorkerSet")
async def runtime_deployment_event(event, resource, namespace, name, labels, memo: kopf.Memo, **_) -> None:
    before = reconciler(memo).kube.store.get(resource.kind, namespace, name)
    if not _observe(memo, resource.kind, event):
        return
    if LABEL_DEPLOYMENT in labels and _view_changed(runtime_view, before, event):
        reconciler(memo).enqueue("SpeculativeDeployment", namespace, labels[LABEL_DEPLOYMENT])


@_on_event("Service")
async def runtime_service_event(event, namespace, labels, memo: kopf.Memo, **_) -> None:
    """Its deployment is Ready only with its Service: one changed or deleted by someone else is applied again."""
    if _observe(memo, "Service", event) and LABEL_DEPLOYMENT in labels:
        reconciler(memo).enqueue("SpeculativeDeployment", namespace, labels[LABEL_DEPLOYMENT])


@_on_event("ConfigMap")
@_on_event("PersistentVolumeClaim")
async def child_event(event, resource, memo: kopf.Memo, **_) -> None:
    """Only cached: their owner reconciles when its own watch tells it to."""
    _observe(memo, resource.kind, event)
