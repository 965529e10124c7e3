"""An in-memory stand-in for kube-apiserver behind a real Kube (the real one runs in tests/cluster).

It answers Kube's requests (Kube._request): discovery of the kinds Kube knows, creates (409 for a taken name),
gets (404), lists, merge patches (the status subresource too), server-side applies (merged, as our own fields'
apply comes out) and deletes, and records every request. `Cluster.run_controllers` writes what Kubernetes' Job
and Deployment controllers would: every Job complete, every Deployment rolled out and available. The watches are
the Store: every write lands in it, as its watch event would."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec.kube.cache import Store
from specdec.kube.client import KINDS, Kube

CACHED = (
    "SpeculativeDeployment",
    "EngineBuild",
    "ModelCache",
    "Job",
    "Pod",
    "Deployment",
    "LeaderWorkerSet",
    "ConfigMap",
    "Service",
    "PersistentVolumeClaim",
)


def _discovery() -> dict[str, list[dict[str, str]]]:
    """Each group version's served resources (GET /apis/<group>/<version>), of the kinds Kube knows."""
    served: dict[str, list[dict[str, str]]] = {}
    for kind in KINDS.values():
        served.setdefault(kind.path(None).rsplit("/", 1)[0], []).append({"name": kind.plural})
    return served


DISCOVERY = _discovery()


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 merge patch: None deletes, dicts merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
    return target


class Cluster:
    def __init__(self):
        self.objects: dict[str, dict[str, Any]] = {}  # by path
        self.requests: list[tuple[str, str]] = []
        self.events: list[tuple[str, str]] = []  # (reason, object name) of each Event posted
        self._version = 0
        self.store = Store(CACHED)
        self.kube = Kube(client.ApiClient(), self.store)
        self.kube._request = self._answer
        self.kube.event = lambda obj, reason, message, warning=False: self.events.append(
            (reason, obj["metadata"]["name"])
        )

    def writes(self) -> list[tuple[str, str]]:
        return [(method, path) for method, path in self.requests if method != "GET"]

    def add(self, obj: dict[str, Any]) -> dict[str, Any]:
        """An object a user applied (kubectl apply): created, and seen by the watch."""
        created, _ = self.kube.create(copy.deepcopy(obj))
        return created

    def _keep(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self.objects[path] = obj
        return copy.deepcopy(obj)

    def _answer(
        self, method: str, path: str, body: Any, query: list[tuple[str, str]] | None, content_type: str
    ) -> dict[str, Any]:
        self.requests.append((method, path))
        query = dict(query or [])
        if method == "GET" and path in DISCOVERY:
            return {"resources": copy.deepcopy(DISCOVERY[path])}
        if method == "POST":
            obj_path = f"{path}/{body['metadata']['name']}"
            if obj_path in self.objects:
                raise ApiException(status=409, reason="AlreadyExists")
            obj = copy.deepcopy(body)
            obj["metadata"].update(
                uid=f"uid-{len(self.objects)}", generation=1, creationTimestamp="2026-01-01T00:00:00Z"
            )
            return self._keep(obj_path, obj)
        if method == "GET" and "limit" in query:
            return {
                "items": [copy.deepcopy(o) for p, o in self.objects.items() if p.rsplit("/", 1)[0] == path],
                "metadata": {"resourceVersion": str(self._version)},
            }
        obj_path = path.removesuffix("/status")
        if obj_path not in self.objects:
            raise ApiException(status=404, reason="NotFound")
        obj = self.objects[obj_path]
        if method == "GET":
            return copy.deepcopy(obj)
        if method == "DELETE":
            del self.objects[obj_path]
            return {}
        assert content_type in ("application/merge-patch+json", "application/apply-patch+yaml"), content_type
        spec = copy.deepcopy(obj.get("spec"))
        _merge(obj, body)
        if obj.get("spec") != spec:
            obj["metadata"]["generation"] += 1
        return self._keep(obj_path, obj)

    def run_controllers(self) -> None:
        """Kubernetes' Job and Deployment controllers and LeaderWorkerSet's: every Job complete, every Deployment
        and LeaderWorkerSet available (their status has the same fields; LeaderWorkerSet's counts groups)."""
        for path, obj in list(self.objects.items()):
            if obj["kind"] == "Job":
                status = {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}
            elif obj["kind"] in ("Deployment", "LeaderWorkerSet"):
                replicas = obj["spec"].get("replicas", 1)
                status = {
                    "observedGeneration": obj["metadata"]["generation"],
                    "replicas": replicas,
                    "updatedReplicas": replicas,
                    "readyReplicas": replicas,
                    "availableReplicas": replicas,
                    "conditions": [{"type": "Available", "status": "True"}],
                }
            else:
                continue
            if obj.get("status") != status:
                obj["status"] = status
                self.store.put(self._keep(path, obj))
