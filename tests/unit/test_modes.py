"""The speculation modes' registry: one module per mode feeds the API union, the CRD, plan() and the
runtime configuration."""

from __future__ import annotations

import pytest

from specdec.api.models import SpeculationSpec, SpeculativeDeploymentSpec
from specdec.modes import MODES
from specdec.schema import cel
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import TARGET, eagle3, spec


def test_the_api_union_is_the_registry():
    schema = SpeculationSpec.model_json_schema(by_alias=True)
    assert schema["properties"]["mode"]["enum"] == list(MODES)
    assert set(schema["properties"]) - {"mode", "rearm"} == {m.name for m in MODES.values() if m.block}


@pytest.mark.parametrize("mode", [m for m in MODES.values() if len(m.backends) == 1], ids=lambda m: m.name)
def test_a_mode_one_backend_serves_is_refused_on_the_other_saying_so(mode):
    """One rule for every such mode (specdec.modes.backend_rule); its message names the chosen mode."""
    other = next(b for b in ("tensorrt", "pytorch") if b not in mode.backends)
    rules = SpeculativeDeploymentSpec.model_config["json_schema_extra"]["x-kubernetes-validations"]
    refused = cel.violations(rules, {"backend": other, "speculation": {"mode": mode.name}})
    assert ("speculation.mode", f"{mode.name} is served by backend {mode.backends[0]} only") in refused
    assert ("speculation.mode", f"{mode.name} is served by backend {mode.backends[0]} only") not in cel.violations(
        rules, {"backend": mode.backends[0], "speculation": {"mode": mode.name}}
    )


@pytest.mark.parametrize("mode", [m for m in MODES.values() if m.pytorch], ids=lambda m: m.name)
def test_pytorch_modes_are_served_by_pytorch(mode):
    """Their keys and literals are checked against TensorRT-LLM's in tests/runtime/test_trtllm_serve.py."""
    assert "pytorch" in mode.backends


def test_eagle3_plan_mounts_a_pvc_draft_head_and_names_it_in_speculative_config():
    p = make_plan(
        spec(
            backend="pytorch",
            speculation=eagle3(
                draftModel="pvc://heads/eagle3-8b", maxDraftLen=4, useDynamicTree=True, dynamicTreeMaxTopK=8
            ),
        )
    )
    assert p.model_claims == ("heads",) and p.engines == ()
    assert p.runtime.speculative_config == {
        "decoding_type": "Eagle3",
        "max_draft_len": 4,
        "speculative_model": "/models/heads/eagle3-8b",
        "use_dynamic_tree": True,
        "dynamic_tree_max_topK": 8,
    }


def test_dynamic_speculation_settings_reach_the_speculative_config():
    p = make_plan(
        spec(
            backend="pytorch",
            speculation={
                "mode": "ngram",
                "ngram": {"maxConcurrency": 16, "acceptanceRateWindowSize": 200, "acceptanceRateThreshold": 0.3},
            },
        )
    )
    config = p.runtime.speculative_config
    assert (config["max_concurrency"], config["acceptance_rate_window_size"], config["acceptance_rate_threshold"]) == (
        16,
        200,
        0.3,
    )
    assert config["max_matching_ngram_size"] == 2  # TensorRT-LLM's default, restated


def test_mtp_without_max_draft_len_leaves_it_to_the_checkpoint():
    p = make_plan(spec(backend="pytorch", target={"model": TARGET}, speculation={"mode": "mtp", "mtp": {}}))
    assert p.runtime.speculative_config == {"decoding_type": "MTP"}


def test_the_engine_path_has_no_speculative_config():
    assert make_plan(spec()).runtime.speculative_config is None


def test_the_engine_recipe_and_the_runtime_union_are_the_registry():
    from specdec.api.runtime_config import RuntimeConfig
    from specdec.api.shared_objects import EngineRecipe

    schema = EngineRecipe.model_json_schema(by_alias=True)
    assert schema["properties"]["speculativeDecodingMode"]["enum"] == [
        "none",
        *(m.engine.decoding_mode for m in MODES.values() if m.engine),
    ]
    assert {m.field for m in MODES.values() if m.engine and m.engine.engine_recipe} <= set(EngineRecipe.model_fields)
    union = RuntimeConfig.model_json_schema(by_alias=True)["$defs"]
    for mode in (m for m in MODES.values() if m.runtime):
        assert mode.runtime.block.model_fields["mode"].default == mode.name  # its tag
        assert mode.runtime.block.__name__ in union
