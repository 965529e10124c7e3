"""Ownership: the operator writes only objects it controls.

A child of a deployment must carry that deployment's controller ownerReference (UID); an EngineBuild or a
ModelCache (the shared objects) must carry our label and the spec we want; a Job its EngineBuild's or
ModelCache's ownerReference; the managed cache claim our label. A name taken by anything else is a
`NameConflict` in status, and the object is left untouched: a first write is a create, which the API server
refuses for a taken name."""

from __future__ import annotations

from typing import Any

from specdec.builders import common
from specdec.kube.client import Kube
from specdec.reconcile.errors import NameConflict


def controlled_by(obj: dict[str, Any], uid: str) -> bool:
    return any(ref.get("controller") and ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def controlled(kind: str, child: dict[str, Any], uid: str) -> dict[str, Any]:
    """`child` if the deployment `uid` controls it, else a NameConflict."""
    if not controlled_by(child, uid):
        raise NameConflict(
            kind, child["metadata"]["name"], "is not controlled by this SpeculativeDeployment", "SpeculativeDeployment"
        )
    return child


def ours(obj: dict[str, Any]) -> bool:
    return (obj["metadata"].get("labels") or {}).get(common.LABEL_MANAGED_BY) == common.MANAGED_BY


class Children:
    """A deployment's children (ConfigMap, Deployment, Service): read and written only if it controls them."""

    def __init__(self, kube: Kube):
        self.kube = kube

    def get(self, kind: str, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        """The child `name` as cached if this deployment controls it, None if the cache has none (the cache
        holds only objects with our label: a name taken by another is found by the create, see write)."""
        obj = self.kube.get(kind, namespace, name)
        return obj if obj is None else controlled(kind, obj, uid)

    def write(self, desired: dict[str, Any], cached: dict[str, Any] | None, uid: str) -> tuple[dict[str, Any], bool]:
        """Write one child (`cached`: as get found it): a create when the cache has none, which the API server
        refuses if the name is taken — nothing of another's is changed, and no lookup comes first; else an
        apply where it differs. (object, written)."""
        obj, written = self.kube.apply(desired, cached)
        if cached is None and not written:  # the name is taken: by this deployment, before the cache knew it?
            obj, written = self.kube.apply(desired, controlled(desired["kind"], obj, uid))
        return obj, written
