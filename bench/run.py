"""Benchmark the operator on the local control plane: latency, its floor, scale and idle cost.

    .venv/bin/python bench/run.py [--reps 20] [--scales 100,300,1000] [--models 10] [--idle-seconds 60]

Starts its own cluster (`specdec-bench`, with an audit log of write requests), runs the operator
as a process, prints a table and writes bench/results/<timestamp>.json. Figures are medians and
ratios from one run: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from kubernetes import client, config, watch
from prometheus_client.parser import text_string_to_metric_families

from specdec.api.crd import render_crds
from specdec.api.models import GROUP, VERSION
from specdec.builders import engine as engine_builders
from specdec.builders import model_cache as cache_builders
from specdec.dev import cluster as dev
from specdec.kube.client import USER_AGENT
from specdec.plan import Plan, plan
from specdec.reconcile import WORKERS
from specdec.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
METRICS_PORT = 18091
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


def now() -> float:
    return time.monotonic()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


class Observer:
    """Watches Jobs, Deployments and SpeculativeDeployments; records when each milestone is first seen."""

    def __init__(self, api: client.ApiClient):
        self.api = api
        self.seen: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def mark(self, namespace: str, milestone: str) -> None:
        with self.lock:
            self.seen.setdefault((namespace, milestone), now())

    def _loop(self, list_fn, handle) -> None:
        while not self.stop.is_set():
            try:  # plain dicts: the client's typed models cost the bench a core's share beside a fleet
                for event in watch.Watch().stream(list_fn, timeout_seconds=30, deserialize=False):
                    handle(event["type"], event["object"])
                    if self.stop.is_set():
                        return
            except Exception:  # reconnect; a watch may expire
                time.sleep(0.1)

    def _job(self, kind, job) -> None:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        self.mark(ns, "job-created")
        self.mark(ns, f"job:{name}")
        conditions = (job.get("status") or {}).get("conditions") or []
        if any(c["type"] == "Complete" and c["status"] == "True" for c in conditions):
            self.mark(ns, f"job-done:{name}")

    def _deployment(self, kind, deployment) -> None:
        ns, status = deployment["metadata"]["namespace"], deployment.get("status") or {}
        self.mark(ns, "deployment-created")
        self.mark(ns, f"deployment:{deployment['metadata']['name']}")
        if any(c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or []) \
                and status.get("readyReplicas", 0) >= deployment["spec"].get("replicas", 1):
            self.mark(ns, "deployment-available")

    def _sd(self, kind, sd) -> None:
        ns = sd["metadata"]["namespace"]
        status = sd.get("status") or {}
        if status.get("observedGeneration") == sd["metadata"].get("generation") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []):
            self.mark(ns, f"ready:{sd['metadata']['name']}")

    def start(self) -> None:
        batch, apps, custom = client.BatchV1Api(self.api), client.AppsV1Api(self.api), client.CustomObjectsApi(self.api)
        for list_fn, handle in (
            (batch.list_job_for_all_namespaces, self._job),
            (apps.list_deployment_for_all_namespaces, self._deployment),
            (lambda **kw: custom.list_cluster_custom_object(GROUP, VERSION, "speculativedeployments", **kw), self._sd),
        ):
            threading.Thread(target=self._loop, args=(list_fn, handle), daemon=True).start()

    def wait(self, namespace: str, milestone: str, timeout: float = 120) -> float:
        deadline = now() + timeout
        while now() < deadline:
            with self.lock:
                if (namespace, milestone) in self.seen:
                    return self.seen[(namespace, milestone)]
            time.sleep(0.005)
        raise TimeoutError(f"{namespace}: {milestone} not seen in {timeout}s")

    def count(self, namespace: str, prefix: str) -> int:
        with self.lock:
            return sum(1 for (ns, m) in self.seen if ns == namespace and m.startswith(prefix))

    def at(self, namespace: str, milestone: str) -> float | None:
        with self.lock:
            return self.seen.get((namespace, milestone))

    def jobs_done(self, namespace: str) -> float | None:
        with self.lock:
            times = [t for (ns, m), t in self.seen.items() if ns == namespace and m.startswith("job-done:")]
        return max(times) if len(times) >= 2 else None


def cpu_seconds(pid: int | str) -> float:
    """User + system CPU seconds of a process so far (/proc/<pid>/stat, after the command name)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def process_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {"rss_mib": int(fields["VmRSS"].split()[0]) / 1024, "peak_rss_mib": int(fields["VmHWM"].split()[0]) / 1024,
            "cpu_seconds": cpu_seconds(pid)}


CLUSTER_PROCESSES = ("kube-apiserver", "etcd", "kube-controller", "kube-scheduler", "kwok")  # /proc comm prefixes


def cluster_cpu() -> dict[str, float]:
    """CPU seconds so far of the local cluster's processes, by name (all processes of each name)."""
    seconds: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        try:
            comm = (proc / "comm").read_text().strip()
            name = next((n for n in CLUSTER_PROCESSES if comm.startswith(n)), None)
            if name and proc.name.isdigit():
                seconds[name] = seconds.get(name, 0.0) + cpu_seconds(proc.name)
        except OSError:  # gone meanwhile
            continue
    return seconds


def cpu_by_process(operator_pid: int) -> dict[str, float]:
    """CPU seconds so far of the local cluster's processes (by name), the operator and this bench: where a
    fleet's two cores go."""
    seconds = {"operator": cpu_seconds(operator_pid), **cluster_cpu()}
    own = os.times()
    seconds["bench"] = own.user + own.system
    return seconds


def sd_body(name: str) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name}
    return body


# Objects the floors and the probe write directly: the operator's kinds, stripped to what the API server
# needs (no label of ours: the operator ignores them; a suspended Job and 0 replicas: no pods).
STAND_IN_CONTAINER = {"name": "c", "image": "registry.invalid/x"}


def direct_engine_build(name: str, model: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "EngineBuild", "metadata": {"name": name},
            "spec": {"recipe": {"model": model, "dtype": "float16", "quantization": "none", "kvCacheDtype": "auto",
                                "tensorParallelSize": 1, "image": "x"},
                     "cacheClaim": "c", "enginePath": f"engines/{name}"}}


def direct_job(name: str, suspend: bool = True) -> dict:
    spec = {"template": {"spec": {"restartPolicy": "Never", "containers": [STAND_IN_CONTAINER]}}}
    return {"metadata": {"name": name}, "spec": {"suspend": True, **spec} if suspend else spec}


def direct_deployment(name: str, app: str | None = None) -> dict:
    labels = {"app": app or name}
    return {"metadata": {"name": name}, "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": labels}, "spec": {"containers": [STAND_IN_CONTAINER]}}}}


def create_namespace(core: client.CoreV1Api, name: str) -> None:
    core.create_namespace({"metadata": {"name": name}})


def latency(api: client.ApiClient, observer: Observer, reps: int) -> dict[str, list[float]]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    out: dict[str, list[float]] = {"apply_to_job": [], "jobs_done_to_deployment": [], "available_to_ready": []}
    for i in range(reps):
        ns = f"bench-latency-{i}"
        create_namespace(core, ns)
        start = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", sd_body("lat"))
        out["apply_to_job"].append(observer.wait(ns, "job-created") - start)
        deployment = observer.wait(ns, "deployment-created")
        done = observer.jobs_done(ns)
        out["jobs_done_to_deployment"].append(deployment - done if done else float("nan"))
        available = observer.wait(ns, "deployment-available")
        out["available_to_ready"].append(observer.wait(ns, "ready:lat") - available)
        core.delete_namespace(ns)  # frees its GPUs for the scale run
    return out


def floor(api: client.ApiClient, reps: int) -> dict[str, list[float]]:
    """The same writes, made directly: what no operator can beat on this API server."""
    core, custom, batch, apps = (client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api),
                                 client.AppsV1Api(api))
    out: dict[str, list[float]] = {"apply_to_job": [], "jobs_done_to_deployment": [], "available_to_ready": []}
    job, eb, deployment = direct_job("j", suspend=False), direct_engine_build("e", "hf://a/b"), direct_deployment(
        "d", app="floor")
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
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "speculativedeployments", "f",
                                                     {"status": {"phase": "Ready"}})
        out["available_to_ready"].append(now() - start)
    return out


def target_model(i: int, models: int, own_every: int) -> str:
    """Every `own_every`-th deployment has a model of its own (its own EngineBuild); the others share
    `models` targets (and all share the draft)."""
    return f"hf://bench/own-{i}" if own_every and i % own_every == 0 else f"hf://bench/target-{i % models}"


def fleet(count: int, models: int, own_every: int) -> list[dict]:
    base = yaml.safe_load(EXAMPLE.read_text())
    bodies = []
    for i in range(count):
        body = copy.deepcopy(base)
        body["metadata"] = {"name": f"sd-{i:04d}"}
        body["spec"]["target"]["model"] = target_model(i, models, own_every)
        bodies.append(body)
    return bodies


def summary(values: list[float]) -> dict[str, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return {"n": 0, "p50": float("nan"), "p95": float("nan")}
    return {"n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95)}


def floor_scale(api: client.ApiClient, count: int, models: int, own_every: int) -> dict:
    """The fleet's writes made directly, one deployment after another: per deployment, its SD, a new
    EngineBuild and (suspended: no pods) Job where its model is new, then ConfigMap, Deployment,
    Service and one status patch."""
    core, custom, batch, apps = (client.CoreV1Api(api), client.CustomObjectsApi(api), client.BatchV1Api(api),
                                 client.AppsV1Api(api))
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
            custom.create_namespaced_custom_object(GROUP, VERSION, ns, "enginebuilds",
                                                   direct_engine_build(f"e-{i}", model))
            batch.create_namespaced_job(ns, direct_job(f"j-{i}"))
            to_job.append(now() - t)
        t = now()
        labels = {"app": name}
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"{name}-runtime"}, "data": {"runtime.json": "{}"}})
        apps.create_namespaced_deployment(ns, direct_deployment(name))
        core.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": {
            "selector": labels, "ports": [{"port": 8000}]}})
        to_deployment.append(now() - t)
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "speculativedeployments", name,
                                                     {"status": {"phase": "Ready"}})
    return {"apply_to_job": summary(to_job), "jobs_done_to_deployment": summary(to_deployment),
            "all_seconds": now() - start}


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
        core.create_namespaced_service(ns, {"metadata": {"name": name}, "spec": {
            "selector": labels, "ports": [{"port": 8000}]}})
        custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, "speculativedeployments", name,
                                                     {"status": {"phase": "Ready"}})
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
        core, custom, batch, apps = (client.CoreV1Api(self.api), client.CustomObjectsApi(self.api),
                                     client.BatchV1Api(self.api), client.AppsV1Api(self.api))
        i = 0
        while not self.stop.wait(self.interval):
            i += 1
            start = now()
            try:
                if i % 2:
                    custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "modelcaches", {
                        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelCache", "metadata": {"name": f"p-{i}"},
                        "spec": {"model": "hf://probe/m", "revision": "main", "cacheClaim": "c", "path": f"p/{i}"}})
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


TIMINGS = {"specdec_api_request_duration_seconds": "request seconds",  # histograms: where time goes
           "specdec_workqueue_wait_seconds": "queue wait", "specdec_reconcile_duration_seconds": "reconcile seconds"}


def mean_timings(counters: dict[str, float]) -> dict[str, float]:
    """'<what> <verb or kind>' -> mean seconds, from the histograms' sums and counts."""
    return {key.removesuffix(" sum"): value / counters[key.removesuffix("sum") + "count"]
            for key, value in counters.items()
            if key.endswith(" sum") and counters.get(key.removesuffix("sum") + "count")}


def scrape(port: int) -> dict[str, float]:
    """The operator's own counters: API requests by verb, reconciles by kind, resync passes."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "specdec_api_requests_total":
                key = f"requests {sample.labels['verb']}"
            elif sample.name == "specdec_reconcile_total":
                key = f"reconciles {sample.labels['kind']}"
            elif sample.name in ("specdec_resync_duration_seconds_count", "specdec_resync_duration_seconds_sum"):
                key = sample.name.removeprefix("specdec_")
            elif sample.name.endswith(("_sum", "_count")) and sample.name.rsplit("_", 1)[0] in TIMINGS:
                stem, part = sample.name.rsplit("_", 1)
                key = f"{TIMINGS[stem]} {sample.labels.get('verb') or sample.labels.get('kind')} {part}"
            else:
                continue
            out[key] = out.get(key, 0) + sample.value
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


def jobs_for(sd: dict) -> list[str]:
    """The Jobs a deployment waits for: its checkpoints' fetch Jobs, then its engines' build Jobs."""
    planned = plan(sd, Settings())
    fetches = [cache_builders.job_name(c.name) for c in planned.model_caches] if isinstance(planned, Plan) else []
    return fetches + [engine_builders.job_name(e) for e in (sd.get("status") or {}).get("engineBuilds") or []]


def scale(api: client.ApiClient, observer: Observer, count: int, models: int, own_every: int) -> dict:
    """N deployments applied at once; per deployment: apply -> its first new Job (a fetch Job, for those
    whose model was new), its last Job done (or its apply, if later) -> its Deployment."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = f"bench-scale-{count}"
    create_namespace(core, ns)
    applied: dict[str, float] = {}
    posted: dict[str, float] = {}  # seconds of each SD's create request
    sent_at: dict[str, float] = {}  # wall clock, as the API server's audit log: see apply_chain
    probe = Probe(api, f"bench-probe-{count}")
    probe.start()
    start = now()
    for body in fleet(count, models, own_every):
        sent_at[body["metadata"]["name"]] = time.time()
        sent = applied[body["metadata"]["name"]] = now()
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", body)
        posted[body["metadata"]["name"]] = now() - sent
    apply_seconds = now() - start
    deadline = start + 900
    while now() < deadline and observer.count(ns, "ready:") < count:
        time.sleep(0.2)
    all_ready = now() - start
    probe.finish()
    sds = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments")["items"]
    jobs_of = {sd["metadata"]["name"]: jobs_for(sd) for sd in sds}
    creator: dict[str, str] = {}  # job -> the first deployment applied that uses it
    for name in sorted(applied, key=applied.get):
        for job in jobs_of.get(name, []):
            creator.setdefault(job, name)
    to_job, to_deployment, first_jobs = [], [], {}
    by_release: dict[str, list[float]] = {"its apply": [], "a Job done": []}  # what released each deployment
    loaded = {"apply_to_job": [], "jobs_done_to_deployment": []}  # the probe's floor beside each deployment
    for name, jobs in jobs_of.items():
        new = {j: observer.at(ns, f"job:{j}") for j in jobs if creator[j] == name}  # the Jobs it was first to need
        if new and None not in new.values():
            first_jobs[name] = min(new, key=new.get)
            to_job.append(new[first_jobs[name]] - applied[name])
            loaded["apply_to_job"].append(posted[name] + probe.near("apply_to_job", applied[name]))
        done = [observer.at(ns, f"job-done:{j}") for j in jobs]
        deployment = observer.at(ns, f"deployment:{name}")
        if deployment is not None and None not in done:
            released = max([applied[name], *done])
            to_deployment.append(deployment - released)
            by_release["its apply" if released == applied[name] else "a Job done"].append(deployment - released)
            # Released by its own apply (its Jobs were done before): timed from before its SD create, as apply →
            # Job is, so its floor has that create's seconds too.
            loaded["jobs_done_to_deployment"].append(probe.near("jobs_done_to_deployment", released)
                                                     + (posted[name] if released == applied[name] else 0.0))
    builds = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "enginebuilds")["items"]
    jobs = client.BatchV1Api(api).list_namespaced_job(ns).items
    recipes = {json.dumps(b["spec"]["recipe"], sort_keys=True) for b in builds}
    expected = len({target_model(i, models, own_every) for i in range(count)}) + 1  # + the shared draft
    return {"deployments": count, "ready": observer.count(ns, "ready:"), "apply_seconds": apply_seconds,
            "all_ready_seconds": all_ready, "ready_at": start + all_ready, "apply_to_job": summary(to_job),
            "jobs_done_to_deployment": summary(to_deployment),
            "jobs_done_to_deployment_by_release": {k: summary(v) for k, v in by_release.items()},
            "loaded_floor": {k: summary(v) for k, v in loaded.items()},
            "probes": {k: len(v) for k, v in probe.samples.items()}, "first_jobs": first_jobs,
            "sent_at": {name: sent_at[name] for name in first_jobs},
            "engine_builds": len(builds), "jobs": len(jobs),
            "distinct_recipes": len(recipes), "expected_recipes": expected}


def delete_namespaces(local: dev.LocalCluster, names: list[str]) -> None:
    """Delete and wait until gone: the next measurement must not share the API server with a cleanup."""
    local.kubectl("delete", "namespace", "--wait=false", *names)
    local.kubectl("wait", "--for=delete", "--timeout=600s", *(f"namespace/{n}" for n in names), check=False)


def _audit_entries(path: Path, offset: int):
    """Each entry of the API server's audit log (writes only: AUDIT_POLICY) from `offset` on."""
    with path.open() as log:
        log.seek(offset)
        for line in log:
            yield json.loads(line)


def _audited_writes(path: Path, offset: int, since: float = 0.0, until: float = math.inf):
    """(user agent, verb, resource) of each write in the API server's audit log from `offset` on, answered
    between `since` and `until` (wall clock)."""
    for entry in _audit_entries(path, offset):
        if entry.get("verb") in WRITE_VERBS and since <= _stamp(entry["stageTimestamp"]) < until:
            yield entry.get("userAgent", ""), entry["verb"], entry["objectRef"].get("resource", "?")


def _stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def apply_chain(path: Path, offset: int, namespace: str, first_jobs: dict[str, str],
                sent_at: dict[str, float]) -> dict[str, dict]:
    """Where apply → first Job goes, from the API server's own clock (the audit log), for the deployments
    whose first Job is their ModelCache's fetch Job (`first_jobs`: deployment → Job): the operator's part
    (from the SD's create answered to the ModelCache's create received, and from that answered to the
    Job's create received) and the API server's (each create's own seconds). And apply → first Job ending
    where the loaded floor's chain ends, at the API server's answer to the Job's create (from `sent_at`, the
    wall clock before each SD's create was sent): the bench's own figure ends when its watch hears of the Job,
    a delivery the floor's direct writes do not wait for."""
    created: dict[tuple[str, str], tuple[float, float]] = {}  # (resource, name) -> (received, answered)
    for entry in _audit_entries(path, offset):
        ref = entry["objectRef"]
        if entry.get("verb") == "create" and ref.get("namespace") == namespace and ref.get("name"):
            created[(ref["resource"], ref["name"])] = (_stamp(entry["requestReceivedTimestamp"]),
                                                       _stamp(entry["stageTimestamp"]))
    parts: dict[str, list[float]] = {"operator: SD created → ModelCache create sent": [], "ModelCache create": [],
                                     "operator: ModelCache created → Job create sent": [], "Job create": [],
                                     "SD create received → Job created": [],
                                     "SD create sent → Job created": []}
    for sd, job in first_jobs.items():
        steps = [created.get(key) for key in (("speculativedeployments", sd),
                                              ("modelcaches", job.removesuffix("-fetch")), ("jobs", job))]
        if None in steps:
            continue
        (sd_in, sd_out), (mc_in, mc_out), (job_in, job_out) = steps
        values = (mc_in - sd_out, mc_out - mc_in, job_in - mc_out, job_out - job_in, job_out - sd_in,
                  job_out - sent_at[sd])
        for key, value in zip(parts, values):
            parts[key].append(value)
    return {key: summary(values) for key, values in parts.items()}


def audit_writes(path: Path, offset: int, since: float = 0.0, until: float = math.inf) -> dict[str, int]:
    """The operator's writes, by verb and resource."""
    counts: dict[str, int] = {}
    for agent, verb, resource in _audited_writes(path, offset, since, until):
        if agent.startswith(USER_AGENT) or agent.startswith("kopf"):
            counts[f"{verb} {resource}"] = counts.get(f"{verb} {resource}", 0) + 1
    return counts


def writes_by_client(path: Path, offset: int) -> dict[str, int]:
    """Every client's writes (the operator's share of the API server's work), by user agent's program."""
    counts: dict[str, int] = {}
    for agent, _, _ in _audited_writes(path, offset):
        program = agent.split("/", 1)[0] or "?"
        counts[program] = counts.get(program, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--scale", type=int, help="one fleet size (the same as --scales N)")
    parser.add_argument("--scales", default="100,300,1000", help="fleet sizes, comma-separated, each with "
                        "a fresh operator (default: %(default)s)")
    parser.add_argument("--models", type=int, default=10, help="target models the fleet shares")
    parser.add_argument("--own-every", type=int, default=10, help="every Nth deployment has a model of its own "
                        "(0: none)")
    parser.add_argument("--idle-seconds", type=float, default=60,
                        help="idle window after the largest fleet is Ready (must be under --resync-seconds)")
    parser.add_argument("--resync-seconds", type=float, default=Settings().resync_seconds,
                        help="the operator's resync interval (default: the operator's own, %(default)s)")
    parser.add_argument("--keep", action="store_true", help="keep the bench cluster afterwards")
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy during the largest fleet "
                        "into this file (collapsed stacks; `pip install py-spy`)")
    args = parser.parse_args()
    scales = [args.scale] if args.scale else sorted(int(n) for n in args.scales.split(","))
    if args.idle_seconds >= args.resync_seconds:
        parser.error("--idle-seconds must be under --resync-seconds: the idle window is between resyncs")

    local = dev.LocalCluster(name="specdec-bench", operator_port=18090)
    dev.down(local)
    policy = local.workdir / "bench-audit-policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(AUDIT_POLICY)
    # Each runtime pod of the example takes 2 GPUs; each fleet's namespace is deleted after it.
    gpu_nodes = math.ceil(max(scales) * 2 / 8) + 4
    dev.up(local, gpu_nodes=gpu_nodes, audit_policy=policy)
    local.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(render_crds().values()))
    local.kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdec.io",
                  "crd/enginebuilds.specdec.io")
    os.environ["SPECDEC_RESYNC_SECONDS"] = str(args.resync_seconds)  # the operator inherits it
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator", "bench"],
                           capture_output=True, text=True).stdout.strip()
    results: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "commit": commit + ("+dirty" if dirty else ""),
                     "machine": f"{os.cpu_count()} cores, {os.uname().machine}", "args": vars(args)}
    try:
        api = config.new_client_from_config(config_file=str(local.kubeconfig))
        api.configuration.connection_pool_maxsize = 16
        # The floor first, before the operator runs: it would otherwise act on the floor's objects.
        print(f"floor: {args.reps} repetitions, fleets {scales}", file=sys.stderr)
        floor_times = floor(api, args.reps)
        floor_fleets = {n: floor_scale(api, n, args.models, args.own_every) for n in scales}
        for n in scales:
            floor_fleets[n]["fanout"] = floor_fanout(api, n)
        delete_namespaces(local, [f"bench-floor-{i}" for i in range(args.reps)]
                          + [f"bench-floor-scale-{n}" for n in scales] + [f"bench-floor-fanout-{n}" for n in scales])
        dev.start_operator(local, metrics_port=METRICS_PORT)
        observer = Observer(api)
        observer.start()
        time.sleep(1)  # let the watches connect before the first measurement
        print(f"latency: {args.reps} repetitions", file=sys.stderr)
        operator_times = latency(api, observer, args.reps)
        results["latency"] = {}
        for stage, values in operator_times.items():
            p50, p95, f50 = statistics.median(values), percentile(values, 0.95), statistics.median(floor_times[stage])
            results["latency"][stage] = {"p50": p50, "p95": p95, "floor_p50": f50, "ratio_p50": p50 / f50}
        results["scales"] = []
        for n in scales:
            if n != scales[0]:  # a fresh operator per fleet: its peak RSS and counters are this fleet's
                dev.stop_operator(local)
                dev.start_operator(local, metrics_port=METRICS_PORT)
            pid = local.operator_pid()
            if args.profile and n == scales[-1]:  # py-spy stops and writes the file when the operator exits
                # --nonblocking: py-spy pausing the operator 50 times a second (its default) slowed the fleet
                # it measured by minutes; unpaused samples may be torn now and then (py-spy counts them).
                py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))  # e.g. in .venv
                subprocess.Popen([py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "20",
                                  "--nonblocking", "--gil", "--output", str(args.profile)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            print(f"scale: {n} deployments", file=sys.stderr)
            audit = local.logs_dir / "audit.log"
            counters, stats, offset = scrape(METRICS_PORT), process_stats(pid), audit.stat().st_size
            cpu = cpu_by_process(pid)
            row = scale(api, observer, n, args.models, args.own_every)
            ready_at = row.pop("ready_at")  # this process's clock (now())
            after = process_stats(pid)
            row["cpu_seconds_by_process"] = {k: round(v - cpu.get(k, 0.0), 1) for k, v in cpu_by_process(pid).items()}
            row["requests"] = delta(scrape(METRICS_PORT), counters)
            row["writes"] = audit_writes(audit, offset)
            row["apply_chain"] = apply_chain(audit, offset, f"bench-scale-{n}", row.pop("first_jobs"),
                                             row.pop("sent_at"))
            row["writes_by_client"] = writes_by_client(audit, offset)
            row["operator_cpu_seconds"] = after["cpu_seconds"] - stats["cpu_seconds"]
            row["operator_peak_rss_mib"] = after["peak_rss_mib"]
            row["floor"] = floor_fleets[n]
            for stage in ("apply_to_job", "jobs_done_to_deployment"):
                row[stage]["floor_p50"] = floor_fleets[n][stage]["p50"]
                row[stage]["ratio_p50"] = row[stage]["p50"] / floor_fleets[n][stage]["p50"]
            for stage, floor_row in row["loaded_floor"].items():
                row[stage]["loaded_floor_p50"] = floor_row["p50"]
                row[stage]["loaded_ratio_p50"] = row[stage]["p50"] / floor_row["p50"]
                row[stage]["loaded_ratio_p95"] = row[stage]["p95"] / floor_row["p95"]
            fanout = floor_fleets[n]["fanout"]
            row["jobs_done_to_deployment"]["fanout_floor_p50"] = fanout["p50"]
            row["jobs_done_to_deployment"]["fanout_ratio_p50"] = row["jobs_done_to_deployment"]["p50"] / fanout["p50"]
            results["scales"].append(row)
            if n == scales[-1]:  # its namespace goes with the cluster
                results["idle"] = idle(local, pid, args.idle_seconds, args.resync_seconds, ready_at)
            else:
                delete_namespaces(local, [f"bench-scale-{n}", f"bench-probe-{n}"])
        observer.stop.set()
    finally:
        if not args.keep:
            dev.down(local)
    out = ROOT / "bench" / "results" / f"{results['date'].replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(render_table(results))
    print(f"\nwritten: {out}")
    return 0


RESYNC_POLL_SECONDS = 0.5


def wait_resync_pass(before: dict[str, float], resync_seconds: float) -> dict[str, float]:
    """The operator's counters once a resync pass has ended after `before` was scraped."""
    deadline = now() + resync_seconds + 120
    while now() < deadline:
        after = scrape(METRICS_PORT)
        if after.get("resync_duration_seconds_count", 0) > before.get("resync_duration_seconds_count", 0):
            return after
        time.sleep(RESYNC_POLL_SECONDS)
    raise SystemExit(f"no resync pass ended within {resync_seconds + 120:.0f}s")


def idle(local: dev.LocalCluster, pid: int, seconds: float, resync_seconds: float, ready_at: float) -> dict:
    """The first resync pass that starts after the fleet is Ready (one under way then began during its
    rollout), measured (duration and writes), then an idle window before the next pass."""
    audit = local.logs_dir / "audit.log"
    before, offset = scrape(METRICS_PORT), audit.stat().st_size
    while True:
        after = wait_resync_pass(before, resync_seconds)
        passes = delta(after, before)
        if now() - passes.get("resync_duration_seconds_sum", 0.0) >= ready_at:
            break
        before, offset = after, audit.stat().st_size
    # The pass's own writes: from its start (its end, seen within a poll, less its duration) on. Before it, the
    # Event poster may still be posting the fleet's Events: those are the rollout's, counted apart.
    began = time.time() - passes.get("resync_duration_seconds_sum", 0.0) - RESYNC_POLL_SECONDS
    resync = {"seconds": passes.get("resync_duration_seconds_sum", float("nan")),
              "writes": audit_writes(audit, offset, since=began),
              "writes_before_it": audit_writes(audit, offset, until=began),
              "requests": {k: v for k, v in passes.items() if k.startswith("requests")}}
    offset = audit.stat().st_size
    stats = process_stats(pid)
    print(f"idle: {seconds:.0f}s", file=sys.stderr)
    time.sleep(seconds)
    after_stats = process_stats(pid)
    writes = audit_writes(audit, offset)
    cpu = after_stats["cpu_seconds"] - stats["cpu_seconds"]
    return {"seconds": seconds, "operator_writes": sum(writes.values()), "writes_by_kind": writes,
            "cpu_seconds": cpu, "cpu_percent_of_a_core": 100 * cpu / seconds, "rss_mib": after_stats["rss_mib"],
            "resync": resync}


def _ms(value: float) -> str:
    return f"{value:.3f}"


def render_table(results: dict) -> str:
    lines = [f"specdec-operator bench, {results['date']}, commit {results['commit']}, {results['machine']}", "",
             "| stage (one deployment) | p50 (s) | p95 (s) | floor p50 (s) | operator/floor |", "|---|---|---|---|---|"]
    for stage, row in results["latency"].items():
        lines.append(f"| {stage} | {row['p50']:.3f} | {row['p95']:.3f} | {row['floor_p50']:.3f} | {row['ratio_p50']:.1f} |")
    lines += ["", "| N | all Ready (s) | applied in (s) | apply→Job p50/p95 (s) | floor | ratio | "
              "Jobs done→Deployment p50/p95 (s) | floor | ratio | peak RSS (MiB) | CPU (s) | API requests |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in results["scales"]:
        job, dep = s["apply_to_job"], s["jobs_done_to_deployment"]
        requests = ", ".join(f"{k.split()[1]} {v:.0f}" for k, v in s["requests"].items() if k.startswith("requests"))
        lines.append(f"| {s['ready']}/{s['deployments']} | {s['all_ready_seconds']:.1f} | {s['apply_seconds']:.1f} | "
                     f"{_ms(job['p50'])}/{_ms(job['p95'])} | {_ms(job['floor_p50'])} | {job['ratio_p50']:.1f} | "
                     f"{_ms(dep['p50'])}/{_ms(dep['p95'])} | {_ms(dep['floor_p50'])} | {dep['ratio_p50']:.1f} | "
                     f"{s['operator_peak_rss_mib']:.0f} | {s['operator_cpu_seconds']:.1f} | {requests} |")
    for s in results["scales"]:
        dep, fanout = s["jobs_done_to_deployment"], s["floor"]["fanout"]
        lines.append(f"N={s['deployments']}: fan-out floor ({s['deployments']} released at once, {FANOUT_WRITERS} "
                     f"writers): Jobs done→Deployment p50/p95 {_ms(fanout['p50'])}/{_ms(fanout['p95'])}, all in "
                     f"{fanout['all_seconds']:.1f}s; operator/fan-out floor p50 {dep['fanout_ratio_p50']:.2f}")
    for s in results["scales"]:
        job, dep, loaded = s["apply_to_job"], s["jobs_done_to_deployment"], s["loaded_floor"]
        lines.append(f"N={s['deployments']}: loaded floor (the same stage's writes made directly during the fleet, "
                     f"{s['probes']['apply_to_job']}+{s['probes']['jobs_done_to_deployment']} probes): apply→Job "
                     f"p50/p95 {_ms(loaded['apply_to_job']['p50'])}/{_ms(loaded['apply_to_job']['p95'])}, "
                     f"operator/loaded floor p50 {job['loaded_ratio_p50']:.2f}, p95 {job['loaded_ratio_p95']:.2f}; "
                     f"Jobs done→Deployment p50/p95 {_ms(loaded['jobs_done_to_deployment']['p50'])}/"
                     f"{_ms(loaded['jobs_done_to_deployment']['p95'])}, "
                     f"operator/loaded floor p50 {dep['loaded_ratio_p50']:.2f}, p95 {dep['loaded_ratio_p95']:.2f}")
    for s in results["scales"]:  # a Job done releases every deployment that waited for it at once: a fan-out
        lines.append(f"N={s['deployments']}: Jobs done→Deployment by what released it, n p50/p95: " + "; ".join(
            f"{cause} {row['n']} {_ms(row['p50'])}/{_ms(row['p95'])}"
            for cause, row in s["jobs_done_to_deployment_by_release"].items()))
    for s in results["scales"]:
        lines.append(f"N={s['deployments']}: apply→Job on the API server's clock (audit log), p50/p95: " + "; ".join(
            f"{part} {_ms(row['p50'])}/{_ms(row['p95'])}" for part, row in s["apply_chain"].items()))
    for s in results["scales"]:
        lines.append(f"N={s['deployments']}: EngineBuilds {s['engine_builds']}, Jobs {s['jobs']}, distinct recipes "
                     f"{s['distinct_recipes']} (expected {s['expected_recipes']}); reconciles "
                     + ", ".join(f"{k.split()[1]} {v:.0f}" for k, v in s["requests"].items()
                                 if k.startswith("reconciles"))
                     + f"; resync passes ended in it {s['requests'].get('resync_duration_seconds_count', 0):.0f}"
                     + "; mean seconds: " + ", ".join(f"{k} {v:.3f}" for k, v in mean_timings(s["requests"]).items())
                     + f"; writes {dict(sorted(s['writes'].items(), key=lambda kv: -kv[1]))}"
                     + f"; all clients' writes {s.get('writes_by_client')}"
                     + f"; CPU seconds by process {s.get('cpu_seconds_by_process')}")
    idle_row = results.get("idle")
    if idle_row:
        r = idle_row["resync"]
        lines += [f"resync pass at N={results['scales'][-1]['deployments']}: {r['seconds']:.1f}s, "
                  f"writes {r['writes'] or 0} (after all Ready, before the pass: {r.get('writes_before_it') or 0})",
                  f"idle {idle_row['seconds']:.0f}s (between resyncs): {idle_row['operator_writes']} operator writes "
                  f"{idle_row['writes_by_kind']}, {idle_row['cpu_seconds']:.2f} CPU s "
                  f"({idle_row['cpu_percent_of_a_core']:.1f} % of a core), RSS {idle_row['rss_mib']:.0f} MiB"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
