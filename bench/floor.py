"""The floors: the operator's writes made directly, what no operator can beat on this API server. One
deployment at a time and a fleet on an idle API server (before the operator runs), a fleet released at
once (fan-out), and the probe: the same writes beside the fleet, under its load."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from bench.objects import create_namespace, direct_deployment, direct_engine_build, direct_job, fleet, sd_body
from bench.timing import now, summary
from kubernetes import client

from specdec.api.models import GROUP, VERSION
from specdec.reconcile import WORKERS


def floor(api: client.ApiClient, reps: int) -> dict[str, list[float]]:
    """The same writes, made directly: what no operator can beat on this API server."""
    core, custom, batch, apps = (
        client.CoreV1Api(api),
        client.CustomObjectsApi(api),
        client.BatchV1Api(api),
        client.AppsV1Api(api),
    )
    out: dict[str, list[float]] = {"apply_to_job": [], "jobs_done_to_deployment": [], "available_to_ready": []}
    job, eb, deployment = (
        direct_job("j", suspend=False),
        direct_engine_build("e", "hf://a/b"),
        direct_deployment("d", app="floor"),
    )
    for i in range(reps):
        ns = f"bench-floor-{i}"
        create_namespace(core, ns)
        start = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", sd_body("f"))
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "enginebuilds", eb)
        batch.create_namespaced_job(ns, job)
        out["apply_to_job"].append(now() - start)
        start = now()
        core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}, "data": {"runtime.json": "{}"}})
        apps.create_namespaced_deployment(ns, deployment)
        out["jobs_done_to_deployment"].append(now() - start)
        start = now()
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "speculativedeployments", "f", {"status": {"phase": "Ready"}}
        )
        out["available_to_ready"].append(now() - start)
    return out


def floor_scale(api: client.ApiClient, count: int, models: int, own_every: int) -> dict:
    """The fleet's writes made directly, one deployment after another: per deployment, its SD, a new
    EngineBuild and (suspended: no pods) Job where its model is new, then ConfigMap, Deployment,
    Service and one status patch."""
    core, custom, batch, apps = (
        client.CoreV1Api(api),
        client.CustomObjectsApi(api),
        client.BatchV1Api(api),
        client.AppsV1Api(api),
    )
    ns = f"bench-floor-scale-{count}"
    create_namespace(core, ns)
    seen_models: set[str] = set()
    to_job, to_deployment = [], []
    start = now()
    for i, body in enumerate(fleet(count, models, own_every)):
        name, model = body["metadata"]["name"], body["spec"]["target"]["model"]
        t = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", body)
        if model not in seen_models:
            seen_models.add(model)
            custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, "enginebuilds", direct_engine_build(f"e-{i}", model)
            )
            batch.create_namespaced_job(ns, direct_job(f"j-{i}"))
            to_job.append(now() - t)
        t = now()
        labels = {"app": name}
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"{name}-runtime"}, "data": {"runtime.json": "{}"}})
        apps.create_namespaced_deployment(ns, direct_deployment(name))
        core.create_namespaced_service(
            ns, {"metadata": {"name": name}, "spec": {"selector": labels, "ports": [{"port": 8000}]}}
        )
        to_deployment.append(now() - t)
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "speculativedeployments", name, {"status": {"phase": "Ready"}}
        )
    return {
        "apply_to_job": summary(to_job),
        "jobs_done_to_deployment": summary(to_deployment),
        "all_seconds": now() - start,
    }


FANOUT_WRITERS = WORKERS["SpeculativeDeployment"]  # as many as the operator's deployment workers


def floor_fanout(api: client.ApiClient, count: int) -> dict:
    """Jobs done → Deployment when a shared build releases `count` deployments at once (the fleet's
    draft engine does): their ConfigMap, Deployment, Service and status patch made directly by
    FANOUT_WRITERS writers, each deployment timed from the common start. The sequential floor times one
    deployment on an idle API server; this is what the same writes cost when they queue as the
    operator's do."""
    core, custom, apps = client.CoreV1Api(api), client.CustomObjectsApi(api), client.AppsV1Api(api)
    ns = f"bench-floor-fanout-{count}"
    create_namespace(core, ns)
    names = [body["metadata"]["name"] for body in fleet(count, 1, 0)]
    for body in fleet(count, 1, 0):  # untimed: the deployments exist before their build completes
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", body)

    def release(name: str) -> float:
        labels = {"app": name}
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"{name}-runtime"}, "data": {"runtime.json": "{}"}})
        apps.create_namespaced_deployment(ns, direct_deployment(name))
        created = now() - start
        core.create_namespaced_service(
            ns, {"metadata": {"name": name}, "spec": {"selector": labels, "ports": [{"port": 8000}]}}
        )
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "speculativedeployments", name, {"status": {"phase": "Ready"}}
        )
        return created

    start = now()
    with ThreadPoolExecutor(FANOUT_WRITERS) as writers:
        to_deployment = list(writers.map(release, names))
    return {**summary(to_deployment), "all_seconds": now() - start}


class Probe:
    """The floor under the fleet's own load: every `interval` seconds, during the fleet, the writes of one
    stage made directly, each chain in turn, in a namespace of its own, with objects the operator ignores
    (no label of ours; the Job suspended, the Deployment at 0 replicas). The sequential floor is measured
    on an idle API server, before the fleet: beside a fleet of 1000 that one answers a ratio the API
    server itself cannot reach. Chains: a ModelCache then its Job (what follows the apply, as the
    operator does it), a ConfigMap then a Deployment (a release)."""

    def __init__(self, api: client.ApiClient, namespace: str, interval: float = 0.5):
        self.api, self.namespace, self.interval = api, namespace, interval
        self.samples: dict[str, list[tuple[float, float]]] = {"apply_to_job": [], "jobs_done_to_deployment": []}
        self.stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        create_namespace(client.CoreV1Api(self.api), self.namespace)
        self._thread.start()

    def finish(self) -> None:
        self.stop.set()
        self._thread.join()

    def _run(self) -> None:
        core, custom, batch, apps = (
            client.CoreV1Api(self.api),
            client.CustomObjectsApi(self.api),
            client.BatchV1Api(self.api),
            client.AppsV1Api(self.api),
        )
        i = 0
        while not self.stop.wait(self.interval):
            i += 1
            start = now()
            try:
                if i % 2:
                    custom.create_namespaced_custom_object(
                        GROUP,
                        VERSION,
                        self.namespace,
                        "modelcaches",
                        {
                            "apiVersion": f"{GROUP}/{VERSION}",
                            "kind": "ModelCache",
                            "metadata": {"name": f"p-{i}"},
                            "spec": {"model": "hf://probe/m", "revision": "main", "cacheClaim": "c", "path": f"p/{i}"},
                        },
                    )
                    batch.create_namespaced_job(self.namespace, direct_job(f"p-{i}"))
                    stage = "apply_to_job"
                else:
                    core.create_namespaced_config_map(self.namespace, {"metadata": {"name": f"p-{i}"}, "data": {}})
                    apps.create_namespaced_deployment(self.namespace, direct_deployment(f"p-{i}"))
                    stage = "jobs_done_to_deployment"
            except client.ApiException:
                continue
            self.samples[stage].append((start, now() - start))

    def near(self, stage: str, at: float) -> float:
        """The chain's seconds of the probe nearest to `at`."""
        return min(self.samples[stage], key=lambda sample: abs(sample[0] - at))[1]
