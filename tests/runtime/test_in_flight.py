"""The Triton route's requests in flight over time: which intervals between polls of Triton's iteration gauges
the load model may count, and their mean draft length."""

from __future__ import annotations

import pytest

from specdec.runtime.in_flight import STEADY_BAND, InFlight


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def loaded(requests: int, draft_len: int = 4) -> tuple[InFlight, Clock]:
    """`requests` in flight since an interval that was not counted (it started idle)."""
    clock = Clock()
    load = InFlight(clock)
    for _ in range(requests):
        load.join(draft_len)
    assert load.interval() is None  # it began with nothing in flight
    return load, clock


def test_a_steady_load_is_counted_with_its_mean_draft_length():
    load, clock = loaded(6)
    for _ in range(2):
        load.join(1)
    clock.now = 5.0
    assert load.interval() == pytest.approx((6 * 4 + 2 * 1) / 8)
    assert load.requests == 8
    load.leave(1)  # one of 8 leaves and another joins: still steady
    load.join(2)
    clock.now = 10.0
    assert load.interval() == pytest.approx((6 * 4 + 1 + 2) / 8)


def test_a_draining_load_is_not_counted():
    """60 in flight most of the interval, 28 at the poll: the batch sampled then does not stand for the interval."""
    load, clock = loaded(60)
    clock.now = 4.0
    for _ in range(32):
        load.leave(4)
    clock.now = 5.0
    assert abs(load.requests - (60 * 4 + 28) / 5) > STEADY_BAND * (60 * 4 + 28) / 5
    assert load.interval() is None
    clock.now = 10.0
    assert load.interval() == 4.0  # steady at 28 since


def test_an_interval_with_a_moment_of_no_request_is_not_counted():
    load, clock = loaded(1)
    clock.now = 2.0
    load.leave(4)
    load.join(4)
    clock.now = 5.0
    assert load.interval() is None  # Triton waited for a request: its iteration times include the wait
    clock.now = 10.0
    assert load.interval() == 4.0
    load.leave(4)
    clock.now = 15.0
    assert load.interval() is None and load.interval() is None  # nothing in flight since
