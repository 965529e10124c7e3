"""What the runtime pods' speculation counters mean, and which draft length pays best. Pure: no I/O.

The model is the standard one of speculative sampling (Leviathan et al., 2023; Chen et al., 2023):
each draft token is accepted with probability `alpha`, independently, until the first rejection, so
a target step that verifies k draft tokens produces on average

    E(k) = (1 - alpha**(k+1)) / (1 - alpha)      tokens (the bonus token included),

and costs 1 + k*c target steps, where c is the cost of one draft token relative to one target step.
The estimated speedup over the target alone is E / (1 + k*c). It ignores what batching does to both
sides (the blog seed's speedup falls from 3.55x to ~1.6x as batches grow), so it is an estimate for
the traffic the window saw, not a benchmark.
"""

from __future__ import annotations

import dataclasses
import math
import re

# Counters the runtime front exposes (specdec.runtime.metrics), per pod.
COUNTERS = {
    "draft": "specdec_draft_tokens_total",
    "accepted": "specdec_accepted_draft_tokens_total",
    "steps": "specdec_speculative_steps_total",
    "draft_seconds": "specdec_draft_seconds_total",
    "target_seconds": "specdec_target_seconds_total",
    # traffic, whether or not it speculates (specdec.speculation.guard)
    "requests": "specdec_requests_total",
    "completion_tokens": "specdec_completion_tokens_total",
}
DRAFT_LEN_GAUGE = "specdec_draft_len"

# The cost of a draft head (EAGLE3, MTP, ReDrafter): one decoder layer on top of the target's, so
# about 1/layers of a target step; 1/32 for the 32-layer models these modes are published for.
HEAD_COST_RATIO = 1 / 32
ASSUMED_COST_RATIO = 0.1  # a draft model whose size cannot be read from its name
_PARAMS = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)[bB](?![a-zA-Z])")


def tokens_per_step(alpha: float, k: float) -> float:
    """E(k): mean tokens one target step produces, the bonus token included."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speedup(alpha: float, k: int, cost_ratio: float) -> float:
    return tokens_per_step(alpha, k) / (1.0 + k * cost_ratio)


def alpha_from_tokens_per_step(tokens: float, k: float) -> float:
    """The per-token acceptance that explains a measured E at draft length k (E is increasing in
    alpha, so bisection finds the one solution)."""
    if tokens >= k + 1:
        return 1.0
    if tokens <= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if tokens_per_step(mid, k) < tokens else (lo, mid)
    return (lo + hi) / 2


def best_draft_len(alpha: float, cost_ratio: float, lo: int, hi: int) -> int:
    """The draft length in [lo, hi] with the highest estimated speedup (the shorter one on a tie)."""
    return max(range(lo, hi + 1), key=lambda k: (round(speedup(alpha, k, cost_ratio), 9), -k))


def parameters_billions(model: str) -> float | None:
    """The parameter count a checkpoint's name states ("Llama-3.1-70B-Instruct" -> 70), if any."""
    found = _PARAMS.findall(model.rstrip("/").rsplit("/", 1)[-1])
    return float(found[-1]) if found else None


def estimated_cost_ratio(drafter: str, target: str, draft: str | None) -> tuple[float, str]:
    """(c, how it was obtained) when the route does not measure it; `drafter` as the mode says
    (specdec.modes.mode.Drafting.drafter)."""
    if drafter == "lookup":
        return 0.0, "NoDraftModel"
    if drafter != "model" or draft is None:
        return HEAD_COST_RATIO, "DraftHead"
    target_b, draft_b = parameters_billions(target), parameters_billions(draft)
    if target_b and draft_b:
        return draft_b / target_b, "ParameterCounts"
    return ASSUMED_COST_RATIO, "Assumed"


# --- one window of counters ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sample:
    """One scrape of one pod: its counters and the draft length it reports."""

    counters: dict[str, float]
    draft_len: int | None


def delta(previous: Sample | None, current: Sample) -> dict[str, float]:
    """What a pod counted between two scrapes; a counter that went down restarted (counts from 0)."""
    out = {}
    for key, value in current.counters.items():
        before = previous.counters.get(key, 0.0) if previous else None
        if before is None:
            out[key] = 0.0  # the first scrape of a pod is the baseline, not a window
        else:
            out[key] = value - before if value >= before else value
    return out


def advance(
    samples: dict[str, tuple[Sample, float]], uid: str, sample: Sample, now: float, window: dict[str, float]
) -> tuple[Sample, float] | None:
    """Keep a pod's new sample (and when it was taken) in `samples`, and add what its counters grew by since its
    last one into `window`. Returns that last (sample, time); None for the pod's first scrape, the baseline."""
    previous = samples.get(uid)
    samples[uid] = (sample, now)
    if previous is not None:
        for name, value in delta(previous[0], sample).items():
            window[name] = window.get(name, 0.0) + value
    return previous


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What the window says about a deployment's speculation."""

    acceptance_rate: float
    tokens_per_step: float
    draft_len: int
    sent: float  # the mean draft length sent per step, at most draft_len (less under a schedule by load)
    alpha: float
    cost_ratio: float
    cost_source: str  # Measured, ParameterCounts, DraftHead, NoDraftModel, Assumed
    speedup: float
    best_draft_len: int
    best_speedup: float
    draft_tokens: int
    pods: int


def measure(
    window: dict[str, float], draft_len: int, pods: int, max_draft_len: int, estimated_cost: tuple[float, str]
) -> Measurement | None:
    """None when the window saw no speculation (no traffic): nothing to say, nothing to write."""
    draft, accepted, steps = window.get("draft", 0.0), window.get("accepted", 0.0), window.get("steps", 0.0)
    if draft <= 0 or draft_len < 1:
        return None
    accepted = min(max(accepted, 0.0), draft)
    steps = steps if steps > 0 else math.ceil(draft / draft_len)
    tokens = (accepted + steps) / steps
    # Drafting less than draft_len by load (the Triton front's schedule, trtllm-serve's draft_len_schedule), the
    # steps' drafts were shorter: acceptance and cost are priced at the mean length sent.
    sent = min(draft / steps, float(draft_len))
    draft_s, target_s = window.get("draft_seconds", 0.0), window.get("target_seconds", 0.0)
    if draft_s > 0 and target_s > 0:
        cost, source = draft_s / (sent * target_s), "Measured"
    else:
        cost, source = estimated_cost
    alpha = alpha_from_tokens_per_step(tokens, sent)
    best = best_draft_len(alpha, cost, 1, max(max_draft_len, draft_len))
    return Measurement(
        acceptance_rate=accepted / draft,
        tokens_per_step=tokens,
        draft_len=draft_len,
        sent=sent,
        alpha=alpha,
        cost_ratio=cost,
        cost_source=source,
        speedup=tokens / (1.0 + sent * cost),
        best_draft_len=best,
        best_speedup=speedup(alpha, best, cost),
        draft_tokens=int(draft),
        pods=pods,
    )


# --- draft length on autopilot ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AutoPolicy:
    """Damping: a change needs the same better length in `confirmations` windows in a row, a predicted
    gain of at least `min_gain`, and `cooldown` windows since the last change (so its effect is
    measured before the next one)."""

    min_gain: float = 0.03
    confirmations: int = 2
    cooldown: int = 2


@dataclasses.dataclass(frozen=True)
class AutoState:
    alpha: float | None = None  # smoothed per-token acceptance
    candidate: int | None = None
    seen: int = 0  # windows in a row that recommended `candidate`
    since_change: int = 1_000_000


SMOOTHING = 0.5  # weight of the newest window in the smoothed acceptance


# The damping where a change restarts the pods (trtllm-serve takes its draft length at start): a larger
# predicted gain and a third confirmation (specdec.feedback.autopilot adds the least time between rollouts).
ROLLOUT_POLICY = AutoPolicy(min_gain=0.05, confirmations=3)


def decide(
    state: AutoState, m: Measurement, lo: int, hi: int, policy: AutoPolicy = AutoPolicy()
) -> tuple[AutoState, int | None]:
    """The next state, and the draft length to switch to (None: keep the current one)."""
    alpha = m.alpha if state.alpha is None else SMOOTHING * m.alpha + (1 - SMOOTHING) * state.alpha
    best = best_draft_len(alpha, m.cost_ratio, lo, hi)
    gain = speedup(alpha, best, m.cost_ratio) / speedup(alpha, m.draft_len, m.cost_ratio) - 1.0
    since = state.since_change + 1
    if best == m.draft_len or gain < policy.min_gain:
        return AutoState(alpha, None, 0, since), None
    seen = state.seen + 1 if best == state.candidate else 1
    if seen >= policy.confirmations and since > policy.cooldown:
        return AutoState(alpha, None, 0, 0), best
    return AutoState(alpha, best, seen, since), None
