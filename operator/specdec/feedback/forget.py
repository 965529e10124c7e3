"""Per-deployment state kept in dicts keyed by (namespace, name), dropped once the deployment is gone."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any


def forget_absent(present: Collection[Any], *tables: dict) -> None:
    """Drop from each table every entry whose key is not in `present` (in place: holders keep their dicts)."""
    for table in tables:
        for key in [k for k in table if k not in present]:
            del table[key]
