"""SpeculationEffective, SpeculationActive and status.speculation: what the speculation monitor measured means."""

from __future__ import annotations

from typing import Any

from specdec.conditions import Cond
from specdec.speculation.guard import COLLAPSED, DRAFTING, NOT_DRAFTING, GuardState, Window
from specdec.speculation.payoff import Measurement

SPECULATION_EFFECTIVE = "SpeculationEffective"
NO_TRAFFIC = Cond(
    SPECULATION_EFFECTIVE,
    None,
    "NoTraffic",
    "no speculative traffic measured yet: the runtime pods' metrics are read every scrape interval",
)
SUGGESTED_GAIN = 0.03  # a better draft length is worth mentioning from this predicted gain


def speculation_condition(m: Measurement, auto: bool) -> Cond:
    """Does the window show a gain? If not, what to change."""
    numbers = (
        f"acceptance {m.acceptance_rate:.2f}, {m.tokens_per_step:.2f} tokens per target step at draftLen "
        f"{m.draft_len}, draft cost {m.cost_ratio:.3f} of a target step ({m.cost_source})"
    )
    better = m.best_draft_len != m.draft_len and m.best_speedup > m.speedup * (1 + SUGGESTED_GAIN)
    if better:
        advice = (
            f"draftLen: auto is moving to {m.best_draft_len}"
            if auto
            else f"draftLen {m.best_draft_len} would give an estimated {m.best_speedup:.2f}x"
        )
    if m.speedup > 1.0:
        return Cond(
            SPECULATION_EFFECTIVE,
            True,
            "SpeculationPaysOff",
            f"estimated speedup {m.speedup:.2f}x: {numbers}" + (f"; {advice}" if better else ""),
        )
    if not (better and m.best_speedup > 1.0):
        advice = (
            "no draft length pays off at this acceptance: use a draft model closer to the target (same "
            "tokenizer and family, or one fine-tuned on this traffic), or serve without speculation "
            "(on the PyTorch path, maxConcurrency turns it off under load)"
        )
    return Cond(
        SPECULATION_EFFECTIVE,
        False,
        "LowAcceptance",
        f"estimated speedup {m.speedup:.2f}x, slower than the target alone: {numbers}; {advice}",
    )


def with_break_even(status: dict[str, Any], break_even: int | None) -> dict[str, Any]:
    """status.speculation with the load model's break-even, once there is one."""
    return status if break_even is None else {**status, "breakEven": break_even}


def speculation_status(m: Measurement, measured_at: str, window_seconds: float) -> dict[str, Any]:
    """status.speculation, rounded: what a person reads, and what decides whether it is rewritten."""
    return {
        "acceptanceRate": round(m.acceptance_rate, 2),
        "acceptedTokensPerStep": round(m.tokens_per_step, 2),
        "draftLen": m.draft_len,
        "estimatedSpeedup": round(m.speedup, 2),
        "costRatio": round(m.cost_ratio, 3),
        "costRatioSource": m.cost_source,
        "recommendedDraftLen": m.best_draft_len,
        "draftTokens": m.draft_tokens,
        "pods": m.pods,
        "windowSeconds": round(window_seconds, 1),
        "measuredAt": measured_at,
    }


SPECULATION_ACTIVE = "SpeculationActive"
ACTIVE_NO_TRAFFIC = Cond(
    SPECULATION_ACTIVE,
    None,
    "NoTraffic",
    "no traffic measured yet: the runtime pods' metrics are read every scrape interval",
)


def _counted(w: Window) -> str:
    return (
        f"{w.draft:.0f} draft tokens for {w.tokens:.0f} generated tokens and {w.requests:.0f} requests "
        "in the last window"
    )


def active_condition(state: GuardState) -> Cond:
    """SpeculationActive from the guard's verdict (specdec.speculation.guard), with the window behind it."""
    w = state.last
    if state.verdict is None or w is None:
        return ACTIVE_NO_TRAFFIC
    if state.verdict == NOT_DRAFTING:
        return Cond(
            SPECULATION_ACTIVE,
            False,
            NOT_DRAFTING,
            f"the runtime stopped proposing draft tokens: {_counted(w)}. Check the runtime's log and its "
            "speculative_config: TensorRT-LLM turns speculation off for good once the mean accepted draft "
            "tokens per step over the last acceptance_rate_window_size requests falls below "
            "acceptance_rate_threshold (the log says '[SpeculationGate] Speculative decoding disabled'; "
            "a restart re-enables it, speculation.rearm can do it), and for a while above max_concurrency "
            "requests in flight",
        )
    baseline = f"{state.baseline:.2f}" if state.baseline is not None else "unknown"
    at = f" at draftLen {w.draft_len}" if w.draft_len else ""
    if state.verdict == COLLAPSED:
        return Cond(
            SPECULATION_ACTIVE,
            False,
            COLLAPSED,
            f"acceptance {w.acceptance:.2f} against a baseline of {baseline}{at} ({_counted(w)}): the "
            "traffic no longer looks like what the draft predicts (another language, task or prompt "
            "template), or the draft or target changed. Compare the draft with the traffic; a shorter "
            "draftLen (or draftLen: auto) limits the cost meanwhile",
        )
    return Cond(
        SPECULATION_ACTIVE,
        True,
        DRAFTING,
        f"drafting under traffic: acceptance {w.acceptance:.2f} (baseline {baseline}); {_counted(w)}",
    )
