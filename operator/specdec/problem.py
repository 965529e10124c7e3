"""Problem: why a spec cannot be acted on. Its own module so that the checks outside plan.py (admission)
return the same type plan() does."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a spec cannot be acted on: a CamelCase reason and a message a person can act on."""

    reason: str
    message: str
    # A refusal on facts a fetch read: the deployment's ModelCaches (plan.ModelCachePlan) that hold them,
    # kept from collection while it stands (collected, their facts would be forgotten and fetched again).
    model_caches: tuple[Any, ...] = ()
