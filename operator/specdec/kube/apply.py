"""What a write decides before it talks to the API server: whether the object already has what we want,
and our created fields handed over to our server-side apply.

client-go has the second as `k8s.io/client-go/util/csaupgrade` (what `kubectl apply --server-side` uses to
take over fields a create or update set); the Python client has neither. Both are pure functions of the
objects, apart from the requests the client (client.py) makes with them.
"""

from __future__ import annotations

from typing import Any


def contains(actual: Any, desired: Any) -> bool:
    """True when every field we set in `desired` has that value in `actual` (defaults may add more)."""
    if isinstance(desired, dict):
        return isinstance(actual, dict) and all(k in actual and contains(actual[k], v) for k, v in desired.items())
    if isinstance(desired, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(desired)
            and all(contains(a, d) for a, d in zip(actual, desired, strict=True))
        )
    return actual == desired


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two managed field sets (FieldsV1: nested objects of `f:`/`k:`/`v:` keys) as one."""
    return {**a, **b, **{k: _union(a[k], b[k]) for k in a.keys() & b.keys()}}


def adopted(entries: list[dict[str, Any]], manager: str) -> list[dict[str, Any]] | None:
    """managedFields with `manager`'s Update entries (a create's, a merge patch's) folded into its Apply entry;
    None when there are none."""
    ours = [e for e in entries if e.get("manager") == manager and not e.get("subresource")]
    if not any(e.get("operation") == "Update" for e in ours):
        return None
    fields: dict[str, Any] = {}
    for entry in ours:
        fields = _union(fields, entry.get("fieldsV1") or {})
    applied = next((e for e in ours if e.get("operation") == "Apply"), ours[0])
    return [
        *(e for e in entries if not any(e is o for o in ours)),
        {**applied, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields},
    ]
