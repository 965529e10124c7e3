"""speculation.rearm: a rolling restart of the runtime pods when they stopped drafting under traffic.

The speculation monitor hands every window's SpeculationActive verdict to `Rearm.observe`; once NotDrafting
has lasted the cool-down, and the last restart is at least that long ago (`speculation_guard.rearm_due`), a
restart is asked for: a new `status.rearm` record (restarts, lastRestartAt), which the monitor publishes
and the reconciler writes to status; the runtime Deployment's pod template carries lastRestartAt as an
annotation (specdec.reconcile.runtime_applier), so its change is one rolling restart. Status is the record: after
a restart of the operator the last restart is read from it.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from specdec import conditions
from specdec.feedback.forget import forget_absent
from specdec.speculation import guard

Key = tuple[str, str]


class Rearm:
    def __init__(self, post_event: Callable[..., None], wall_clock: Callable[[], float]):
        self.post_event = post_event
        self.wall_clock = wall_clock  # to place status' lastRestartAt on the monitor's clock
        self._since: dict[Key, float] = {}  # when NotDrafting began
        self._last: dict[Key, tuple[float, dict[str, Any]]] = {}  # the last restart: when, its status.rearm

    def record(self, key: Key) -> dict[str, Any] | None:
        """status.rearm as this operator last asked for it (None: it asked for none)."""
        return self._last[key][1] if key in self._last else None

    def observe(self, sd: dict[str, Any], key: Key, cooldown: float | None, verdict: str | None, now: float) -> bool:
        """Whether a rolling restart is asked for now; `cooldown` None: speculation.rearm is off."""
        if verdict != guard.NOT_DRAFTING:
            self._since.pop(key, None)
            return False
        since = self._since.setdefault(key, now)
        if cooldown is None:
            return False
        last = self._last.get(key) or self._in_status(sd, now)
        if not guard.rearm_due(since, last[0] if last else None, now, cooldown):
            return False
        record = {"restarts": (last[1].get("restarts") or 0) + 1 if last else 1, "lastRestartAt": conditions.now()}
        self._last[key] = (now, record)
        self.post_event(
            sd,
            "SpeculationRearmed",
            f"no draft tokens under traffic for {now - since:.0f} s (speculation.rearm.cooldownSeconds "
            f"{cooldown:.0f}): rolling restart {record['restarts']} of the runtime pods, whose new "
            "processes speculate again; if it recurs, the NotDrafting Event says where to look",
        )
        return True

    def _in_status(self, sd: dict[str, Any], now: float) -> tuple[float, dict[str, Any]] | None:
        record = (sd.get("status") or {}).get("rearm") or {}
        try:
            at = datetime.datetime.fromisoformat(str(record.get("lastRestartAt")).replace("Z", "+00:00"))
        except ValueError:
            return None
        return now - (self.wall_clock() - at.timestamp()), record

    def forget_gone(self, present: set[Key]) -> None:
        forget_absent(present, self._since, self._last)
