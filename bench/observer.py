"""When the operator's objects reach each milestone, as the bench's watches first see it."""

from __future__ import annotations

import threading
import time

from bench.timing import now
from kubernetes import client, watch

from specdec.api.models import GROUP, VERSION


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
        if any(
            c["type"] == "Available" and c["status"] == "True" for c in status.get("conditions") or []
        ) and status.get("readyReplicas", 0) >= deployment["spec"].get("replicas", 1):
            self.mark(ns, "deployment-available")

    def _sd(self, kind, sd) -> None:
        ns = sd["metadata"]["namespace"]
        status = sd.get("status") or {}
        if status.get("observedGeneration") == sd["metadata"].get("generation") and any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        ):
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
