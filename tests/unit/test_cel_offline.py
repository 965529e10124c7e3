"""The offline CEL evaluator (specdec.schema.cel) stops at a left side of `||` or `&&` that decides, as the API
server's cel-go does, and otherwise gives CEL's commutative answers."""

from __future__ import annotations

import pytest

from specdec.schema import cel

MISSING = "self.absent.field == 1"  # an error: no such key


@pytest.mark.parametrize(
    "rule,holds",
    [
        (f"true || {MISSING}", True),
        (f"{MISSING} || true", True),
        (f"false || {MISSING}", False),  # an evaluation error fails the rule, as at the API server
        (f"false && {MISSING}", False),
        (f"{MISSING} && false", False),
        (f"true && {MISSING}", False),
        ("self.a == 1 || self.a == 2", True),
        ("self.a == 2 || self.a == 3", False),
        ("self.a == 1 && (self.b == 'x' || self.b == 'y')", True),
        ("self.a == 1 && !(self.b == 'x' || self.b == 'y')", False),
        ("self.a == 1 ? self.b == 'x' : " + MISSING, True),
    ],
)
def test_logical_operators(rule, holds):
    assert cel.violations([{"rule": rule, "message": "m"}], {"a": 1, "b": "x"}) == ([] if holds else [("", "m")])


def test_a_decided_left_side_skips_the_right():
    """The right side would take one evaluation per list element: a left side that decides spares them."""
    big = {"items": list(range(2000))}
    rule = {"rule": "true || self.items.all(i, self.items.exists_one(j, j == i))", "message": "m"}
    assert cel.violations([rule], big) == []
    assert cel.violations([{**rule, "rule": rule["rule"].replace("true ||", "false ||")}], {"items": [1, 1]}) == [
        ("", "m")
    ]
