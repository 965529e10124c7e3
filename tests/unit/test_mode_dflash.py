"""Mode dflash (DFlashDecodingConfig on the PyTorch path): the speculative_config it emits has exactly the keys
and the literal of the pinned release's reference page (tests/runtime/data/trtllm_speculative_config.json),
TensorRT-LLM's defaults, the draft checkpoint fetched into the cache like any model, and what it cannot
serve refused before any pod starts."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.modes import MODES
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import make_plan, make_problem
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())
DYNAMIC = {"max_concurrency", "acceptance_rate_window_size", "acceptance_rate_threshold"}
DRAFT = "hf://z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"
CACHED_DRAFT = "/cache/models/z-lab--LLaMA3.1-8B-Instruct-DFlash-UltraChat/main"


def dflash(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "dflash", "dflash": {"draftModel": DRAFT, **fields}})


def test_defaults_are_tensorrt_llms():
    config = make_plan(dflash()).runtime.speculative_config
    assert config == {
        "decoding_type": "DFlash",
        "max_draft_len": 4,
        "speculative_model": CACHED_DRAFT,
        "context_recompute_tail": 0,
        "attention_backend": "VANILLA",
        "skip_ctx_buffer_budget_check": False,
    }


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(
        dflash(
            maxDraftLen=15,
            maskTokenId=128256,
            targetLayerIds=[1, 9, 17, 25, 31],
            contextRecomputeTail=64,
            attentionBackend="TRTLLM",
            skipCtxBufferBudgetCheck=True,
            maxConcurrency=16,
            acceptanceRateWindowSize=100,
            acceptanceRateThreshold=0.2,
        )
    ).runtime.speculative_config
    entry = SPECULATIVE["decoding_types"]["DFlash"]
    assert entry["class"] == "DFlashDecodingConfig" and entry["backends"] == ["pytorch"]
    assert "1.4.0rc1" in entry["source"]
    assert set(config) <= {"decoding_type", *SPECULATIVE["base_fields"], *entry["fields"]}
    assert config == {
        "decoding_type": "DFlash",
        "max_draft_len": 15,
        "speculative_model": CACHED_DRAFT,
        "mask_token_id": 128256,
        "target_layer_ids": [1, 9, 17, 25, 31],
        "context_recompute_tail": 64,
        "attention_backend": "TRTLLM",
        "skip_ctx_buffer_budget_check": True,
        "max_concurrency": 16,
        "acceptance_rate_window_size": 100,
        "acceptance_rate_threshold": 0.2,
    }


def test_the_draft_is_a_model_of_its_own_fetched_into_the_cache():
    mode = MODES["dflash"]
    assert mode.backends == ("pytorch",) and mode.drafting.drafter == "model"
    result = make_plan(dflash(maxDraftLen=7))
    assert result.runtime.speculative_config["max_draft_len"] == 7 and result.engines == ()
    assert DRAFT in {cache.spec.model for cache in result.model_caches}


def test_refused_before_any_pod_with_a_clear_message():
    on_tensorrt = parse_spec(spec(speculation={"mode": "dflash", "dflash": {"draftModel": DRAFT}}))
    assert isinstance(on_tensorrt, Problem) and "dflash is served by backend pytorch only" in on_tensorrt.message
    without = parse_spec(spec(backend="pytorch", speculation={"mode": "dflash", "dflash": {}}))
    assert isinstance(without, Problem)
    assert "dflash needs its draft checkpoint, trained against this target: set draftModel" in without.message
    for bad in (
        {"attentionBackend": "CUTEDSL"},
        {"targetLayerIds": []},
        {"targetLayerIds": [-1]},
        {"contextRecomputeTail": -1},
        {"maskTokenId": -1},
        {"maxDraftLen": 0},
    ):
        assert isinstance(parse_spec(dflash(**bad)), Problem), bad


def test_target_layers_the_target_does_not_have_are_refused_before_any_pod():
    problem = make_problem(dflash(targetLayerIds=[1, 20, 40]))
    assert problem.reason == "InvalidSpec"
    assert "meta-llama/Llama-2-13b-hf has 40 layers (0 to 39), not 40" in problem.message
    make_plan(dflash(targetLayerIds=[1, 20, 39]))  # the last layer is fine
