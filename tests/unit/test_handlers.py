"""The operator's kopf wiring."""

from __future__ import annotations

import kopf

from specdec import handlers
from specdec.api import base, cel
from specdec.plan import Plan, _parse_canonical, plan
from tests.unit.helpers import EXAMPLE_70B, SETTINGS, load_example


def test_only_event_handlers_so_no_diff_base_is_needed():
    # handlers.NoDiffBase skips kopf's per-event copy of every object: right only while no handler diffs
    # (on.create, on.update, on.field, on.resume, on.delete, daemons, timers).
    registry = kopf.get_default_registry()
    assert list(registry._watching.get_all_handlers())
    assert not list(registry._changing.get_all_handlers()) and not list(registry._spawning.get_all_handlers())
    assert handlers.NoDiffBase().build(body={"spec": {}}) is None


def test_after_the_warm_up_an_example_s_first_plan_compiles_no_cel_rule():
    _parse_canonical.cache_clear()  # as in a new process: nothing parsed, judged or compiled
    base._broken.cache_clear()
    cel._program.cache_clear()
    handlers._warm_up(SETTINGS)
    compiled = cel._program.cache_info().currsize
    assert compiled > 10  # the models' rules, compiled once each
    sd = load_example(EXAMPLE_70B)
    sd["metadata"].update(name="another", namespace="ns")
    assert isinstance(plan(sd, SETTINGS), Plan)
    assert cel._program.cache_info().currsize == compiled


def test_a_failing_warm_up_does_not_stop_the_operator_s_start(monkeypatch, caplog):
    def broken(*_args, **_kwargs):
        raise RuntimeError("a bug in plan()")
    monkeypatch.setattr(handlers, "plan", broken)
    handlers._warm_up(SETTINGS)  # returns
    assert "warming up plan()" in caplog.text and "a bug in plan()" in caplog.text
