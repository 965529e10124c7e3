"""The step-time model under load, its fit from measured windows, the break-even and the front's gate."""

from __future__ import annotations

import math
import random
from itertools import pairwise

import pytest

from specdec.speculation import load_model as lm
from specdec.speculation import payoff

T = lm.StepTime(0.02, 0.0008)  # the simulator's default profile


def test_without_a_load_slope_the_model_is_the_single_sequence_one():
    flat = lm.StepTime(0.02, 0.0)
    for n in (1, 64, 256):
        assert lm.speedup(flat, n, 3, 0.7, 0.05) == pytest.approx(payoff.speedup(0.7, 3, 0.05))
    assert lm.break_even(flat, 0.7, 0.05, 1, 8) is None


def test_speedup_falls_with_load_and_crosses_one_at_the_break_even():
    for k in (1, 2, 4):
        values = [lm.speedup(T, n, k, 0.7, 0.05) for n in range(1, 300)]
        assert all(a > b for a, b in pairwise(values))
        n_k = lm.crossing(T, k, 0.7, 0.05)
        assert lm.speedup(T, n_k, k, 0.7, 0.05) == pytest.approx(1.0)
    assert lm.break_even(T, 0.7, 0.05, 4, 4) == math.ceil(lm.crossing(T, 4, 0.7, 0.05)) == 17
    best = lm.break_even(T, 0.7, 0.05, 1, 8)
    assert best == 47  # draft length 1 pays longest
    assert lm.best_draft_len_at(T, best - 1, 0.7, 0.05, 1, 8) == 1
    assert lm.best_draft_len_at(T, best, 0.7, 0.05, 1, 8) == 0
    assert lm.best_draft_len_at(T, 1, 0.7, 0.05, 1, 8) == 4  # at one sequence longer drafts pay


def test_a_draft_that_never_pays_has_a_break_even_of_one():
    assert lm.crossing(T, 2, 0.05, 0.5) == 0.0
    assert lm.break_even(T, 0.05, 0.5, 1, 4) == 1


def test_the_fit_recovers_the_step_time_from_noisy_windows():
    rng = random.Random(4)
    windows = []
    for n in (1, 4, 16, 64, 128):
        for k in (0, 4):
            seconds = lm.step_seconds(T, n, k, 0.05) * (1 + rng.uniform(-0.02, 0.02))
            windows.append(lm.Window(n, k, seconds))
    fit = lm.fit_step_time(windows, 0.05)
    assert fit is not None
    assert fit.floor == pytest.approx(T.floor, rel=0.1) and fit.per_token == pytest.approx(T.per_token, rel=0.1)
    assert lm.break_even(fit, 0.7, 0.05, 4, 4) in range(15, 20)


def test_the_fit_needs_enough_windows_over_enough_load():
    same_load = [lm.Window(8, 4, lm.step_seconds(T, 8, 4, 0.05))] * 10
    assert lm.fit_step_time(same_load, 0.05) is None
    few = [lm.Window(n, 4, lm.step_seconds(T, n, 4, 0.05)) for n in (1, 64, 128)]
    assert lm.fit_step_time(few, 0.05) is None
    idle = [lm.Window(0, 4, 1.0)] * 10  # no batch: nothing measured
    assert lm.fit_step_time(idle, 0.05) is None


def test_a_step_time_that_does_not_grow_with_load_fits_flat():
    windows = [lm.Window(n, 0, 0.02 - 0.00001 * n) for n in (1, 8, 32, 64)]
    fit = lm.fit_step_time(windows, 0.05)
    assert fit is not None and fit.per_token == 0.0 and fit.floor == pytest.approx(0.0198, rel=0.02)


def test_the_gate_turns_off_above_the_band_and_on_below_it():
    gate = lm.Gate()
    path = []
    for n in (5, 10, 11, 10, 9, 8, 9, 10, 11):
        gate = gate.next(n, 10)
        path.append(gate.drafting)
    assert path == [True, True, False, False, False, True, True, True, False]
    assert lm.Gate(False).next(500, None).drafting  # no break-even: speculate
    assert not lm.Gate().next(1, 1).drafting  # never pays: never drafts


def test_the_schedule_gives_the_best_length_for_each_load_and_ends_at_the_break_even():
    entries = lm.schedule(T, 0.7, 0.05, 4)
    assert lm.format_schedule(entries) == "1:4 3:3 6:2 14:1 47:0"
    for n in range(1, 60):  # bisection finds what a scan finds
        assert lm.scheduled_draft_len(entries, n) == lm.best_draft_len_at(T, n, 0.7, 0.05, 1, 4)
    assert lm.schedule_break_even(entries) == lm.break_even(T, 0.7, 0.05, 1, 4) == 47
    flat = lm.schedule(lm.StepTime(0.02, 0.0), 0.7, 0.05, 4)
    assert flat == [(1, 4)] and lm.schedule_break_even(flat) is None  # pays at any load
    assert lm.schedule(T, 0.05, 0.5, 4) == [(1, 0)]  # never pays


def test_a_schedule_round_trips_and_nonsense_is_refused():
    entries = [(1, 4), (6, 2), (47, 0)]
    assert lm.parse_schedule(lm.format_schedule(entries)) == entries
    for text in ("", "2:4", "1:4 1:3", "1:4 6:x", "1:-1", "4"):
        assert lm.parse_schedule(text) is None, text


def test_only_a_schedule_that_moved_by_a_fifth_is_worth_telling_the_pods():
    before = [(1, 4), (14, 1), (47, 0)]
    assert not lm.schedule_moved(before, [(1, 4), (14, 1), (56, 0)])
    assert not lm.schedule_moved(before, [(1, 4), (12, 1), (38, 0)])
    assert lm.schedule_moved(before, [(1, 4), (14, 1), (57, 0)])
    assert lm.schedule_moved(before, [(1, 4), (11, 1), (47, 0)])
    assert lm.schedule_moved(before, [(1, 4), (14, 2), (47, 0)])
    assert lm.schedule_moved(None, before)
