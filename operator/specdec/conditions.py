"""Status conditions per the Kubernetes API conventions (their types and reasons: docs/troubleshooting.md).

`lastTransitionTime` changes only when a condition's status flips, so recomputing the same
conditions yields the same status and no write.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable
from typing import Any


@dataclasses.dataclass(frozen=True)
class Cond:
    type: str
    status: bool | None  # None: Unknown
    reason: str
    message: str = ""

    @classmethod
    def from_dict(cls, item: dict[str, Any]) -> Cond:
        status = {"True": True, "False": False}.get(item.get("status", ""))
        return cls(item.get("type", ""), status, item.get("reason", ""), item.get("message", ""))

    def as_dict(self, generation: int | None) -> dict[str, Any]:
        status = "Unknown" if self.status is None else "True" if self.status else "False"
        out: dict[str, Any] = {"type": self.type, "status": status, "reason": self.reason, "message": self.message}
        if generation is not None:
            out["observedGeneration"] = generation
        return out


def now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def merge(
    old: Iterable[dict[str, Any]] | None, new: Iterable[Cond], generation: int | None, timestamp: str
) -> list[dict[str, Any]]:
    """New conditions, keeping each one's lastTransitionTime when its status did not change."""
    previous = {c.get("type"): c for c in old or []}
    merged = []
    for cond in new:
        item = cond.as_dict(generation)
        before = previous.get(cond.type)
        keep = before and before.get("status") == item["status"] and before.get("lastTransitionTime")
        item["lastTransitionTime"] = before["lastTransitionTime"] if keep and before else timestamp
        merged.append(item)
    return merged


def aggregate_ready(parts: list[Cond], ready_message: str) -> Cond:
    """Ready is True when every sub-condition is; else the first False one decides reason and message."""
    for part in parts:
        if not part.status:
            return Cond("Ready", False, part.reason, part.message)
    return Cond("Ready", True, "Ready", ready_message)
