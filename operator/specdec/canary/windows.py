"""One arm's scrape window (decision.ArmWindow) from the increases of its pods' counters. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from specdec.canary.decision import ArmWindow

TPOT_SUM, TPOT_COUNT = "tpot_sum", "tpot_count"
# The runtime front's counters a canary reads besides the speculation ones (specdec.speculation.payoff.COUNTERS):
# the TPOT histogram's sum and count, and the calls to the backend that failed.
COUNTERS = {
    TPOT_SUM: "specdec_time_per_output_token_seconds_sum",
    TPOT_COUNT: "specdec_time_per_output_token_seconds_count",
    "errors": "specdec_backend_errors_total",
}


def arm_window(window: dict[str, float], replicas: int, failed_pods: int, seconds: float) -> ArmWindow:
    """`window`: the arm's pods' counter increases, summed (payoff.delta's names and COUNTERS'). A counter that
    restarted between two scrapes can make errors or accepted tokens look larger than what they count within:
    they are bounded by it."""
    requests = window.get("requests", 0.0)
    draft = window.get("draft", 0.0)
    count = window.get(TPOT_COUNT, 0.0)
    return ArmWindow(
        requests=requests,
        errors=min(window.get("errors", 0.0), requests),
        steps=window.get("steps", 0.0),
        draft_tokens=draft,
        accepted_tokens=min(window.get("accepted", 0.0), draft),
        output_tokens=window.get("completion_tokens", 0.0),
        tpot_seconds=window.get(TPOT_SUM, 0.0) / count if count > 0 else 0.0,
        replicas=replicas,
        failed_pods=failed_pods,
        seconds=seconds,
    )


def arm_figures(window: ArmWindow) -> dict[str, Any]:
    """status.canary.arms' figures of the last window."""
    return {
        "acceptanceRate": round(window.acceptance, 4),
        "acceptedTokensPerStep": round(window.accepted_per_step, 4),
        "tpotSeconds": round(window.tpot_seconds, 6),
        "outputTokensPerSecondPerReplica": round(window.output_tokens_per_second_per_replica, 3),
        "replicas": window.replicas,
    }


def described(block: dict[str, Any]) -> str:
    """A speculation block's mode and the first model it names (its draft or head), for status.canary.arms."""
    mode = str(block.get("mode", "none"))
    model = _first_model(block.get(mode))
    return f"{mode} {model}" if model else mode


def _first_model(node: Any) -> str | None:
    if not isinstance(node, dict):
        return None
    if isinstance(node.get("model"), str):
        return node["model"]
    return next((m for m in map(_first_model, node.values()) if m), None)
