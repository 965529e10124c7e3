"""Engine path, draft-target: a Triton model repository and the tritonserver launch in orchestrator mode.

The repository holds the target (`tensorrt_llm`) and draft (`tensorrt_llm_draft`) engines, each with its
own `gpu_device_ids`, KV-cache fraction and block reuse, the tokenizer models and `tensorrt_llm_bls`,
which speculates when a request carries `num_draft_tokens` (the front adds it to every request).
Keys and launch flags follow TensorRT-LLM's triton_backend (all_models/inflight_batcher_llm and
scripts/launch_triton_server.py --multi-model); tests/runtime/data/ keeps what was read and where.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import jinja2

from specdec.api.runtime_config import RuntimeConfig
from specdec.runtime import config as cfg
from specdec.schema.served_model import ServedModel

TARGET_MODEL = "tensorrt_llm"
DRAFT_MODEL = "tensorrt_llm_draft"
BLS_MODEL = "tensorrt_llm_bls"
PYTHON_MODELS = ("preprocessing", "postprocessing", BLS_MODEL)
MODELS = ("preprocessing", TARGET_MODEL, DRAFT_MODEL, BLS_MODEL, "postprocessing")

TRITONSERVER = "/opt/tritonserver/bin/tritonserver"
# Spawned by the backend in orchestrator mode, one per engine (TensorRT-LLM's template sets this path).
EXECUTOR_WORKER = "/opt/tritonserver/backends/tensorrtllm/trtllmExecutorWorker"
# Where the runtime image keeps the Python models (model.py files) of the TensorRT-LLM backend.
DEFAULT_BACKEND_MODELS_DIR = "/app/all_models/inflight_batcher_llm"
# The engine's own limit decides; Triton's batch size is only an upper bound on what it hands over.
DEFAULT_MAX_BATCH_SIZE = 8
LOGITS_DATATYPE = "TYPE_FP32"

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("specdec.runtime", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


def engine_max_batch_size(engine_dir: str | None) -> int | None:
    """build_config.max_batch_size from an engine's config.json, when the engine is there to read."""
    if not engine_dir:
        return None
    try:
        data = json.loads((Path(engine_dir) / "config.json").read_text())
        value = int(data["build_config"]["max_batch_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return value if value > 0 else None


def _bool(value: bool) -> str:
    return "true" if value else "false"


def engine_parameters(model: ServedModel, config: RuntimeConfig) -> dict[str, str]:
    return {
        "gpt_model_type": "inflight_fused_batching",
        "gpt_model_path": model.engine_dir or "",
        "gpu_device_ids": ",".join(str(d) for d in model.devices),
        "kv_cache_free_gpu_mem_fraction": repr(float(config.kv_cache.free_gpu_memory_fraction)),
        "enable_kv_cache_reuse": _bool(config.kv_cache.enable_block_reuse),
        # The BLS reads this back (over gRPC) to know whether outputs carry the prompt.
        "exclude_input_in_output": "true",
        "max_beam_width": "1",  # draft-target speculation does not support beam search
        "executor_worker_path": EXECUTOR_WORKER,
        "FORCE_CPU_ONLY_INPUT_TENSORS": "no",
    }


@dataclass(frozen=True)
class Repository:
    files: dict[str, str]  # path inside the repository -> text
    max_batch_size: int
    max_batch_size_source: str


def render_repository(config: RuntimeConfig, max_batch_size: int | None = None) -> Repository:
    """Every config.pbtxt of the repository; pure (no file system access)."""
    dt = config.draft_target
    if dt is None:
        raise cfg.ConfigError("the Triton route serves mode draftTarget only")
    source = "engine config.json"
    if max_batch_size is None and config.max_batch_size is not None:
        max_batch_size, source = config.max_batch_size, "runtime config (spec.engine.maxBatchSize)"
    if max_batch_size is None:
        max_batch_size, source = DEFAULT_MAX_BATCH_SIZE, "default (target engine config.json not readable)"
    tokenizer = config.target.checkpoint
    common = {"max_batch_size": max_batch_size, "logits_datatype": LOGITS_DATATYPE}
    files = {
        f"{TARGET_MODEL}/config.pbtxt": _ENV.get_template("tensorrt_llm.pbtxt.j2").render(
            name=TARGET_MODEL,
            role="target",
            engine_dir=config.target.engine_dir,
            parameters=engine_parameters(config.target, config),
            **common,
        ),
        f"{DRAFT_MODEL}/config.pbtxt": _ENV.get_template("tensorrt_llm.pbtxt.j2").render(
            name=DRAFT_MODEL,
            role="draft",
            engine_dir=dt.draft.engine_dir,
            parameters=engine_parameters(dt.draft, config),
            **common,
        ),
        f"{BLS_MODEL}/config.pbtxt": _ENV.get_template("tensorrt_llm_bls.pbtxt.j2").render(
            instance_count=max_batch_size,
            parameters={
                "tensorrt_llm_model_name": TARGET_MODEL,
                "tensorrt_llm_draft_model_name": DRAFT_MODEL,
                "accumulate_tokens": "false",
            },
            **common,
        ),
        "preprocessing/config.pbtxt": _ENV.get_template("preprocessing.pbtxt.j2").render(
            instance_count=1,
            # multimodal_model_path must be present: preprocessing/1/model.py indexes it directly.
            parameters={"tokenizer_dir": tokenizer, "add_special_tokens": "true", "multimodal_model_path": ""},
            **common,
        ),
        "postprocessing/config.pbtxt": _ENV.get_template("postprocessing.pbtxt.j2").render(
            instance_count=1, parameters={"tokenizer_dir": tokenizer, "skip_special_tokens": "true"}, **common
        ),
    }
    return Repository(files=files, max_batch_size=max_batch_size, max_batch_size_source=source)


def write_repository(repo: Repository, target: Path, backend_models_dir: Path) -> None:
    """Write the repository: our config.pbtxt files, the backend's Python model code, empty engine versions."""
    missing = [m for m in PYTHON_MODELS if not (backend_models_dir / m / "1" / "model.py").is_file()]
    if missing:
        raise cfg.ConfigError(
            f"the TensorRT-LLM backend's Python models are missing in {backend_models_dir}: "
            f"{', '.join(f'{m}/1/model.py' for m in missing)} (set SPECDEC_TRITON_MODELS_DIR)"
        )
    if target.exists():
        shutil.rmtree(target)
    for model in MODELS:
        version = target / model / "1"
        if model in PYTHON_MODELS:
            shutil.copytree(backend_models_dir / model / "1", version, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            version.mkdir(parents=True)
    for path, text in repo.files.items():
        (target / path).write_text(text)


def visible_gpus(config: RuntimeConfig) -> list[int]:
    devices = set(config.target.devices)
    if config.draft_target:
        devices |= set(config.draft_target.draft.devices)
    return sorted(devices)


def command(config: RuntimeConfig, repo_dir: str) -> tuple[list[str], dict[str, str]]:
    """tritonserver under mpirun in orchestrator mode, as launch_triton_server.py --multi-model does it."""
    argv = [
        "mpirun",
        "--allow-run-as-root",
        "-n",
        "1",
        TRITONSERVER,
        f"--model-repository={repo_dir}",
        f"--grpc-port={cfg.TRITON_GRPC_PORT}",
        f"--http-port={cfg.TRITON_HTTP_PORT}",
        f"--metrics-port={cfg.TRITON_METRICS_PORT}",
        # Only the front listens on the pod's network.
        "--http-address=127.0.0.1",
        "--grpc-address=127.0.0.1",
        "--metrics-address=127.0.0.1",
        # Spawning executor processes (orchestrator mode) wants these memory pools off.
        "--pinned-memory-pool-byte-size=0",
        "--enable-peer-access=false",
        *[f"--cuda-memory-pool-byte-size={gpu}:0" for gpu in visible_gpus(config)],
        "--disable-auto-complete-config",
        "--backend-config=python,shm-region-prefix-name=prefix0_",
    ]
    env = {"TRTLLM_ORCHESTRATOR": "1", "TRTLLM_ORCHESTRATOR_SPAWN_PROCESSES": "1"}
    return argv, env
