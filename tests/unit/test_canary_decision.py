"""The canary's decision (specdec.canary.decision): the SPRT on paired windows and the safety rule."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from specdec.canary.decision import (
    ACCEPTANCE_COLLAPSED,
    BUDGET,
    ERROR_RATE_ROSE,
    FASTER,
    INCONCLUSIVE,
    NOT_FASTER,
    NOT_SERVING,
    PODS_FAILED,
    PROMOTED,
    REJECTED,
    ArmWindow,
    CanaryPolicy,
    CanaryState,
    Decision,
    not_serving,
    observe,
)


def arm(tpot: float, *, requests: float = 50, acceptance: float = 0.5, errors: float = 0, failed: int = 0) -> ArmWindow:
    draft = 400.0
    return ArmWindow(
        requests=requests,
        errors=errors,
        steps=100,
        draft_tokens=draft,
        accepted_tokens=draft * acceptance,
        output_tokens=requests * 64,
        tpot_seconds=tpot,
        replicas=1,
        failed_pods=failed,
        seconds=30,
    )


def run(
    pairs: list[tuple[ArmWindow, ArmWindow]], policy: CanaryPolicy = CanaryPolicy()
) -> tuple[CanaryState, Decision | None]:
    state, decision = CanaryState(), None
    for current, canary in pairs:
        state, decision = observe(state, current, canary, policy)
        if decision is not None:
            break
    return state, decision


def noisy_pairs(rng: random.Random, gain: float, spread: float, windows: int = 100, requests: float = 50):
    """Windows whose ln(TPOT ratio) is normal around ln(1 + gain) with `spread`."""
    for _ in range(windows):
        current = 0.02 * math.exp(rng.gauss(0, spread / math.sqrt(2)))
        canary = 0.02 / (1 + gain) * math.exp(rng.gauss(0, spread / math.sqrt(2)))
        yield arm(current, requests=requests), arm(canary, requests=requests)


def test_a_clearly_faster_canary_is_promoted():
    jitter = [1.0, 1.02, 0.99, 1.01, 1.0, 0.98] * 4
    state, decision = run([(arm(0.02 * j), arm(0.015 * j)) for j in jitter])
    assert decision is not None and decision.outcome == PROMOTED and decision.reason == FASTER and decision.promote
    assert state.pairs == CanaryPolicy().min_windows  # not before, and no later than it can
    assert state.effect == pytest.approx(0.02 / 0.015 - 1)
    assert "+33.3%" in decision.message


def test_an_equal_canary_is_rejected_as_not_faster_and_keeps_the_current_draft():
    jitter = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0, 1.01, 0.99]
    _, decision = run([(arm(0.02), arm(0.02 * j)) for j in jitter])
    assert decision is not None and decision.outcome == REJECTED and decision.reason == NOT_FASTER
    assert not decision.promote


def test_a_slower_canary_is_rejected():
    state, decision = run([(arm(0.02), arm(0.024 * j)) for j in [1.0, 1.01, 0.99, 1.0, 1.02] * 4])
    assert decision is not None and decision.reason == NOT_FASTER and state.pairs <= 10


def test_nothing_is_decided_before_the_minimum_windows():
    state, decision = run([(arm(0.02), arm(0.01))] * 3)
    assert decision is None and state.pairs == 3


def test_windows_with_too_few_requests_are_not_pairs_but_count_towards_the_budget():
    policy = CanaryPolicy(request_budget=100)
    state, decision = run([(arm(0.02, requests=50), arm(0.01, requests=10))] * 20, policy)
    assert state.pairs == 0
    assert decision is not None and decision.outcome == INCONCLUSIVE and decision.reason == BUDGET
    assert state.canary_requests == 100 and not decision.promote


def test_the_policy_says_which_way_an_inconclusive_canary_goes():
    policy = CanaryPolicy(request_budget=100, on_inconclusive=PROMOTED)
    _, decision = run([(arm(0.02, requests=50), arm(0.01, requests=10))] * 20, policy)
    assert decision is not None and decision.outcome == INCONCLUSIVE and decision.promote


def test_acceptance_collapse_rolls_back_in_the_window_it_shows():
    pairs = [(arm(0.02), arm(0.016, acceptance=0.7))] * 2 + [(arm(0.02, acceptance=0.5), arm(0.03, acceptance=0.2))]
    state, decision = run(pairs)
    assert state.windows == 3
    assert decision is not None and decision.outcome == REJECTED and decision.reason == ACCEPTANCE_COLLAPSED
    assert "0.200" in decision.message and "0.500" in decision.message


def test_an_acceptance_just_above_the_collapse_ratio_is_not_a_collapse():
    _, decision = run([(arm(0.02, acceptance=0.5), arm(0.02, acceptance=0.26))])
    assert decision is None


def test_failed_pods_and_an_error_rate_rise_roll_back():
    _, failed = run([(arm(0.02), arm(0.015, failed=1))])
    assert failed is not None and failed.reason == PODS_FAILED and not failed.promote
    _, errors = run([(arm(0.02, errors=0), arm(0.015, errors=3))])  # 6 % against 0 %
    assert errors is not None and errors.reason == ERROR_RATE_ROSE and "3/50" in errors.message
    _, tolerated = run([(arm(0.02, errors=2), arm(0.015, errors=3))])  # 6 % against 4 %: within 0.02
    assert tolerated is None


def test_a_canary_that_serves_nothing_ends_inconclusive_with_the_current_draft_kept():
    """Even where the policy would promote an Inconclusive canary: there is no evidence for its draft."""
    policy = CanaryPolicy(not_serving_seconds=600, on_inconclusive=PROMOTED)
    state = CanaryState(windows=3, current_requests=150)
    assert not_serving(599.0, state, policy) is None
    ended = not_serving(600.0, state, policy)
    assert ended is not None and ended.outcome == INCONCLUSIVE and ended.reason == NOT_SERVING
    assert not ended.promote
    assert "no request for 600s" in ended.message and "0 canary / 150 current requests" in ended.message


@pytest.mark.parametrize("spread", [0.03, 0.1])
def test_the_false_promotion_rate_holds_for_equal_arms(spread):
    """Also where the windows' spread is twice the minimum effect, where a spread estimated from the first few
    pairs and taken as known would promote equal arms about twice as often as alpha."""
    rng = random.Random(7)
    runs = 400
    promoted = sum(
        1
        for _ in range(runs)
        if (d := run(list(noisy_pairs(rng, 0.0, spread, windows=300)))[1]) is not None and d.promote
    )
    assert promoted / runs <= CanaryPolicy().false_promotion + 0.015, promoted


def test_a_canary_faster_by_twice_the_minimum_effect_is_promoted_almost_always():
    rng = random.Random(11)
    runs = 200
    outcomes = [run(list(noisy_pairs(rng, 0.10, 0.03)))[1] for _ in range(runs)]
    assert sum(1 for d in outcomes if d is not None and d.outcome == PROMOTED) >= 0.95 * runs


def test_state_is_plain_enough_to_resume_from():
    """Status holds the state as numbers; the state rebuilt from them decides the same."""
    pairs = [(arm(0.02), arm(0.015 * j)) for j in [1.0, 1.02, 0.99]]
    state, _ = run(pairs)
    resumed = CanaryState(**dataclasses.asdict(state))
    assert observe(resumed, arm(0.02), arm(0.015)) == observe(state, arm(0.02), arm(0.015))


@pytest.mark.parametrize(
    "change",
    [{"errors": 60}, {"accepted_tokens": 500.0}, {"tpot_seconds": -1.0}, {"seconds": 0.0}, {"requests": math.nan}],
)
def test_bad_windows_are_refused_by_name(change):
    field = next(iter(change))
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(arm(0.02), **change)


@pytest.mark.parametrize(
    "change",
    [
        {"false_promotion": 0.0},
        {"min_effect": 0.0},
        {"on_inconclusive": "Maybe"},
        {"min_windows": 1},
        {"not_serving_seconds": 0.0},
        {"not_serving_seconds": math.nan},
    ],
)
def test_bad_policies_are_refused(change):
    with pytest.raises(ValueError):
        CanaryPolicy(**change)


def test_one_unlucky_error_is_not_an_error_rate_rise():
    _, one = run([(arm(0.02, requests=20), arm(0.02, requests=20, errors=1))])  # 5 %, but one error
    assert one is None
    _, three = run([(arm(0.02, requests=20), arm(0.02, requests=20, errors=3))])
    assert three is not None and three.reason == ERROR_RATE_ROSE


def test_acceptances_on_too_few_draft_tokens_are_not_compared():
    few = dataclasses.replace(arm(0.02, acceptance=0.1), draft_tokens=100.0, accepted_tokens=10.0)
    _, decision = run([(arm(0.02, acceptance=0.5), few)])
    assert decision is None


def test_a_canary_faster_by_the_minimum_effect_is_promoted_at_least_one_minus_beta_of_the_time():
    """Where the windows' spread is below delta (0.6 delta here); above it the bound on the spread costs power."""
    rng = random.Random(13)
    runs = 400
    promoted = sum(
        1 for _ in range(runs) if (d := run(list(noisy_pairs(rng, 0.05, 0.03)))[1]) is not None and d.promote
    )
    assert promoted / runs >= 1 - CanaryPolicy().missed_promotion, promoted
