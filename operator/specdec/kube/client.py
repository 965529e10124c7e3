"""The operator's API client: every request it makes; reads of the cached kinds come from the cache.

Mirrors client-go's REST client with its request retries (a 429's Retry-After honoured) and pager. The
Kubernetes Python client falls short for an operator: its generated API classes turn every object into
model classes and back, and by default it retries no 429 or 5xx answer. So one request function over its
ApiClient (configuration and authentication) does the retries below. Errors: errors.py; Events: events.py;
what a write decides before a request: apply.py; the cache: cache.py.

Objects are plain dicts in their wire form, so the pure builders' output goes out unchanged.
Transient failures (429, 5xx, resets, refused connections, timeouts) are retried with jittered
back-off, honouring Retry-After; what is still failing after that is an `ApiException` whose
`permanent(error)` says whether retrying soon can help. A 409 on create means "already there".
Writes happen only when what we want is not already what the API server has (`contains`), so an
idle operator writes nothing.
"""

from __future__ import annotations

import builtins
import dataclasses
import logging
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specdec.kube import jsonio
from specdec.kube.apply import adopted, contains
from specdec.kube.cache import Store, slim
from specdec.kube.errors import CONNECTION_FAILED, TRANSIENT_STATUSES, body_message
from specdec.kube.events import EventRecorder
from specdec.metrics import API_REQUEST_SECONDS, API_REQUESTS
from specdec.versions import LWS

FIELD_MANAGER = "specdec-operator"
USER_AGENT = "specdec-operator/0.1.0"  # tells our requests apart in the API server's audit log
RETRIES = 6
BACKOFF_BASE = 0.2
BACKOFF_MAX = 5.0
RETRY_AFTER_MAX = 30.0
LIST_PAGE_SIZE = 500  # client-go's pager's default
ADOPT_ATTEMPTS = 3  # see Kube._adopt_created_fields: a controller may write a Deployment's status meanwhile

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Kind:
    api_version: str
    plural: str

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/api/{self.api_version}" if "/" not in self.api_version else f"/apis/{self.api_version}"
        parts = [base]
        if namespace:
            parts.append(f"namespaces/{quote(namespace)}")
        parts.append(self.plural)
        if name:
            parts.append(quote(name))
        if subresource:
            parts.append(subresource)
        return "/".join(parts)


KINDS = {
    "ConfigMap": Kind("v1", "configmaps"),
    "Service": Kind("v1", "services"),
    "PersistentVolumeClaim": Kind("v1", "persistentvolumeclaims"),
    "Pod": Kind("v1", "pods"),
    "Event": Kind("v1", "events"),
    "Node": Kind("v1", "nodes"),  # cluster-scoped; listed for their GPU labels (specdec.admission.gpu_nodes)
    "Deployment": Kind("apps/v1", "deployments"),
    "Job": Kind("batch/v1", "jobs"),
    "EngineBuild": Kind("specdec.io/v1alpha1", "enginebuilds"),
    "ModelCache": Kind("specdec.io/v1alpha1", "modelcaches"),
    "SpeculativeDeployment": Kind("specdec.io/v1alpha1", "speculativedeployments"),
    # A target spanning several nodes (specdec.builders.multinode): its group of pods, and its SSH keys, which the
    # operator creates and never reads.
    "LeaderWorkerSet": Kind(LWS.api_version, LWS.plural),
    "Secret": Kind("v1", "secrets"),
}


def _backoff(attempt: int) -> float:
    """Exponential, with full jitter so that many clients retrying at once spread out."""
    return random.uniform(0.5, 1.0) * min(BACKOFF_MAX, BACKOFF_BASE * 2**attempt)


class Kube:
    """API access; reads of the kinds in `store` come from that cache (kept fresh by the watches)."""

    def __init__(self, api: client.ApiClient, store: Store | None = None):
        self.api = api
        self.store = store or Store(())
        self.events = EventRecorder(
            lambda event: self._call("POST", KINDS["Event"].path(event["metadata"]["namespace"]), body=event),
            FIELD_MANAGER,
        )

    @classmethod
    def from_environment(cls, store: Store | None = None) -> Kube:
        try:
            config.load_incluster_config()
            configuration = client.Configuration.get_default_copy()
        except config.ConfigException:
            configuration = client.Configuration()
            config.load_kube_config(client_configuration=configuration)
        configuration.connection_pool_maxsize = 32
        api = client.ApiClient(configuration)
        api.user_agent = USER_AGENT
        return cls(api, store)

    # -- transport --------------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        """One request, retried while the failure is transient. Writes are safe to repeat: creates
        answer 409 (handled by the callers), applies and merge patches are idempotent."""
        previous_500 = None
        for attempt in range(RETRIES):
            try:
                return self._request(method, path, body, query, content_type)
            except ApiException as error:
                if error.status == 500:  # the same 500 twice is a verdict, not an outage
                    message = body_message(error)
                    if message == previous_500:
                        error.permanent = True  # type: ignore[attr-defined]  # read by kube.errors.permanent
                        raise
                    previous_500 = message
                if error.status not in TRANSIENT_STATUSES or attempt == RETRIES - 1:
                    raise
                retry_after = (error.headers or {}).get("Retry-After")
                delay = (
                    min(float(retry_after), RETRY_AFTER_MAX)
                    if retry_after and retry_after.isdigit()
                    else _backoff(attempt)
                )
                log.warning("%s %s: HTTP %s, retrying in %.1fs", method, path, error.status, delay)
            except (urllib3.exceptions.HTTPError, OSError) as error:  # reset, refused, timed out
                API_REQUESTS.labels(method, "error").inc()
                if attempt == RETRIES - 1:
                    raise ApiException(status=CONNECTION_FAILED, reason=f"{type(error).__name__}: {error}") from error
                delay = _backoff(attempt)
                log.warning("%s %s: %s, retrying in %.1fs", method, path, type(error).__name__, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _request(
        self, method: str, path: str, body: Any, query: list[tuple[str, str]] | None, content_type: str
    ) -> dict[str, Any]:
        method, url, headers, body, _ = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            body=body,
            header_params={"Accept": "application/json", "Content-Type": content_type},
            auth_settings=["BearerToken"],
        )
        with API_REQUEST_SECONDS.labels(method).time():
            response = self.api.call_api(method, url, header_params=headers, body=body, _request_timeout=30)
            data = response.read()
        API_REQUESTS.labels(method, f"{response.status // 100}xx").inc()
        if not 200 <= response.status < 300:
            raise ApiException.from_response(http_resp=response, body=data.decode(errors="replace"), data=None)
        return jsonio.loads(data) if data else {}

    def served_resources(self, group_version: str) -> set[str]:
        """Plural names the API server serves in `group_version` (discovery; empty if none)."""
        try:
            return {r["name"] for r in self._call("GET", f"/apis/{group_version}").get("resources", [])}
        except ApiException as error:
            if error.status == 404:
                return set()
            raise

    # -- reads ------------------------------------------------------------------------------------

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        if self.store.caches(kind):
            return self.store.get(kind, namespace, name)
        return self.get_live(kind, namespace, name)

    def get_live(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            return self._call("GET", KINDS[kind].path(namespace, name))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        if self.store.caches(kind):
            return self.store.list(kind, namespace, label_selector)
        return self.list_live(kind, namespace, label_selector)

    def list_live(
        self, kind: str, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None
    ) -> builtins.list[dict[str, Any]]:
        return self._list(kind, namespace, label_selector, field_selector)[0]

    def _list(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] = slim,
    ) -> tuple[builtins.list[dict[str, Any]], str]:
        """(items, the list's resourceVersion), in pages of LIST_PAGE_SIZE as client-go's pager reads
        them: a fleet's pods in one answer would be one ~10 MB body and its parse at once, the operator's
        peak memory. What is kept of each item (`keep`: by default cache.slim) is chosen page by page.
        Consistent lists (no resourceVersion=0: the API server ignores `limit` for those); recent API servers
        answer them, pages too, from their watch cache (ConsistentListFromCache, ListFromCacheSnapshot)."""
        query = [(k, v) for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v]
        query.append(("limit", str(LIST_PAGE_SIZE)))
        items: list[dict[str, Any]] = []
        page: list[tuple[str, str]] = []
        while True:
            result = self._call("GET", KINDS[kind].path(namespace), query=query + page)
            for item in result.get("items", []):  # items of a List carry no kind of their own
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", KINDS[kind].api_version)
                items.append(keep(item))
            meta = result.get("metadata") or {}
            if not meta.get("continue"):
                return items, meta.get("resourceVersion", "")
            page = [("continue", meta["continue"])]

    def refresh(self, kind: str, namespace: str | None, label_selector: str | None = None) -> None:
        """Re-read a cached kind from the API server, in case a watch missed something. An object unchanged
        since (same resourceVersion) stays the one cached: a pass over a fleet holds one page of new copies
        at a time, not a second copy of every object (the operator's peak memory at N=1000)."""

        def cached_or_listed(item: dict[str, Any]) -> dict[str, Any]:
            meta = item["metadata"]
            held = self.store.get(kind, meta.get("namespace"), meta["name"])
            if held is not None and held["metadata"].get("resourceVersion") == meta.get("resourceVersion"):
                return held
            return slim(item)

        items, version = self._list(kind, namespace, label_selector, keep=cached_or_listed)
        self.store.replace(kind, namespace, label_selector, items, version)

    # -- writes -----------------------------------------------------------------------------------

    def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create; returns (object, True), or (what has that name already, False) — names are
        deterministic, so the caller decides whether the object found there is its own."""
        meta = obj["metadata"]
        path = KINDS[obj["kind"]].path(meta.get("namespace"))
        query = [("fieldManager", FIELD_MANAGER)]
        try:
            return self._remember(self._call("POST", path, body=obj, query=query)), True
        except ApiException as error:
            if error.status != 409:
                raise
        existing = self.get_live(obj["kind"], meta.get("namespace"), meta["name"])  # the cache lags: ask
        if existing is None:  # deleted between our create and get: try once more
            return self._remember(self._call("POST", path, body=obj, query=query)), True
        return self._remember(existing), False

    def create_unread(self, obj: dict[str, Any]) -> str | None:
        """Create an object the operator may not read (a Secret): the created object's uid; None when the name is
        taken, without a look at what has it."""
        meta = obj["metadata"]
        try:
            created = self._call(
                "POST",
                KINDS[obj["kind"]].path(meta.get("namespace")),
                body=obj,
                query=[("fieldManager", FIELD_MANAGER)],
            )
        except ApiException as error:
            if error.status != 409:
                raise
            return None
        return str(created["metadata"]["uid"])

    def _remember(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.store.put(obj)
        return obj

    def apply(self, obj: dict[str, Any], existing: dict[str, Any] | None) -> tuple[dict[str, Any], bool]:
        """Write `obj`, one of our own objects; returns (object, written). With no `existing` it is created:
        a create, not a server-side apply, because the API server refuses a create whose name is taken —
        nothing of another's is written, and no lookup is needed first — and spends less CPU on it (the
        runtime's Deployment: an apply 1.5x a create, bench/apply_cost.py). A taken name gives (what has
        it, False), for the caller to check. Else (`existing`: what the API server has, checked by the
        caller to be ours) it is server-side applied, unless `existing` already has it."""
        if existing is None:
            return self.create(obj)
        if contains(existing, obj):
            return existing, False
        meta = obj["metadata"]
        self._adopt_created_fields(obj["kind"], meta.get("namespace"), meta["name"])
        return self.server_side_apply(obj), True

    def server_side_apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The apply request itself, taking every field of `obj` (force), whatever the object holds."""
        meta = obj["metadata"]
        return self._remember(
            self._call(
                "PATCH",
                KINDS[obj["kind"]].path(meta.get("namespace"), meta["name"]),
                body=obj,
                query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                content_type="application/apply-patch+yaml",
            )
        )

    def _adopt_created_fields(self, kind: str, namespace: str | None, name: str) -> None:
        """Make the fields our create (and merge patches) set ours as applied fields before an apply, as
        `kubectl apply --server-side` does with client-go's csaupgrade: the API server records a create under
        our manager name with operation Update, a manager of its own to an apply, so a field the apply leaves
        out would stay, still owned by that create. A read before each change (the cache holds no
        managedFields; changes are rare: a new spec or operator version) and, once per object, a write."""
        for attempt in range(ADOPT_ATTEMPTS):
            live = self.get_live(kind, namespace, name)
            entries = adopted((live or {}).get("metadata", {}).get("managedFields") or [], FIELD_MANAGER)
            if entries is None or live is None:  # no live object: no managedFields, so entries is None
                return
            try:
                self._call(
                    "PATCH",
                    KINDS[kind].path(namespace, name),
                    content_type="application/json-patch+json",
                    body=[
                        {
                            "op": "test",
                            "path": "/metadata/resourceVersion",
                            "value": live["metadata"]["resourceVersion"],
                        },
                        {"op": "replace", "path": "/metadata/managedFields", "value": entries},
                    ],
                )
                return
            except ApiException as error:  # 422: the test failed, another wrote the object since we read it
                if error.status != 422 or attempt == ADOPT_ATTEMPTS - 1:
                    raise

    def patch(
        self, kind: str, namespace: str, name: str, patch: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any]:
        return self._remember(
            self._call(
                "PATCH",
                KINDS[kind].path(namespace, name, subresource),
                body=patch,
                content_type="application/merge-patch+json",
            )
        )

    def delete(self, kind: str, namespace: str, name: str) -> None:
        try:
            self._call("DELETE", KINDS[kind].path(namespace, name), body={"propagationPolicy": "Background"})
        except ApiException as error:
            if error.status != 404:
                raise
        self.store.remove(kind, namespace, name)

    def event(self, obj: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        """Post an Event about `obj` in the background (events.py)."""
        self.events.record(obj, reason, message, warning)
