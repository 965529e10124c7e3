"""The fuzz library without a cluster: seeded mutants, and the settle invariant's judgement."""

from __future__ import annotations

import pytest

from tests.faults import fuzz


def test_mutants_are_reproducible_described_and_cover_every_category():
    first, again = fuzz.mutants(200, seed=5), fuzz.mutants(200, seed=5)
    assert [m.body for m in first] == [m.body for m in again]
    assert [m.body for m in first] != [m.body for m in fuzz.mutants(200, seed=6)]
    assert {m.category for m in first} == {name for name, _, _ in fuzz.MUTATORS}
    assert all(m.description and m.body != fuzz.load_examples()[m.example] for m in first)
    assert len({m.name for m in first if m.category != "name"}) == len([m for m in first if m.category != "name"])


def test_prepared_mutants_hold_no_gpus_and_share_no_engines():
    ms = [
        m
        for m in fuzz.mutants(100, seed=1)
        if m.path[:2] not in (("spec", "runtime"), ("spec", "engine"))
        and isinstance(m.body.get("spec"), dict)
        and isinstance(m.body["spec"].get("runtime", {}), dict)
        and isinstance(m.body["spec"].get("engine", {}), dict)
    ]
    prepared = [fuzz.prepare_for_creation(m, i).body for i, m in enumerate(ms)]
    assert all(b["spec"]["runtime"]["replicas"] == 0 for b in prepared)
    assert len({b["spec"]["engine"]["maxBatchSize"] for b in prepared}) == len(prepared)


def sd(status: dict | None, generation: int = 2) -> dict:
    return {"metadata": {"name": "x", "generation": generation}, **({"status": status} if status else {})}


def ready(status: str, reason: str, message: str = "something") -> dict:
    return {
        "observedGeneration": 2,
        "phase": "Whatever",
        "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}],
    }


@pytest.mark.parametrize(
    "obj,problem",
    [
        (sd(ready("True", "Ready")), None),
        (sd(ready("False", "BuildFailed", "step build failed")), None),
        (sd(ready("False", "InvalidSpec", "spec.x: bad")), None),
        (sd(None), "no status"),
        (sd({**ready("True", "Ready"), "observedGeneration": 1}), "stale status"),
        (sd({**ready("True", "Ready"), "phase": None}), "no phase"),
        (sd({"observedGeneration": 2, "phase": "Building", "conditions": []}), "no Ready condition"),
        (sd(ready("False", "EnginesBuilding", "target: Pending")), "progress reason"),
        (sd(ready("False", "RollingOut")), "progress reason"),
        (sd(ready("False", "JobPending")), "progress reason"),
        (sd(ready("False", "BuildFailed", " ")), "without a message"),
        (sd(ready("Unknown", "Whatever")), "Ready=Unknown"),
    ],
)
def test_violation(obj, problem):
    found = fuzz.violation(obj)
    assert (found is None) if problem is None else (found is not None and problem in found)


def test_sample_covers_every_category_then_follows_what_was_accepted():
    accepted = fuzz.mutants(300, seed=2)
    chosen = fuzz.sample(accepted, 30, seed=2)
    assert len(chosen) == 30 and len({m.name for m in chosen}) == 30
    per_category = {c: sum(m.category == c for m in chosen) for c in {m.category for m in accepted}}
    assert min(per_category.values()) >= 2
    assert per_category["pod-refuses"] == max(per_category.values())  # the largest share of the mutants
    assert chosen == fuzz.sample(accepted, 30, seed=2)
