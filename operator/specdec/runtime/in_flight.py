"""The requests the Triton route has at Triton, over time: the load its break-even gate and draft-length schedule
go by, and, per poll of Triton's iteration gauges, whether that interval can be counted for the load model.

The TensorRT-LLM backend's gauges are those of the target's latest iteration: the batch of an interval is a
sample taken at the poll. It stands for the interval's iterations only where the load held steady: an interval
in which Triton was idle at some moment (the time between its iterations includes the wait for requests) or
whose requests in flight at the poll are off their mean over the interval by more than STEADY_BAND (the load
rose or drained: a batch of 28 sampled while 60 drained would price 60's steps at 28) is not counted. The
interval's draft length is the mean over its sequences in flight, weighted by time (under a schedule requests
draft different lengths as the load moves).
"""

from __future__ import annotations

import time
from collections.abc import Callable

STEADY_BAND = 0.25


class InFlight:
    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.requests = 0
        self._draft_tokens = 0  # draft tokens per sequence, summed over the requests in flight
        self._clock = clock
        self._since = self._changed = clock()
        self._area = self._draft_area = 0.0  # requests and their draft tokens, integrated over time
        self._idled = True  # no request at Triton at some moment of the interval

    def join(self, draft_len: int) -> None:
        self._advance()
        self.requests += 1
        self._draft_tokens += draft_len

    def leave(self, draft_len: int) -> None:
        self._advance()
        self.requests -= 1
        self._draft_tokens -= draft_len
        self._idled |= self.requests == 0

    def interval(self) -> float | None:
        """The mean draft length per sequence since the previous call, None where the load did not hold steady;
        then a new interval starts."""
        self._advance()
        seconds = self._changed - self._since
        mean = self._area / seconds if seconds > 0 else 0.0
        steady = not self._idled and mean > 0 and abs(self.requests - mean) <= STEADY_BAND * mean
        draft = self._draft_area / self._area if self._area > 0 else 0.0
        self._since, self._area, self._draft_area, self._idled = self._changed, 0.0, 0.0, self.requests == 0
        return draft if steady else None

    def _advance(self) -> None:
        now = self._clock()
        self._area += self.requests * (now - self._changed)
        self._draft_area += self._draft_tokens * (now - self._changed)
        self._changed = now
