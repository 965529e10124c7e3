"""Loading and checking the runtime configuration (`runtime.json`, written by the operator).

The file is validated with the operator's own model (`specdec.api.runtime_config.RuntimeConfig`), so a
configuration the operator can write is one the runtime accepts. The checks below are the ones only the
runtime can make: what each serving route needs, and the ports it keeps for itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specdec.api.ports import TRITON_GRPC_PORT, TRITON_HTTP_PORT, TRITON_METRICS_PORT, TRTLLM_SERVE_PORT
from specdec.api.runtime_config import RuntimeConfig
from specdec.modes import MODES


class ConfigError(Exception):
    """A runtime configuration that cannot be served; the message says what to change."""


def route(config: RuntimeConfig) -> str:
    """triton (an engine path its mode serves by Triton: draft-target), trtllm-serve-engine (engine path, one
    engine) or trtllm-serve-pytorch."""
    if config.backend == "pytorch":
        return "trtllm-serve-pytorch"
    mode = MODES.get(config.mode)
    return "triton" if mode and mode.engine and mode.engine.triton else "trtllm-serve-engine"


def request_defaults(config: RuntimeConfig) -> dict[str, Any]:
    """Fields of a generation request the mode sets where the client set none (RuntimeBlock.request_defaults)."""
    mode = MODES.get(config.mode)
    return mode.runtime.request_defaults(config.speculation) if mode and mode.runtime else {}


def reserved_ports(config: RuntimeConfig) -> dict[int, str]:
    if route(config) == "triton":
        return {
            TRITON_GRPC_PORT: "Triton's gRPC endpoint (the BLS model requires localhost:8001)",
            TRITON_HTTP_PORT: "Triton's HTTP endpoint",
            TRITON_METRICS_PORT: "Triton's metrics endpoint",
        }
    return {TRTLLM_SERVE_PORT: "trtllm-serve"}


def check(config: RuntimeConfig) -> RuntimeConfig:
    """What the shared model cannot say on its own; raises ConfigError."""
    problems: list[str] = []
    mode = MODES.get(config.mode)
    if mode is None:
        problems.append(f"mode {config.mode!r} is not one of {', '.join(MODES)}")
    elif config.backend not in mode.backends:
        problems.append(f"{config.mode} is served by backend {' or '.join(mode.backends)} only")
    elif config.backend == "pytorch" and mode.pytorch and config.speculative_config is None:
        problems.append(f"mode {config.mode} on backend pytorch needs speculativeConfig")
    if config.backend != "pytorch" and config.speculative_config is not None:
        problems.append("speculativeConfig applies to backend pytorch only")
    models = [("target", config.target)]
    if config.draft_target is not None:
        models.append(("draftTarget.draft", config.draft_target.draft))
        if config.draft_target.draft_len > config.draft_target.max_draft_len:
            problems.append(
                f"draftTarget.draftLen ({config.draft_target.draft_len}) exceeds maxDraftLen "
                f"({config.draft_target.max_draft_len}), the target engine's capacity"
            )
    for name, model in models:
        if config.backend == "tensorrt" and not model.engine_dir:
            problems.append(f"{name}.engineDir is required with backend tensorrt")
        if len(model.devices) != model.tensor_parallel_size:
            problems.append(
                f"{name}.devices has {len(model.devices)} entries but tensorParallelSize is "
                f"{model.tensor_parallel_size}"
            )
    taken = reserved_ports(config)
    if config.port in taken:
        problems.append(f"port {config.port} is used inside the pod by {taken[config.port]}; choose another")
    if problems:
        raise ConfigError("; ".join(problems))
    return config


def parse(text: str, source: str = "runtime.json") -> RuntimeConfig:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"{source} is not valid JSON: {error}") from None
    try:
        # The operator writes camelCase (by_alias); reject what it would never write.
        config = RuntimeConfig.model_validate(raw, by_alias=True, by_name=False)
    except ValidationError as error:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in error.errors())
        raise ConfigError(f"{source} is not a valid runtime configuration: {details}") from None
    return check(config)


def load(path: str | Path) -> RuntimeConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read the runtime configuration {path}: {error.strerror}") from None
    return parse(text, str(path))
