"""The API's validation rules, offline: pydantic (`parse_spec`) and the generated CRD agree.

`invalid_specs.INVALID_SPECS` is the one table; the cluster tests send the same entries to a real
API server.
"""

from __future__ import annotations

import pytest

from specdec.admission.validation import parse_spec
from specdec.api import models
from specdec.plan import Problem
from specdec.schema.openapi import schema_errors
from tests.unit.helpers import (
    EXAMPLES,
    SD_CRD,
    crd_schema,
    load_example,
    make_plan,
    reported,
    schema_nodes,
    validations,
)
from tests.unit.invalid_specs import CEL, INVALID_SPECS, LIST_SET, VALID_SPECS, draft_target, redrafter, spec

IDS = [entry[0] for entry in INVALID_SPECS]
SIMPLE = [entry for entry in INVALID_SPECS if entry[0] not in CEL | LIST_SET]


def spec_schema() -> dict:
    return crd_schema(SD_CRD)["properties"]["spec"]


def test_table_is_well_formed():
    assert len(set(IDS)) == len(IDS), "duplicate ids"
    assert CEL | LIST_SET <= set(IDS), "CEL/LIST_SET name unknown entries"
    for entry_id, raw, field in INVALID_SPECS:
        assert isinstance(raw, dict) and raw.get("target"), entry_id
        assert field, entry_id


def test_table_base_spec_is_valid():
    """The invalid entries are small edits of specs that are valid without the edit."""
    for raw in (spec(), spec(speculation=draft_target()), spec(speculation=redrafter())):
        assert isinstance(parse_spec(raw), models.SpeculativeDeploymentSpec), raw


@pytest.mark.parametrize("entry_id,raw,field", INVALID_SPECS, ids=IDS)
def test_parse_spec_refuses_and_names_the_field(entry_id, raw, field):
    problem = parse_spec(raw)
    assert isinstance(problem, Problem), f"{entry_id} was accepted"
    assert problem.reason == "InvalidSpec"
    assert field in problem.message, problem.message


@pytest.mark.parametrize(
    "entry_id,raw,field", [e for e in INVALID_SPECS if e[0] in CEL], ids=sorted(CEL, key=IDS.index)
)
def test_cel_entry_is_refused_offline_by_its_rule(entry_id, raw, field):
    """The CRD rule the offline check evaluated: its message is the one reported, and the
    path the API server reports (the rule's node plus its fieldPath), or else its message, names the field."""
    message = parse_spec(raw).message
    twins = [(path, rule) for path, rule in validations(spec_schema()) if reported(rule, raw, path) in message]
    assert twins, f"no CEL rule with the message of: {message}"
    assert any(field in path + rule.get("fieldPath", "") or field in rule["message"] for path, rule in twins), twins


def test_every_cel_rule_has_a_table_entry():
    """No CEL rule without an invalid spec exercising it (through the message the offline check reports)."""
    refused = [(raw, parse_spec(raw).message) for entry_id, raw, _ in INVALID_SPECS if entry_id in CEL]
    for path, rule in validations(spec_schema()):
        assert any(reported(rule, raw, path) in m for raw, m in refused), f"CEL rule at spec{path} untested: {rule}"


def test_cel_field_paths_name_existing_fields():
    for path, node in schema_nodes(spec_schema()):
        for rule in node.get("x-kubernetes-validations") or []:
            target = node
            for part in rule.get("fieldPath", "").strip(".").split("."):
                if part:
                    assert part in target.get("properties", {}), f"spec{path}: fieldPath {rule['fieldPath']}"
                    target = target["properties"][part]


@pytest.mark.parametrize("entry_id", sorted(LIST_SET))
def test_list_set_entries_rely_on_a_set_list(entry_id):
    field = dict((e[0], e[2]) for e in INVALID_SPECS)[entry_id]
    sets = [
        path
        for path, node in schema_nodes(spec_schema())
        if path.endswith("." + field) and node.get("x-kubernetes-list-type") == "set"
    ]
    assert ".target.devices" in sets and ".speculation.draftTarget.draft.devices" in sets, sets


@pytest.mark.parametrize("entry_id,raw,field", SIMPLE, ids=[e[0] for e in SIMPLE])
def test_crd_schema_refuses_simple_violations(entry_id, raw, field):
    """Bounds, enums and patterns live in the OpenAPI schema itself (no CEL needed)."""
    errors = schema_errors(spec_schema(), raw)
    assert errors, f"{entry_id} passes the CRD schema"
    assert any(field in e.split(":")[0] for e in errors), errors


@pytest.mark.parametrize("entry_id,raw", VALID_SPECS, ids=[e[0] for e in VALID_SPECS])
def test_valid_specs_pass_pydantic_and_the_crd_schema(entry_id, raw):
    """Near the edges of the rules above, still valid (the cluster tests send them to the API server)."""
    assert isinstance(parse_spec(raw), models.SpeculativeDeploymentSpec), parse_spec(raw)
    assert schema_errors(spec_schema(), raw) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_parse_and_fit_the_crd_schema(path):
    obj = load_example(path.stem)
    assert obj["apiVersion"] == models.API_VERSION and obj["kind"] == "SpeculativeDeployment"
    assert isinstance(parse_spec(obj["spec"]), models.SpeculativeDeploymentSpec)
    assert schema_errors(spec_schema(), obj["spec"]) == []


def test_defaults_of_a_minimal_spec():
    parsed = parse_spec(spec())
    assert parsed.speculation.mode == "none"
    assert parsed.backend == "tensorrt"
    assert parsed.runtime.replicas == 1
    assert parsed.runtime.kv_cache.enable_block_reuse is True
    assert parsed.target.tensor_parallel_size == 1 and parsed.target.effective_devices == [0]
    assert parsed.target.quantization == "none" and parsed.target.effective_kv_cache_dtype == "auto"


def test_defaults_of_redrafter():
    rd = parse_spec(spec(speculation=redrafter())).speculation.redrafter
    assert (rd.num_beams, rd.draft_len_per_beam, rd.greedy, rd.temperature) == (5, 5, True, None)


def test_max_draft_len_defaults_to_draft_len():
    parsed = parse_spec(spec(speculation=draft_target(draftLen=6)))
    assert parsed.speculation.draft_target.max_draft_len is None
    assert parsed.speculation.draft_target.effective_max_draft_len == 6
    p = make_plan(spec(speculation=draft_target(draftLen=6)))
    target = next(e for e in p.engines if e.role == "target")
    assert target.spec.recipe.max_draft_len == 6
    assert p.runtime.draft_target.max_draft_len == 6


def test_fp8_quantization_defaults_kv_cache_to_fp8():
    parsed = parse_spec(spec(target={"model": "hf://a/b", "quantization": "fp8"}))
    assert parsed.target.effective_kv_cache_dtype == "fp8"


@pytest.mark.parametrize(
    "json_path,default",
    [
        (".backend", "tensorrt"),
        (".speculation.mode", "none"),
        (".runtime.replicas", 1),
        (".runtime.kvCache.enableBlockReuse", True),
        (".speculation.redrafter.numBeams", 5),
        (".speculation.redrafter.draftLenPerBeam", 5),
        (".speculation.redrafter.greedy", True),
        (".target.tensorParallelSize", 1),
    ],
)
def test_crd_defaults_match_pydantic(json_path, default):
    node = spec_schema()
    for part in json_path.strip(".").split("."):
        node = node["properties"][part]
    assert node["default"] == default


@pytest.mark.parametrize("block", [".speculation", ".runtime", ".runtime.kvCache", ".engine", ".build", ".cache"])
def test_crd_defaults_of_omitted_blocks_match_pydantic(block):
    """An omitted block defaults (in the API server) to what pydantic fills in, so nested defaults
    and the CEL rules reading them (e.g. `self.runtime.kvCache.enableBlockReuse`) see the same values."""
    node, value = spec_schema(), parse_spec(spec())
    for part in block.strip(".").split("."):
        node = node["properties"][part]
        value = getattr(value, {"kvCache": "kv_cache"}.get(part, part))
    assert "default" in node, f"spec{block} has no default"
    assert node["default"] == value.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert schema_errors(node, node["default"]) == []


def test_crd_default_of_runtime_enables_block_reuse():
    runtime = spec_schema()["properties"]["runtime"]
    assert runtime["default"]["kvCache"]["enableBlockReuse"] is True
    assert runtime["default"]["replicas"] == 1


def test_parse_spec_refuses_snake_case_field_names():
    raw = {"target": {"model": "hf://a/b", "tensor_parallel_size": 2}}
    assert schema_errors(spec_schema(), raw) == [".target.tensor_parallel_size: unknown field"]
    assert isinstance(parse_spec(raw), Problem)


def test_parse_spec_refuses_strings_for_integers():
    raw = spec(target={"model": "hf://a/b", "tensorParallelSize": "2"})
    assert schema_errors(spec_schema(), raw) == [".target.tensorParallelSize: not integer"]
    assert isinstance(parse_spec(raw), Problem)
    raw = spec(speculation=draft_target(draftLen="4"))  # int-or-string: a string must be "auto"
    assert schema_errors(spec_schema(), raw) == [".speculation.draftTarget.draftLen: does not match pattern"]
    assert isinstance(parse_spec(raw), Problem)
