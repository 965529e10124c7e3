"""The CRD's CEL rules, evaluated offline: one rule, two enforcers.

The API server evaluates each model's `x-kubernetes-validations`; `specdec render`, the operator's
plan and the runtime evaluate the very same expressions with cel-python (a CEL implementation; the
Kubernetes extension functions we use are registered below). So a cross-field rule is written once,
as CEL, and cannot drift from its offline twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.evaluation import CELEvalError, Evaluator, Result

from specdec.schema import k8s


class _Quantity:
    """What Kubernetes' CEL `quantity(string)` returns, for the comparisons we use."""

    def __init__(self, text: Any):
        self.value = k8s.parse_quantity(str(text))


def _quantity(text: Any) -> _Quantity:
    return _Quantity(text)


def _is_greater_than(a: _Quantity, b: _Quantity) -> celtypes.BoolType:
    return celtypes.BoolType(a.value > b.value)


def _is_less_than(a: _Quantity, b: _Quantity) -> celtypes.BoolType:
    return celtypes.BoolType(a.value < b.value)


def _index_of(text: celtypes.StringType, sub: celtypes.StringType) -> celtypes.IntType:
    return celtypes.IntType(str(text).find(str(sub)))


# The Kubernetes CEL library functions our rules call (k8s.io/apiserver/pkg/cel/library: quantity;
# cel-go's strings extension: indexOf). A rule calling another one fails its unit tests.
KUBERNETES_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "indexOf": _index_of,
}


class _ShortCircuit(Evaluator):
    """cel-python evaluates both sides of `||` and `&&`; CEL lets an evaluation stop at a left side that
    decides (`true || x` is true and `false && x` false, whatever x, an error included), as the API server's
    cel-go does. Evaluating every side made a rule guarded by its mode or by an unset field (`mode != 'x' ||
    ...`) cost as much as the rule, and each spec's offline check grew with the modes' rules."""

    def _logical(self, tree: lark.Tree, operator: str, decides: bool) -> Result:
        if len(tree.children) != 2:
            return (
                self.visit_children(tree)[0]
                if len(tree.children) == 1
                else getattr(super(), "conditionalor" if operator == "_||_" else "conditionaland")(tree)
            )
        left = self.visit(tree.children[0])
        if isinstance(left, celtypes.BoolType) and bool(left) == decides:
            return left
        right = self.visit(tree.children[1])
        try:
            return self.activation.resolve_function(operator)(left, right)
        except TypeError as error:  # as cel-python's own
            value = CELEvalError(
                f"found no matching overload for {operator} applied to '({type(left)}, {type(right)})'",
                error.__class__,
                error.args,
                tree=tree,
            )
            value.__cause__ = error
            return value

    def conditionalor(self, tree: lark.Tree) -> Result:
        return self._logical(tree, "_||_", True)

    def conditionaland(self, tree: lark.Tree) -> Result:
        return self._logical(tree, "_&&_", False)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: celpy.Context) -> celtypes.Value:
        return _ShortCircuit(ast=self.ast, activation=self.new_activation()).evaluate(context)


@functools.cache
def _program(rule: str) -> celpy.Runner:
    environment = celpy.Environment(runner_class=_Runner)
    return environment.program(environment.compile(rule), functions=KUBERNETES_FUNCTIONS)


def mode_guard(mode: str) -> str:
    """The start of a rule on the whole spec that applies when `mode` is chosen (specdec.modes.mode): for a
    deployment of any other mode it holds there, and evaluation stops (`true || x`)."""
    return f"self.speculation.mode != '{mode}' || "


def transition_rule(rule: str) -> bool:
    """Rules on `oldSelf` compare with the stored object: only the API server can judge them."""
    return "oldSelf" in rule


def violations(rules: list[dict[str, str]], obj: dict[str, Any]) -> list[tuple[str, str]]:
    """(field path without the leading dot, message) of each rule `obj` (the wire form, defaults
    applied, as the API server sees `self`) breaks."""
    broken = []
    activation = {"self": celpy.json_to_cel(obj)}
    for rule in rules:
        if transition_rule(rule["rule"]):
            continue
        result: object
        try:
            result = _program(rule["rule"]).evaluate(activation)
        except celpy.CELEvalError:  # as at the API server, an evaluation error fails the rule
            result = False
        if not bool(result):
            broken.append((rule.get("fieldPath", "").lstrip("."), message(rule, obj)))
    return broken


def message(rule: dict[str, str], obj: dict[str, Any]) -> str:
    """What a refusal by `rule` of `obj` says: its messageExpression's value; as at the API server, its
    `message` where the expression fails or gives no text."""
    if "messageExpression" in rule:
        try:
            text = _program(rule["messageExpression"]).evaluate({"self": celpy.json_to_cel(obj)})
        except celpy.CELEvalError:
            text = None
        if isinstance(text, str) and text.strip():  # cel-python gives a str for `+` of strings
            return str(text)
    return rule["message"]
