"""Mode auto (AutoDecodingConfig on the PyTorch path): the speculative_config it emits is exactly the
literal read from TensorRT-LLM's llm_args.py (tests/runtime/data/trtllm_speculative_config.json), which
has no field of its own and ignores the ones it inherits; it has no block, and backend tensorrt is refused."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.api.models import SpeculationSpec
from specdec.modes import MODES
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import make_plan
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(spec(backend="pytorch", speculation={"mode": "auto"})).runtime.speculative_config
    known = SPECULATIVE["decoding_types"]["AUTO"]
    assert (known["class"], known["fields"]) == ("AutoDecodingConfig", [])
    assert set(config) == {"decoding_type"} and config == {"decoding_type": "AUTO"}


def test_the_mode_has_no_block_and_drafts_by_lookup_at_the_runtimes_length():
    mode = MODES["auto"]
    assert mode.block is None and "auto" not in SpeculationSpec.model_json_schema(by_alias=True)["properties"]
    assert mode.backends == ("pytorch",) and mode.drafting.drafter == "lookup" and mode.drafting.draft_len(None) is None
    assert make_plan(spec(backend="pytorch", speculation={"mode": "auto"})).engines == ()
    refused = parse_spec(spec(backend="pytorch", speculation={"mode": "auto", "auto": {}}))
    assert isinstance(refused, Problem)  # nothing to set: TensorRT-LLM ignores every field


def test_refused_on_tensorrt_before_any_pod_with_a_clear_message():
    problem = parse_spec(spec(speculation={"mode": "auto"}))
    assert isinstance(problem, Problem) and "auto is served by backend pytorch only" in problem.message
