"""draftLen: auto's decisions, per deployment, from the speculation monitor's windows (specdec.feedback.monitor).

- The draft length (specdec.speculation.payoff.decide): on the Triton route a live change (the ConfigMap's
  draft_len, re-read by the front); on trtllm-serve, which reads it at start, a rollout, so damped harder
  (`rollout_policy`).
- On trtllm-serve, the draft lengths by load: the load model's schedule (specdec.feedback.load_schedules) as
  TensorRT-LLM's draft_len_schedule (specdec.speculation.trtllm_schedule), rolled out only for a predicted gain of
  ROLLOUT_GAIN at the load measured (the Triton route's front applies the schedule per request, live).

Every rollout of a deployment, of either kind, waits `rollout_seconds` after the one before. Each decision is
an Event with its numbers. The reconciler reads the choices (thread-safe) and renders them.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Any

from specdec.feedback.forget import forget_absent
from specdec.feedback.load_schedules import LoadSchedules
from specdec.speculation import payoff, trtllm_schedule
from specdec.speculation.load_model import Window

Key = tuple[str, str]
ROLLOUT_GAIN = 0.05  # a rollout for less is not worth the restart
# draftLen: auto exists on draftTarget, a one-engine mode on the pinned release (DraftTargetDecodingConfig's
# _draft_target_one_model defaults to True): no tier of 0 (specdec.speculation.trtllm_schedule).
SCHEDULE_FLOOR = 1
ROLLING = "; trtllm-serve reads it at start: rolling the pods (a new pod ready before an old one goes)"


class Autopilot:
    def __init__(
        self,
        post_event: Callable[..., None],
        policy: payoff.AutoPolicy,
        rollout_policy: payoff.AutoPolicy,
        rollout_seconds: float,
        told_schedule: Callable[[str, str], trtllm_schedule.Schedule | None] = lambda ns, name: None,
    ):
        self.post_event = post_event
        self.policy = policy  # where a change is live (the Triton route)
        self.rollout_policy = rollout_policy  # where a change is a rollout (trtllm-serve)
        self.rollout_seconds = rollout_seconds
        self.told_schedule = told_schedule  # what the pods were last told (the ConfigMap), after a restart
        self._states: dict[Key, payoff.AutoState] = {}
        self._draft_lens: dict[Key, int] = {}
        self._schedules: dict[Key, trtllm_schedule.Schedule | None] = {}
        self._rolled_at: dict[Key, float] = {}  # monotonic: the last rollout decided
        self._lock = threading.Lock()

    def draft_len_choice(self, namespace: str, name: str) -> int | None:
        with self._lock:
            return self._draft_lens.get((namespace, name))

    def schedule_choice(self, namespace: str, name: str) -> trtllm_schedule.Schedule | None:
        with self._lock:
            return self._schedules.get((namespace, name))

    def _may_roll(self, key: Key, now: float) -> bool:
        return now - self._rolled_at.get(key, -float("inf")) >= self.rollout_seconds

    def draft_len(
        self, sd: dict[str, Any], key: Key, m: payoff.Measurement, lo: int, hi: int, restarts: bool, now: float
    ) -> bool:
        """Decide on the draft length from a settled window; True when it changed."""
        with self._lock:
            asked = self._draft_lens.get(key)
        if asked is not None and asked != m.draft_len:
            return False  # the pods have not taken up the last choice yet (a ConfigMap refresh, or a rollout)
        policy = self.rollout_policy if restarts else self.policy
        if restarts and not self._may_roll(key, now):  # keep smoothing and confirming; choose nothing yet
            policy = dataclasses.replace(policy, cooldown=sys.maxsize)
        state, choice = payoff.decide(self._states.get(key, payoff.AutoState()), m, lo, hi, policy)
        self._states[key] = state
        if choice is None:
            return False
        with self._lock:
            self._draft_lens[key] = choice
        if restarts:
            self._rolled_at[key] = now
        assert state.alpha is not None  # a choice is made from a measured acceptance
        before = payoff.speedup(state.alpha, m.draft_len, m.cost_ratio)
        after = payoff.speedup(state.alpha, choice, m.cost_ratio)
        self.post_event(
            sd,
            "DraftLenChanged",
            f"draftLen {m.draft_len} -> {choice}: per-token acceptance {state.alpha:.2f} (measured "
            f"acceptance {m.acceptance_rate:.2f} at draftLen {m.draft_len}), draft cost "
            f"{m.cost_ratio:.3f} ({m.cost_source}); estimated speedup {before:.2f}x -> {after:.2f}x"
            + (ROLLING if restarts else ""),
        )
        return True

    def schedule(
        self, sd: dict[str, Any], key: Key, draft_len: int, load: Window | None, fits: LoadSchedules, now: float
    ) -> bool:
        """trtllm-serve: roll out the load model's draft lengths by load when they would pay at the load this
        window measured; True when the choice changed."""
        found = fits.schedule(*key)
        if load is None or found is None or not self._may_roll(key, now):
            return False
        entries, fit = found
        with self._lock:
            current = self._schedules[key] if key in self._schedules else self.told_schedule(*key)
        current = trtllm_schedule.clamped(current, draft_len)
        proposed = trtllm_schedule.from_load_schedule(entries, draft_len, SCHEDULE_FLOOR)
        if proposed == current:
            return False
        gain = trtllm_schedule.predicted_gain(
            fit.step, fit.alpha, fit.cost_ratio, load.batch, draft_len, current, proposed
        )
        if gain < ROLLOUT_GAIN:
            return False
        with self._lock:
            self._schedules[key] = proposed
        self._rolled_at[key] = now
        self.post_event(
            sd,
            "DraftLenScheduleChanged",
            f"draft_len_schedule {current or 'none'} -> {proposed} (largest batch size: draft length): "
            f"estimated {gain:+.0%} tokens/s at the {load.batch:.1f} sequences in flight measured, from "
            f"step time {fit.step.floor * 1000:.2f} ms + {fit.step.per_token * 1e6:.0f} us per token, "
            f"per-token acceptance {fit.alpha:.2f}, draft cost {fit.cost_ratio:.3f}" + ROLLING,
        )
        return True

    def forget_gone(self, present: set[Key]) -> None:
        with self._lock:
            forget_absent(present, self._draft_lens, self._schedules)
        forget_absent(present, self._states, self._rolled_at)
