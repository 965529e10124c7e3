"""Mode saveState (SaveHiddenStatesDecodingConfig on the PyTorch path): the speculative_config it emits has
exactly the keys and the literal of the key-set table, TensorRT-LLM's defaults, no draft at all, and the
runtime pod writes only the capture directory, to the claim the user names or the cache claim."""

from __future__ import annotations

import json

from specdec.admission.validation import parse_spec
from specdec.builders.serving import build_deployment
from specdec.modes import MODES
from specdec.plan import Problem
from tests.runtime.helpers import DATA
from tests.unit.helpers import SETTINGS, make_plan, make_problem
from tests.unit.invalid_specs import spec

SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())


def save_state(**fields) -> dict:
    return spec(backend="pytorch", speculation={"mode": "saveState", "saveState": fields})


def pod(result) -> dict:
    return build_deployment(result, "uid", SETTINGS)["spec"]["template"]["spec"]


def test_defaults_are_tensorrt_llms_and_nothing_drafts():
    result = make_plan(save_state())
    assert result.runtime.speculative_config == {
        "decoding_type": "SaveState",
        "output_directory": "/captures",
        "write_interval": 20,
        "file_prefix": "data",
    }
    assert {cache.spec.model for cache in result.model_caches} == {result.spec.target.model}
    mode = MODES["saveState"]
    assert mode.backends == ("pytorch",) and mode.drafting is None and not mode.speculates


def test_keys_and_literal_are_exactly_the_verified_set():
    config = make_plan(
        save_state(writeInterval=1, filePrefix="dp_0", eagle3LayersToCapture=[28, 1, 15, -1])
    ).runtime.speculative_config
    entry = SPECULATIVE["decoding_types"]["SaveState"]
    assert entry["class"] == "SaveHiddenStatesDecodingConfig"
    assert set(config) == {"decoding_type", *entry["fields"]}
    assert not set(config) & set(entry["not_settable"])
    assert config == {
        "decoding_type": "SaveState",
        "output_directory": "/captures",
        "write_interval": 1,
        "file_prefix": "dp_0",
        "eagle3_layers_to_capture": [-1, 1, 15, 28],
    }


def test_the_capture_directory_of_the_cache_claim_by_default_and_only_it_writable():
    result = make_plan(save_state())
    spec_ = pod(result)
    mounts = {m["name"]: m for m in spec_["containers"][0]["volumeMounts"]}
    volumes = {v["name"]: v for v in spec_["volumes"]}
    assert mounts["captures"] == {
        "name": "captures",
        "mountPath": "/captures",
        "subPath": f"hidden-states/{result.name}",
    }
    assert volumes["captures"]["persistentVolumeClaim"] == {"claimName": result.cache.claim_name}
    assert mounts["cache"]["readOnly"] is True  # the checkpoints stay read-only


def test_a_claim_and_path_the_user_names():
    spec_ = pod(make_plan(save_state(output={"claimName": "eagle-data", "path": "llama8b/run-1"})))
    volumes = {v["name"]: v for v in spec_["volumes"]}
    mount = next(m for m in spec_["containers"][0]["volumeMounts"] if m["name"] == "captures")
    assert volumes["captures"]["persistentVolumeClaim"] == {"claimName": "eagle-data"}
    assert mount["subPath"] == "llama8b/run-1"


def test_other_modes_mount_no_capture_directory():
    other = spec(backend="pytorch", speculation={"mode": "ngram", "ngram": {}})
    assert "captures" not in {v["name"] for v in pod(make_plan(other))["volumes"]}


def test_refused_before_any_pod_with_a_clear_message():
    on_tensorrt = parse_spec(spec(speculation={"mode": "saveState", "saveState": {}}))
    assert isinstance(on_tensorrt, Problem) and "saveState is served by backend pytorch only" in on_tensorrt.message
    twice = parse_spec(save_state(eagle3LayersToCapture=[1, 1]))
    assert isinstance(twice, Problem) and "lists each layer once" in twice.message
    for bad in (
        {"eagle3LayersToCapture": []},
        {"eagle3LayersToCapture": [-2]},
        {"writeInterval": 0},
        {"filePrefix": "../x"},
        {"output": {"path": "/abs"}},
        {"output": {"path": "a/../b"}},
        {"output": {"claimName": "Not_A_Claim"}},
    ):
        assert isinstance(parse_spec(save_state(**bad)), Problem), bad


def test_captured_layers_the_target_does_not_have_are_refused_before_any_pod():
    problem = make_problem(save_state(eagle3LayersToCapture=[1, 40, -1]))
    assert problem.reason == "InvalidSpec" and "saveState.eagle3LayersToCapture" in problem.message
    assert "has 40 layers (0 to 39), not 40" in problem.message
