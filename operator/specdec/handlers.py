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
from collections.abc import Callable
from importlib import resources
from typing import Any, TypedDict

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
from specdec.kube import gc_pacing, kopf_patches
from specdec.kube.cache import Store
from specdec.kube.client import Kube
from specdec.kube.leader import Leadership
from specdec.plan import plan
from specdec.reconcile import Reconciler
from specdec.settings import Settings
from specdec.status.deployment import runtime_pod_blocked, runtime_view

log = logging.getLogger("specdec")

MANAGED = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


@dataclasses.dataclass(frozen=True)
class Watched:
    """A kind the operator caches: how kopf names it and which objects of it we watch."""

    kind: str
    group_version: tuple[str, str]  # (group, version); the core group is ""
    plural: str
    label_selector: str | None = None


WATCHED = (
    Watched("SpeculativeDeployment", (GROUP, VERSION), "speculativedeployments"),
    Watched("EngineBuild", (GROUP, VERSION), "enginebuilds"),
    Watched("ModelCache", (GROUP, VERSION), "modelcaches"),
    Watched("Job", ("batch", "v1"), "jobs", MANAGED),  # build and fetch Jobs
    Watched("Pod", ("", "v1"), "pods", MANAGED),  # build, fetch and runtime pods
    Watched("Deployment", ("apps", "v1"), "deployments", MANAGED),
    Watched("ConfigMap", ("", "v1"), "configmaps", MANAGED),
    Watched("Service", ("", "v1"), "services", MANAGED),
    Watched("PersistentVolumeClaim", ("", "v1"), "persistentvolumeclaims", MANAGED),
)


class _Running(TypedDict, total=False):
    """What the operator's start left running, for the probes and the stop."""

    reconciler: Reconciler
    resync: threading.Thread
    leadership: Leadership


_state: _Running = {}
_STOP = threading.Event()
_WAKE = threading.Event()  # a resync pass now, not at the next interval


def reconciler() -> Reconciler:
    return _state["reconciler"]


def _observe(kind: str, event) -> bool:
    """Cache the event's object; False for the echo of our own write: no reconcile needed for it
    (a deployment's status writes would otherwise each cost a second, idle reconcile)."""
    return reconciler().kube.store.observe(kind, event)


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
    try:
        leadership = Leadership.from_env(kube.api, on_started=_started_leading, on_stopped=_stopped_leading)
    except ValueError as error:
        raise kopf.PermanentError(f"leader election: {error}") from error
    _state["reconciler"] = Reconciler(kube, ours, active=leadership.is_leader if leadership else lambda: True)
    reconciler().gpu_nodes.refresh()  # before the first reconcile, so that admission sees the GPUs
    _warm_up(ours)
    reconciler().speculation.start()
    if memo.get("metrics_port"):
        metrics.serve(memo["metrics_port"], lambda kind: store.list(kind, None))
    # None = all namespaces; else only the watched ones (a namespaced install has no cluster-wide rights).
    namespaces = list(memo.get("namespaces") or []) or [None]
    resync = threading.Thread(
        target=_resync_loop, args=(ours.resync_seconds, namespaces), daemon=True, name="specdec-resync"
    )
    resync.start()
    _state["resync"] = resync
    if leadership:
        _state["leadership"] = leadership
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


def _started_leading() -> None:
    log.info("leading: reconciling everything now")
    _WAKE.set()  # a standby ignored every event: catch up at once


def _stopped_leading() -> None:
    log.warning("no longer leading: standing by (watching, not reconciling)")


@kopf.on.cleanup()
def shutdown(**_) -> None:
    _STOP.set()
    _WAKE.set()
    if "reconciler" in _state:
        reconciler().speculation.stop()
    leadership = _state.get("leadership")
    if isinstance(leadership, Leadership):
        leadership.stop()  # release the Lease: a standby takes over at once


def _resync_loop(interval: float, namespaces: list[str | None]) -> None:
    """Periodic level-triggered pass: catches anything a lost watch event would have missed."""
    refreshes = [(w.kind, w.label_selector) for w in WATCHED]
    while True:
        _WAKE.wait(interval)
        _WAKE.clear()
        if _STOP.is_set():
            return
        with metrics.RESYNC_SECONDS.time():
            reconciler().gpu_nodes.refresh()
            for namespace in namespaces:
                try:
                    reconciler().resync(namespace, refreshes)
                except Exception:  # resync isolates objects; this is a bug, and the next pass tries again
                    log.exception("resync pass failed (namespace %s)", namespace or "all")


@kopf.on.probe(id="workers")
def workers_alive(**_) -> str:
    """Liveness: kopf's own /healthz answers while its loop runs; our threads must be alive too."""
    r = _state.get("reconciler")
    dead = [
        name
        for name, alive in (
            ("event poster", r is None or r.kube.events.alive),
            ("delayed reconciles", r is None or r.delays.alive),
            ("reconcile workers", r is None or r.workers_alive),
            ("resync", "resync" not in _state or _state["resync"].is_alive()),
            ("speculation monitor", r is None or r.speculation.alive),
            ("leader election", "leadership" not in _state or _state["leadership"].alive),
        )
        if not alive
    ]
    if dead:
        raise kopf.PermanentError(f"worker thread(s) died: {', '.join(dead)}")
    return "ok"


# The watch handlers are coroutines that never await: each caches the event and adds keys to a work queue
# (microseconds, under locks held as briefly), so kopf runs them on its event loop. As plain functions each
# event went through kopf's thread pool and back: two GIL hand-offs among busy reconcile threads per event.
@kopf.on.event(GROUP, VERSION, "speculativedeployments")
async def speculative_deployment_event(event, namespace, name, **_) -> None:
    if not _observe("SpeculativeDeployment", event):
        return
    if event.get("type") == "DELETED":
        reconciler().forget(namespace, name)
        return
    obj = event["object"]  # a spec not acted on yet (new or changed) is work, not a status refresh
    if (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation"):
        reconciler().enqueue("SpeculativeDeployment", namespace, name)
    else:
        reconciler().start(namespace, name)


@kopf.on.event(GROUP, VERSION, "enginebuilds")
async def engine_build_event(event, namespace, name, **_) -> None:
    _shared_event("EngineBuild", event, namespace, name)


@kopf.on.event(GROUP, VERSION, "modelcaches")
async def model_cache_event(event, namespace, name, **_) -> None:
    _shared_event("ModelCache", event, namespace, name)


def _shared_event(kind: str, event, namespace: str, name: str) -> None:
    if not _observe(kind, event):
        return
    if event.get("type") == "DELETED":
        reconciler().shared_gone(kind, namespace, name)
        return
    reconciler().shared_seen(kind, event["object"])


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


@kopf.on.event("batch", "v1", "jobs", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def job_event(event, namespace, labels, **_) -> None:
    if not _observe("Job", event):
        return
    owner = _worker_of(labels)
    if owner:
        reconciler().enqueue(owner[0], namespace, owner[1])  # its users hear from it


@kopf.on.event("v1", "pods", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def pod_event(event, namespace, name, labels, **_) -> None:
    before = reconciler().kube.store.get("Pod", namespace, name)
    if not _observe("Pod", event):
        return
    owner = _worker_of(labels)
    if owner:
        reconciler().enqueue(owner[0], namespace, owner[1])
    elif labels.get(LABEL_COMPONENT) == "runtime" and LABEL_INSTANCE in labels:
        # Only why a runtime pod is blocked (unschedulable, a container that will not start or keeps exiting): its
        # readiness wakes the deployment through its Deployment's status, and a reconcile per pod event was 2-3
        # more per deployment in a fleet (bench/run.py).
        if _view_changed(runtime_pod_blocked, before, event):
            reconciler().enqueue("SpeculativeDeployment", namespace, labels[LABEL_INSTANCE])


@kopf.on.event("apps", "v1", "deployments", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def runtime_deployment_event(event, namespace, name, labels, **_) -> None:
    before = reconciler().kube.store.get("Deployment", namespace, name)
    if not _observe("Deployment", event):
        return
    if LABEL_DEPLOYMENT in labels and _view_changed(runtime_view, before, event):
        reconciler().enqueue("SpeculativeDeployment", namespace, labels[LABEL_DEPLOYMENT])


@kopf.on.event("v1", "services", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def runtime_service_event(event, namespace, labels, **_) -> None:
    """Its deployment is Ready only with its Service: one changed or deleted by someone else is applied again."""
    if _observe("Service", event) and LABEL_DEPLOYMENT in labels:
        reconciler().enqueue("SpeculativeDeployment", namespace, labels[LABEL_DEPLOYMENT])


@kopf.on.event("v1", "configmaps", labels={LABEL_MANAGED_BY: MANAGED_BY})
@kopf.on.event("v1", "persistentvolumeclaims", labels={LABEL_MANAGED_BY: MANAGED_BY})
async def child_event(event, resource, **_) -> None:
    """Only cached: their owner reconciles when its own watch tells it to."""
    _observe(resource.kind, event)
