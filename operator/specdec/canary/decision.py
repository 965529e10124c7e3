"""Whether a canary draft pays, from paired scrape windows of the two arms. Pure: no I/O.

Both arms serve the same target behind the same Service, each pod taking an equal random share of the
same traffic at the same time, so in one scrape window the only difference between the arms is the draft.
Each window where both arms served at least `min_requests` requests is a pair, and its difference

    d = ln(TPOT_current / TPOT_canary)          (> 0: the canary generates faster)

is what the test reads. TPOT is each arm's mean time per output token over the window's responses (the
runtime's specdec_time_per_output_token_seconds histogram, sum over count): the goodput a request sees at
the load the arm saw. Pairing cancels what both arms share (the traffic's mix, its load, the time of day).

The test is Wald's sequential probability ratio test (SPRT) on the d of the pairs, taken as normal with a
spread sigma: H0 "the canary is not faster" (mean 0) against H1 "it is faster by the minimum effect"
(mean delta = ln(1 + min_effect)). After n pairs the log-likelihood ratio is

    LLR = (delta / sigma^2) * (sum(d) - n * delta / 2)

and the test stops at the first pair where LLR >= ln((1 - beta) / alpha) (Promoted) or
LLR <= ln(beta / (1 - alpha)) (Rejected: not better by the minimum effect). alpha is the false-promotion
rate (a canary no faster than the current draft promoted), beta the missed-promotion rate at the minimum
effect. Among the tests with those error rates the SPRT needs the fewest pairs on average (Wald and
Wolfowitz, 1948): the canary's exposure ends as soon as the evidence allows. A canary slower than the
current draft is promoted less often than alpha (the ratio falls with the mean).

sigma is not known. The pairs' sample spread s, plugged in as if known, is too small too often when the pairs
are few, and the test then stops early on noise (equal arms promoted about twice as often as alpha where
sigma is twice delta). So sigma is taken at its 90 % upper confidence bound, s * sqrt((n-1) / chi2_0.10(n-1))
(the chi-square quantile by Wilson and Hilferty's approximation), and at least `min_spread`: the
false-promotion rate then holds at or below alpha (tests/unit/test_canary_decision.py checks it at spreads of
0.6 and 2 delta; bench/canary_bench.py measures it on the simulator's model). The price is paid near the
minimum effect: a few more pairs, and where the spread is large against delta a missed-promotion rate above
beta. The test may not stop before `min_windows` pairs.

Why an SPRT and not a bootstrap: a bootstrap interval re-read after every window is a test repeated on
growing data, whose false-promotion rate grows with the number of looks unless corrected; the SPRT's
boundaries hold their error rates however often it looks, which is what "stop as soon as it can" needs.

Its limits: the error rates are approximate (sigma is estimated; Wald's boundaries ignore the overshoot of
the last pair, which makes them conservative). The pairs are taken as independent: a backlog carried from one
window into the next correlates them. A mean of d between 0 and delta is promoted with a chance between
alpha and 1 - beta. The arms' loads per replica are equal only when the Service spreads requests evenly over
the pods.

The budget: once the arm with fewer requests (the canary, when it has fewer replicas) has served
`request_budget` requests, the test ends Inconclusive, and `on_inconclusive` says which way that goes.

A canary that serves nothing (its pods never ready, or no traffic reaching them) gives no windows and would never
reach its budget: once it has served no request for `not_serving_seconds`, the test ends Inconclusive
(NotServing) and the current draft keeps serving, whatever `on_inconclusive` says: there is no evidence for the
canary's draft at all.

Safety comes before the test, on every window: the canary is rolled back (Rejected) at once when its pods
failed, when its acceptance is at most `collapse_ratio` of the current arm's in the same window, or when its
error rate exceeds the current arm's by more than `max_error_rate_rise` (on at least `min_errors` errors). One
window suffices: a rollback costs a canary, a collapsed draft costs every request it serves. So that one window
of equal drafts is not taken for a collapse, both arms' acceptances are compared only on `min_draft_tokens`
draft tokens each.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist
from typing import Final, Literal

PROMOTED: Final = "Promoted"
REJECTED: Final = "Rejected"
INCONCLUSIVE: Final = "Inconclusive"
# Why a canary ended.
FASTER, NOT_FASTER, BUDGET = "Faster", "NotFaster", "BudgetSpent"
PODS_FAILED, ACCEPTANCE_COLLAPSED, ERROR_RATE_ROSE = "PodsFailed", "AcceptanceCollapsed", "ErrorRateRose"
NOT_SERVING = "NotServing"

SPREAD_CONFIDENCE = 0.9  # the confidence of the upper bound the test takes for the pairs' spread
_NORMAL = NormalDist()


@dataclasses.dataclass(frozen=True)
class ArmWindow:
    """What one arm's pods counted in one scrape window (the increases of their counters, summed)."""

    requests: float
    errors: float  # requests answered with an error (5xx) or failed towards the backend
    steps: float  # target steps that verified draft tokens
    draft_tokens: float
    accepted_tokens: float
    output_tokens: float
    tpot_seconds: float  # mean time per output token over the window's responses (0: no response)
    replicas: int  # ready pods of the arm
    failed_pods: int  # pods of the arm that failed or restarted in the window
    seconds: float  # the window's length

    def __post_init__(self) -> None:
        for name in ("requests", "errors", "steps", "draft_tokens", "accepted_tokens", "output_tokens"):
            if not math.isfinite(getattr(self, name)) or getattr(self, name) < 0:
                raise ValueError(f"ArmWindow.{name} must be a finite count >= 0, got {getattr(self, name)!r}")
        if self.errors > self.requests:
            raise ValueError(f"ArmWindow.errors ({self.errors}) exceeds its requests ({self.requests})")
        if self.accepted_tokens > self.draft_tokens:
            raise ValueError(
                f"ArmWindow.accepted_tokens ({self.accepted_tokens}) exceeds its draft_tokens ({self.draft_tokens})"
            )
        if not math.isfinite(self.tpot_seconds) or self.tpot_seconds < 0:
            raise ValueError(f"ArmWindow.tpot_seconds must be finite and >= 0, got {self.tpot_seconds!r}")
        if self.replicas < 0 or self.failed_pods < 0:
            raise ValueError(f"ArmWindow: replicas ({self.replicas}) and failed_pods ({self.failed_pods}) must be >= 0")
        if not math.isfinite(self.seconds) or self.seconds <= 0:
            raise ValueError(f"ArmWindow.seconds must be > 0, got {self.seconds!r}")

    @property
    def acceptance(self) -> float:
        """Accepted / proposed draft tokens (0 without drafts)."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens > 0 else 0.0

    @property
    def accepted_per_step(self) -> float:
        return self.accepted_tokens / self.steps if self.steps > 0 else 0.0

    @property
    def error_rate(self) -> float:
        return self.errors / self.requests if self.requests > 0 else 0.0

    @property
    def output_tokens_per_second_per_replica(self) -> float:
        return self.output_tokens / (self.seconds * self.replicas) if self.replicas > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class CanaryPolicy:
    """The defaults are what docs/canary.md states."""

    min_effect: float = 0.05  # the TPOT gain worth promoting: 5 % faster
    false_promotion: float = 0.05  # alpha
    missed_promotion: float = 0.2  # beta, at the minimum effect
    request_budget: int = 2000  # requests of the smaller arm after which the test ends Inconclusive
    on_inconclusive: Literal["Promoted", "Rejected"] = REJECTED
    min_windows: int = 5  # pairs before the test may stop
    min_requests: int = 20  # requests of each arm that make a window a pair
    min_spread: float = 0.01  # floor of sigma (ln units, 1 %): a few pairs can agree to ~0
    collapse_ratio: float = 0.5
    # Draft tokens of each arm for a window's acceptances to be compared. The collapse rule acts on one window:
    # on the simulator's model, equal drafts (0.62 per position, draft length 4) look collapsed in 12 % of
    # windows of 32 draft tokens each, 1.4 % at 100, none in 20,000 at 400.
    min_draft_tokens: float = 400.0
    max_error_rate_rise: float = 0.02  # canary's error rate minus the current arm's
    # Canary errors in a window before its error rate is judged: one unlucky error among 20 requests is 5 %.
    min_errors: int = 3
    # How long the canary may serve no request before it ends NotServing: its pods start (engines built, weights
    # loaded) within this; a canary behind a Service that sends it nothing ends as well.
    not_serving_seconds: float = 900.0

    def __post_init__(self) -> None:
        if not 0 < self.min_effect <= 10:
            raise ValueError(f"min_effect must be in (0, 10], got {self.min_effect!r}")
        for name in ("false_promotion", "missed_promotion"):
            if not 0 < getattr(self, name) < 0.5:
                raise ValueError(f"{name} must be in (0, 0.5), got {getattr(self, name)!r}")
        if self.on_inconclusive not in (PROMOTED, REJECTED):
            raise ValueError(f"on_inconclusive must be {PROMOTED} or {REJECTED}, got {self.on_inconclusive!r}")
        if self.request_budget < 1 or self.min_windows < 2 or self.min_requests < 1 or self.min_errors < 1:
            raise ValueError("request_budget, min_requests and min_errors must be >= 1, min_windows >= 2")
        if not 0 < self.min_spread or not 0 < self.collapse_ratio < 1 or not 0 <= self.max_error_rate_rise <= 1:
            raise ValueError("min_spread must be > 0, collapse_ratio in (0, 1), max_error_rate_rise in [0, 1]")
        if not self.not_serving_seconds > 0:  # NaN too
            raise ValueError(f"not_serving_seconds must be > 0, got {self.not_serving_seconds!r}")

    @property
    def delta(self) -> float:
        return math.log1p(self.min_effect)

    @property
    def promote_at(self) -> float:
        return math.log((1 - self.missed_promotion) / self.false_promotion)

    @property
    def reject_at(self) -> float:
        return math.log(self.missed_promotion / (1 - self.false_promotion))


@dataclasses.dataclass(frozen=True)
class CanaryState:
    """What the test has read so far: small and plain, so status can hold it and a restarted operator resume."""

    windows: int = 0  # windows seen
    pairs: int = 0  # windows that were pairs
    sum_d: float = 0.0
    sum_d2: float = 0.0
    current_requests: float = 0.0
    canary_requests: float = 0.0

    @property
    def mean(self) -> float:
        return self.sum_d / self.pairs if self.pairs else 0.0

    @property
    def spread(self) -> float:
        """The pairs' sample standard deviation s (0 below two pairs)."""
        if self.pairs < 2:
            return 0.0
        return math.sqrt(max(self.sum_d2 - self.pairs * self.mean**2, 0.0) / (self.pairs - 1))

    def sigma(self, policy: CanaryPolicy) -> float:
        """The spread the test takes: s at its upper confidence bound, at least policy.min_spread."""
        k = self.pairs - 1
        if k < 1:
            return math.inf
        z = _NORMAL.inv_cdf(1 - SPREAD_CONFIDENCE)
        chi2 = k * (1 - 2 / (9 * k) + z * math.sqrt(2 / (9 * k))) ** 3  # Wilson-Hilferty
        return max(self.spread * math.sqrt(k / chi2), policy.min_spread)

    def llr(self, policy: CanaryPolicy) -> float:
        """ln of the likelihood ratio of H1 (mean delta) over H0 (mean 0); 0 below two pairs."""
        sigma = self.sigma(policy)
        if math.isinf(sigma):
            return 0.0
        return policy.delta / sigma**2 * (self.sum_d - self.pairs * policy.delta / 2)

    @property
    def effect(self) -> float:
        """The canary's estimated TPOT gain (0.1: 10 % faster)."""
        return math.expm1(self.mean)


@dataclasses.dataclass(frozen=True)
class Decision:
    outcome: str  # PROMOTED, REJECTED or INCONCLUSIVE
    reason: str  # FASTER, NOT_FASTER, BUDGET, NOT_SERVING, PODS_FAILED, ACCEPTANCE_COLLAPSED, ERROR_RATE_ROSE
    message: str  # the numbers behind it, for the Event and the condition
    promote: bool  # whether the canary's draft replaces the current one (an Inconclusive goes by the policy)


def safety(current: ArmWindow, canary: ArmWindow, policy: CanaryPolicy) -> Decision | None:
    """A rollback this window calls for, or None."""
    if canary.failed_pods:
        return _rollback(PODS_FAILED, f"{canary.failed_pods} canary pod(s) failed or restarted")
    if (
        canary.draft_tokens >= policy.min_draft_tokens
        and current.draft_tokens >= policy.min_draft_tokens
        and canary.acceptance <= policy.collapse_ratio * current.acceptance
    ):
        return _rollback(
            ACCEPTANCE_COLLAPSED,
            f"canary acceptance {canary.acceptance:.3f} <= {policy.collapse_ratio:g} x the current draft's "
            f"{current.acceptance:.3f} ({canary.accepted_tokens:.0f}/{canary.draft_tokens:.0f} vs "
            f"{current.accepted_tokens:.0f}/{current.draft_tokens:.0f} tokens)",
        )
    if (
        canary.requests >= policy.min_requests
        and canary.errors >= policy.min_errors
        and canary.error_rate - current.error_rate > policy.max_error_rate_rise
    ):
        return _rollback(
            ERROR_RATE_ROSE,
            f"canary error rate {canary.error_rate:.3f} ({canary.errors:.0f}/{canary.requests:.0f}) exceeds the "
            f"current draft's {current.error_rate:.3f} by more than {policy.max_error_rate_rise:g}",
        )
    return None


def _rollback(reason: str, message: str) -> Decision:
    return Decision(REJECTED, reason, f"rolled back: {message}", promote=False)


def observe(
    state: CanaryState, current: ArmWindow, canary: ArmWindow, policy: CanaryPolicy = CanaryPolicy()
) -> tuple[CanaryState, Decision | None]:
    """The state after one more window of both arms, and the decision when the canary ends (None: go on)."""
    state = dataclasses.replace(
        state,
        windows=state.windows + 1,
        current_requests=state.current_requests + current.requests,
        canary_requests=state.canary_requests + canary.requests,
    )
    rollback = safety(current, canary, policy)
    if rollback is not None:
        return state, rollback
    paired = min(current.requests, canary.requests) >= policy.min_requests
    if paired and current.tpot_seconds > 0 and canary.tpot_seconds > 0:
        d = math.log(current.tpot_seconds / canary.tpot_seconds)
        state = dataclasses.replace(state, pairs=state.pairs + 1, sum_d=state.sum_d + d, sum_d2=state.sum_d2 + d * d)
    return state, verdict(state, policy)


def verdict(state: CanaryState, policy: CanaryPolicy) -> Decision | None:
    """The test's decision on the pairs read so far (None: go on)."""
    llr = state.llr(policy)
    said = (
        f"TPOT gain {state.effect:+.1%} over {state.pairs} paired windows "
        f"(spread {state.spread:.3f}, taken as {state.sigma(policy):.3f}; LLR {llr:.2f}; "
        f"promote at {policy.promote_at:.2f}, reject at {policy.reject_at:.2f}), "
        f"{state.current_requests:.0f} current / {state.canary_requests:.0f} canary requests"
    )
    if state.pairs >= policy.min_windows:
        if llr >= policy.promote_at:
            return Decision(PROMOTED, FASTER, said, promote=True)
        if llr <= policy.reject_at:
            return Decision(REJECTED, NOT_FASTER, f"not {policy.min_effect:.0%} faster: {said}", promote=False)
    if min(state.current_requests, state.canary_requests) >= policy.request_budget:
        promote = policy.on_inconclusive == PROMOTED
        return Decision(
            INCONCLUSIVE, BUDGET, f"budget of {policy.request_budget} requests spent: {said}", promote=promote
        )
    return None


def not_serving(idle_seconds: float, state: CanaryState, policy: CanaryPolicy) -> Decision | None:
    """The end of a canary that has served no request for `idle_seconds` (None: it may still start serving)."""
    if idle_seconds < policy.not_serving_seconds:
        return None
    return Decision(
        INCONCLUSIVE,
        NOT_SERVING,
        f"the canary served no request for {idle_seconds:.0f}s (at most {policy.not_serving_seconds:.0f}s): "
        f"{state.canary_requests:.0f} canary / {state.current_requests:.0f} current requests over "
        f"{state.windows} windows; the current draft keeps serving",
        promote=False,
    )
