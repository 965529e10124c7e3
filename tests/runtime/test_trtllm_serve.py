"""trtllm-serve routes: the command parses with the options serve.py declares, and the YAML uses only
keys of llm_args.py."""

from __future__ import annotations

import json

import click
import pytest
import yaml

from specdec.runtime import config as cfg
from specdec.runtime import launch, trtllm_serve
from tests.runtime.helpers import DATA, scenario_configs

SERVE = json.loads((DATA / "trtllm_serve.json").read_text())
SPECULATIVE = json.loads((DATA / "trtllm_speculative_config.json").read_text())
CONFIGS = scenario_configs()
SERVED = {name: c for name, c in CONFIGS.items() if cfg.route(c) != "triton"}
TYPES = {"str": str, "int": int, "float": float, "path": str}


def serve_command() -> click.Command:
    """A click command with serve.py's options (names, aliases and types as read)."""
    params: list[click.Parameter] = [click.Argument(["model"])]
    for name, kind in SERVE["serve_py"]["options"].items():
        if kind == "flag":
            params.append(click.Option([name], is_flag=True))
        elif isinstance(kind, list):
            params.append(click.Option([name], type=click.Choice(kind)))
        else:
            params.append(click.Option([name], type=TYPES[kind.split()[0]], multiple=name == "--custom_module_dirs"))
    return click.Command("serve", params=params, callback=lambda **kw: kw)


def parsed(argv: list[str]) -> dict:
    assert argv[0] == "trtllm-serve"
    return serve_command().main(argv[1:], standalone_mode=False)


def test_the_scenarios_cover_every_trtllm_serve_route():
    assert {cfg.route(c) for c in SERVED.values()} == {"trtllm-serve-engine", "trtllm-serve-pytorch"}


@pytest.mark.parametrize("name", sorted(SERVED))
def test_command_parses_with_serve_py_options(name):
    config = SERVED[name]
    argv, env = trtllm_serve.command(config, "/tmp/specdec/extra_llm_api_options.yaml")
    args = parsed(argv)
    assert args["host"] == "127.0.0.1" and args["port"] == cfg.TRTLLM_SERVE_PORT
    assert args["tp_size"] == config.target.tensor_parallel_size
    # The KV fraction is the YAML's kv_cache_config alone (test_extra_options_yaml_uses_llm_args_keys).
    assert args["kv_cache_free_gpu_memory_fraction"] is None and args["free_gpu_memory_fraction"] is None
    assert args["extra_llm_api_options"] == "/tmp/specdec/extra_llm_api_options.yaml"
    if config.backend == "tensorrt":
        assert args["backend"] == "tensorrt" and args["model"] == config.target.engine_dir
        assert args["tokenizer"] == config.target.checkpoint  # an engine directory has no tokenizer
        assert env == {"CUDA_VISIBLE_DEVICES": ",".join(map(str, config.target.devices))}
    else:
        assert args["backend"] == "pytorch" and args["model"] == config.target.checkpoint
        assert env == {}


@pytest.mark.parametrize("name", sorted(SERVED))
def test_command_uses_only_options_that_1_0_and_1_1_have_too(name):
    argv, _ = trtllm_serve.command(SERVED[name], "/x.yaml")
    older = set(SERVE["serve_py"]["also_in_1_0_1_1"]["options"])
    assert {a for a in argv if a.startswith("--")} <= older


def test_a_pinned_hub_revision_is_passed_on_the_pytorch_path():
    config = SERVED["pytorch-llama-3.1-8b-draft-1b"]
    pinned = config.model_copy(update={"target": config.target.model_copy(update={"revision": "abc123"})})
    argv, _ = trtllm_serve.command(pinned, "/x.yaml")
    assert parsed(argv)["revision"] == "abc123"


def yaml_keys_ok(options: dict, backend: str) -> None:
    llm = SERVE["llm_args"]
    allowed = set(llm["base_keys"]) | (set(llm["pytorch_only_keys"]) if backend == "pytorch" else set())
    assert set(options) <= allowed, set(options) - allowed
    assert set(options["kv_cache_config"]) <= set(llm["kv_cache_config_keys"])
    if "speculative_config" in options:
        speculative_config_ok(options["speculative_config"])


def speculative_config_ok(config: dict) -> None:
    """Its decoding_type is a literal of the pinned llm_args.py, and every key a field of that class."""
    known = SPECULATIVE["decoding_types"].get(config["decoding_type"])
    assert known, f"decoding_type {config['decoding_type']!r} is not one of {sorted(SPECULATIVE['decoding_types'])}"
    allowed = {"decoding_type", *SPECULATIVE["base_fields"], *known["fields"]}
    assert set(config) <= allowed, set(config) - allowed


@pytest.mark.parametrize("name", sorted(SERVED))
def test_extra_options_yaml_uses_llm_args_keys(name):
    config = SERVED[name]
    options = yaml.safe_load(trtllm_serve.extra_options_yaml(config))
    yaml_keys_ok(options, config.backend)
    assert options["kv_cache_config"] == {
        "free_gpu_memory_fraction": config.kv_cache.free_gpu_memory_fraction,
        "enable_block_reuse": config.kv_cache.enable_block_reuse,
    }


def test_pytorch_draft_target_yaml():
    config = SERVED["pytorch-llama-3.1-8b-draft-1b"]
    options = yaml.safe_load(trtllm_serve.extra_options_yaml(config))
    assert options["speculative_config"] == {
        "decoding_type": "Draft_Target",
        "max_draft_len": 4,
        "speculative_model": "/cache/models/meta-llama--Llama-3.2-1B-Instruct/main",
    }
    assert options["kv_cache_config"] == {"free_gpu_memory_fraction": 0.5, "enable_block_reuse": True}
    assert options["enable_iter_perf_stats"] is True  # specDecodingStats on trtllm-serve's /metrics


def test_engine_path_yaml_has_no_pytorch_only_keys():
    options = trtllm_serve.extra_options(SERVED["vicuna-7b-redrafter"])
    assert options == {"kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": True}}


def test_logits_acceptance_on_pytorch_is_reported_not_silently_dropped():
    config = SERVED["pytorch-llama-3.1-8b-draft-1b"]
    logits = config.model_copy(update={"speculation": config.draft_target.model_copy(update={"use_logits": True})})
    assert any("useLogits" in w for w in trtllm_serve.warnings(logits))
    assert trtllm_serve.warnings(config) == []


def test_launch_plan_writes_the_yaml_the_command_names(tmp_path):
    config = SERVED["pytorch-none-tp2"]
    plan = launch.plan_launch(config, str(tmp_path))
    launch.prepare(plan)
    path = plan.argv[plan.argv.index("--extra_llm_api_options") + 1]
    assert yaml.safe_load(open(path)) == trtllm_serve.extra_options(config)
    assert plan.backend.kind == "openai" and plan.backend.health_path == "/health"
