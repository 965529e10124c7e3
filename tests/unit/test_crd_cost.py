"""What one mode more costs a write of another mode's SpeculativeDeployment: the CEL rules the API server
evaluates for it gain only the new mode's guards, which hold at their first comparison (cel-go stops there).
bench/write_cost.py measures the same in CPU (`--crds full,plus-toy`)."""

from __future__ import annotations

import functools
from typing import Any

from bench.crd_variants import ROOT, as_stored, evaluated_rules, openapi_schema, sd_crd

from specdec.schema import cel
from tests.unit.helpers import load_example


@functools.cache
def _schema(variant: str) -> dict[str, Any]:
    return openapi_schema(sd_crd(variant))


def _stored(stem: str) -> dict[str, Any]:
    return as_stored(load_example(stem))


BACKEND_RULE = "!(self.speculation.mode in {"  # specdec.modes.backend_rule: one for every mode


def _guard(rule: str) -> str | None:
    """The part of a rule that decides it for a deployment of another mode: `mode != 'x'` of a mode's
    rule on the whole spec, `mode == 'x'` of the rule that its block is set exactly when it is chosen, the
    mode not among those one backend alone serves of the backend rule."""
    if rule.startswith(BACKEND_RULE):
        return rule.split(" || ")[0]
    for guard in (cel.mode_guard("toy"), "self.mode == 'toy' ? "):
        if rule.startswith(guard):
            return guard.removesuffix(" || ").removesuffix(" ? ")
    return None


def test_one_mode_more_adds_only_guards_that_decide_at_once():
    obj = _stored("llama-2-13b-draft-7b-logits")
    before = evaluated_rules(_schema("full"), obj)
    after = evaluated_rules(_schema("plus-toy"), obj)
    added = [(path, rule) for path, rule in after if (path, rule) not in before]
    removed = [(path, rule) for path, rule in before if (path, rule) not in after]
    # the one backend rule gains the new mode's entry; no other rule changes
    assert [rule["rule"][: len(BACKEND_RULE)] for _, rule in removed] == [BACKEND_RULE]
    assert len(added) == 3, added  # the backend rule, its rule on the whole spec, its block exactly when chosen
    for path, rule in added:
        guard = _guard(rule["rule"])
        assert guard, f"{path}: {rule['rule']} is evaluated in full for every mode's deployments"
        node = obj if path == "" else obj["spec"] if path == ".spec" else obj["spec"]["speculation"]
        # the guard alone decides the rule: `mode != 'toy'` true, or the ternary's `mode == 'toy'` false
        assert cel.violations([{"rule": guard if "==" not in guard else f"!({guard})", "message": ""}], node) == []


def test_a_write_of_a_mode_evaluates_its_own_rules():
    """The count above is not vacuous: the example's own mode's rules are among those evaluated."""
    rules = [rule["rule"] for _, rule in evaluated_rules(_schema("full"), _stored("llama-2-13b-draft-7b-logits"))]
    assert any(r.startswith(cel.mode_guard("draftTarget")) for r in rules)
    assert any(r.startswith("self.mode == 'draftTarget' ? ") for r in rules)


def test_the_cel_cost_tool_runs_the_local_clusters_validator():
    """bench/cel_cost measures kube-apiserver's CEL validator at the version the local cluster runs."""
    from specdec_dev.toolchain import KUBERNETES_VERSION

    staging = "v0." + KUBERNETES_VERSION.removeprefix("v1.")
    go_mod = (ROOT / "bench" / "cel_cost" / "go.mod").read_text()
    for module in ("k8s.io/apiextensions-apiserver", "k8s.io/apiserver", "k8s.io/apimachinery"):
        assert f"\t{module} {staging}\n" in go_mod, module
