"""Closed-loop clients of a runtime Service on the local cluster, counting every request that fails.

The requests go where the Service sends them: to a random ready endpoint, re-read every 0.2 s (what
kube-proxy does). The local cluster runs no EndpointSlice controller (the API server refuses the loopback
addresses of its pods there), so the endpoints are derived from the pods as that controller does. kwok marks a
pod Ready the moment it runs, before the local pod runner serves it (a kubelet would wait for the readiness
probe): an endpoint that refuses a connection before it ever answered is skipped, not counted. Any other failure
counts, among them a refused connection from an endpoint that had answered (a pod stopping too early).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request

from tests.kube_helpers import Kube


class ServiceClients:
    """Closed-loop clients of a Service, sending /v1/completions to its ready endpoints."""

    def __init__(self, kube: Kube, namespace: str, service: str, clients: int = 4):
        self.kube, self.namespace, self.service = kube, namespace, service
        self.endpoints: list[str] = []
        self.answered: set[str] = set()
        self.ok, self.failures, self.skipped = 0, [], 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._watch_endpoints, daemon=True)]
        self._threads += [threading.Thread(target=self._send, daemon=True) for _ in range(clients)]

    def __enter__(self):
        self._read_endpoints()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _read_endpoints(self) -> None:
        """The Service's ready endpoints as the EndpointSlice controller derives them: its selector's pods that
        are Ready and not terminating, at their port "http"."""
        service = self.kube.core.read_namespaced_service(self.service, self.namespace)
        selector = ",".join(f"{k}={v}" for k, v in service.spec.selector.items())
        found = []
        for pod in self.kube.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            ports = [p.container_port for c in pod.spec.containers for p in c.ports or [] if p.name == "http"]
            if ready and ports and pod.status.pod_ip and not pod.metadata.deletion_timestamp:
                found.append(f"{pod.status.pod_ip}:{ports[0]}")
        self.endpoints = found

    def _watch_endpoints(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._read_endpoints()
            except Exception:  # the API server busy for a moment: keep the last list
                pass

    def _send(self) -> None:
        body = json.dumps({"prompt": "hello", "max_tokens": 32}).encode()
        while not self._stop.is_set():
            endpoints = self.endpoints
            if not endpoints:
                time.sleep(0.05)
                continue
            endpoint = random.choice(endpoints)
            request = urllib.request.Request(
                f"http://{endpoint}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                with self._lock:
                    self.ok += 1
                    self.answered.add(endpoint)
            except urllib.error.HTTPError as error:
                with self._lock:
                    self.failures.append(f"{endpoint}: HTTP {error.code}")
            except urllib.error.URLError as error:
                refused = isinstance(error.reason, ConnectionRefusedError)
                with self._lock:
                    if refused and endpoint not in self.answered:
                        self.skipped += 1  # not served yet (see the module's doc)
                        time.sleep(0.05)
                    else:
                        self.failures.append(f"{endpoint}: {error.reason}")
            except OSError as error:
                with self._lock:
                    self.failures.append(f"{endpoint}: {error}")
