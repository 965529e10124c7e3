"""Which watch events wake whom: a shared EngineBuild wakes its users only when what they read changed."""

from __future__ import annotations

from kubernetes import client

from specdec.kube.cache import Store
from specdec.kube.client import Kube
from specdec.reconcile import Reconciler
from specdec.settings import Settings
from tests.unit.helpers import Recorded


def engine_build(rv: str, phase: str | None = None) -> dict:
    eb = {
        "kind": "EngineBuild",
        "metadata": {
            "name": "eb",
            "namespace": "ns",
            "resourceVersion": rv,
            "labels": {"app.kubernetes.io/managed-by": "specdec-operator"},
        },
        "spec": {"enginePath": "engines/eb"},
    }
    if phase:
        eb["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "False", "reason": phase}]}
    return eb


def test_users_hear_of_a_shared_build_only_when_its_status_spec_or_ownership_changes():
    reconciler = Reconciler(Kube(client.ApiClient(), Store(["EngineBuild"])), Settings())
    builds, deployments = Recorded(), Recorded()
    reconciler.queues = {"EngineBuild": builds, "SpeculativeDeployment": deployments}
    for user in ("a", "b"):
        reconciler.users.use("ns", "eb", user)

    reconciler.shared_seen("EngineBuild", engine_build("1"))
    first = sorted(deployments.keys)
    reconciler.shared_seen("EngineBuild", engine_build("2"))  # e.g. an annotation: nothing its users read
    reconciler.shared_seen("EngineBuild", engine_build("3", "Converting"))  # a step: nor is this
    reconciler.shared_seen("EngineBuild", engine_build("4", "Building"))
    unchanged = len(deployments.keys)
    reconciler.shared_seen("EngineBuild", engine_build("5", "Succeeded"))
    reconciler.shared_seen("EngineBuild", engine_build("6", "Succeeded"))

    assert first == [("SpeculativeDeployment", "ns", "a"), ("SpeculativeDeployment", "ns", "b")]
    assert unchanged == 2 and len(deployments.keys) == 4
    assert builds.keys == [("EngineBuild", "ns", "eb")] * 6  # the build itself reconciles on every event
    reconciler.shared_gone("EngineBuild", "ns", "eb")
    reconciler.shared_seen("EngineBuild", engine_build("7", "Succeeded"))  # recreated: its users hear again
    assert len(deployments.keys) == 6


def test_a_deployments_events_mark_ready_not_ready_and_each_new_failure():
    from specdec.conditions import Cond
    from specdec.reconcile.deployment_status import worth_an_event

    def ready(status: str, reason: str) -> dict:
        return {"type": "Ready", "status": status, "reason": reason}

    # progress between steps is in status only
    assert not worth_an_event({}, Cond("Ready", False, "Fetching"), None, "Building")
    assert not worth_an_event(
        ready("False", "Fetching"), Cond("Ready", False, "EnginesBuilding"), "Building", "Building"
    )
    assert not worth_an_event(
        ready("False", "EnginesBuilding"), Cond("Ready", False, "RollingOut"), "Building", "RollingOut"
    )
    assert worth_an_event(ready("False", "RollingOut"), Cond("Ready", True, "Ready"), "RollingOut", "Ready")
    assert not worth_an_event(ready("True", "Ready"), Cond("Ready", True, "Ready"), "Ready", "Ready")
    assert worth_an_event(ready("True", "Ready"), Cond("Ready", False, "RollingOut"), "Ready", "RollingOut")
    # failures: each new cause
    assert worth_an_event({}, Cond("Ready", False, "VocabularyMismatch"), None, "Invalid")
    assert not worth_an_event(ready("False", "BuildFailed"), Cond("Ready", False, "BuildFailed"), "Failed", "Failed")
    assert worth_an_event(ready("False", "BuildFailed"), Cond("Ready", False, "ApiUnavailable"), "Failed", "Failed")


def test_a_build_waits_for_its_checkpoints_and_a_fetch_wakes_only_the_builds_reading_it():
    import yaml

    from specdec.builders.engine import build_engine_build
    from specdec.builders.model_cache import build_model_cache
    from specdec.plan import plan
    from tests.unit.helpers import ROOT

    sd = yaml.safe_load((ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml").read_text())
    sd["metadata"].update(namespace="ns", uid="u")
    p = plan(sd, Settings())
    store = Store(["EngineBuild", "ModelCache"])
    reconciler = Reconciler(Kube(client.ApiClient(), store), Settings())
    builds = Recorded()
    reconciler.queues = {"EngineBuild": builds, "SpeculativeDeployment": Recorded(), "ModelCache": Recorded()}
    ebs = {e.role: build_engine_build("ns", e) for e in p.engines}
    caches = {c.spec.model: build_model_cache("ns", c) for c in p.model_caches}
    for obj in (*ebs.values(), *caches.values()):
        obj["metadata"]["resourceVersion"] = "1"
        store.put(obj)
    target = "hf://meta-llama/Llama-2-13b-hf"
    assert reconciler.shared.jobs.checkpoints_awaited(ebs["target"]) == [f"{target}@main"]

    fetched = {
        **caches[target],
        "status": {"phase": "Fetched", "conditions": [{"type": "Ready", "status": "True", "reason": "Fetched"}]},
    }
    fetched["metadata"] = {**fetched["metadata"], "resourceVersion": "2"}
    store.put(fetched)
    reconciler.shared_seen("ModelCache", fetched)
    assert reconciler.shared.jobs.checkpoints_awaited(ebs["target"]) == []
    assert reconciler.shared.jobs.checkpoints_awaited(ebs["draft"]) == ["hf://meta-llama/Llama-2-7b-hf@main"]
    assert builds.keys == [("EngineBuild", "ns", ebs["target"]["metadata"]["name"])]  # not the draft's


def test_a_deployment_of_an_uncatalogued_model_is_planned_again_when_its_fetch_reports_facts():
    """No EngineBuild while the facts are awaited (Plan.facts_awaited); a ModelCache's facts wake its users and
    give a new plan, here a refusal: 40 heads do not split over 3 GPUs."""
    from specdec.admission.model_catalog import catalog_facts
    from specdec.builders.model_cache import build_model_cache
    from specdec.plan import Plan, Problem, plan

    sd = {
        "apiVersion": "specdec.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "sd", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"target": {"model": "hf://example-org/llama-13b-finetune", "tensorParallelSize": 3}},
    }
    store = Store(["EngineBuild", "ModelCache", "SpeculativeDeployment"])
    reconciler = Reconciler(Kube(client.ApiClient(), store), Settings())
    deployments = Recorded()
    reconciler.queues = {"EngineBuild": Recorded(), "SpeculativeDeployment": deployments, "ModelCache": Recorded()}
    waiting = reconciler.plans.plan(sd)
    assert isinstance(waiting, Plan) and waiting.facts_awaited == ("hf://example-org/llama-13b-finetune",)
    cache = build_model_cache("ns", waiting.model_caches[0])
    reconciler.users.use("ns", cache["metadata"]["name"], "sd")
    fetched_without_facts = {
        "phase": "Fetched",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Fetched"}],
    }
    without_facts = {
        **cache,
        "metadata": {**cache["metadata"], "resourceVersion": "2"},
        "status": fetched_without_facts,
    }
    store.put(without_facts)
    reconciler.shared_seen("ModelCache", without_facts)
    assert reconciler.plans.plan(sd).facts_awaited == ()  # fetched, no facts: built unchecked, as a pvc:// model
    deployments.keys.clear()

    facts = catalog_facts("meta-llama/Llama-2-13b-hf").to_status()
    reported = {
        **cache,
        "metadata": {**cache["metadata"], "resourceVersion": "3"},
        "status": {**fetched_without_facts, "facts": facts},
    }
    store.put(reported)
    reconciler.shared_seen("ModelCache", reported)
    assert deployments.keys == [("SpeculativeDeployment", "ns", "sd")]  # facts alone changed: its users hear
    refused = reconciler.plans.plan(sd)
    assert isinstance(refused, Problem) and refused.reason == "TensorParallelDoesNotDivideHeads"
    assert refused.message.endswith(
        "(facts of example-org/llama-13b-finetune: the files its fetch read "
        f"(hf://example-org/llama-13b-finetune@main, ModelCache {cache['metadata']['name']}))"
    )
    assert plan(sd, Settings()).facts_awaited  # the offline plan still waits: it reads no ModelCache
    # the refusal keeps its ModelCache from collection: collected, its facts would be fetched again
    assert [c.name for c in refused.model_caches] == [cache["metadata"]["name"]]
    store.put({**sd, "metadata": {**sd["metadata"], "resourceVersion": "4"}})
    patches = []
    reconciler.kube.patch = lambda *args: patches.append(args)
    assert reconciler.collect_unused_engines("ns") == [] and patches == []  # not even marked unused


def test_a_plan_is_kept_while_the_facts_it_looked_up_are_the_same():
    """Another checkpoint of the namespace fetched (a fleet's hundred models) does not plan a deployment again;
    its own checkpoint's facts do."""
    from specdec.admission.model_catalog import catalog_facts
    from specdec.builders.model_cache import build_model_cache
    from specdec.plan import ModelCachePlan, plan
    from specdec.reconcile import plans as plan_memo

    sd = {
        "apiVersion": "specdec.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "sd", "namespace": "ns", "uid": "u", "generation": 1},
        "spec": {"target": {"model": "hf://example-org/llama-13b-finetune", "tensorParallelSize": 3}},
    }
    store = Store(["EngineBuild", "ModelCache", "SpeculativeDeployment"])
    reconciler = Reconciler(Kube(client.ApiClient(), store), Settings())
    planned = []
    reconciler_plan = plan_memo.plan
    plan_memo.plan = lambda *args: planned.append(args) or plan(*args)
    try:
        first = reconciler.plans.plan(sd)
        own = first.model_caches[0]
        other = ModelCachePlan(name="mc-other", spec=own.spec.model_copy(update={"model": "hf://example-org/other"}))

        def fetched(cache_plan, rv: str) -> None:
            cache = build_model_cache("ns", cache_plan)
            store.put(
                {
                    **cache,
                    "metadata": {**cache["metadata"], "resourceVersion": rv},
                    "status": {
                        "phase": "Fetched",
                        "facts": catalog_facts("meta-llama/Llama-2-13b-hf").to_status(),
                        "conditions": [{"type": "Ready", "status": "True", "reason": "Fetched"}],
                    },
                }
            )

        fetched(other, "2")
        assert reconciler.plans.plan(sd) is first and len(planned) == 1  # not a checkpoint it reads
        fetched(own, "3")
        assert reconciler.plans.plan(sd).reason == "TensorParallelDoesNotDivideHeads" and len(planned) == 2
        fetched(other, "4")
        reconciler.plans.plan(sd)
        assert len(planned) == 2
    finally:
        plan_memo.plan = reconciler_plan


def test_users_with_something_to_create_go_first_when_a_shared_object_is_done():
    import yaml

    from tests.unit.helpers import ROOT

    store = Store(["EngineBuild", "ModelCache"])
    reconciler = Reconciler(Kube(client.ApiClient(), store), Settings())
    deployments = Recorded()
    reconciler.queues = {"EngineBuild": Recorded(), "SpeculativeDeployment": deployments, "ModelCache": Recorded()}
    plans = {}
    for name, example in (
        ("engines", "llama-2-13b-draft-7b-logits.yaml"),
        ("torch", "llama-3.1-8b-draft-1b-pytorch.yaml"),
    ):
        sd = yaml.safe_load((ROOT / "examples" / example).read_text())
        sd["metadata"].update(name=name, namespace="ns", uid=name, generation=1)
        plans[name] = reconciler.plans.plan(sd)
    draft, target = (next(e.name for e in plans["engines"].engines if e.role == role) for role in ("draft", "target"))

    def told(kind: str, name: str, rv: str, phase: str) -> dict[str, bool]:
        """Whether each user of `name` is woken as urgent when it reaches `phase`."""
        obj = engine_build(rv, phase)
        obj["kind"], obj["metadata"]["name"] = kind, name
        for user in ("engines", "torch", "unplanned"):
            reconciler.users.use("ns", name, user)
        deployments.keys.clear(), deployments.urgent.clear()
        reconciler.shared_seen(kind, obj)
        return dict(zip((k[2] for k in deployments.keys), deployments.urgent, strict=True))

    # A fetched checkpoint: the EngineBuild starts its own Job; only the runtime that reads it (pytorch)
    # and a deployment not planned yet have work.
    assert told("ModelCache", "cache", "1", "Fetched") == {"engines": False, "torch": True, "unplanned": True}
    # The draft engine built while the target's is not: the engine path's runtime still waits, only reports.
    assert told("EngineBuild", draft, "2", "Succeeded") == {"engines": False, "torch": True, "unplanned": True}
    # The target's built, the draft's in the cache as built: every user applies its runtime.
    built = engine_build("3", "Succeeded")
    built["metadata"]["name"] = draft
    store.put(built)
    assert told("EngineBuild", target, "4", "Succeeded") == {"engines": True, "torch": True, "unplanned": True}


def test_a_new_spec_creates_its_shared_objects_first_then_goes_to_the_deployment_queue():
    """The start lane creates the ModelCaches and EngineBuilds a spec needs, nothing else (no runtime, no
    status: the reconcile it hands over to does that); it creates each new ModelCache's fetch Job itself,
    before anything else (the first Job the deployment waits for), and wakes each new EngineBuild at once."""
    import yaml

    from tests.unit.helpers import ROOT

    sd = yaml.safe_load((ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml").read_text())
    sd["metadata"].update(namespace="ns", uid="u", generation=1, resourceVersion="1")
    store = Store(
        ["EngineBuild", "ModelCache", "SpeculativeDeployment", "PersistentVolumeClaim", "Deployment", "Job", "Pod"]
    )
    store.put(sd)
    kube = Kube(client.ApiClient(), store)
    written = []

    def create(obj):
        written.append((obj["kind"], obj["metadata"]["name"]))
        obj = {**obj, "metadata": {**obj["metadata"], "uid": f"uid-{len(written)}", "resourceVersion": "2"}}
        store.put(obj)
        return obj, True

    def patch(kind, namespace, name, body, subresource=None):
        written.append(("write", name))
        obj = {**store.get(kind, namespace, name), **body}
        obj["metadata"] = {**obj["metadata"], "resourceVersion": "3"}
        store.put(obj)
        return obj

    kube.create, kube.patch = create, patch
    kube.apply = lambda *args, **kw: written.append(("write", args))
    kube.event = lambda *args, **kw: None
    reconciler = Reconciler(kube, Settings())
    deployments, caches, builds = Recorded(), Recorded(), Recorded()
    reconciler.queues = {"EngineBuild": builds, "SpeculativeDeployment": deployments, "ModelCache": caches}
    reconciler._start_key(("SpeculativeDeployment", "ns", sd["metadata"]["name"]))

    kinds = [kind for kind, _ in written if kind != "write"]  # "write": the ModelCaches' status
    assert kinds == ["PersistentVolumeClaim", "ModelCache", "Job", "ModelCache", "Job", "EngineBuild", "EngineBuild"]
    fetches = [name for kind, name in written if kind == "Job"]
    assert fetches == [f"{name}-fetch" for kind, name in written if kind == "ModelCache"]
    assert caches.keys == [] and len(builds.keys) == 2 and all(builds.urgent)
    assert all(
        store.get("ModelCache", "ns", name)["status"]["phase"] == "Pending"  # reconciled, not failed
        for kind, name in written
        if kind == "ModelCache"
    )
    # Handed over to the deployment queue (the ModelCaches' status writes told their user too: one key there).
    assert set(deployments.keys) == {("SpeculativeDeployment", "ns", sd["metadata"]["name"])}
    assert deployments.urgent[-1]

    written.clear(), deployments.keys.clear()
    reconciler.kube.create = lambda obj: (_ for _ in ()).throw(AssertionError("created twice"))
    reconciler._start_key(("SpeculativeDeployment", "ns", sd["metadata"]["name"]))  # all there: no request
    assert written == [] and len(deployments.keys) == 1


class StatusWrites:
    """A Kube that records status patches and answers with the object patched."""

    def __init__(self):
        self.patched: list[dict] = []

    def patch(self, kind, namespace, name, patch, subresource=None):
        self.patched.append(patch["status"])
        return patch

    def event(self, *args, **kwargs):
        pass


def test_a_rollouts_progress_is_written_at_most_every_few_seconds_a_new_state_at_once():
    from specdec.conditions import Cond
    from specdec.problem import Problem
    from specdec.reconcile import PROGRESS_WRITE_SECONDS
    from specdec.reconcile.bookkeeping.pacing import WritePacing
    from specdec.reconcile.deployment_status import DeploymentStatusWriter

    kube = StatusWrites()
    deferred = []
    pacing = WritePacing(lambda seconds, *key, urgent=False: deferred.append((seconds, key)))
    writer = DeploymentStatusWriter(kube, pacing, published=lambda namespace, name, generation: None)
    problem = Problem("ModelDoesNotFitGpu", "too big")
    sd = {"metadata": {"namespace": "ns", "name": "sd", "generation": 1}}

    def write(reason: str, message: str) -> None:
        conds = [Cond("SpecValid", False, reason, message), Cond("Ready", False, reason, message)]
        writer.write(sd, problem, "Invalid", conds, None, [])
        if kube.patched:
            sd["status"] = kube.patched[-1]

    write("ModelDoesNotFitGpu", "needs 200 GiB")  # a first status: at once
    write("ModelDoesNotFitGpu", "needs 210 GiB")  # only a message moved, just after: later
    assert len(kube.patched) == 1 and deferred == [(deferred[0][0], ("SpeculativeDeployment", "ns", "sd"))]
    assert 0 < deferred[0][0] <= PROGRESS_WRITE_SECONDS
    write("VocabularyMismatch", "the draft's tokenizer differs")  # a new reason: at once
    assert len(kube.patched) == 2 and kube.patched[-1]["conditions"][-1]["reason"] == "VocabularyMismatch"
    pacing.last_written[("SpeculativeDeployment", "ns", "sd")] -= PROGRESS_WRITE_SECONDS  # the interval has passed
    write("VocabularyMismatch", "the draft's tokenizer differs in 3 tokens")
    assert len(kube.patched) == 3 and len(deferred) == 1


def test_a_shared_objects_job_steps_wait_what_its_users_read_is_written_at_once():
    """An EngineBuild's status moves with each step of its Job (seconds apart at most in a fleet's simulated
    builds): a change none of its users reads waits PROGRESS_WRITE_SECONDS after the last write; done is
    written at once."""
    from specdec.reconcile import PROGRESS_WRITE_SECONDS
    from specdec.status.shared import BuildState

    reconciler = Reconciler(Kube(client.ApiClient(), Store(["EngineBuild"])), Settings())
    eb = engine_build("1")
    patched = []

    def patch(kind, namespace, name, body, subresource=None):
        patched.append(body["status"]["phase"])
        eb["status"] = body["status"]
        return eb

    reconciler.kube.patch, reconciler.kube.event = patch, lambda *args, **kwargs: None
    deferred = []
    reconciler.delays.after = lambda seconds, key, call: deferred.append((seconds, key[1]))  # (queue, key)

    def step(phase: str) -> None:
        reconciler.shared.jobs.observe = lambda kind, obj: (BuildState(phase, phase, f"{phase}: message"), False, [])
        reconciler.shared._reconcile("EngineBuild", eb)

    step("Pending")  # a first status: at once
    step("Converting")  # its Job's steps, just after: later, what is current then
    step("Building")
    assert patched == ["Pending"] and [key for _, key in deferred] == [("EngineBuild", "ns", "eb")] * 2
    assert all(0 < seconds <= PROGRESS_WRITE_SECONDS for seconds, _ in deferred)
    step("Succeeded")  # what its users wait for: at once
    assert patched == ["Pending", "Succeeded"]
    step("Failed")  # a failure, just after: its users report it, at once
    assert patched[-1] == "Failed" and len(deferred) == 2
