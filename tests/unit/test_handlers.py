"""The operator's kopf wiring."""

from __future__ import annotations

import asyncio
import threading

import kopf

from specdec import handlers
from specdec.admission.validation import _parse_canonical
from specdec.kube import kopf_patches
from specdec.kube.cache import Store
from specdec.plan import Plan, plan
from specdec.schema import base, cel
from tests.unit.helpers import EXAMPLE_70B, SETTINGS, load_example
from tests.unit.test_status import AS_ROOT, RT_POD, rt_exit, rt_waiting, runtime_pod


def test_a_handler_per_watched_kind_filtered_on_our_label_where_its_watch_selects_by_it():
    """kopf's handlers are registered from WATCHED: one per kind, each named as the client's KINDS name it."""
    registered = {
        (h.selector.group or "", h.selector.version, h.selector.plural or h.selector.any_name): h.labels
        for h in kopf.get_default_registry()._watching.get_all_handlers()
    }
    assert registered == {
        (*w.group_version, w.plural): {"app.kubernetes.io/managed-by": "specdec-operator"} if w.label_selector else None
        for w in handlers.WATCHED
    }
    assert ("", "v1", "pods") in registered and ("specdec.io", "v1alpha1", "enginebuilds") in registered


def test_only_event_handlers_so_no_diff_base_is_needed():
    # kopf_patches.NoDiffBase skips kopf's per-event copy of every object: right only while no handler diffs
    # (on.create, on.update, on.field, on.resume, on.delete, daemons, timers).
    registry = kopf.get_default_registry()
    assert list(registry._watching.get_all_handlers())
    assert not list(registry._changing.get_all_handlers()) and not list(registry._spawning.get_all_handlers())
    assert kopf_patches.NoDiffBase().build(body={"spec": {}}) is None


def test_after_the_warm_up_an_example_s_first_plan_compiles_no_cel_rule():
    _parse_canonical.cache_clear()  # as in a new process: nothing parsed, judged or compiled
    base._broken.cache_clear()
    cel._program.cache_clear()
    handlers._warm_up(SETTINGS)
    compiled = cel._program.cache_info().currsize
    assert compiled > 10  # the models' rules, compiled once each
    sd = load_example(EXAMPLE_70B)
    sd["metadata"].update(name="another", namespace="ns")
    assert isinstance(plan(sd, SETTINGS), Plan)
    assert cel._program.cache_info().currsize == compiled


def test_a_failing_warm_up_does_not_stop_the_operator_s_start(monkeypatch, caplog):
    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in plan()")

    monkeypatch.setattr(handlers, "plan", broken)
    handlers._warm_up(SETTINGS)  # returns
    assert "warming up plan()" in caplog.text and "a bug in plan()" in caplog.text


class _Woken:
    """The reconciler as the pod watch handler sees it: the watch cache, and the keys it queues."""

    def __init__(self):
        self.kube = type("Kube", (), {})()
        self.kube.store = Store(["Pod"])
        self.queued: list[tuple[str, str, str]] = []

    def enqueue(self, kind: str, namespace: str, name: str, urgent: bool = False) -> None:  # noqa: ARG002 - the Reconciler's signature
        self.queued.append((kind, namespace, name))


def test_a_runtime_pod_wakes_its_deployment_only_when_what_blocks_it_changes():
    """Zero reconciles for a converged fleet's pod events (a restart count, a probe), one each time a container's
    verdict changes (a root image refused, then fixed)."""
    woken = _Woken()
    memo = kopf.Memo(running=handlers.Running(woken, threading.Event()))  # what configure leaves in kopf's memo
    labels = {
        "app.kubernetes.io/component": "runtime",
        "app.kubernetes.io/instance": "sd",
        "app.kubernetes.io/managed-by": "specdec-operator",
    }
    version = iter(range(1, 100))

    def event(pod, kind="MODIFIED"):
        pod["metadata"].update(resourceVersion=str(next(version)), labels=labels)
        asyncio.run(
            handlers.pod_event(
                event={"type": kind, "object": pod}, namespace="ns", name=RT_POD, labels=labels, memo=memo
            )
        )
        return len(woken.queued)

    running = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    assert event(runtime_pod({"waiting": {"reason": "ContainerCreating"}}, phase="Pending"), "ADDED") == 0
    assert event(runtime_pod(rt_waiting("CreateContainerConfigError", AS_ROOT), phase="Pending")) == 1
    assert event(runtime_pod(rt_waiting("CreateContainerConfigError", AS_ROOT), phase="Pending")) == 1
    assert event(runtime_pod(running, started=True)) == 2  # started: no longer blocked
    assert event(runtime_pod(running, started=True, ready=True)) == 2
    assert event(runtime_pod(running, restarts=3, last=rt_exit(137, "OOMKilled"), started=True, ready=True)) == 2
    assert event(runtime_pod(running, restarts=3, last=rt_exit(137, "OOMKilled"), started=True), "DELETED") == 2
    assert woken.queued == [("SpeculativeDeployment", "ns", "sd")] * 2
