"""Mode sa (SADecodingConfig on the PyTorch path): the speculative_config it emits has exactly the keys
and the literal read from TensorRT-LLM's llm_args.py (tests/runtime/data/trtllm_speculative_config.json),
TensorRT-LLM's defaults, and what it cannot serve is refused before any pod starts."""

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


def sa(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "sa", "sa": fields})


def test_defaults_are_tensorrt_llms():
    config = make_plan(sa()).runtime.speculative_config
    assert config == {
        "decoding_type": "SA",
        "max_draft_len": 4,
        "max_matching_ngram_size": -1,
        "enable_global_pool": False,
    }


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(
        sa(
            maxDraftLen=6,
            maxMatchingNgramSize=3,
            enableGlobalPool=True,
            maxConcurrency=16,
            acceptanceRateWindowSize=100,
            acceptanceRateThreshold=0.2,
        )
    ).runtime.speculative_config
    assert SPECULATIVE["decoding_types"]["SA"]["class"] == "SADecodingConfig"
    assert set(config) == {"decoding_type", "max_draft_len", "max_matching_ngram_size", "enable_global_pool", *DYNAMIC}
    verified = {"decoding_type", *SPECULATIVE["base_fields"], *SPECULATIVE["decoding_types"]["SA"]["fields"]}
    assert set(config) <= verified
    assert config == {
        "decoding_type": "SA",
        "max_draft_len": 6,
        "max_matching_ngram_size": 3,
        "enable_global_pool": True,
        "max_concurrency": 16,
        "acceptance_rate_window_size": 100,
        "acceptance_rate_threshold": 0.2,
    }


def test_the_mode_drafts_by_lookup_with_its_configured_length():
    mode = MODES["sa"]
    assert mode.backends == ("pytorch",) and mode.drafting.drafter == "lookup"
    assert make_plan(sa(maxDraftLen=7)).runtime.speculative_config["max_draft_len"] == 7
    assert make_plan(sa()).engines == ()


def test_refused_before_any_pod_with_a_clear_message():
    on_tensorrt = parse_spec(spec(speculation={"mode": "sa", "sa": {}}))
    assert isinstance(on_tensorrt, Problem) and "sa is served by backend pytorch only" in on_tensorrt.message
    zero = parse_spec(sa(maxMatchingNgramSize=0))
    assert isinstance(zero, Problem) and "maxMatchingNgramSize is -1 (the longest match)" in zero.message
    pool = parse_spec(sa(enableGlobalPool=True, maxMatchingNgramSize=65))
    assert isinstance(pool, Problem)
    assert "with enableGlobalPool, maxMatchingNgramSize is -1 or at most 64" in pool.message
    assert isinstance(parse_spec(sa(maxMatchingNgramSize=-2)), Problem)
    assert not isinstance(parse_spec(sa(enableGlobalPool=True, maxMatchingNgramSize=64)), Problem)
    assert not isinstance(parse_spec(sa(maxMatchingNgramSize=200)), Problem)  # fixed size, no global pool
