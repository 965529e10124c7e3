"""ModelCaches: hf:// checkpoints fetched on CPU nodes, once per model, revision and cache claim."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec.builders.common import LABEL_MANAGED_BY, LABEL_MODEL_CACHE, MANAGED_BY
from specdec.builders.model_cache import build_fetch_job, build_model_cache, fetch_script
from specdec.render import render_objects
from tests.unit.helpers import EXAMPLE_70B, SETTINGS, Recorded, load_example, make_plan
from tests.unit.invalid_specs import DRAFT, TARGET, draft_target, redrafter, spec


def fetch_job(cache, uid: str = "uid-1") -> dict:
    created = build_model_cache("ns", cache)
    created["metadata"]["uid"] = uid
    return build_fetch_job(created, SETTINGS)


def test_fetch_job_requests_no_gpu_and_tolerates_no_gpu_taint():
    cache = make_plan(
        spec(
            build={"nodeSelector": {"pool": "a100"}, "resources": {"limits": {"nvidia.com/gpu": 8}}},
            speculation=draft_target(),
        )
    ).model_caches[0]
    pod = fetch_job(cache)["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["fetch"] and "initContainers" not in pod
    assert pod["containers"][0]["resources"] == {}  # no nvidia.com/gpu, and spec.build's resources do not apply
    assert "tolerations" not in pod and "nodeSelector" not in pod  # not the GPU defaults, not spec.build's


def test_fetch_pods_are_placed_by_spec_cache_fetch():
    fetch = {
        "nodeSelector": {"pool": "cpu"},
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "resources": {"limits": {"memory": "8Gi", "nvidia.com/gpu": 1}},
        "backoffLimit": 5,
        "activeDeadlineSeconds": 7200,
        "podLabels": {"team": "ml"},
    }
    cache = make_plan(spec(cache={"fetch": fetch})).model_caches[0]
    job = fetch_job(cache)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "cpu"}
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists"}]
    assert pod["containers"][0]["resources"] == {"limits": {"memory": "8Gi"}}  # GPUs are never requested
    assert (job["spec"]["backoffLimit"], job["spec"]["activeDeadlineSeconds"]) == (5, 7200)
    assert job["spec"]["template"]["metadata"]["labels"]["team"] == "ml"


def test_fetch_job_carries_our_labels_and_is_owned_by_its_model_cache():
    cache = make_plan(spec()).model_caches[0]
    job = fetch_job(cache, uid="mc-uid")
    assert job["metadata"]["name"] == f"{cache.name}-fetch"
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels[LABEL_MANAGED_BY] == MANAGED_BY and labels[LABEL_MODEL_CACHE] == cache.name
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "specdec.io/v1alpha1",
            "kind": "ModelCache",
            "name": cache.name,
            "uid": "mc-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert build_model_cache("ns", cache)["metadata"]["labels"][LABEL_MANAGED_BY] == MANAGED_BY


def test_model_cache_is_content_addressed_and_shared():
    a = make_plan(spec(speculation=draft_target()), "a")
    b = make_plan(spec(speculation=draft_target(draft={"model": "hf://other/draft"})), "b")
    assert a.model_caches[0] == b.model_caches[0]  # one target checkpoint for both deployments
    assert a.model_caches[0].spec.path == "models/meta-llama--Llama-2-13b-hf/main"
    names = {
        make_plan(spec(target={"model": TARGET, "revision": rev}, cache=cache)).model_caches[0].name
        for rev in (None, "main", "v1")
        for cache in ({}, {"claimName": "mine"})
    }
    assert len(names) == 4  # None and "main" are one revision; claim and revision name the cache
    placed = make_plan(spec(cache={"fetch": {"nodeSelector": {"pool": "cpu"}}})).model_caches[0]
    assert placed.name.startswith(a.model_caches[0].name + "-")  # same checkpoint path, own name
    assert placed.spec.path == a.model_caches[0].spec.path


def test_engines_list_the_checkpoints_they_read():
    p = make_plan(spec(speculation=draft_target()))
    by_role = {e.role: [c.spec.model for c in e.inputs] for e in p.engines}
    assert by_role == {"target": [TARGET], "draft": [DRAFT]}
    assert [c.spec.model for c in p.model_caches] == [TARGET, DRAFT]
    rd = make_plan(spec(speculation=redrafter(drafterModel="hf://org/drafter")))
    assert [(c.spec.model, c.spec.revision) for c in rd.model_caches] == [
        (TARGET, "main"),
        ("hf://org/drafter", "main"),
    ]
    assert make_plan(spec(target={"model": "pvc://weights/m"})).model_caches == ()
    assert make_plan(spec(backend="pytorch")).engines == ()  # the runtime's own checkpoints: runtime_inputs


def test_render_prints_model_caches_and_fetch_jobs_before_engine_builds():
    objects = render_objects(load_example(EXAMPLE_70B), SETTINGS)
    order = [(o["kind"], o["metadata"]["name"]) for o in objects]
    caches = [n for k, n in order if k == "ModelCache"]
    assert len(caches) == 2
    for name in caches:
        assert order.index(("Job", f"{name}-fetch")) < min(i for i, (k, _) in enumerate(order) if k == "EngineBuild")


def test_fetch_script_publishes_atomically(tmp_path):
    """Run the script with a stand-in python3 that 'downloads' one file (and runs the facts program with the
    real one): the checkpoint appears complete under its path, the partial directory is gone, the
    termination message has its report, and a second run does nothing."""
    cache = make_plan(spec()).model_caches[0]
    script = (
        fetch_script(cache.name, cache.spec)
        .replace("/cache", str(tmp_path))
        .replace("/dev/termination-log", str(tmp_path / "termination"))
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(
        f'#!/bin/bash\nif [[ "$2" != *snapshot_download* ]]; then exec {sys.executable} "$@"; fi\n'
        f'echo weights > "${{@: -1}}/model.safetensors"\necho "downloaded $3"\n'
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SPECDEC_MODEL": "meta-llama/Llama-3.1-70B-Instruct"}
    first = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    target = tmp_path / cache.spec.path
    assert (target / "model.safetensors").read_text() == "weights\n" and (target / ".specdec-complete").exists()
    assert not (tmp_path / ".work" / f"fetch-{cache.name}").exists()
    assert "downloaded meta-llama/Llama-3.1-70B-Instruct" in first.stdout
    assert json.loads((tmp_path / "termination").read_text()) == {"sizeBytes": len("weights\n")}
    again = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "already in the cache" in again.stdout


# --- backend pytorch: the runtime reads its checkpoints from the cache ------------------------------


def test_pytorch_plan_fetches_every_checkpoint_its_runtime_reads():
    dt = make_plan(spec(backend="pytorch", speculation=draft_target(draft={"model": DRAFT, "revision": "r1"})))
    assert dt.engines == ()
    assert [(c.spec.model, c.spec.revision) for c in dt.model_caches] == [(TARGET, "main"), (DRAFT, "r1")]
    assert dt.runtime_inputs == dt.model_caches
    eagle = make_plan(load_example("llama-3.1-8b-eagle3")["spec"])
    assert [c.spec.model for c in eagle.model_caches] == [
        "hf://meta-llama/Llama-3.1-8B-Instruct",
        "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
    ]
    assert make_plan(spec(backend="pytorch", target={"model": "pvc://weights/m"})).model_caches == ()  # as is


def test_pytorch_runtime_config_points_at_the_cache():
    p = make_plan(spec(backend="pytorch", speculation=draft_target(draft={"model": DRAFT, "revision": "r1"})))
    assert p.runtime.target.checkpoint == f"/cache/{p.runtime_inputs[0].spec.path}"
    assert p.runtime.target.revision is None and p.runtime.draft_target.draft.revision is None
    speculative_model = p.runtime.speculative_config["speculative_model"]
    assert speculative_model == f"/cache/{p.runtime_inputs[1].spec.path}" and speculative_model.endswith("/r1")
    eagle = make_plan(load_example("llama-3.1-8b-eagle3")["spec"])
    assert (
        eagle.runtime.speculative_config["speculative_model"]
        == "/cache/models/yuhuili--EAGLE3-LLaMA3.1-Instruct-8B/main"
    )


def test_pytorch_runtime_mounts_the_cache_read_only():
    from specdec.builders.serving import build_deployment

    p = make_plan(spec(backend="pytorch"))
    pod = build_deployment(p, "uid", SETTINGS)["spec"]["template"]["spec"]
    assert {"name": "cache", "persistentVolumeClaim": {"claimName": p.cache.claim_name, "readOnly": True}} in pod[
        "volumes"
    ]
    assert {"name": "cache", "mountPath": "/cache", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    pvc_only = make_plan(spec(backend="pytorch", target={"model": "pvc://weights/m"}))
    assert "cache" not in {
        v["name"] for v in build_deployment(pvc_only, "uid", SETTINGS)["spec"]["template"]["spec"]["volumes"]
    }


class NoWrites:
    """A Kube that holds nothing and records writes."""

    def __init__(self):
        self.written: list[str] = []

    def get(self, kind, namespace, name):
        return None

    get_live = get

    def apply(self, desired, existing):
        self.written.append(desired["kind"])
        return desired, True

    def event(self, *args, **kwargs):
        pass


class Queues:
    """The work queues of a controller tested alone: `enqueue` records each key in its kind's queue."""

    def __init__(self):
        self.by_kind: dict[str, Recorded] = {}

    def enqueue(self, kind, namespace, name, urgent=False):
        self.by_kind.setdefault(kind, Recorded()).add((kind, namespace, name), urgent)

    def __getitem__(self, kind) -> Recorded:
        return self.by_kind.setdefault(kind, Recorded())


def runtime_applier(kube, queues: Queues):
    from specdec.reconcile.bookkeeping.failures import ServiceFailures
    from specdec.reconcile.ownership import Children
    from specdec.reconcile.runtime_applier import RuntimeApplier

    return RuntimeApplier(
        kube,
        SETTINGS,
        Children(kube),
        ServiceFailures(),
        draft_len_choice=lambda namespace, name: None,
        enqueue=queues.enqueue,
    )


def test_pytorch_runtime_is_applied_only_once_its_checkpoints_are_fetched():
    from types import SimpleNamespace

    from specdec.reconcile.bookkeeping.failures import Backoff, ServiceFailures
    from specdec.reconcile.ownership import Children
    from specdec.reconcile.service_lane import ServiceLane
    from specdec.status.shared import BuildState

    kube, queues = NoWrites(), Queues()
    runtime = runtime_applier(kube, queues)
    services, deployments = queues["Service"], queues["SpeculativeDeployment"]
    p = make_plan(spec(backend="pytorch", speculation=draft_target()))
    sd = {"metadata": {"uid": "uid-1", "namespace": p.namespace, "name": p.name}}
    target, draft = p.runtime_inputs
    fetched = BuildState("Fetched", "Fetched", "checkpoint in the cache")
    assert runtime.apply(sd, p, {}, {}) == (None, False, False, False)
    assert runtime.apply(sd, p, {}, {target.name: fetched, draft.name: BuildState("Fetching", "Fetching", "")}) == (
        None,
        False,
        False,
        False,
    )
    assert kube.written == []
    _, current, service_current, written = runtime.apply(sd, p, {}, {target.name: fetched, draft.name: fetched})
    assert current and not service_current and written
    assert sorted(kube.written) == ["ConfigMap", "Deployment"]  # written at once; the Service has its lane
    assert services.keys == [("Service", p.namespace, p.name)] and services.urgent == [True]
    lane = ServiceLane(
        kube,
        SimpleNamespace(plan=lambda _: p),
        Children(kube),
        ServiceFailures(),
        Backoff(lambda seconds, *key, urgent=False: None),
        queues.enqueue,
        active=lambda: True,
    )
    kube.get = lambda kind, namespace, name: sd if kind == "SpeculativeDeployment" else None
    lane.reconcile(("Service", p.namespace, p.name))
    assert kube.written[2:] == ["Service"]
    assert deployments.keys == [("SpeculativeDeployment", p.namespace, p.name)]  # its Ready waits for it
    assert deployments.urgent == [False]
    # A change: the ConfigMap first, for new pods must read the new configuration.
    ours = {"metadata": {"ownerReferences": [{"controller": True, "uid": "uid-1"}]}, "spec": {}, "data": {}}
    kube.get = lambda kind, namespace, name: sd if kind == "SpeculativeDeployment" else {**ours, "kind": kind}
    kube.written.clear()
    runtime.apply(sd, p, {}, {target.name: fetched, draft.name: fetched})
    assert kube.written == ["ConfigMap", "Deployment"]


def test_a_first_release_creates_without_asking_and_a_taken_name_stops_it():
    """A first write is a create, which the API server refuses if the name is taken: nothing is asked first.
    The ConfigMap goes first, so a ConfigMap name taken by another leaves no Deployment whose pods would read
    it, and the Service is queued only once the Deployment is ours."""
    from specdec.reconcile.errors import NameConflict
    from specdec.status.shared import BuildState

    kube, queues = NoWrites(), Queues()
    kube.get_live = None  # a lookup would fail the test
    runtime = runtime_applier(kube, queues)
    services = queues["Service"]
    p = make_plan(spec(backend="pytorch", speculation=draft_target()))
    sd = {"metadata": {"uid": "uid-1", "namespace": p.namespace, "name": p.name}}
    fetched = {c.name: BuildState("Fetched", "Fetched", "checkpoint in the cache") for c in p.runtime_inputs}
    _, current, service_current, _ = runtime.apply(sd, p, {}, fetched)
    assert kube.written == ["ConfigMap", "Deployment"] and current and not service_current
    assert services.keys == [("Service", p.namespace, p.name)]

    foreign = {"metadata": {"name": "x", "labels": {"app": "someone-else"}}}
    kube.apply = lambda desired, existing: (
        (foreign, False) if desired["kind"] == "ConfigMap" else NoWrites.apply(kube, desired, existing)
    )
    kube.written.clear()
    with pytest.raises(NameConflict, match=r"ConfigMap .* already exists and is not controlled by this"):
        runtime.apply(sd, p, {}, fetched)
    assert kube.written == [] and services.keys == [("Service", p.namespace, p.name)]


def test_pytorch_runtime_waits_naming_the_checkpoints():
    from specdec.status.deployment import DeploymentInput, deployment_conditions
    from specdec.status.shared import BuildState

    p = make_plan(spec(backend="pytorch", speculation=draft_target()))
    target, draft = p.runtime_inputs
    caches = {
        target.name: BuildState("Fetched", "Fetched", "checkpoint in the cache"),
        draft.name: BuildState("Fetching", "Fetching", "step fetch running"),
    }
    phase, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=caches))
    runtime = next(c for c in conds if c.type == "RuntimeAvailable")
    assert phase == "Building" and (runtime.status, runtime.reason) == (False, "Fetching")
    assert (
        runtime.message.endswith(f"fetching {DRAFT}@main (ModelCache {draft.name})") and TARGET not in runtime.message
    )
    assert "EnginesReady" not in {c.type for c in conds}
    failed = {c.name: BuildState("Failed", "FetchFailed", "401 Unauthorized") for c in p.runtime_inputs}
    phase, conds = deployment_conditions(DeploymentInput(p, {}, None, False, None, caches=failed))
    ready = next(c for c in conds if c.type == "Ready")
    assert phase == "Failed" and ready.reason == "FetchFailed"
    assert "401 Unauthorized" in next(c for c in conds if c.type == "RuntimeAvailable").message
