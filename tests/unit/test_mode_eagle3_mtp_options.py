"""Eagle3 and MTP options of the pinned release (their 1.4.0rc1 reference pages, in the key-set table): the
dynamic tree with its token budget, the captured layers and architecture of an EAGLE-3 head, vanilla MTP,
the thinking-phase tokens of relaxed acceptance and the suffix-automaton enhancer; the keys the page no
longer lists (eagle3_one_model, eagle_choices, greedy_sampling, posterior_threshold, mtp_eagle_one_model)
are never emitted."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())
HEAD = "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
GONE = {"eagle3_one_model", "eagle_choices", "greedy_sampling", "posterior_threshold", "mtp_eagle_one_model"}


def allowed(decoding_type: str) -> set[str]:
    return {"decoding_type", *SPECULATIVE["base_fields"], *SPECULATIVE["decoding_types"][decoding_type]["fields"]}


def eagle3(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "eagle3", "eagle3": {"draftModel": HEAD, **fields}})


def mtp(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "mtp", "mtp": fields})


def test_eagle3_every_option_within_the_pinned_key_set():
    config = make_plan(
        eagle3(
            maxDraftLen=6,
            useDynamicTree=True,
            dynamicTreeMaxTopK=10,
            maxTotalDraftTokens=60,
            eagle3ModelArch="mistral_large3",
            eagle3LayersToCapture=[28, 1, 15],
            saConfig={"threshold": 6},
        )
    ).runtime.speculative_config
    assert set(config) <= allowed("Eagle3") and not set(config) & GONE
    assert "1.4.0rc1" in SPECULATIVE["decoding_types"]["Eagle3"]["source"]
    assert not GONE & set(SPECULATIVE["decoding_types"]["Eagle3"]["fields"])
    assert config == {
        "decoding_type": "Eagle3",
        "max_draft_len": 6,
        "speculative_model": config["speculative_model"],
        "use_dynamic_tree": True,
        "dynamic_tree_max_topK": 10,
        "max_total_draft_tokens": 60,
        "eagle3_model_arch": "mistral_large3",
        "eagle3_layers_to_capture": [1, 15, 28],
        "sa_config": {"threshold": 6, "enable_global_pool": False},
    }


def test_eagle3_defaults_emit_nothing_extra():
    assert set(make_plan(eagle3()).runtime.speculative_config) == {
        "decoding_type",
        "max_draft_len",
        "speculative_model",
    }


def test_eagle3_tree_budget_outside_its_bounds_is_refused():
    for total in (5, 61):
        problem = parse_spec(
            eagle3(maxDraftLen=6, useDynamicTree=True, dynamicTreeMaxTopK=10, maxTotalDraftTokens=total)
        )
        assert isinstance(problem, Problem) and "maxTotalDraftTokens sizes a dynamic tree" in problem.message
    assert isinstance(parse_spec(eagle3(eagle3ModelArch="llama4")), Problem)


def test_mtp_every_option_within_the_pinned_key_set():
    config = make_plan(
        mtp(
            maxDraftLen=3,
            useDynamicTree=True,
            dynamicTreeMaxTopK=4,
            useMtpVanilla=True,
            saConfig={},
            relaxedAcceptance={"topK": 10, "delta": 0.6, "beginThinkingPhaseToken": 5, "endThinkingPhaseToken": 6},
        )
    ).runtime.speculative_config
    assert set(config) <= allowed("MTP") and not set(config) & GONE
    assert config == {
        "decoding_type": "MTP",
        "max_draft_len": 3,
        "use_dynamic_tree": True,
        "dynamic_tree_max_topK": 4,
        "use_mtp_vanilla": True,
        "sa_config": {"threshold": 4, "enable_global_pool": False},
        "use_relaxed_acceptance_for_thinking": True,
        "relaxed_topk": 10,
        "relaxed_delta": 0.6,
        "begin_thinking_phase_token": 5,
        "end_thinking_phase_token": 6,
    }


def test_mtp_relaxed_acceptance_thinking_tokens_default_to_tensorrt_llms():
    config = make_plan(mtp(relaxedAcceptance={})).runtime.speculative_config
    assert (config["begin_thinking_phase_token"], config["end_thinking_phase_token"]) == (128798, 128799)


def test_mtp_dynamic_tree_needs_a_draft_length():
    problem = parse_spec(mtp(useDynamicTree=True, dynamicTreeMaxTopK=4))
    assert isinstance(problem, Problem) and "useDynamicTree needs maxDraftLen" in problem.message
