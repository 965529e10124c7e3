"""Per deployment, what the load model (specdec.speculation.load_model) was fitted on and what it concluded: the
windows of the target model's iterations, and the draft lengths by load with the break-even. Kept for the
speculation monitor (specdec.feedback.monitor), which feeds it each window, and read by the reconciler for the
runtime ConfigMap and status; thread-safe, since the two run on different threads."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import deque

from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.feedback.forget import forget_absent
from specdec.speculation import load_model, payoff

Key = tuple[str, str]  # (namespace, name)
# A published schedule is replaced no sooner than this after the last change: each change is a write of the
# runtime ConfigMap and of status, and a fit moves with the load it has seen so far.
CHANGE_SECONDS = 60.0


@dataclasses.dataclass(frozen=True)
class Fit:
    """What a schedule was computed from: the step time, the per-token acceptance and the draft's cost."""

    step: load_model.StepTime
    alpha: float
    cost_ratio: float


class LoadSchedules:
    def __init__(self) -> None:
        self._windows: dict[Key, deque[load_model.Window]] = {}
        self._schedules: dict[Key, list[tuple[int, int]]] = {}
        self._fits: dict[Key, Fit] = {}
        self._costs: dict[Key, float] = {}  # the draft's cost at the target's batch, as last measured
        self._changed_at: dict[Key, float] = {}  # when the schedule last changed (monotonic seconds)
        self._lock = threading.Lock()

    def schedule(self, namespace: str, name: str) -> tuple[list[tuple[int, int]], Fit] | None:
        """The draft lengths by load and the fit behind them, once there is one."""
        with self._lock:
            key = (namespace, name)
            return (self._schedules[key], self._fits[key]) if key in self._schedules else None

    def break_even(self, namespace: str, name: str) -> int | None:
        """The concurrency from which speculation stops paying, once the load model has a fit."""
        with self._lock:
            found = self._schedules.get((namespace, name))
        return load_model.schedule_break_even(found) if found else None

    def config_map_keys(self, namespace: str, name: str) -> dict[str, str]:
        """The runtime ConfigMap's keys of the load model (none before a fit)."""
        with self._lock:
            found = self._schedules.get((namespace, name))
        if not found:
            return {}
        keys = {SCHEDULE_KEY: load_model.format_schedule(found)}
        break_even = load_model.schedule_break_even(found)
        return keys if break_even is None else {**keys, BREAK_EVEN_KEY: str(break_even)}

    def observe(self, key: Key, window: dict[str, float]) -> load_model.Window | None:
        """A window of the target's iterations (the Triton route counts them; None where none were), kept for
        the fit."""
        found = load_model.window_of(window)
        if found is not None:
            with self._lock:
                self._windows.setdefault(key, deque(maxlen=load_model.WINDOWS_KEPT)).append(found)
        return found

    def update(
        self, key: Key, m: payoff.Measurement, window: dict[str, float], load: load_model.Window | None, now: float
    ) -> bool:
        """Refit and recompute, given the window's counters and its iterations (`observe`'s); True when the
        schedule moved enough to tell the pods, CHANGE_SECONDS or more after it last did."""
        # The route's times price the draft against the target at the batch they were measured at: only a window
        # that timed both at a batch it knows gives the draft's cost at the target's batch. Any other window
        # keeps the cost found so; before there is one, an estimate (already that cost) is taken as it is, and
        # a measured ratio whose batch is not known (the monitor's cost of an earlier window; a window whose
        # batch the front did not count) is not used: the schedule waits.
        timed = window.get("draft_seconds", 0.0) > 0 and window.get("target_seconds", 0.0) > 0
        with self._lock:
            windows, known = list(self._windows.get(key, ())), self._costs.get(key)
        if timed and load is not None:
            cost, measured_at = m.cost_ratio, load.batch
        elif known is not None:
            cost, measured_at = known, None
        elif m.cost_source != "Measured":
            cost, measured_at = m.cost_ratio, None
        else:
            return False
        # The measurement priced acceptance and cost at the mean draft length sent (a schedule sends less than
        # draft_len), which the measured cost's batch needs too.
        fitted = load_model.measured_fit(windows, cost, measured_at, m.sent)
        if fitted is None:
            return False
        alpha = m.alpha
        found = load_model.schedule(fitted[0], alpha, fitted[1], m.draft_len)
        with self._lock:
            if measured_at is not None:
                self._costs[key] = fitted[1]
            if not load_model.schedule_moved(self._schedules.get(key), found):
                return False
            if now - self._changed_at.get(key, -math.inf) < CHANGE_SECONDS:
                return False
            self._schedules[key], self._fits[key] = found, Fit(fitted[0], alpha, fitted[1])
            self._changed_at[key] = now
        return True

    def forget_gone(self, present: set[Key]) -> None:
        with self._lock:
            forget_absent(present, self._windows, self._schedules, self._fits, self._costs, self._changed_at)
