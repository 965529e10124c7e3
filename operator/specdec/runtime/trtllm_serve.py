"""Routes served by `trtllm-serve`: the engine path with one engine (modes none and redrafter) and the
PyTorch path (every mode its backends list includes pytorch; the mode renders `speculative_config`).

Flags are the ones present in every `tensorrt_llm/commands/serve.py` read (1.0/1.1 and the newest):
`--backend`, `--host`, `--port`, `--tokenizer`, `--tp_size`, `--extra_llm_api_options`, `--log_level`;
`--revision` only when a hub revision is pinned, `--pp_size` only above 1. KV-cache settings and speculation go in the
`--extra_llm_api_options` YAML (keys of `llm_args.py`: kv_cache_config, speculative_config, ...), the KV
fraction only there: trtllm-serve replaces the kv_cache_config its --kv_cache_free_gpu_memory_fraction made
with the YAML's whole (update_llm_args_with_extra_dict in llm_args.py), so the flag would never be read.
tests/runtime/data/trtllm_serve.json keeps what was read and where.
"""

from __future__ import annotations

from typing import Any

import yaml

from specdec.api.runtime_config import RuntimeConfig
from specdec.runtime import config as cfg

TRTLLM_SERVE = "trtllm-serve"
HOST = "127.0.0.1"  # only the front listens on the pod's network


def extra_options(config: RuntimeConfig) -> dict[str, Any]:
    """The --extra_llm_api_options YAML: applied by trtllm-serve over its own arguments."""
    options: dict[str, Any] = {
        "kv_cache_config": {
            "free_gpu_memory_fraction": float(config.kv_cache.free_gpu_memory_fraction),
            "enable_block_reuse": config.kv_cache.enable_block_reuse,
        },
    }
    if config.backend == "pytorch":
        # Iteration statistics (GET /metrics of trtllm-serve, with specDecodingStats) are opt-in on the
        # PyTorch backend; the TensorRT backend always keeps them. The front reads them for /metrics.
        options["enable_iter_perf_stats"] = True
        if config.speculative_config is not None:  # rendered by the mode (specdec.modes)
            options["speculative_config"] = _integer_batch_sizes(dict(config.speculative_config))
    return options


def _integer_batch_sizes(speculative_config: dict[str, Any]) -> dict[str, Any]:
    """draft_len_schedule maps batch sizes (dict[int, int] in llm_args.py); runtime.json, being JSON, carries
    them as strings: the YAML gets integers back."""
    schedule = speculative_config.get("draft_len_schedule")
    if schedule:
        speculative_config["draft_len_schedule"] = {int(size): length for size, length in schedule.items()}
    return speculative_config


def extra_options_yaml(config: RuntimeConfig) -> str:
    return yaml.safe_dump(extra_options(config), sort_keys=True, default_flow_style=False)


def warnings(config: RuntimeConfig) -> list[str]:
    """Settings the chosen route cannot honour; logged at start-up."""
    notes = []
    if config.backend == "pytorch" and config.draft_target is not None:
        if config.draft_target.use_logits:
            notes.append(
                "useLogits is not available with trtllm-serve's PyTorch Draft_Target; tokens are accepted by comparison"
            )
        if config.draft_target.draft.revision:
            notes.append("draftTarget.draft.revision is ignored: speculative_model takes a path or hub id")
    return notes


def command(config: RuntimeConfig, options_path: str) -> tuple[list[str], dict[str, str]]:
    target = config.target
    if config.backend == "pytorch":
        argv = [TRTLLM_SERVE, target.checkpoint, "--backend", "pytorch"]
    else:
        if cfg.route(config) == "triton":
            raise cfg.ConfigError(f"engine-path {config.mode} is served by Triton, not trtllm-serve")
        # An engine directory holds no tokenizer: it comes from the checkpoint.
        argv = [TRTLLM_SERVE, target.engine_dir or "", "--backend", "tensorrt", "--tokenizer", target.checkpoint]
    argv += [
        "--host",
        HOST,
        "--port",
        str(cfg.TRTLLM_SERVE_PORT),
        "--tp_size",
        str(target.tensor_parallel_size),
        "--extra_llm_api_options",
        options_path,
        "--log_level",
        "info",
    ]
    if target.pipeline_parallel_size:
        argv += ["--pp_size", str(target.pipeline_parallel_size)]
    if config.backend == "pytorch" and target.revision:
        argv += ["--revision", target.revision]
    env: dict[str, str] = {}
    if config.backend == "tensorrt":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in target.devices)
    return argv, env
