"""The bench's clock and the summaries of the times it measures."""

from __future__ import annotations

import math
import statistics
import time


def now() -> float:
    return time.monotonic()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def summary(values: list[float]) -> dict[str, float]:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return {"n": 0, "p50": float("nan"), "p95": float("nan")}
    return {"n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95)}
