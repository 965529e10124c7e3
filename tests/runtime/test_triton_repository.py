"""The Triton model repository of the draft-target engine path, checked against Triton's own schema
(model_config.proto from tritonclient) and the TensorRT-LLM backend's template configs."""

from __future__ import annotations

import json

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from specdec.runtime import config as cfg
from specdec.runtime import triton
from tests.runtime.helpers import DATA, scenario_configs

BACKEND = json.loads((DATA / "trtllm_backend.json").read_text())
CONFIGS = scenario_configs()
DRAFT_TARGET = {name: c for name, c in CONFIGS.items() if cfg.route(c) == "triton"}
MODEL_KEYS = {
    "tensorrt_llm": "tensorrt_llm",
    "tensorrt_llm_draft": "tensorrt_llm",
    "tensorrt_llm_bls": "tensorrt_llm_bls",
    "preprocessing": "preprocessing",
    "postprocessing": "postprocessing",
}


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def rendered(name: str) -> dict[str, model_config_pb2.ModelConfig]:
    repo = triton.render_repository(DRAFT_TARGET[name], max_batch_size=4)
    return {path.split("/")[0]: parse(text) for path, text in repo.files.items()}


def params(model: model_config_pb2.ModelConfig) -> dict[str, str]:
    return {k: v.string_value for k, v in model.parameters.items()}


def test_the_schema_refuses_unknown_fields():
    """The check below means something: Triton's text format parser rejects what the schema lacks."""
    with pytest.raises(text_format.ParseError):
        parse('name: "x"\nmax_batch_siz: 4\n')


def test_both_examples_take_the_triton_route():
    assert sorted(DRAFT_TARGET) == ["llama-2-13b-draft-7b-logits", "llama-3.1-70b-fp8-draft-1b"]


@pytest.mark.parametrize("name", sorted(DRAFT_TARGET))
def test_every_config_parses_with_tritons_model_config_schema(name):
    models = rendered(name)
    assert sorted(models) == sorted(triton.MODELS)
    for directory, model in models.items():
        assert model.name == directory
        assert model.max_batch_size == 4
    assert models["tensorrt_llm"].backend == "tensorrtllm"
    assert models["tensorrt_llm_bls"].backend == "python"
    assert not models["tensorrt_llm_bls"].model_transaction_policy.decoupled


@pytest.mark.parametrize("name", sorted(DRAFT_TARGET))
def test_parameter_keys_are_those_of_the_backends_templates(name):
    for directory, model in rendered(name).items():
        allowed = set(BACKEND["parameter_keys"][MODEL_KEYS[directory]]["keys"])
        assert set(params(model)) <= allowed, (directory, set(params(model)) - allowed)
        # Triton passes "${...}" through as text: nothing may be left unrendered.
        assert not any("${" in v or "{{" in v for v in params(model).values())


@pytest.mark.parametrize("name", sorted(DRAFT_TARGET))
def test_parameters_the_python_models_index_without_default_are_present(name):
    models = rendered(name)
    for directory in ("preprocessing", "postprocessing"):
        assert set(BACKEND["required_parameters"][directory]) <= set(params(models[directory]))


def test_the_llama2_example_places_draft_and_target_on_their_own_gpus():
    config = DRAFT_TARGET["llama-2-13b-draft-7b-logits"]
    models = rendered("llama-2-13b-draft-7b-logits")
    target, draft, bls = (
        params(models["tensorrt_llm"]),
        params(models["tensorrt_llm_draft"]),
        params(models["tensorrt_llm_bls"]),
    )
    assert target["gpu_device_ids"] == "1" and draft["gpu_device_ids"] == "0"
    assert target["gpt_model_path"] == config.target.engine_dir == "/cache/engines/llama-2-13b-hf-286904e830"
    assert draft["gpt_model_path"] == config.draft_target.draft.engine_dir
    for engine in (target, draft):
        assert engine["kv_cache_free_gpu_mem_fraction"] == "0.4"
        assert engine["enable_kv_cache_reuse"] == "true"
        assert engine["gpt_model_type"] == "inflight_fused_batching"
        assert engine["executor_worker_path"] == triton.EXECUTOR_WORKER
    assert bls == {
        "tensorrt_llm_model_name": "tensorrt_llm",
        "tensorrt_llm_draft_model_name": "tensorrt_llm_draft",
        "accumulate_tokens": "false",
    }
    for tokenizer_model in ("preprocessing", "postprocessing"):
        assert params(models[tokenizer_model])["tokenizer_dir"] == config.target.checkpoint
    # One BLS instance per batch slot: a non-decoupled Python model serves one request at a time.
    assert models["tensorrt_llm_bls"].instance_group[0].count == 4


def test_the_shared_gpu_example_puts_both_engines_on_gpu_0():
    models = rendered("llama-3.1-70b-fp8-draft-1b")
    assert (
        params(models["tensorrt_llm"])["gpu_device_ids"]
        == params(models["tensorrt_llm_draft"])["gpu_device_ids"]
        == "0"
    )
    assert params(models["tensorrt_llm"])["kv_cache_free_gpu_mem_fraction"] == "0.35"


def test_tensor_parallel_device_lists_are_comma_separated():
    config = DRAFT_TARGET["llama-2-13b-draft-7b-logits"]
    wide = config.model_copy(
        update={"target": config.target.model_copy(update={"devices": [1, 2], "tensor_parallel_size": 2})}
    )
    repo = triton.render_repository(wide, 4)
    assert params(parse(repo.files["tensorrt_llm/config.pbtxt"]))["gpu_device_ids"] == "1,2"


def names(tensors) -> set[str]:
    return {t.name for t in tensors}


@pytest.mark.parametrize("name", sorted(DRAFT_TARGET))
def test_tensors_cover_what_the_bls_and_tokenizer_models_exchange(name):
    """Triton refuses an input or a requested output a config does not declare."""
    models, iface = rendered(name), BACKEND["interface"]
    bls, llm = models["tensorrt_llm_bls"], models["tensorrt_llm"]
    assert set(iface["bls_inputs_read"]) <= names(bls.input)
    assert set(iface["bls_outputs_sent"]) <= names(bls.output)
    for engine in (llm, models["tensorrt_llm_draft"]):
        assert set(iface["llm_inputs_sent"]) <= names(engine.input)
        assert set(iface["llm_outputs_requested"]) <= names(engine.output)
    assert set(iface["preprocessing_inputs_sent"]) <= names(models["preprocessing"].input)
    assert set(iface["preprocessing_outputs_used"]) <= names(models["preprocessing"].output)
    assert set(iface["postprocessing_inputs_sent"]) <= names(models["postprocessing"].input)
    assert set(iface["postprocessing_outputs_used"]) <= names(models["postprocessing"].output)
    speculative = {t.name: t for t in bls.input}
    assert speculative["num_draft_tokens"].data_type == model_config_pb2.TYPE_INT32
    assert speculative["use_draft_logits"].data_type == model_config_pb2.TYPE_BOOL
    perf = {t.name: t.data_type for t in bls.output}
    assert perf["acceptance_rate"] == model_config_pb2.TYPE_FP32
    assert perf["total_accepted_draft_tokens"] == perf["total_draft_tokens"] == model_config_pb2.TYPE_INT32


def test_max_batch_size_comes_from_the_target_engine(tmp_path):
    engine = tmp_path / "engine"
    engine.mkdir()
    (engine / "config.json").write_text(json.dumps({"build_config": {"max_batch_size": 32}}))
    assert triton.engine_max_batch_size(str(engine)) == 32
    assert triton.engine_max_batch_size(str(tmp_path / "missing")) is None
    (engine / "config.json").write_text("{}")
    assert triton.engine_max_batch_size(str(engine)) is None
    config = DRAFT_TARGET["llama-2-13b-draft-7b-logits"]  # spec.engine.maxBatchSize: 4
    assert triton.render_repository(config).max_batch_size == 4
    unset = config.model_copy(update={"max_batch_size": None})
    assert triton.render_repository(unset).max_batch_size == triton.DEFAULT_MAX_BATCH_SIZE


def test_writing_the_repository_copies_the_backends_python_models(tmp_path):
    models_dir = tmp_path / "all_models"
    for model in triton.PYTHON_MODELS:
        (models_dir / model / "1").mkdir(parents=True)
        (models_dir / model / "1" / "model.py").write_text(f"# {model}\n")
    (models_dir / "tensorrt_llm_bls" / "1" / "lib").mkdir()
    (models_dir / "tensorrt_llm_bls" / "1" / "lib" / "decode.py").write_text("# decode\n")
    repo = triton.render_repository(DRAFT_TARGET["llama-2-13b-draft-7b-logits"], 4)
    target = tmp_path / "repo"
    target.mkdir()
    (target / "stale").write_text("from an earlier start")
    triton.write_repository(repo, target, models_dir)
    assert not (target / "stale").exists()
    assert (target / "tensorrt_llm_bls" / "1" / "lib" / "decode.py").read_text() == "# decode\n"
    assert (target / "preprocessing" / "1" / "model.py").is_file()
    assert (target / "tensorrt_llm" / "1").is_dir() and not any((target / "tensorrt_llm" / "1").iterdir())
    for path, text in repo.files.items():
        assert (target / path).read_text() == text


def test_missing_python_models_are_a_clear_error(tmp_path):
    repo = triton.render_repository(DRAFT_TARGET["llama-2-13b-draft-7b-logits"], 4)
    with pytest.raises(cfg.ConfigError, match="tensorrt_llm_bls/1/model.py.*SPECDEC_TRITON_MODELS_DIR"):
        triton.write_repository(repo, tmp_path / "repo", tmp_path / "nothing")


def test_tritonserver_command_is_orchestrator_mode_with_known_flags():
    data = json.loads((DATA / "tritonserver.json").read_text())
    known = set(data["command_line_parser"]["options"]) | set(data["launch_triton_server_py"]["options"])
    config = DRAFT_TARGET["llama-2-13b-draft-7b-logits"]
    argv, env = triton.command(config, "/tmp/specdec/triton-repository")
    assert argv[:4] == data["launch_triton_server_py"]["prefix"]
    assert argv[4] == triton.TRITONSERVER
    flags = [a[2:].split("=", 1)[0] for a in argv[5:]]
    assert set(flags) <= known, set(flags) - known
    assert env == data["launch_triton_server_py"]["env"]
    assert f"--grpc-port={cfg.TRITON_GRPC_PORT}" in argv and cfg.TRITON_GRPC_PORT == 8001
    assert "--model-repository=/tmp/specdec/triton-repository" in argv
    # One memory-pool flag per GPU the pod sees (draft on 0, target on 1).
    assert [a for a in argv if a.startswith("--cuda-memory-pool-byte-size")] == [
        "--cuda-memory-pool-byte-size=0:0",
        "--cuda-memory-pool-byte-size=1:0",
    ]
