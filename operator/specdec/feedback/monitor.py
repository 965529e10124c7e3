"""Reads the runtime pods' metrics, the way Prometheus scrapes them, and says what speculation does.

Every `interval` seconds (leader only) each ready runtime pod's `/metrics` is fetched (`GET
http://<podIP>:<port>/metrics`, a few at a time on a small pool: specdec.feedback.scrape), the
counters' increase since the previous scrape is summed per SpeculativeDeployment, and
`specdec.speculation.payoff` turns the window into a Measurement. The reconciler writes status from what this
monitor *published*; a measurement is published (and the deployment enqueued) only when it moved
enough to matter, or every `refresh_seconds`, so a steady fleet is not a stream of status writes,
and an idle one (no traffic) writes nothing. With `draftLen: auto`, the damped decision of
`specdec.speculation.payoff.decide` picks the draft length; the reconciler writes it into the runtime
ConfigMap, which the pods re-read without a restart. The same windows feed the guard
(`specdec.speculation.guard`): the condition SpeculationActive says whether the pods still draft under
traffic, at an acceptance like their own recent one (a flip to False is a Warning Event, the way back a
Normal one), and `specdec.feedback.rearm` restarts pods that stopped drafting when the spec asks for it. On the
Triton route the windows of the target model's iterations also fit the step time under load
(specdec.speculation.load_model): the break-even and the best draft length by load go into the same ConfigMap (the
front drafts less as the requests in flight grow, and stops at the break-even), and the break-even into
status.speculation. A saveState deployment's pods are scraped on the same passes for what they captured
(specdec.feedback.capture_watch: status.capture).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from specdec import conditions, modes
from specdec.admission.validation import parse_spec
from specdec.api.canary import CanarySpec
from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec.builders.serving import RUNTIME, RUNTIME_CANARY
from specdec.feedback.autopilot import Autopilot
from specdec.feedback.canary_watch import CANARY, CURRENT, CanaryWatch, running
from specdec.feedback.capture_watch import CaptureFacts, CaptureWatch, capture_facts_of, parse_capture
from specdec.feedback.drafter_watch import DrafterFacts, DrafterWatch, drafter_facts_of, parse_drafter
from specdec.feedback.forget import forget_absent
from specdec.feedback.load_schedules import LoadSchedules
from specdec.feedback.rearm import Rearm
from specdec.feedback.scrape import Scraper, parse_sample, scrapable
from specdec.kube.cache import Store
from specdec.plan import Problem
from specdec.speculation import guard, payoff
from specdec.status.speculation import (
    NO_TRAFFIC,
    active_condition,
    speculation_condition,
    speculation_status,
    with_break_even,
)

log = logging.getLogger("specdec.monitor")

SETTLE_WINDOWS = 2  # windows after a draft length change that mix both lengths
# Publish a new measurement when one of these moved at least this much (or the condition changed).
MOVES = {"acceptanceRate": 0.02, "estimatedSpeedup": 0.05, "acceptedTokensPerStep": 0.1}


@dataclasses.dataclass(frozen=True)
class Facts:
    """What the monitor needs of a deployment's spec."""

    generation: int | None
    drafter: str  # specdec.modes.mode.Drafting.drafter
    target: str
    draft: str | None
    draft_len: int | None
    draft_len_range: tuple[int, int]
    auto: bool
    restarts: bool  # a new draft length takes new pods (trtllm-serve reads it at start)
    port: int
    rearm_cooldown: float | None  # payoff.rearm: None when off
    canary: CanarySpec | None = None  # spec.rollout.canary
    learning: DrafterFacts | None = None  # spec.drafter.learning: the pods count samples too


def parse_with_drafter(text: str) -> tuple[payoff.Sample | None, Any]:
    """A learning deployment's pod: its speculation counters and its samples' figures, from one page."""
    return parse_sample(text), parse_drafter(text)


def parser_of(facts: Facts | CaptureFacts) -> Callable[[str], Any]:
    if isinstance(facts, CaptureFacts):
        return parse_capture
    return parse_with_drafter if facts.learning is not None else parse_sample


@dataclasses.dataclass(frozen=True)
class Published:
    generation: int | None
    status: dict[str, Any] | None  # None: nothing measured yet (the pods never drafted)
    condition: conditions.Cond
    at: float  # monotonic: when `status` was measured
    active: conditions.Cond  # SpeculationActive
    rearm: dict[str, Any] | None  # status.rearm: the restarts payoff.rearm asked for


def facts_of(sd: dict[str, Any]) -> Facts | CaptureFacts | None:
    """None when there is nothing to measure (an invalid spec, or a mode that neither speculates nor captures)."""
    spec = parse_spec(sd.get("spec") or {})
    if isinstance(spec, Problem):
        return None
    mode = modes.mode_of(spec.speculation)
    if mode.mode.drafting is None:
        return capture_facts_of(sd, spec)
    rearm = spec.speculation.rearm  # type: ignore[attr-defined]  # the Mode's callables and the registry's models are untyped
    draft = mode.draft()
    draft_len = mode.draft_len()
    return Facts(
        generation=sd["metadata"].get("generation"),
        drafter=mode.mode.drafting.drafter,
        target=spec.target.model,
        draft=draft.model if draft else None,
        draft_len=draft_len,
        draft_len_range=mode.draft_len_range() or (1, draft_len or 1),
        auto=mode.auto_draft_len() is not None,
        restarts=spec.backend == "pytorch",
        port=spec.runtime.port,
        rearm_cooldown=float(rearm.cooldown_seconds) if rearm and rearm.enabled else None,
        canary=spec.rollout.canary,
        learning=drafter_facts_of(sd, spec),
    )


def _moved(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    if before is None or any(before.get(k) != after.get(k) for k in ("draftLen", "costRatioSource")):
        return True
    return any(abs((after.get(k) or 0) - (before.get(k) or 0)) >= step for k, step in MOVES.items())


def _state(condition: conditions.Cond) -> tuple[bool | None, str]:
    return condition.status, condition.reason


class SpeculationMonitor:
    def __init__(
        self,
        store: Store,
        post_event: Callable[..., None],
        enqueue: Callable[[str, str], None],
        interval: float,
        refresh_seconds: float = 300.0,
        active: Callable[[], bool] = lambda: True,
        policy: payoff.AutoPolicy = payoff.AutoPolicy(),
        rollout_seconds: float = 900.0,
        told_schedule: Callable[[str, str], dict[int, int] | None] = lambda namespace, name: None,
        guard_policy: guard.GuardPolicy = guard.GuardPolicy(),
        wall_clock: Callable[[], float] = time.time,
        read_claim: Callable[[str, str], dict[str, Any] | None] = lambda namespace, name: None,
    ):
        self.store = store
        self.post_event = post_event
        self.enqueue = enqueue  # (namespace, name): the deployment's status should be rewritten
        self.interval = interval
        self.refresh_seconds = refresh_seconds
        self.active = active
        self.autopilot = Autopilot(post_event, policy, payoff.ROLLOUT_POLICY, rollout_seconds, told_schedule)
        self.guard_policy = guard_policy
        self.rearm = Rearm(post_event, wall_clock)
        self.capture = CaptureWatch(read_claim, post_event, enqueue)  # saveState: status.capture
        self.canary = CanaryWatch(enqueue)  # a running canary's test: status.canary
        self.drafter = DrafterWatch(enqueue)  # spec.drafter.learning: status.drafter's counts
        self.scraper = Scraper()
        self._samples: dict[str, tuple[payoff.Sample, float]] = {}  # pod uid -> last sample, when
        self._measured_cost: dict[tuple[str, str], tuple[float, str]] = {}
        self._settling: dict[tuple[str, str], int] = {}  # windows left before a draft length change settled
        self._activity: dict[tuple[str, str], tuple[int | None, guard.GuardState]] = {}  # by generation
        self.load = LoadSchedules()  # the load model's fits: the break-even and draft lengths by load
        # (namespace, name) -> ((uid, generation), facts): parsing a spec costs ~1 ms, a pass reads them all
        self._facts: dict[tuple[str, str], tuple[tuple, Facts | CaptureFacts | None]] = {}
        self._published: dict[tuple[str, str], Published] = {}
        self._guard = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the reconciler reads ----------------------------------------------------------------

    def published(self, namespace: str, name: str, generation: int | None) -> Published | None:
        """The latest measurement of this generation of the spec (an older one measured other settings)."""
        with self._guard:
            found = self._published.get((namespace, name))
        return found if found and found.generation == generation else None

    def draft_len_choice(self, namespace: str, name: str) -> int | None:
        return self.autopilot.draft_len_choice(namespace, name)

    def schedule_choice(self, namespace: str, name: str) -> dict[int, int] | None:
        """trtllm-serve, draftLen: auto: the draft_len_schedule to roll out (None: none chosen)."""
        return self.autopilot.schedule_choice(namespace, name)

    # -- the loop ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="specdec-monitor")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    @property
    def alive(self) -> bool:
        return self._thread is None or self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:  # a bug: say so, and try again at the next interval
                log.exception("speculation monitor pass failed")

    def run_once(self, now: float | None = None) -> None:
        if not self.active():
            self._samples.clear()  # a standby's baselines would be stale when it leads
            return
        now = time.monotonic() if now is None else now
        work = []
        canaries: list[tuple[dict[str, Any], Facts, dict[str, list[dict[str, Any]]]]] = []
        deployments = self.store.list("SpeculativeDeployment", None)
        for sd in deployments:
            facts = self._facts_of(sd)
            if facts is None:
                continue
            meta = sd["metadata"]
            arms = {
                arm: self.store.list("Pod", meta["namespace"], f"{LABEL_INSTANCE}={meta['name']},{LABEL_COMPONENT}={c}")
                for arm, c in ((CURRENT, RUNTIME), (CANARY, RUNTIME_CANARY))
            }
            pods = [p for p in arms[CURRENT] if scrapable(p)]
            if isinstance(facts, Facts) and facts.canary is not None and facts.canary.enabled and running(sd):
                canaries.append((sd, facts, arms))
                pods += [p for p in arms[CANARY] if scrapable(p)]
            if pods:
                work.append((sd, facts, pods))
        scraped = self.scraper.scrape(
            [
                (
                    p["metadata"]["uid"],
                    f"http://{p['status']['podIP']}:{facts.port}/metrics",
                    parser_of(facts),
                )
                for _, facts, pods in work
                for p in pods
            ]
        )
        live: set[str] = set()
        for sd, facts, pods in work:
            live.update(p["metadata"]["uid"] for p in pods)
            if isinstance(facts, CaptureFacts):
                self.capture.account(sd, facts, [scraped.get(p["metadata"]["uid"]) for p in pods], now)
            else:
                if facts.learning is not None:
                    self._account_samples(sd, facts.learning, [p["metadata"]["uid"] for p in pods], scraped)
                main = [p for p in pods if p["metadata"].get("labels", {}).get(LABEL_COMPONENT) == RUNTIME]
                self._account(sd, facts, main, scraped, now)
        for sd, facts, arms in canaries:
            assert facts.canary is not None  # for mypy: checked where listed
            live.update(p["metadata"]["uid"] for pods in arms.values() for p in pods)
            self.canary.account(sd, arms, scraped, now, facts.canary)
        self._samples = {uid: s for uid, s in self._samples.items() if uid in live}
        self.scraper.forget_gone(live)
        present = {(sd["metadata"]["namespace"], sd["metadata"]["name"]) for sd in deployments}
        self._forget_gone(present)
        self.canary.forget_gone({(sd["metadata"]["namespace"], sd["metadata"]["name"]) for sd, _, _ in canaries}, live)

    def _account_samples(
        self, sd: dict[str, Any], learning: DrafterFacts, uids: list[str], scraped: dict[str, Any]
    ) -> None:
        """The samples' figures to the drafter watch; each pod's speculation sample left in `scraped`."""
        pairs = [scraped.get(uid) for uid in uids]
        self.drafter.account(sd, learning, [pair[1] if pair else None for pair in pairs])
        for uid, pair in zip(uids, pairs, strict=True):
            scraped[uid] = pair[0] if pair else None

    def _facts_of(self, sd: dict[str, Any]) -> Facts | CaptureFacts | None:
        meta = sd["metadata"]
        key, version = (meta["namespace"], meta["name"]), (meta.get("uid"), meta.get("generation"))
        known = self._facts.get(key)
        if known is None or known[0] != version:
            known = self._facts[key] = (version, facts_of(sd))
        return known[1]

    def _account(
        self,
        sd: dict[str, Any],
        facts: Facts,
        pods: list[dict[str, Any]],
        scraped: dict[str, payoff.Sample | None],
        now: float,
    ) -> None:
        key = (sd["metadata"]["namespace"], sd["metadata"]["name"])
        window: dict[str, float] = {}
        seconds, counted, lengths, switched = [], 0, set(), False
        for pod in pods:
            uid = pod["metadata"]["uid"]
            sample = scraped.get(uid)
            if sample is None:
                continue  # unreachable this time: its next scrape covers both windows
            previous = payoff.advance(self._samples, uid, sample, now, window)
            if previous is None:
                continue
            seconds.append(now - previous[1])
            counted += 1
            switched |= previous[0].draft_len != sample.draft_len
            if sample.draft_len:
                lengths.add(sample.draft_len)
        if not counted or len(lengths) > 1:
            return  # no window yet, or pods mid-way through a draft length change: measure the next one
        draft_len = lengths.pop() if lengths else facts.draft_len
        # A new generation of the spec (another draft, another runtime) starts a new baseline.
        generation, state = self._activity.get(key, (facts.generation, guard.GuardState()))
        if generation != facts.generation:
            state = guard.GuardState()
        state = guard.observe(state, guard.window_of(window, draft_len), self.guard_policy)
        self._activity[key] = (facts.generation, state)
        rearmed = self.rearm.observe(sd, key, facts.rearm_cooldown, state.verdict, now)
        m, changed = self._measure(sd, key, facts, window, draft_len, counted, switched, now)
        changed |= rearmed
        self._publish(sd, key, facts, m, changed, active_condition(state), sum(seconds) / len(seconds), now)

    def _measure(
        self,
        sd: dict[str, Any],
        key: tuple[str, str],
        facts: Facts,
        window: dict[str, float],
        draft_len: int | None,
        pods: int,
        switched: bool,
        now: float,
    ) -> tuple[payoff.Measurement | None, bool]:
        """The window's Measurement (None: nothing drafted, or no draft length known), and whether the load
        model or the autopilot (specdec.feedback.autopilot) changed something from it."""
        if draft_len is None:
            return None, False
        # After a change of the draft length the counters of a window or two mix both lengths (requests in
        # flight, the route's times polled late): measure the cost and decide only on settled windows.
        settling = SETTLE_WINDOWS if switched else max(self._settling.get(key, 0) - 1, 0)
        self._settling[key] = settling
        if settling:
            window = {k: v for k, v in window.items() if k not in ("draft_seconds", "target_seconds")}
        lo, hi = facts.draft_len_range
        # A route reports its times on its own schedule (the front polls Triton's metrics): a window
        # without them keeps the cost last measured, which changes slowly, rather than falling back.
        fallback = self._measured_cost.get(key) or payoff.estimated_cost_ratio(facts.drafter, facts.target, facts.draft)
        load = self.load.observe(key, window)
        m = payoff.measure(window, draft_len, pods, hi, fallback)
        if m is None:
            return None, False
        if m.cost_source == "Measured" and not settling:
            self._measured_cost[key] = (m.cost_ratio, m.cost_source)
        decide = facts.auto and not settling
        changed = decide and self.autopilot.draft_len(sd, key, m, lo, hi, facts.restarts, now)
        fitted = self.load.update(key, m, window, load, now)
        if decide and facts.restarts and not changed:  # the Triton route's front applies the fit live
            changed = self.autopilot.schedule(sd, key, m.draft_len, load, self.load, now)
        return m, fitted or changed

    def _publish(
        self,
        sd: dict[str, Any],
        key: tuple[str, str],
        facts: Facts,
        m: payoff.Measurement | None,
        changed: bool,
        active: conditions.Cond,
        window_seconds: float,
        now: float,
    ) -> None:
        """Publish when a condition changed, the measurement moved (or is due for a refresh), or the autopilot
        chose: a window that measured nothing keeps the measurement published before."""
        break_even = self.load.break_even(*key)
        with self._guard:
            before = self._published.get(key)
            current = before if before is not None and before.generation == facts.generation else None
            status: dict[str, Any] | None
            if m is not None:
                status = with_break_even(speculation_status(m, conditions.now(), window_seconds), break_even)
                condition = speculation_condition(m, facts.auto)
            elif current is not None:
                status, condition = current.status, current.condition
            else:
                status, condition = None, NO_TRAFFIC
            if current is None:
                due = m is not None or active.status is not None
            else:
                due = changed or any(
                    _state(a) != _state(b) for a, b in ((current.condition, condition), (current.active, active))
                )
                if m is not None and status is not None:  # a measurement gives a status
                    due |= now - current.at >= self.refresh_seconds or _moved(current.status, status)
            if not due:
                return
            at = now if m is not None or current is None else current.at
            self._published[key] = Published(facts.generation, status, condition, at, active, self.rearm.record(key))
        was = before.condition if before is not None else None
        if condition.status is False and (was is None or was.status is not False):
            self.post_event(sd, condition.reason, condition.message, warning=True)  # `kubectl get events` shows it
        was = before.active if before is not None else None
        if active.status is False and (was is None or _state(was) != _state(active)):
            self.post_event(sd, active.reason, active.message, warning=True)
        elif active.status is True and was is not None and was.status is False:
            self.post_event(sd, "SpeculationResumed", active.message)
        self.enqueue(*key)

    def _forget_gone(self, present: set[tuple[str, str]]) -> None:
        with self._guard:
            forget_absent(present, self._published)
        self.rearm.forget_gone(present)
        self.autopilot.forget_gone(present)
        self.capture.forget_gone(present)
        self.drafter.forget_gone(present)
        self.load.forget_gone(present)
        forget_absent(present, self._measured_cost, self._settling, self._facts, self._activity)
