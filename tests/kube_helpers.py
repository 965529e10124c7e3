"""Small helpers for tests against a real API server: typed clients and polling with deadlines."""

from __future__ import annotations

import dataclasses
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")

# The simulated backends' profile of the cluster tests that measure speculation (specdec_dev.simulation_profile):
# many short requests, fast steps, and a step time that does not grow with the batch, so the figures the
# tests check are those of speculative sampling at any load and no break-even stops the drafting.
FAST_PROFILE = {"requestsPerSecond": 20, "maxTokens": 32, "targetStepSeconds": 0.002, "stepSecondsPerToken": 0}


@dataclasses.dataclass
class Kube:
    api: client.ApiClient

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Kube:
        return cls(config.new_client_from_config(config_file=str(path)))

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def batch(self) -> client.BatchV1Api:
        return client.BatchV1Api(self.api)

    @property
    def rbac(self) -> client.RbacAuthorizationV1Api:
        return client.RbacAuthorizationV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    @property
    def apiext(self) -> client.ApiextensionsV1Api:
        return client.ApiextensionsV1Api(self.api)

    def quota(self, namespace: str, resource: str, hard: str) -> None:
        """A ResourceQuota of `hard` on `resource`, once the quota controller has observed it (until then
        the API server admits everything)."""
        name = "q-" + "".join(c if c.isalnum() else "-" for c in resource)
        self.core.create_namespaced_resource_quota(
            namespace, {"metadata": {"name": name}, "spec": {"hard": {resource: hard}}}
        )
        wait_for(
            lambda: (self.core.read_namespaced_resource_quota(name, namespace).status.hard or {}).get(resource) == hard,
            f"quota on {resource} observed",
        )

    def events_for(self, namespace: str, name: str) -> list:
        return self.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 60.0, interval: float = 0.25) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` and the last value seen."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def scrape(url: str) -> dict[str, float]:
    """The unlabelled samples of a Prometheus text page (a runtime front's /metrics), by name."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples if not s.labels}


def scrape_if_served(url: str) -> dict[str, float] | None:
    """scrape, or None while nothing answers there (kwok marks a pod Ready before the pod runner serves it)."""
    try:
        return scrape(url)
    except OSError:  # URLError included
        return None


def condition(obj, kind: str) -> str | None:
    """Status of the condition `kind` on a typed object with status.conditions."""
    for c in obj.status.conditions or []:
        if c.type == kind:
            return c.status
    return None
