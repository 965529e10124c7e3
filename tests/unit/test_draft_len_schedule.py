"""draftLenSchedule beside maxConcurrency on every PyTorch-path mode (DecodingBaseConfig.draft_len_schedule):
emitted with integer batch sizes in order, exclusive with maxConcurrency, its smallest tier maxDraftLen and
none above it, and a tier of 0 refused where the drafter runs inside the target's engine (every mode but
ngram on the pinned release: TensorRT-LLM PR 16888), all before any pod starts."""

from __future__ import annotations

import pytest
import yaml

from specdec.admission.validation import parse_spec
from specdec.api.runtime_config import RuntimeConfig
from specdec.builders.serving import runtime_config_json
from specdec.plan import Problem
from specdec.runtime import trtllm_serve
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import spec

BLOCKS = {
    "ngram": {},
    "sa": {},
    "mtp": {"maxDraftLen": 4},
    "pard": {"draftModel": "hf://amd/PARD-Llama-3.2-1B"},
    "eagle3": {"draftModel": "hf://yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "maxDraftLen": 4},
    "dflash": {"draftModel": "hf://z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat"},
    "dspark": {"draftModel": "hf://deepseek-ai/dspark_qwen3_4b_block7"},
}


def with_schedule(mode: str, schedule: dict, **fields) -> dict:
    return spec(
        backend="pytorch", speculation={"mode": mode, mode: {**BLOCKS[mode], "draftLenSchedule": schedule, **fields}}
    )


@pytest.mark.parametrize("mode", sorted(BLOCKS))
def test_every_mode_emits_the_schedule_sorted_with_integer_batch_sizes(mode):
    config = make_plan(with_schedule(mode, {"32": 1, "4": 4, "8": 2})).runtime.speculative_config
    assert config["draft_len_schedule"] == {4: 4, 8: 2, 32: 1}
    assert list(config["draft_len_schedule"]) == [4, 8, 32] and "max_concurrency" not in config


@pytest.mark.parametrize("mode", sorted(set(BLOCKS) - {"ngram"}))
def test_a_zero_tier_is_refused_where_the_drafter_runs_in_the_target_engine(mode):
    problem = parse_spec(with_schedule(mode, {"4": 4, "16": 0}))
    assert isinstance(problem, Problem) and "tier of 0 leaves this mode's drafter stale" in problem.message


def test_ngram_may_end_on_a_zero_tier():
    config = make_plan(with_schedule("ngram", {"4": 4, "64": 0})).runtime.speculative_config
    assert config["draft_len_schedule"] == {4: 4, 64: 0}


@pytest.mark.parametrize(
    "schedule, fields, message",
    [
        ({"4": 4}, {"maxConcurrency": 8}, "set maxConcurrency"),
        ({"0": 4}, {}, "keys are batch sizes"),
        ({"4": 3, "8": 2}, {}, "smallest batch size drafts maxDraftLen"),
        ({"4": 4, "8": 5}, {}, "at most maxDraftLen"),
    ],
)
def test_schedules_tensorrt_llm_would_refuse_at_start_are_refused_first(schedule, fields, message):
    problem = parse_spec(with_schedule("sa", schedule, **fields))
    assert isinstance(problem, Problem) and message in problem.message


def test_the_runtime_yaml_keeps_batch_sizes_integers():
    """runtime.json (JSON) carries the schedule's keys as strings; llm_args.py's dict[int, int] gets integers."""
    result = make_plan(with_schedule("sa", {"8": 2, "4": 4}))
    config = RuntimeConfig.model_validate_json(runtime_config_json(result))
    options = yaml.safe_load(trtllm_serve.extra_options_yaml(config))
    assert options["speculative_config"]["draft_len_schedule"] == {4: 4, 8: 2}
