"""The objects the operator watches, as last seen: a cache, like client-go's informers (their indexer).

kopf hands each watch event's object to its handler and keeps no cache a reconcile could read; the Kubernetes
Python client has watches but no informer. So this is the informer's store, fed by kopf's watches.

Filled from watch events and from the results of our own writes (so a reconcile right after a
write sees it), refreshed by each resync's LIST. Reconciles read from here instead of asking the
API server, so a reconcile that changes nothing makes no request at all.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Iterable, Mapping
from typing import Any

Key = tuple[str, str, str]  # kind, namespace, name


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace") or "", meta["name"]


def _newer(candidate: dict[str, Any], current: dict[str, Any]) -> bool:
    """Strictly newer; where resourceVersions do not parse as numbers, assumed so."""
    new, old = candidate["metadata"].get("resourceVersion", ""), current["metadata"].get("resourceVersion", "")
    return not (new.isdigit() and old.isdigit()) or int(new) > int(old)


def _newer_or_same(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """A late watch event must not replace what our own write returned. resourceVersions are etcd
    revisions in practice; where they do not parse as numbers, the latest arrival wins."""
    if current is None:
        return True
    new, old = candidate["metadata"].get("resourceVersion", ""), current["metadata"].get("resourceVersion", "")
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """Without managedFields: no reconcile reads them, and on server-side-applied objects they are
    a good part of the size (client-go informers drop them with a transform for the same reason). A Pod's
    spec only as far as the status evaluation reads it, its containers' names and memory limits: the rest (env, volumes,
    probes, the API server's defaults) of a fleet's pods was most of what the cache held of them."""
    meta = obj["metadata"]
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    if obj.get("kind") == "Pod" and "spec" in obj:
        obj = {**obj, "spec": _containers_only(obj["spec"] or {})}
    return obj


def _containers_only(spec: dict[str, Any]) -> dict[str, Any]:
    def container(c: dict[str, Any]) -> dict[str, Any]:
        memory = ((c.get("resources") or {}).get("limits") or {}).get("memory")
        return {"name": c.get("name"), **({"resources": {"limits": {"memory": memory}}} if memory else {})}

    return {group: [container(c) for c in spec[group]] for group in ("initContainers", "containers") if spec.get(group)}


def matches(labels: dict[str, str] | None, selector: str | None) -> bool:
    """The label selectors we use: comma-separated `key=value` and `key` (exists)."""
    labels = labels or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


def _terms(selector: str | None) -> list[tuple[str, str]]:
    return [(key, value) for key, _, value in (t.partition("=") for t in (selector or "").split(",") if t)]


class Store:
    """Objects by (kind, namespace) and name, so a lookup never scans other kinds or namespaces;
    `indexed_labels` (like client-go's indexers) answer `label=value` selectors without a scan of
    the namespace: a reconcile that lists its own pods costs the same among a thousand deployments."""

    def __init__(
        self, kinds: Iterable[str], indexed_labels: Iterable[str] = (), selectors: Mapping[str, str] | None = None
    ):
        self.kinds = frozenset(kinds)
        # By kind, the label selector of its watch: what the cache may hold. An object outside it (another's,
        # met by a create refused for its name) would stay after it is gone: no watch event would remove it.
        self.selectors = dict(selectors or {})
        self.indexed_labels = frozenset(indexed_labels)
        self._scopes: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self._by_label: dict[tuple[str, str, str, str], set[str]] = {}  # kind, namespace, label, value
        self._lock = threading.Lock()

    def caches(self, kind: str) -> bool:
        return kind in self.kinds

    def put(self, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        if kind not in self.kinds or not matches(obj["metadata"].get("labels"), self.selectors.get(kind)):
            return
        kind, namespace, name = _key(obj)
        with self._lock:
            if _newer_or_same(obj, self._scopes.get((kind, namespace), {}).get(name)):
                self._put(kind, namespace, name, obj)

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        with self._lock:
            self._remove(kind, namespace or "", name)

    def observe(self, kind: str, event: dict[str, Any]) -> bool:
        """Apply one watch event (kopf's raw event: type and object; listed objects may lack a kind).
        False when it told nothing new: the echo of our own write (whose answer the cache already
        holds, and whose writer saw what it wrote) or a late event; the caller need not reconcile."""
        obj = {**(event.get("object") or {}), "kind": kind}
        if event.get("type") == "DELETED":
            self.remove(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            return True
        if kind not in self.kinds:
            return True
        kind, namespace, name = _key(obj)
        with self._lock:
            current = self._scopes.get((kind, namespace), {}).get(name)
            if current is not None and not _newer(obj, current):  # held already, or something newer
                return False
            self._put(kind, namespace, name, obj)
            return True

    def replace(
        self,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        objects: list[dict[str, Any]],
        version: str = "",
    ) -> None:
        """What a LIST (at resourceVersion `version`) returned is all there is (of that kind, namespace
        and selector), except what is newer than the list: our own writes since, or their watch events."""
        listed = {_key(obj): obj for obj in objects}
        snapshot = {"metadata": {"resourceVersion": version}}
        with self._lock:
            for obj in self._matching(kind, namespace, label_selector):
                if _key(obj) not in listed and _newer_or_same(snapshot, obj):
                    self._remove(*_key(obj))
            for key, obj in listed.items():
                if _newer_or_same(obj, self._scopes.get(key[:2], {}).get(key[2])):
                    self._put(*key, obj)

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._scopes.get((kind, namespace or ""), {}).get(name)

    def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return self._matching(kind, namespace, label_selector)

    # The caller of these holds the lock.

    def _put(self, kind: str, namespace: str, name: str, obj: dict[str, Any]) -> None:
        self._remove(kind, namespace, name)
        obj = slim(obj)
        self._scopes.setdefault((kind, namespace), {})[name] = obj
        for label, value in (obj["metadata"].get("labels") or {}).items():
            if label in self.indexed_labels:
                self._by_label.setdefault((kind, namespace, label, value), set()).add(name)

    def _remove(self, kind: str, namespace: str, name: str) -> None:
        scope = self._scopes.get((kind, namespace), {})
        obj = scope.pop(name, None)
        if obj is None:
            return
        for label, value in (obj["metadata"].get("labels") or {}).items():
            names = self._by_label.get((kind, namespace, label, value))
            if names is not None:
                names.discard(name)
                if not names:
                    del self._by_label[(kind, namespace, label, value)]

    def _matching(self, kind: str, namespace: str | None, label_selector: str | None) -> builtins.list[dict[str, Any]]:
        if namespace is None:
            candidates = [o for (k, _), scope in self._scopes.items() if k == kind for o in scope.values()]
        else:
            scope = self._scopes.get((kind, namespace), {})
            indexed = [(k, v) for k, v in _terms(label_selector) if k in self.indexed_labels and v]
            if indexed:
                names = self._by_label.get((kind, namespace, *indexed[0]), set())
                candidates = [scope[n] for n in names]
            else:
                candidates = list(scope.values())
        return [o for o in candidates if matches(o["metadata"].get("labels"), label_selector)]
