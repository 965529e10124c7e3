"""Is speculation still happening, and accepting what it used to? Pure: no I/O.

The condition SpeculationActive reads one window of the runtime pods' counters at a time
(specdec.speculation.payoff.COUNTERS, summed over the deployment's pods) and says one of:

- Drafting: draft tokens are proposed under traffic, at an acceptance like the deployment's own.
- NotDrafting: the pods generated at least `min_tokens` tokens but proposed fewer than `min_draft_share`
  draft tokens per generated token (none, in practice), or, where the route counts no tokens (the Triton
  route without a tokenizer), served at least `min_requests` requests and proposed no draft token: the
  server stopped speculating. TensorRT-LLM's
  SpeculationGate (PyTorch path, tensorrt_llm/_torch/speculative/speculation_gate.py @ 41080dc55e22)
  disables it for good once the mean accepted draft tokens per step over the last
  `acceptance_rate_window_size` completed requests falls below `acceptance_rate_threshold`;
  `max_concurrency` pauses it under load; or a configuration does not enable it.
- AcceptanceCollapsed: a window with at least `min_draft_tokens` draft tokens accepted at most
  `collapse_ratio` (half) of the baseline; it ends when a window is back at `recover_ratio` of it.

The baseline is an exponentially weighted mean of the acceptance rate (accepted / draft tokens) of the
earlier windows at the same draft length (weight `baseline_weight` for the newest), fed only by windows
with enough draft tokens that are not collapsed, and judged on only once `warmup` windows fed it: a
collapse is measured against what the deployment did before it, not folded into it. A change of the draft
length starts a new baseline (a longer draft accepts a smaller share of its tokens).

Going False, and back to True, needs the same evidence in `windows` windows in a row, so one odd window
flips nothing; the first traffic that drafts says Drafting at once. A window without traffic (an idle
fleet) changes nothing.
"""

from __future__ import annotations

import dataclasses

DRAFTING, NOT_DRAFTING, COLLAPSED = "Drafting", "NotDrafting", "AcceptanceCollapsed"


@dataclasses.dataclass(frozen=True)
class GuardPolicy:
    min_tokens: float = 64.0  # generated tokens in a window that make it a window with traffic
    min_draft_share: float = 0.01  # draft tokens per generated token below which nothing is drafted
    min_requests: float = 8.0  # requests that make a window with traffic where no token is counted
    min_draft_tokens: float = 32.0  # draft tokens a window needs for its acceptance to count
    collapse_ratio: float = 0.5
    recover_ratio: float = 0.7
    baseline_weight: float = 0.2
    warmup: int = 3
    windows: int = 2


@dataclasses.dataclass(frozen=True)
class Window:
    """What a deployment's pods counted in one window."""

    tokens: float  # generated (completion) tokens
    requests: float
    draft: float
    accepted: float
    draft_len: int | None

    @property
    def acceptance(self) -> float:
        return min(max(self.accepted, 0.0), self.draft) / self.draft if self.draft > 0 else 0.0


def window_of(counters: dict[str, float], draft_len: int | None) -> Window:
    """A Window from the summed counter increases (specdec.speculation.payoff.COUNTERS keys)."""
    return Window(
        tokens=counters.get("completion_tokens", 0.0),
        requests=counters.get("requests", 0.0),
        draft=counters.get("draft", 0.0),
        accepted=counters.get("accepted", 0.0),
        draft_len=draft_len,
    )


@dataclasses.dataclass(frozen=True)
class GuardState:
    verdict: str | None = None  # None: no traffic seen yet
    candidate: str | None = None  # a different verdict the last windows pointed to
    seen: int = 0  # windows in a row that pointed to `candidate`
    baseline: float | None = None  # smoothed acceptance rate at `baseline_draft_len`
    baseline_windows: int = 0
    baseline_draft_len: int | None = None
    last: Window | None = None  # the window behind the latest verdict change, for its message


def evidence(state: GuardState, w: Window, policy: GuardPolicy) -> str | None:
    """What this window alone says; None: no traffic, or too little drafting to judge the acceptance."""
    if w.draft < policy.min_draft_tokens:
        counted = w.tokens > 0  # generated tokens, where the route counts them; else requests
        traffic = w.tokens >= policy.min_tokens if counted else w.requests >= policy.min_requests
        drafted = w.draft >= policy.min_draft_share * w.tokens if counted else w.draft > 0
        if traffic and not drafted:
            return NOT_DRAFTING
        return DRAFTING if w.draft > 0 and traffic else None
    baseline = state.baseline
    judged = (
        baseline is not None and state.baseline_windows >= policy.warmup and state.baseline_draft_len == w.draft_len
    )
    if not judged or baseline is None:
        return DRAFTING
    if w.acceptance <= policy.collapse_ratio * baseline:
        return COLLAPSED
    if state.verdict == COLLAPSED and w.acceptance < policy.recover_ratio * baseline:
        return COLLAPSED  # between the two thresholds: still collapsed
    return DRAFTING


def _learn(state: GuardState, w: Window, said: str | None, policy: GuardPolicy) -> GuardState:
    """The baseline after this window: a new draft length starts over; a collapsed window is not learnt."""
    if state.baseline_draft_len != w.draft_len and w.draft >= policy.min_draft_tokens:
        state = dataclasses.replace(state, baseline=None, baseline_windows=0, baseline_draft_len=w.draft_len)
    if said != DRAFTING or w.draft < policy.min_draft_tokens:
        return state
    a = policy.baseline_weight
    baseline = w.acceptance if state.baseline is None else a * w.acceptance + (1 - a) * state.baseline
    return dataclasses.replace(state, baseline=baseline, baseline_windows=state.baseline_windows + 1)


def observe(state: GuardState, w: Window, policy: GuardPolicy = GuardPolicy()) -> GuardState:
    """The state after one more window; `.verdict` is what the condition says."""
    said = evidence(state, w, policy)
    learnt = _learn(state, w, said, policy)
    if said is None or said == state.verdict:
        return dataclasses.replace(learnt, candidate=None, seen=0)
    if state.verdict is None and said == DRAFTING:
        return dataclasses.replace(learnt, verdict=said, candidate=None, seen=0, last=w)
    seen = state.seen + 1 if said == state.candidate else 1
    if seen >= policy.windows:
        return dataclasses.replace(learnt, verdict=said, candidate=None, seen=0, last=w)
    return dataclasses.replace(learnt, candidate=said, seen=seen)


def rearm_due(not_drafting_since: float | None, last_restart: float | None, now: float, cooldown: float) -> bool:
    """speculation.rearm: a rolling restart once NotDrafting has lasted `cooldown` seconds, and at most one per
    `cooldown` seconds (times in seconds on one clock)."""
    return (
        not_drafting_since is not None
        and now - not_drafting_since >= cooldown
        and (last_restart is None or now - last_restart >= cooldown)
    )
