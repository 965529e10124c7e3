"""The operator's kopf wiring."""

from __future__ import annotations

import kopf

from specdec import handlers


def test_only_event_handlers_so_no_diff_base_is_needed():
    # handlers.NoDiffBase skips kopf's per-event copy of every object: right only while no handler diffs
    # (on.create, on.update, on.field, on.resume, on.delete, daemons, timers).
    registry = kopf.get_default_registry()
    assert list(registry._watching.get_all_handlers())
    assert not list(registry._changing.get_all_handlers()) and not list(registry._spawning.get_all_handlers())
    assert handlers.NoDiffBase().build(body={"spec": {}}) is None
