"""status.capture and the condition CaptureSpace: what a saveState deployment's capture directory holds (as its
runtime pods count it, specdec.runtime.capture), and how near the claim's capacity the capture is. Pure."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from specdec.conditions import Cond

CAPTURE_SPACE = "CaptureSpace"
NEARLY_FULL = 0.9  # of the claim's capacity: from here the condition is False and a Warning Event says what to do
GIB = 1 << 30


@dataclass(frozen=True)
class CaptureSample:
    """A runtime pod's specdec_capture_* gauges."""

    files: int
    bytes: int
    requests: int
    tokens: int
    last_write: float | None  # Unix seconds; None: no file yet


@dataclass(frozen=True)
class CapturePlace:
    claim: str
    path: str  # the capture directory inside the claim


def _gib(n: float) -> str:
    return f"{n / GIB:.2f} GiB"


def _timestamp(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(int(seconds), datetime.UTC).isoformat().replace("+00:00", "Z")


def capture_status(place: CapturePlace, sample: CaptureSample, capacity: int | None) -> dict[str, Any]:
    """status.capture: nothing in it moves unless the directory or the claim changes (no write while idle)."""
    status: dict[str, Any] = {
        "claimName": place.claim,
        "path": place.path,
        "files": sample.files,
        "bytes": sample.bytes,
        "requests": sample.requests,
        "tokens": sample.tokens,
    }
    if sample.last_write:
        status["lastWriteAt"] = _timestamp(sample.last_write)
    if capacity is not None:
        status["claimCapacityBytes"] = capacity
        status["claimUsedPercent"] = round(100 * sample.bytes / capacity, 1) if capacity else 100.0
    return status


def capture_condition(place: CapturePlace, sample: CaptureSample, capacity: int | None) -> Cond:
    where = f"{place.path} of claim {place.claim}"
    held = f"{sample.files} files, {_gib(sample.bytes)}, {sample.tokens} tokens of {sample.requests} requests"
    if capacity is None:
        return Cond(
            CAPTURE_SPACE,
            None,
            "CapacityUnknown",
            f"{held} in {where}; the claim's capacity cannot be read (not found, or not bound yet)",
        )
    used = sample.bytes / capacity if capacity else 1.0
    share = f"{100 * used:.1f}% of the claim's {_gib(capacity)}"
    if used >= NEARLY_FULL:
        return Cond(
            CAPTURE_SPACE,
            False,
            "ClaimNearlyFull",
            f"{held} in {where}: {share}. Copy the files away (any pod mounting the claim, e.g. with "
            f"kubectl cp) and remove them, or set spec.speculation.saveState.output.claimName to a bigger "
            f"claim: TensorRT-LLM cannot write once the claim is full, and the operator never deletes "
            f"captured data",
        )
    return Cond(CAPTURE_SPACE, True, "WithinClaim", f"{held} in {where}: {share}")
