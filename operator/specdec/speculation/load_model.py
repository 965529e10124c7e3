"""When speculation stops paying under load: the step-time model, its fit and the break-even. Pure: no I/O.

`specdec.speculation.payoff` prices a draft length at one sequence: E(k) / (1 + k*c). Under load the target's
verification of k+1 tokens per sequence is no longer free: a step of a batch holding T tokens costs

    t(T) = a + b*T        (a: the memory-bound floor, reading the weights once; b: compute per token)

and at concurrency n with draft length k one speculative step costs k*c*t(n) (k draft passes over the batch,
each c of a target pass at the same batch) plus t(n*(k+1)) (the target verifies k+1 tokens per sequence);
it yields n*E(k) tokens where plain decoding yields n tokens in t(n). So

    speedup(n, k) = E(k) * t(n) / (k*c*t(n) + t(n*(k+1)))

which is today's E/(1+kc) at b = 0. With r = b*n/a it is E(1+r) / (kc(1+r) + 1 + r(k+1)), strictly falling in
n for k >= 1, and speedup(n, k) = 1 at

    n_k = (a/b) * (E(k) - 1 - k*c) / (k + 1 + k*c - E(k))

so the break-even (the concurrency from which no draft length beats k = 0) is the largest n_k over the
allowed lengths: below it some k pays, at and above it none does. Below it the best length falls with the
load (longer drafts stop paying first): the schedule lists where it changes, so the front sends the best
length for the requests in flight.

Measuring a and b: the target model's mean iteration time (Triton's `nv_trt_llm_general_metrics`
iteration_counter and timestamp of the tensorrt_llm model) over a window, at the window's mean batch n
(`nv_trt_llm_inflight_batcher_metrics` generation_requests) and draft length k. In the draft-target BLS a
target iteration waits for its batch's drafts, so one iteration interval is the whole speculative step
k*c*t(n) + t(n(k+1)) = a*(1 + k*c) + b*n*(k + 1 + k*c): linear in (a, b), fitted by least squares over many
windows. A fit needs windows at loads at least MIN_SPREAD apart (else the slope is noise).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from itertools import pairwise

from specdec.speculation.payoff import tokens_per_step

MIN_WINDOWS = 4  # windows a fit needs
MIN_SPREAD = 2.0  # the largest window's batch tokens over the smallest's
HYSTERESIS = 0.1  # the front's gate: the band around the break-even where it keeps what it does


@dataclasses.dataclass(frozen=True)
class StepTime:
    """t(T) = floor + per_token * T, in seconds."""

    floor: float
    per_token: float

    def __call__(self, tokens: float) -> float:
        return self.floor + self.per_token * tokens


def step_seconds(t: StepTime, n: float, k: int, cost_ratio: float) -> float:
    """One speculative step of a batch of n sequences at draft length k (k = 0: plain decoding)."""
    return k * cost_ratio * t(n) + t(n * (k + 1))


def speedup(t: StepTime, n: float, k: int, alpha: float, cost_ratio: float) -> float:
    return tokens_per_step(alpha, k) * t(n) / step_seconds(t, n, k, cost_ratio)


def best_draft_len_at(t: StepTime, n: float, alpha: float, cost_ratio: float, lo: int, hi: int) -> int:
    """The draft length in {0} + [lo, hi] with the highest speedup at concurrency n (0: do not speculate)."""
    return max([0, *range(lo, hi + 1)], key=lambda k: (round(speedup(t, n, k, alpha, cost_ratio), 9) if k else 1.0, -k))


def crossing(t: StepTime, k: int, alpha: float, cost_ratio: float) -> float:
    """n_k: the concurrency at which draft length k stops beating plain decoding (0: never beats it;
    inf: beats it at every load, as with b = 0)."""
    gain = tokens_per_step(alpha, k) - 1.0 - k * cost_ratio
    if gain <= 0:
        return 0.0
    if t.per_token <= 0:
        return math.inf
    return t.floor / t.per_token * gain / (k + 1 + k * cost_ratio - tokens_per_step(alpha, k))


def break_even(t: StepTime, alpha: float, cost_ratio: float, lo: int, hi: int) -> int | None:
    """The smallest whole concurrency at which no draft length in [lo, hi] pays (1: speculation never pays);
    None when one pays at every load."""
    n = max(crossing(t, k, alpha, cost_ratio) for k in range(max(lo, 1), hi + 1))
    return None if math.isinf(n) else max(math.ceil(n), 1)


# --- fitting t(T) from measured windows ---------------------------------------------------------------

# The runtime front's counters of the target model's iterations (specdec.runtime.metrics), per pod: Triton's
# iteration gauges on the Triton route, trtllm-serve's iteration statistics on the others.
COUNTERS = {
    "iterations": "specdec_target_iterations_total",
    "iteration_seconds": "specdec_target_iteration_seconds_total",
    "batch_sequences": "specdec_target_batch_sequences_total",
    "batch_draft_tokens": "specdec_target_batch_draft_tokens_total",
}
WINDOWS_KEPT = 64  # the fit's memory: enough to span the loads a day sees


@dataclasses.dataclass(frozen=True)
class Window:
    """One window of the target model: mean sequences per iteration, draft length, seconds per iteration."""

    batch: float
    draft_len: float
    seconds: float


def window_of(counted: dict[str, float]) -> Window | None:
    """A window from the increases of COUNTERS (keys as there); None when the target did not iterate."""
    iterations, sequences = counted.get("iterations", 0.0), counted.get("batch_sequences", 0.0)
    if iterations <= 0 or sequences <= 0:
        return None
    return Window(
        sequences / iterations,
        counted.get("batch_draft_tokens", 0.0) / sequences,
        counted.get("iteration_seconds", 0.0) / iterations,
    )


def fit_step_time(windows: Iterable[Window], cost_ratio: float) -> StepTime | None:
    """Least squares of seconds = a*(1 + k*c) + b*n*(k + 1 + k*c) over the windows (with b >= 0); None without
    MIN_WINDOWS windows whose batch tokens span MIN_SPREAD."""
    rows = [
        (1 + w.draft_len * cost_ratio, w.batch * (w.draft_len + 1 + w.draft_len * cost_ratio), w.seconds)
        for w in windows
        if w.batch > 0 and w.seconds > 0 and math.isfinite(w.seconds)
    ]
    if len(rows) < MIN_WINDOWS:
        return None
    tokens = [x2 / x1 for x1, x2, _ in rows]
    if max(tokens) < MIN_SPREAD * min(tokens):
        return None
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    s1y = sum(x1 * y for x1, _, y in rows)
    s2y = sum(x2 * y for _, x2, y in rows)
    det = s11 * s22 - s12 * s12
    if det <= 0:
        return None
    a, b = (s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det
    if b < 0:  # the load does not slow a step down (within noise): a flat step time
        a, b = s1y / s11, 0.0
    return StepTime(a, b) if a > 0 else None


# --- the front's gate -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Gate:
    """Whether the front drafts, from the sequences in flight and the break-even, with hysteresis: off from
    break-even + m, on again below break-even - m (m = floor(band * break-even)), so a load at the break-even
    does not flap between the two. A break-even of 1 (speculation never pays) keeps it off."""

    drafting: bool = True

    def next(self, in_flight: int, break_even: int | None, band: float = HYSTERESIS) -> Gate:
        if break_even is None:
            return Gate(True)
        margin = math.floor(break_even * band)
        if self.drafting and in_flight >= break_even + margin:
            return Gate(False)
        if not self.drafting and in_flight < break_even - margin:
            return Gate(True)
        return self


SCHEDULE_LIMIT = 1 << 16  # requests in flight a schedule covers when speculation pays at any load


def schedule(t: StepTime, alpha: float, cost_ratio: float, hi: int) -> list[tuple[int, int]]:
    """(from n, best draft length in 0..hi) at each change of the best length as n grows from 1; the last
    entry has length 0 at the break-even, unless speculation pays up to SCHEDULE_LIMIT. The best length does
    not grow with n, so each change is found by bisection."""
    out, n = [], 1
    while n <= SCHEDULE_LIMIT:
        k = best_draft_len_at(t, n, alpha, cost_ratio, 1, hi)
        out.append((n, k))
        if k == 0:
            break
        lo, high = n, SCHEDULE_LIMIT + 1  # best(lo) == k; the first n with another length is in (lo, high]
        while high - lo > 1:
            mid = (lo + high) // 2
            lo, high = (mid, high) if best_draft_len_at(t, mid, alpha, cost_ratio, 1, hi) == k else (lo, mid)
        n = high
    return out


def format_schedule(entries: list[tuple[int, int]]) -> str:
    """As the ConfigMap holds it: "1:4 3:3 6:2 14:1 47:0"."""
    return " ".join(f"{n}:{k}" for n, k in entries)


def parse_schedule(text: str) -> list[tuple[int, int]] | None:
    """format_schedule's text back; None unless every entry is n:k with n rising from 1."""
    try:
        entries = [(int(n), int(k)) for n, _, k in (item.partition(":") for item in text.split())]
    except ValueError:
        return None
    ok = (
        entries
        and entries[0][0] == 1
        and all(k >= 0 for _, k in entries)
        and all(a[0] < b[0] for a, b in pairwise(entries))
    )
    return entries if ok else None


def scheduled_draft_len(entries: list[tuple[int, int]], in_flight: int) -> int:
    return next((k for n, k in reversed(entries) if n <= in_flight), entries[0][1])


def measured_fit(
    windows: list[Window], cost_ratio: float, measured_at: float | None, sent: float
) -> tuple[StepTime, float] | None:
    """The step time fitted on measured windows, and the draft's cost at one batch; None without a fit. A cost
    ratio measured from the route's times (`measured_at`: the batch it was measured at; `sent`: the mean draft
    length then) is the draft's time over the target's at (n, n*(k+1)) tokens, not at the same batch: it is
    brought to t(n) with the fit, and the fit redone."""
    cost, fit = cost_ratio, None
    for _ in range(1 if measured_at is None else 3):
        fit = fit_step_time(windows, cost)
        if fit is None:
            return None
        if measured_at is not None:
            cost = cost_ratio * fit(measured_at * (sent + 1)) / fit(measured_at)
    assert fit is not None
    return fit, cost


def schedule_break_even(entries: list[tuple[int, int]]) -> int | None:
    return entries[-1][0] if entries[-1][1] == 0 else None


def schedule_moved(before: list[tuple[int, int]] | None, after: list[tuple[int, int]]) -> bool:
    """Worth telling the pods: other lengths, or a change point moved by a fifth or more. The fit's noise moves
    the change points by about a sixth from one window to the next at a steady load (docs/performance/
    breakeven.md), and around a change point the lengths either side pay about the same."""
    if before is None or [k for _, k in before] != [k for _, k in after]:
        return True
    return any(abs(a - b) >= max(1.0, b / 5) for (a, _), (b, _) in zip(after, before, strict=True))
