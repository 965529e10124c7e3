"""A running canary's test, on the monitor's scrape windows: each window, the current arm's pods (component
`runtime`) and the canary's (`runtime-canary`) give one ArmWindow each, and specdec.canary.decision.observe reads the
pair. A canary that serves no request for its policy's notServingSeconds (its pods never ready, or no traffic
reaching them) ends NotServing, windows or not. Its Reading (the test's state, each arm's figures, the decision
once there is one) is what the deployment controller writes into status.canary (specdec.canary.rollout); a
restarted operator resumes the test from there."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

from specdec.api.canary import CanarySpec
from specdec.canary import rollout, windows
from specdec.canary.decision import ArmWindow, not_serving, observe
from specdec.feedback.forget import forget_absent
from specdec.speculation import payoff
from specdec.status.pods import container_statuses

CURRENT, CANARY = "current", "canary"


def running(sd: dict[str, Any]) -> bool:
    """Whether status.canary says a canary is in progress for this generation of the spec."""
    status = (sd.get("status") or {}).get("canary") or {}
    return status.get("state") == rollout.IN_PROGRESS and status.get("generation") == sd["metadata"].get("generation")


def _restarts(pod: dict[str, Any]) -> int:
    return sum(cs.get("restartCount") or 0 for cs in container_statuses(pod))


class CanaryWatch:
    """`enqueue(namespace, name)`: the deployment's status should be rewritten."""

    def __init__(self, enqueue: Callable[[str, str], None]):
        self.enqueue = enqueue
        self._samples: dict[str, tuple[payoff.Sample, float]] = {}  # pod uid -> last sample, when
        self._restarts: dict[str, int] = {}  # pod uid -> its containers' restarts when first seen
        self._readings: dict[tuple[str, str], rollout.Reading] = {}
        # deployment -> when its canary last served a request, or its test was first read (a restarted operator
        # starts the wait again: it has no earlier clock)
        self._served_at: dict[tuple[str, str], float] = {}
        self._guard = threading.Lock()

    def reading(self, namespace: str, name: str) -> rollout.Reading | None:
        with self._guard:
            return self._readings.get((namespace, name))

    def account(
        self,
        sd: dict[str, Any],
        arms: dict[str, list[dict[str, Any]]],
        scraped: dict[str, payoff.Sample | None],
        now: float,
        policy: CanarySpec,
    ) -> None:
        """One window of both arms (`arms`: each arm's pods, ready or not) read into the canary's test."""
        meta, status = sd["metadata"], (sd.get("status") or {}).get("canary") or {}
        key = (meta["namespace"], meta["name"])
        test = (status.get("generation"), status.get("retry", ""))
        with self._guard:
            reading = self._readings.get(key)
        if reading is None or (reading.generation, reading.retry) != test:
            for pod in (*arms[CURRENT], *arms[CANARY]):  # a new test's windows start at its first scrape
                self._samples.pop(pod["metadata"]["uid"], None)
            reading = rollout.Reading(
                test[0],
                test[1],
                rollout.resumed_state(status),  # a restarted operator resumes from status
                {arm: dict((status.get("arms") or {}).get(arm) or {}) for arm in (CURRENT, CANARY)},
                0.0,
                None,
            )
            self._served_at[key] = now
        if reading.decision is not None:
            return  # decided: the controller acts on it
        current, canary = self._window(arms[CURRENT], scraped, now), self._window(arms[CANARY], scraped, now)
        if canary is not None and canary[0].requests > 0:
            self._served_at[key] = now
        if current is None or canary is None:  # an arm with no window: not scraped, or a first scrape (its baseline)
            ended = not_serving(now - self._served_at[key], reading.state, rollout.policy_of(policy))
            self._keep(key, reading if ended is None else dataclasses.replace(reading, decision=ended))
            if ended is not None:
                self.enqueue(*key)
            return
        state, decision = observe(reading.state, current[0], canary[0], rollout.policy_of(policy))
        if decision is None:
            decision = not_serving(now - self._served_at[key], state, rollout.policy_of(policy))
        figures = {}
        blocks = {CURRENT: (status.get("current") or {}).get("speculation") or {}, CANARY: rollout.spec_block(sd)}
        for arm, window in ((CURRENT, current[0]), (CANARY, canary[0])):
            before = reading.arms.get(arm) or {}
            figures[arm] = {
                **before,
                **windows.arm_figures(window),
                "draft": windows.described(blocks[arm]),
                "requests": int(before.get("requests", 0) + window.requests),
                "windows": int(before.get("windows", 0)) + (1 if window.requests > 0 else 0),
                "errors": int(before.get("errors", 0) + window.errors),
            }
        seconds = (current[1] + canary[1]) / 2
        self._keep(key, rollout.Reading(test[0], test[1], state, figures, seconds, decision))
        self.enqueue(*key)

    def _window(
        self, pods: list[dict[str, Any]], scraped: dict[str, payoff.Sample | None], now: float
    ) -> tuple[ArmWindow, float] | None:
        """(the arm's ArmWindow, its mean seconds) from the pods scraped now and before; None: no window yet."""
        window: dict[str, float] = {}
        seconds: list[float] = []
        failed = ready = 0
        for pod in pods:
            uid = pod["metadata"]["uid"]
            restarts = _restarts(pod)
            first = self._restarts.setdefault(uid, restarts)
            if restarts > first or (pod.get("status") or {}).get("phase") == "Failed":
                failed += 1
                self._restarts[uid] = restarts  # one failure is counted once
            sample = scraped.get(uid)
            if sample is None:
                continue
            ready += 1
            previous = payoff.advance(self._samples, uid, sample, now, window)
            if previous is None:
                continue
            seconds.append(now - previous[1])
        if not seconds:
            return None
        mean = sum(seconds) / len(seconds)
        return windows.arm_window(window, ready, failed, max(mean, 1e-3)), mean

    def _keep(self, key: tuple[str, str], reading: rollout.Reading) -> None:
        with self._guard:
            self._readings[key] = reading

    def forget_gone(self, present: set[tuple[str, str]], live_pods: set[str]) -> None:
        with self._guard:
            forget_absent(present, self._readings, self._served_at)
        forget_absent(live_pods, self._samples, self._restarts)
