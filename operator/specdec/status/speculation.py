"""SpeculationEffective and status.speculation: what the speculation monitor's measurement means."""

from __future__ import annotations

from typing import Any

from specdec.conditions import Cond
from specdec.speculation import Measurement

SPECULATION_EFFECTIVE = "SpeculationEffective"
NO_TRAFFIC = Cond(SPECULATION_EFFECTIVE, None, "NoTraffic",
                  "no speculative traffic measured yet: the runtime pods' metrics are read every scrape interval")
SUGGESTED_GAIN = 0.03  # a better draft length is worth mentioning from this predicted gain


def speculation_condition(m: Measurement, auto: bool) -> Cond:
    """Does the window show a gain? If not, what to change."""
    numbers = (f"acceptance {m.acceptance_rate:.2f}, {m.tokens_per_step:.2f} tokens per target step at draftLen "
               f"{m.draft_len}, draft cost {m.cost_ratio:.3f} of a target step ({m.cost_source})")
    better = m.best_draft_len != m.draft_len and m.best_speedup > m.speedup * (1 + SUGGESTED_GAIN)
    if better:
        advice = (f"draftLen: auto is moving to {m.best_draft_len}" if auto else
                  f"draftLen {m.best_draft_len} would give an estimated {m.best_speedup:.2f}x")
    if m.speedup > 1.0:
        return Cond(SPECULATION_EFFECTIVE, True, "SpeculationPaysOff",
                    f"estimated speedup {m.speedup:.2f}x: {numbers}" + (f"; {advice}" if better else ""))
    if not (better and m.best_speedup > 1.0):
        advice = ("no draft length pays off at this acceptance: use a draft model closer to the target (same "
                  "tokenizer and family, or one fine-tuned on this traffic), or serve without speculation "
                  "(on the PyTorch path, maxConcurrency turns it off under load)")
    return Cond(SPECULATION_EFFECTIVE, False, "LowAcceptance",
                f"estimated speedup {m.speedup:.2f}x, slower than the target alone: {numbers}; {advice}")


def with_break_even(status: dict[str, Any], break_even: int | None) -> dict[str, Any]:
    """status.speculation with the load model's break-even, once there is one."""
    return status if break_even is None else {**status, "breakEven": break_even}


def speculation_status(m: Measurement, measured_at: str, window_seconds: float) -> dict[str, Any]:
    """status.speculation, rounded: what a person reads, and what decides whether it is rewritten."""
    return {"acceptanceRate": round(m.acceptance_rate, 2), "acceptedTokensPerStep": round(m.tokens_per_step, 2),
            "draftLen": m.draft_len, "estimatedSpeedup": round(m.speedup, 2), "costRatio": round(m.cost_ratio, 3),
            "costRatioSource": m.cost_source, "recommendedDraftLen": m.best_draft_len,
            "draftTokens": m.draft_tokens, "pods": m.pods, "windowSeconds": round(window_seconds, 1),
            "measuredAt": measured_at}
