"""Mode dspark (DSparkDecodingConfig on the PyTorch path): the speculative_config it emits has exactly the keys
and the literal of the pinned release's reference page (tests/runtime/data/trtllm_speculative_config.json),
TensorRT-LLM's defaults (unset fields come from the draft's config), and what it cannot serve refused
before any pod starts."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.modes import MODES
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import make_plan, make_problem
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())
DRAFT = "hf://deepseek-ai/dspark_qwen3_4b_block7"
CACHED_DRAFT = "/cache/models/deepseek-ai--dspark_qwen3_4b_block7/main"


def dspark(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "dspark", "dspark": {"draftModel": DRAFT, **fields}})


def test_defaults_leave_the_draft_config_in_charge():
    config = make_plan(dspark(maxDraftLen=7)).runtime.speculative_config
    assert config == {
        "decoding_type": "DSpark",
        "max_draft_len": 7,
        "speculative_model": CACHED_DRAFT,
        "attention_backend": "AUTO",
    }


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(
        dspark(
            maxDraftLen=7,
            blockSize=7,
            markovRank=256,
            markovHeadType="gated",
            maskTokenId=151669,
            targetLayerIds=[33, 34, 35],
            attentionBackend="CUTEDSL",
            maxConcurrency=8,
        )
    ).runtime.speculative_config
    entry = SPECULATIVE["decoding_types"]["DSpark"]
    assert entry["class"] == "DSparkDecodingConfig" and "1.4.0rc1" in entry["source"]
    assert set(config) <= {"decoding_type", *SPECULATIVE["base_fields"], *entry["fields"]}
    assert config == {
        "decoding_type": "DSpark",
        "max_draft_len": 7,
        "speculative_model": CACHED_DRAFT,
        "block_size": 7,
        "markov_rank": 256,
        "markov_head_type": "gated",
        "mask_token_id": 151669,
        "target_layer_ids": [33, 34, 35],
        "attention_backend": "CUTEDSL",
        "max_concurrency": 8,
    }


def test_markov_rank_zero_turns_the_head_off_and_is_emitted():
    assert make_plan(dspark(markovRank=0)).runtime.speculative_config["markov_rank"] == 0


def test_the_draft_is_fetched_into_the_cache():
    assert MODES["dspark"].drafting.drafter == "model" and MODES["dspark"].backends == ("pytorch",)
    assert DRAFT in {cache.spec.model for cache in make_plan(dspark()).model_caches}


def test_refused_before_any_pod_with_a_clear_message():
    on_tensorrt = parse_spec(spec(speculation={"mode": "dspark", "dspark": {"draftModel": DRAFT}}))
    assert isinstance(on_tensorrt, Problem) and "dspark is served by backend pytorch only" in on_tensorrt.message
    without = parse_spec(spec(backend="pytorch", speculation={"mode": "dspark", "dspark": {}}))
    assert isinstance(without, Problem) and "dspark needs its draft checkpoint" in without.message
    mismatch = parse_spec(dspark(maxDraftLen=4, blockSize=7))
    assert isinstance(mismatch, Problem) and "it equals maxDraftLen" in mismatch.message
    for bad in ({"markovHeadType": "lstm"}, {"markovRank": -1}, {"attentionBackend": "FA4"}, {"blockSize": 0}):
        assert isinstance(parse_spec(dspark(**bad)), Problem), bad


def test_the_target_as_its_own_draft_only_for_deepseek_v4():
    """Only DeepSeek-V4 checkpoints embed a DSpark draft (mtp.*): any other target named as draftModel is refused."""
    qwen = "hf://Qwen/Qwen3-4B"
    problem = make_problem(
        spec(backend="pytorch", target={"model": qwen}, speculation={"mode": "dspark", "dspark": {"draftModel": qwen}})
    )
    assert problem.reason == "InvalidSpec"
    assert "only a DeepseekV4ForCausalLM target holds a DSpark draft" in problem.message
    assert "Qwen/Qwen3-4B is Qwen3ForCausalLM" in problem.message
    make_plan(
        spec(
            backend="pytorch",
            target={"model": qwen},
            speculation={"mode": "dspark", "dspark": {"draftModel": DRAFT, "maxDraftLen": 7}},
        )
    )
