"""Benchmark the operator on the local control plane: latency, its floor, scale and idle cost.

    .venv/bin/python bench/run.py [--reps 20] [--scale 300] [--models 10] [--idle-seconds 300]

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
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml
from kubernetes import client, config, watch

from specdec.api.crd import render_crds
from specdec.api.models import GROUP, VERSION
from specdec.dev import cluster as dev
from specdec.kube import USER_AGENT

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
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
            try:
                for event in watch.Watch().stream(list_fn, timeout_seconds=30):
                    handle(event["type"], event["object"])
                    if self.stop.is_set():
                        return
            except Exception:  # reconnect; a watch may expire
                time.sleep(0.1)

    def _job(self, kind, job) -> None:
        ns = job.metadata.namespace
        self.mark(ns, "job-created")
        if any(c.type == "Complete" and c.status == "True" for c in (job.status.conditions or [])):
            self.mark(ns, f"job-done:{job.metadata.name}")

    def _deployment(self, kind, deployment) -> None:
        ns = deployment.metadata.namespace
        self.mark(ns, "deployment-created")
        if any(c.type == "Available" and c.status == "True" for c in (deployment.status.conditions or [])) \
                and (deployment.status.ready_replicas or 0) >= (deployment.spec.replicas or 0):
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

    def jobs_done(self, namespace: str) -> float | None:
        with self.lock:
            times = [t for (ns, m), t in self.seen.items() if ns == namespace and m.startswith("job-done:")]
        return max(times) if len(times) >= 2 else None


def process_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return {"rss_mib": int(fields["VmRSS"].split()[0]) / 1024, "peak_rss_mib": int(fields["VmHWM"].split()[0]) / 1024,
            "cpu_seconds": (int(stat[11]) + int(stat[12])) / ticks}


def sd_body(name: str) -> dict:
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"] = {"name": name}
    return body


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
    job = {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.invalid/x"}]}}}}
    eb = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "EngineBuild", "metadata": {"name": "e"},
          "spec": {"recipe": {"model": "hf://a/b", "dtype": "float16", "quantization": "none", "kvCacheDtype": "auto",
                              "tensorParallelSize": 1, "image": "x"}, "cacheClaim": "c", "enginePath": "engines/e"}}
    labels = {"app": "floor"}
    deployment = {"metadata": {"name": "d"}, "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
        "metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}}}}
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


def scale(api: client.ApiClient, observer: Observer, count: int, models: int) -> dict[str, float]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ns = "bench-scale"
    create_namespace(core, ns)
    base = yaml.safe_load(EXAMPLE.read_text())
    start = now()
    for i in range(count):
        body = copy.deepcopy(base)
        body["metadata"] = {"name": f"sd-{i:03d}"}
        body["spec"]["target"]["model"] = f"hf://bench/target-{i % models}"
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, "speculativedeployments", body)
    applied = now() - start
    deadline = start + 600
    while now() < deadline:
        with observer.lock:
            ready = sum(1 for (n, m) in observer.seen if n == ns and m.startswith("ready:"))
        if ready == count:
            break
        time.sleep(0.2)
    all_ready = now() - start
    builds = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "enginebuilds")["items"]
    jobs = client.BatchV1Api(api).list_namespaced_job(ns).items
    recipes = {json.dumps(b["spec"]["recipe"], sort_keys=True) for b in builds}
    return {"deployments": count, "ready": ready, "apply_seconds": applied, "all_ready_seconds": all_ready,
            "engine_builds": len(builds), "jobs": len(jobs), "distinct_recipes": len(recipes),
            "expected_recipes": models + 1}  # 10 targets + the one shared draft


def audit_writes(path: Path, offset: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    with path.open() as log:
        log.seek(offset)
        for line in log:
            entry = json.loads(line)
            agent = entry.get("userAgent", "")
            if entry.get("verb") in WRITE_VERBS and (agent.startswith(USER_AGENT) or agent.startswith("kopf")):
                key = f"{entry['verb']} {entry['objectRef'].get('resource', '?')}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--scale", type=int, default=300)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=300)
    parser.add_argument("--keep", action="store_true", help="keep the bench cluster afterwards")
    parser.add_argument("--profile", type=Path, help="record the operator with py-spy into this file "
                        "(collapsed stacks; `pip install py-spy`)")
    args = parser.parse_args()

    local = dev.LocalCluster(name="specdec-bench", operator_port=18090)
    dev.down(local)
    policy = local.workdir / "bench-audit-policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(AUDIT_POLICY)
    # Each runtime pod of the example takes 2 GPUs; latency namespaces are deleted after each rep.
    gpu_nodes = math.ceil(args.scale * 2 / 8) + 4
    dev.up(local, gpu_nodes=gpu_nodes, audit_policy=policy)
    local.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(render_crds().values()))
    local.kubectl("wait", "--for=condition=Established", "crd/speculativedeployments.specdec.io",
                  "crd/enginebuilds.specdec.io")
    try:
        api = config.new_client_from_config(config_file=str(local.kubeconfig))
        api.configuration.connection_pool_maxsize = 16
        # The floor first, before the operator runs: it would otherwise act on the floor's EngineBuilds.
        print(f"floor: {args.reps} repetitions", file=sys.stderr)
        floor_times = floor(api, args.reps)
        core = client.CoreV1Api(api)
        for i in range(args.reps):
            core.delete_namespace(f"bench-floor-{i}")
        dev.start_operator(local)
        pid = local.operator_pid()
        if args.profile:  # py-spy stops and writes the file when the operator exits
            subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--rate", "50",
                                         "--output", str(args.profile), "--threads"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        observer = Observer(api)
        observer.start()
        time.sleep(1)  # let the watches connect before the first measurement
        results: dict = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                         "machine": f"{os.cpu_count()} cores, {os.uname().machine}", "args": vars(args)}
        print(f"latency: {args.reps} repetitions", file=sys.stderr)
        operator_times = latency(api, observer, args.reps)
        results["latency"] = {}
        for stage, values in operator_times.items():
            p50, p95, f50 = statistics.median(values), percentile(values, 0.95), statistics.median(floor_times[stage])
            results["latency"][stage] = {"p50": p50, "p95": p95, "floor_p50": f50, "ratio_p50": p50 / f50}
        print(f"scale: {args.scale} deployments, {args.models} target models", file=sys.stderr)
        results["scale"] = scale(api, observer, args.scale, args.models)
        results["scale"]["operator_peak_rss_mib"] = process_stats(pid)["peak_rss_mib"]
        audit = local.logs_dir / "audit.log"
        offset = audit.stat().st_size
        before = process_stats(pid)
        print(f"idle: {args.idle_seconds:.0f}s", file=sys.stderr)
        time.sleep(args.idle_seconds)
        after = process_stats(pid)
        writes = audit_writes(audit, offset)
        results["idle"] = {"seconds": args.idle_seconds, "operator_writes": sum(writes.values()),
                           "writes_by_kind": writes, "cpu_seconds": after["cpu_seconds"] - before["cpu_seconds"],
                           "rss_mib": after["rss_mib"]}
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


def render_table(results: dict) -> str:
    lines = [f"specdec-operator bench, {results['date']}, {results['machine']}", "",
             "| stage | p50 (s) | p95 (s) | floor p50 (s) | operator/floor |", "|---|---|---|---|---|"]
    for stage, row in results["latency"].items():
        lines.append(f"| {stage} | {row['p50']:.3f} | {row['p95']:.3f} | {row['floor_p50']:.3f} | {row['ratio_p50']:.1f} |")
    s, idle = results["scale"], results["idle"]
    lines += ["", f"scale: {s['ready']}/{s['deployments']} Ready in {s['all_ready_seconds']:.1f}s "
              f"(applied in {s['apply_seconds']:.1f}s); EngineBuilds {s['engine_builds']}, Jobs {s['jobs']}, "
              f"distinct recipes {s['distinct_recipes']} (expected {s['expected_recipes']}); "
              f"operator peak RSS {s['operator_peak_rss_mib']:.0f} MiB",
              f"idle {idle['seconds']:.0f}s: {idle['operator_writes']} operator writes {idle['writes_by_kind']}, "
              f"{idle['cpu_seconds']:.2f} CPU s, RSS {idle['rss_mib']:.0f} MiB"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
