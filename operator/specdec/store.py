"""The objects the operator watches, as last seen: a cache, like client-go's informers.

Filled from watch events and from the results of our own writes (so a reconcile right after a
write sees it), refreshed by each resync's LIST. Reconciles read from here instead of asking the
API server, so a reconcile that changes nothing makes no request at all.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

Key = tuple[str, str, str]  # kind, namespace, name


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace") or "", meta["name"]


def _newer_or_same(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """A late watch event must not replace what our own write returned. resourceVersions are etcd
    revisions in practice; where they do not parse as numbers, the latest arrival wins."""
    if current is None:
        return True
    new, old = candidate["metadata"].get("resourceVersion", ""), current["metadata"].get("resourceVersion", "")
    if new.isdigit() and old.isdigit():
        return int(new) >= int(old)
    return True


def matches(labels: dict[str, str] | None, selector: str | None) -> bool:
    """The label selectors we use: comma-separated `key=value` and `key` (exists)."""
    labels = labels or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if key not in labels or (value and labels[key] != value):
            return False
    return True


class Store:
    def __init__(self, kinds: Iterable[str]):
        self.kinds = frozenset(kinds)
        self._objects: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def caches(self, kind: str) -> bool:
        return kind in self.kinds

    def put(self, obj: dict[str, Any]) -> None:
        if obj.get("kind") not in self.kinds:
            return
        key = _key(obj)
        with self._lock:
            if _newer_or_same(obj, self._objects.get(key)):
                self._objects[key] = obj

    def remove(self, kind: str, namespace: str | None, name: str) -> None:
        with self._lock:
            self._objects.pop((kind, namespace or "", name), None)

    def observe(self, kind: str, event: dict[str, Any]) -> None:
        """Apply one watch event (kopf's raw event: type and object; listed objects may lack a kind)."""
        obj = {**(event.get("object") or {}), "kind": kind}
        if event.get("type") == "DELETED":
            self.remove(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        else:
            self.put(obj)

    def replace(self, kind: str, namespace: str | None, label_selector: str | None,
                objects: list[dict[str, Any]]) -> None:
        """What a LIST returned is all there is (of that kind, namespace and selector)."""
        with self._lock:
            for key in self._matching(kind, namespace, label_selector):
                del self._objects[key]
            for obj in objects:
                self._objects[_key(obj)] = obj

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((kind, namespace or "", name))

    def list(self, kind: str, namespace: str | None, label_selector: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [self._objects[key] for key in self._matching(kind, namespace, label_selector)]

    def _matching(self, kind: str, namespace: str | None, label_selector: str | None) -> list[Key]:
        """Keys of the cached objects in scope (the caller holds the lock)."""
        return [key for key, obj in self._objects.items()
                if key[0] == kind and (namespace is None or key[1] == namespace)
                and matches(obj["metadata"].get("labels"), label_selector)]
