"""The guard's decisions (specdec.speculation.guard) and the condition they make (status.speculation)."""

from __future__ import annotations

import datetime
import random

from specdec.feedback.rearm import Rearm
from specdec.speculation.guard import (
    COLLAPSED,
    DRAFTING,
    NOT_DRAFTING,
    GuardPolicy,
    GuardState,
    Window,
    observe,
    rearm_due,
    window_of,
)
from specdec.status.speculation import active_condition

POLICY = GuardPolicy()


def drafting(acceptance: float, draft: float = 400, draft_len: int = 4) -> Window:
    return Window(tokens=600, requests=10, draft=draft, accepted=acceptance * draft, draft_len=draft_len)


IDLE = Window(tokens=0, requests=0, draft=0, accepted=0, draft_len=4)
NO_DRAFTS = Window(tokens=600, requests=10, draft=0, accepted=0, draft_len=4)


def run(windows, state: GuardState = GuardState()) -> list[GuardState]:
    states = []
    for w in windows:
        state = observe(state, w, POLICY)
        states.append(state)
    return states


def test_no_traffic_says_nothing_and_first_drafting_says_drafting_at_once():
    assert run([IDLE, IDLE])[-1].verdict is None
    assert active_condition(run([IDLE])[-1]).status is None
    assert active_condition(run([IDLE])[-1]).reason == "NoTraffic"
    state = run([drafting(0.6)])[-1]
    assert state.verdict == DRAFTING
    cond = active_condition(state)
    assert (cond.type, cond.status, cond.reason) == ("SpeculationActive", True, "Drafting")


def test_drafting_stopping_under_traffic_flips_in_two_windows_and_recovers():
    states = run([drafting(0.6)] * 4 + [NO_DRAFTS, NO_DRAFTS])
    assert [s.verdict for s in states[-2:]] == [DRAFTING, NOT_DRAFTING]
    cond = active_condition(states[-1])
    assert (cond.status, cond.reason) == (False, "NotDrafting")
    assert "0 draft tokens for 600 generated tokens and 10 requests" in cond.message
    assert "acceptance_rate_threshold" in cond.message
    back = run([drafting(0.6), drafting(0.6)], states[-1])
    assert [s.verdict for s in back] == [NOT_DRAFTING, DRAFTING]


def test_traffic_that_never_drafted_is_not_drafting():
    assert [s.verdict for s in run([NO_DRAFTS, NO_DRAFTS])] == [None, NOT_DRAFTING]


def test_acceptance_halving_flips_in_two_windows_and_recovers():
    states = run([drafting(0.8)] * 5 + [drafting(0.35)] * 2)
    assert [s.verdict for s in states[-2:]] == [DRAFTING, COLLAPSED]
    assert abs(states[-1].baseline - 0.8) < 1e-9  # the collapsed windows were not learnt
    cond = active_condition(states[-1])
    assert (cond.status, cond.reason) == (False, "AcceptanceCollapsed")
    assert "acceptance 0.35 against a baseline of 0.80 at draftLen 4" in cond.message
    between = run([drafting(0.5)] * 3, states[-1])  # above half, below the recovery line: still collapsed
    assert {s.verdict for s in between} == {COLLAPSED}
    back = run([drafting(0.7)] * 2, between[-1])
    assert [s.verdict for s in back] == [COLLAPSED, DRAFTING]


def test_noise_single_odd_windows_and_idle_gaps_flip_nothing():
    rng = random.Random(7)
    windows = [drafting(min(1.0, max(0.0, 0.6 + rng.uniform(-0.2, 0.2)))) for _ in range(200)]
    windows[50] = NO_DRAFTS  # one window without drafts
    windows[80] = drafting(0.1)  # one window of bad acceptance
    windows[120:130] = [IDLE] * 10  # traffic stops for a while
    assert {s.verdict for s in run(windows)} == {DRAFTING}


def test_no_collapse_before_the_baseline_warmed_up_or_after_a_draft_length_change():
    assert {s.verdict for s in run([drafting(0.8)] * 2 + [drafting(0.2)] * 2)} == {DRAFTING}
    change = run([drafting(0.8)] * 5 + [drafting(0.3, draft_len=8)] * 3)
    assert {s.verdict for s in change} == {DRAFTING}
    assert change[-1].baseline_draft_len == 8 and abs(change[-1].baseline - 0.3) < 1e-9


def test_few_draft_tokens_do_not_judge_acceptance_nor_feed_the_baseline():
    state = run([drafting(0.8)] * 5)[-1]
    sparse = run([drafting(0.0, draft=10)] * 3, state)
    assert {s.verdict for s in sparse} == {DRAFTING} and sparse[-1].baseline == state.baseline


def test_window_of_reads_the_monitor_counter_keys():
    w = window_of({"draft": 40, "accepted": 30, "requests": 2, "completion_tokens": 90}, 4)
    assert w == Window(tokens=90, requests=2, draft=40, accepted=30, draft_len=4)
    assert w.acceptance == 0.75


def test_rearm_is_due_after_the_cooldown_and_at_most_once_per_cooldown():
    assert not rearm_due(None, None, 1000.0, 60)  # drafting
    assert not rearm_due(950.0, None, 1000.0, 60)  # NotDrafting for 50 s only
    assert rearm_due(940.0, None, 1000.0, 60)
    assert not rearm_due(0.0, 990.0, 1000.0, 60)  # restarted 10 s ago
    assert rearm_due(0.0, 940.0, 1000.0, 60)


def test_rearm_reads_the_last_restart_from_status_after_an_operator_restart():
    events, wall = [], {"now": 0.0}
    rearm = Rearm(
        lambda obj, reason, message, warning=False: events.append((reason, message)), wall_clock=lambda: wall["now"]
    )
    at = datetime.datetime.fromtimestamp(10_020.0, datetime.UTC).isoformat().replace("+00:00", "Z")
    sd = {"status": {"rearm": {"restarts": 3, "lastRestartAt": at}}}  # by the operator before this one
    key = ("ns", "llama")

    def restarts_at(now: float, verdict: str = NOT_DRAFTING) -> bool:
        wall["now"] = 10_000.0 + (now - 500.0)  # the wall clock runs with the monitor's
        return rearm.observe(sd, key, 60.0, verdict, now)

    assert not restarts_at(500.0)  # NotDrafting begins
    assert not restarts_at(560.0)  # NotDrafting for 60 s, but the restart in status was 40 s ago
    assert rearm.record(key) is None
    assert restarts_at(580.0)
    assert rearm.record(key)["restarts"] == 4
    assert events[0][0] == "SpeculationRearmed" and "rolling restart 4" in events[0][1]
    assert not restarts_at(600.0) and not restarts_at(620.0, DRAFTING)  # drafting again: the count starts over
    assert not restarts_at(640.0) and not restarts_at(699.0) and restarts_at(700.0)


def test_where_no_token_is_counted_requests_without_drafts_are_not_drafting():
    """The Triton route without a tokenizer counts requests, not tokens: traffic is requests there."""
    policy = GuardPolicy()
    state = observe(GuardState(), Window(tokens=0, requests=20, draft=200, accepted=100, draft_len=4), policy)
    assert state.verdict == "Drafting"
    idle = Window(tokens=0, requests=policy.min_requests - 1, draft=0, accepted=0, draft_len=4)
    assert observe(observe(state, idle, policy), idle, policy).verdict == "Drafting"  # too little traffic to tell
    stopped = Window(tokens=0, requests=policy.min_requests, draft=0, accepted=0, draft_len=4)
    assert observe(observe(state, stopped, policy), stopped, policy).verdict == "NotDrafting"
