"""Each reconcile controller on its own, and the whole reconciler on an in-memory API server (tests/unit/apiserver.py):
a converged deployment makes no write at all on a further reconcile."""

from __future__ import annotations

import datetime

from specdec.admission.gpu_nodes import GpuNodeInventory
from specdec.builders.engine import build_engine_build
from specdec.builders.model_cache import build_model_cache
from specdec.kube.workqueue import BACKOFF_FIRST
from specdec.plan import plan
from specdec.reconcile import WORKERS, Reconciler
from specdec.reconcile.bookkeeping.failures import Backoff, ServiceFailures
from specdec.reconcile.bookkeeping.locks import Locks
from specdec.reconcile.bookkeeping.pacing import WritePacing
from specdec.reconcile.bookkeeping.users import Users
from specdec.reconcile.build_and_cache_jobs import SharedJobs
from specdec.reconcile.builds_and_caches import SharedController
from specdec.reconcile.collect import ANNOTATION_UNUSED_SINCE, GarbageCollector
from specdec.reconcile.deployment import DeploymentController
from specdec.reconcile.deployment_status import DeploymentStatusWriter
from specdec.reconcile.fanout import UserFanout
from specdec.reconcile.inputs import DeploymentInputs
from specdec.reconcile.ownership import Children
from specdec.reconcile.plans import PlanMemo
from specdec.reconcile.runtime_applier import RuntimeApplier
from tests.unit.apiserver import Cluster
from tests.unit.helpers import EXAMPLE_13B, SETTINGS, Recorded, load_example


def example(namespace: str = "ns") -> dict:
    sd = load_example(EXAMPLE_13B)
    sd["metadata"]["namespace"] = namespace
    return sd


class Queues:
    """Work queues that record keys; `enqueue` is what a controller is handed."""

    def __init__(self):
        self.by_kind = {kind: Recorded() for kind in WORKERS}

    def enqueue(self, kind, namespace, name, urgent=False):
        self.by_kind[kind].add((kind, namespace, name), urgent)

    def take(self) -> list[tuple]:
        keys = [key for q in self.by_kind.values() for key in dict.fromkeys(q.keys)]
        for q in self.by_kind.values():
            q.keys.clear(), q.urgent.clear()
        return keys


class Operator:
    """The Reconciler on a Cluster, its work queues run by hand, its delayed reconciles recorded."""

    def __init__(self, cluster: Cluster):
        self.reconciler = Reconciler(cluster.kube, SETTINGS)
        self.queues = Queues()
        self.reconciler.queues = self.queues.by_kind

    def resync(self) -> None:
        """A resync pass, then every key it queued (the Service lane's too), until none is left."""
        self.reconciler.pacing.last_written.clear()  # the pacing interval has passed
        for q in self.queues.by_kind.values():
            q.later.clear()
        self.reconciler.resync(None, [])
        for _ in range(10):
            keys = self.queues.take()
            if not keys:
                return
            for kind, namespace, name in keys:
                if kind == "SpeculativeDeployment":
                    self.reconciler.reconcile_deployment(namespace, name)
                elif kind == "Service":
                    self.reconciler.services.reconcile((kind, namespace, name))
                else:
                    self.reconciler.reconcile_shared(kind, namespace, name)
        raise AssertionError("the work queues never drained")

    @property
    def deferred(self) -> list[tuple]:
        """The keys queued for later since the last resync."""
        return [key for q in self.queues.by_kind.values() for _, key in q.later]


def test_a_converged_deployment_makes_no_write_on_a_further_reconcile():
    cluster = Cluster()
    sd = cluster.add(example())
    operator = Operator(cluster)
    for _ in range(8):
        operator.resync()
        cluster.run_controllers()
        status = cluster.store.get("SpeculativeDeployment", "ns", sd["metadata"]["name"]).get("status") or {}
        if status.get("phase") == "Ready":
            break
    assert status.get("phase") == "Ready", status
    kinds = {path.split("/")[-1] for method, path in cluster.writes() if method == "POST"}
    assert {"modelcaches", "enginebuilds", "jobs", "configmaps", "deployments", "services"} <= kinds

    requests, events = len(cluster.requests), len(cluster.events)
    operator.resync()
    assert cluster.requests[requests:] == []  # not a write, not even a read: all from the cache
    assert cluster.events[events:] == [] and operator.deferred == []


def shared_controller(cluster: Cluster, queues: Queues, users: Users) -> SharedController:
    def later(seconds, *key, urgent=False):
        return None

    plans = PlanMemo(
        SETTINGS,
        GpuNodeInventory(lambda selector: [], False),
        lambda namespace: cluster.kube.list("ModelCache", namespace),
    )
    return SharedController(
        cluster.kube,
        SharedJobs(cluster.kube, SETTINGS),
        UserFanout(cluster.kube, users, plans, queues.enqueue),
        WritePacing(later),
        Backoff(later),
        Locks(),
        queues.enqueue,
        later,
        active=lambda: True,
    )


def test_the_shared_object_controller_starts_a_build_once_its_checkpoint_is_fetched_and_then_writes_nothing():
    cluster, queues, users = Cluster(), Queues(), Users()
    shared = shared_controller(cluster, queues, users)
    p = plan(cluster.add(example()), SETTINGS)
    target = next(e for e in p.engines if e.role == "target")
    cache = next(
        c
        for c in p.model_caches
        if (c.spec.model, c.spec.revision) in {(i.spec.model, i.spec.revision) for i in target.inputs}
    )
    eb = cluster.add(build_engine_build("ns", target))["metadata"]["name"]
    mc = cluster.add(build_model_cache("ns", cache))["metadata"]["name"]
    users.use("ns", eb, "user")

    assert shared.reconcile("EngineBuild", "ns", eb).reason == "WaitingForCheckpoints"
    assert cluster.store.get("Job", "ns", f"{eb}-build") is None  # no GPU Job while its download runs
    assert queues.take() == [("SpeculativeDeployment", "ns", "user")]  # its user heard the first status
    writes = len(cluster.writes())
    shared.pacing.last_written.clear()  # the pacing interval has passed: nothing holds a write back
    assert shared.reconcile("EngineBuild", "ns", eb).reason == "WaitingForCheckpoints"
    assert len(cluster.writes()) == writes  # unchanged: not written again

    shared.reconcile("ModelCache", "ns", mc)  # creates the fetch Job
    cluster.run_controllers()
    assert shared.reconcile("ModelCache", "ns", mc).phase == "Fetched"
    assert ("EngineBuild", "ns", eb) in queues.take()  # the build reading the checkpoint is woken
    shared.reconcile("EngineBuild", "ns", eb)  # creates the build Job
    assert cluster.store.get("Job", "ns", f"{eb}-build") is not None
    cluster.run_controllers()
    assert shared.reconcile("EngineBuild", "ns", eb).succeeded
    assert queues.take() == [("SpeculativeDeployment", "ns", "user")]
    writes = len(cluster.writes())
    shared.pacing.last_written.clear()
    shared.reconcile("EngineBuild", "ns", eb)
    shared.reconcile("ModelCache", "ns", mc)
    assert len(cluster.writes()) == writes and queues.take() == []


def deployment_controller(
    cluster: Cluster, queues: Queues, reconciled_shared: list, behind_creates=lambda namespace, name: False
) -> DeploymentController:
    def later(seconds, *key, urgent=False):
        return None

    plans = PlanMemo(
        SETTINGS,
        GpuNodeInventory(lambda selector: [], False),
        lambda namespace: cluster.kube.list("ModelCache", namespace),
    )
    service_failures = ServiceFailures()
    inputs = DeploymentInputs(cluster.kube, Users(), lambda *key: reconciled_shared.append(key), queues.enqueue)
    runtime = RuntimeApplier(
        cluster.kube, SETTINGS, Children(cluster.kube), service_failures, lambda namespace, name: None, queues.enqueue
    )
    status = DeploymentStatusWriter(cluster.kube, WritePacing(later), lambda namespace, name, generation: None)
    return DeploymentController(
        cluster.kube,
        plans,
        inputs,
        runtime,
        status,
        service_failures,
        Backoff(later),
        Locks(),
        lambda namespace, name: None,
        active=lambda: True,
        behind_creates=behind_creates,
    )


def test_the_deployment_controller_creates_its_inputs_then_its_runtime_and_reports_each_step():
    cluster, queues, reconciled_shared = Cluster(), Queues(), []
    controller = deployment_controller(cluster, queues, reconciled_shared)
    name = cluster.add(example())["metadata"]["name"]

    def status() -> dict:
        return cluster.store.get("SpeculativeDeployment", "ns", name)["status"]

    controller.reconcile("ns", name)
    created = sorted(path.split("/")[-1] for method, path in cluster.writes() if method == "POST")
    assert created == ["enginebuilds"] * 2 + ["modelcaches"] * 2 + ["persistentvolumeclaims", "speculativedeployments"]
    assert status()["phase"] == "Building" and reconciled_shared == []  # their own queues reconcile them, first
    shared = queues.by_kind["EngineBuild"].keys + queues.by_kind["ModelCache"].keys
    assert len(shared) == 4 and all(queues.by_kind["EngineBuild"].urgent + queues.by_kind["ModelCache"].urgent)
    queues.take()

    done = {"EngineBuild": ("Succeeded", "Built"), "ModelCache": ("Fetched", "Fetched")}
    for kind, _, shared_name in shared:
        phase, reason = done[kind]
        cluster.kube.patch(
            kind,
            "ns",
            shared_name,
            {"status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True", "reason": reason}]}},
            subresource="status",
        )
    controller.reconcile("ns", name)
    assert {path.split("/")[-1] for method, path in cluster.writes()[-3:] if method == "POST"} == {
        "configmaps",
        "deployments",
    }
    assert status()["phase"] == "RollingOut"
    assert queues.take() == [("Service", "ns", name)]  # the Service lane applies it
    cluster.run_controllers()
    controller.status.pacing.last_written.clear()
    controller.reconcile("ns", name)
    ready = next(c for c in status()["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ServicePending"  # the runtime is available, its Service not applied yet
    writes = len(cluster.writes())
    controller.status.pacing.last_written.clear()
    controller.reconcile("ns", name)
    assert len(cluster.writes()) == writes  # nothing changed: nothing written


def test_a_runtime_written_while_other_creates_wait_leaves_its_status_to_its_next_pass():
    """A shared engine's end releases its users at once: each one's Deployment before any of their status writes."""
    cluster, queues, requeued = Cluster(), Queues(), []
    creates_waiting = [True]

    def behind_creates(namespace, name):
        if creates_waiting[0]:
            requeued.append(name)
        return creates_waiting[0]

    controller = deployment_controller(cluster, queues, [], behind_creates)
    name = cluster.add(example())["metadata"]["name"]
    controller.reconcile("ns", name)  # its inputs: nothing of its runtime written, its status written
    assert requeued == [] and cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["phase"] == "Building"
    for kind in ("EngineBuild", "ModelCache"):
        for shared in cluster.store.list(kind, "ns"):
            phase = "Succeeded" if kind == "EngineBuild" else "Fetched"
            cluster.kube.patch(
                kind,
                "ns",
                shared["metadata"]["name"],
                {"status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True", "reason": phase}]}},
                subresource="status",
            )
    controller.reconcile("ns", name)
    assert requeued == [name]
    assert [path.split("/")[-1] for method, path in cluster.writes()[-2:]] == ["configmaps", "deployments"]
    assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["phase"] == "Building"
    controller.reconcile("ns", name)  # its next pass: nothing to create, the status written whatever waits
    assert requeued == [name] and [path.split("/")[-1] for _, path in cluster.writes()[-1:]] == ["status"]
    assert cluster.store.get("SpeculativeDeployment", "ns", name)["status"]["phase"] == "RollingOut"


def test_garbage_collection_marks_an_unused_engine_deletes_it_after_the_retention_and_unmarks_a_used_one():
    cluster = Cluster()
    sd = cluster.add(example())
    p = plan(sd, SETTINGS)
    used = cluster.add(build_engine_build("ns", p.engines[0]))["metadata"]["name"]
    other = plan(example("elsewhere"), SETTINGS)  # its EngineBuild, made again in ns: nobody's there
    unused_build = build_engine_build("ns", other.engines[0])
    unused_build["metadata"]["name"] = "unused"
    cluster.add(unused_build)
    plans = PlanMemo(
        SETTINGS,
        GpuNodeInventory(lambda selector: [], False),
        lambda namespace: cluster.kube.list("ModelCache", namespace),
    )
    collector = GarbageCollector(cluster.kube, SETTINGS, plans)
    now = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)

    def marked(name: str) -> str | None:
        return (cluster.store.get("EngineBuild", "ns", name)["metadata"].get("annotations") or {}).get(
            ANNOTATION_UNUSED_SINCE
        )

    assert collector.collect("ns", now) == []
    assert marked("unused") == "2026-01-02T00:00:00Z" and marked(used) is None
    later = now + datetime.timedelta(seconds=SETTINGS.engine_retention_seconds - 1)
    assert collector.collect("ns", later) == []  # within the retention: kept
    cluster.kube.patch("EngineBuild", "ns", used, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: "x"}}})
    assert collector.collect("ns", later + datetime.timedelta(seconds=2)) == ["unused"]
    assert cluster.store.get("EngineBuild", "ns", "unused") is None and marked(used) is None


def test_users_hear_of_a_change_once_and_a_deleted_shared_object_is_heard_of_anew():
    users = Users()
    users.use("ns", "eb", "b"), users.use("ns", "eb", "a"), users.use("other", "eb", "c")
    assert users.of("ns", "eb") == ["a", "b"]
    assert sorted(users.to_tell("ns", "eb", ("built",))) == ["a", "b"]
    assert users.to_tell("ns", "eb", ("built",)) is None
    users.forget_shared("ns", "eb")
    assert sorted(users.to_tell("ns", "eb", ("built",))) == ["a", "b"]
    users.forget_user("ns", "a")
    assert users.of("ns", "eb") == ["b"] and users.of("other", "eb") == ["c"]


def test_backoff_waits_longer_after_each_failure_and_starts_over_once_settled():
    waits = []
    backoff = Backoff(lambda seconds, *key, urgent=False: waits.append(seconds))
    key = ("EngineBuild", "ns", "eb")
    for _ in range(3):
        backoff.retry_later(key)
    backoff.settled(key)
    backoff.retry_later(key)
    first = (BACKOFF_FIRST * 0.8, BACKOFF_FIRST * 1.2)  # jittered by 20%
    assert waits[0] < waits[1] < waits[2] and first[0] <= waits[3] <= first[1]
