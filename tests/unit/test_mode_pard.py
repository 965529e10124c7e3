"""Mode pard (PARDDecodingConfig on the PyTorch path): the speculative_config it emits has exactly the keys
and the literal read from TensorRT-LLM's llm_args.py (tests/runtime/data/trtllm_speculative_config.json),
the draft checkpoint is fetched into the cache like any model, and what it cannot serve is refused before
any pod starts."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.modes import MODES
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())
DYNAMIC = {"max_concurrency", "acceptance_rate_window_size", "acceptance_rate_threshold"}
DRAFT = "hf://amd/PARD-Llama-3.2-1B"
CACHED_DRAFT = "/cache/models/amd--PARD-Llama-3.2-1B/main"


def pard(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "pard", "pard": {"draftModel": DRAFT, **fields}})


def test_defaults_and_the_cached_draft():
    config = make_plan(pard()).runtime.speculative_config
    assert config == {"decoding_type": "PARD", "max_draft_len": 4, "speculative_model": CACHED_DRAFT}


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(
        pard(
            maxDraftLen=6,
            maskTokenId=128256,
            saConfig={"threshold": 5, "enableGlobalPool": True},
            maxConcurrency=16,
            acceptanceRateWindowSize=100,
            acceptanceRateThreshold=0.2,
        )
    ).runtime.speculative_config
    entry = SPECULATIVE["decoding_types"]["PARD"]
    assert entry["class"] == "PARDDecodingConfig" and entry["backends"] == ["pytorch"]
    assert set(config) == {
        "decoding_type",
        "max_draft_len",
        "speculative_model",
        "mask_token_id",
        "sa_config",
        *DYNAMIC,
    }
    assert set(config) <= {"decoding_type", *SPECULATIVE["base_fields"], *entry["fields"]}
    assert set(config["sa_config"]) == set(entry["sa_config_fields"])
    assert config == {
        "decoding_type": "PARD",
        "max_draft_len": 6,
        "speculative_model": CACHED_DRAFT,
        "mask_token_id": 128256,
        "sa_config": {"threshold": 5, "enable_global_pool": True},
        "max_concurrency": 16,
        "acceptance_rate_window_size": 100,
        "acceptance_rate_threshold": 0.2,
    }


def test_sa_enhancer_defaults_are_tensorrt_llms():
    assert make_plan(pard(saConfig={})).runtime.speculative_config["sa_config"] == {
        "threshold": 4,
        "enable_global_pool": False,
    }


def test_the_draft_is_a_model_of_its_own_fetched_into_the_cache():
    mode = MODES["pard"]
    assert mode.backends == ("pytorch",) and mode.drafting.drafter == "model"
    result = make_plan(pard(maxDraftLen=7))
    assert result.runtime.speculative_config["max_draft_len"] == 7 and result.engines == ()
    assert DRAFT in {cache.spec.model for cache in result.model_caches}


def test_refused_before_any_pod_with_a_clear_message():
    on_tensorrt = parse_spec(spec(speculation={"mode": "pard", "pard": {"draftModel": DRAFT}}))
    assert isinstance(on_tensorrt, Problem) and "pard is served by backend pytorch only" in on_tensorrt.message
    without = parse_spec(spec(backend="pytorch", speculation={"mode": "pard", "pard": {}}))
    assert isinstance(without, Problem)
    assert "pard needs its parallel draft checkpoint: set draftModel" in without.message
    assert isinstance(parse_spec(pard(maskTokenId=-1)), Problem)
    assert isinstance(parse_spec(pard(saConfig={"threshold": 0})), Problem)
    assert isinstance(parse_spec(pard(maxDraftLen=0)), Problem)
