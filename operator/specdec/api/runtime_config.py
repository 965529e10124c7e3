"""The runtime configuration: what the operator writes into the ConfigMap and `specdec-runtime` reads.

One model shared by both sides, so a configuration the operator can write is one the runtime accepts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from specdec.api.base import ApiModel

RUNTIME_CONFIG_KEY = "runtime.json"
RUNTIME_CONFIG_DIR = "/etc/specdec"
CACHE_MOUNT = "/cache"
MODELS_MOUNT = "/models"


class ServedModel(ApiModel):
    engine_dir: str | None = Field(None, description="Engine directory (tensorrt backend).")
    checkpoint: str = Field(description="Hugging Face checkpoint dir or hub id: tokenizer, and the model itself for pytorch.")
    revision: str | None = Field(None, description="Hub revision, when checkpoint is a hub id.")
    devices: list[int] = Field(description="GPU indices within the pod.")
    tensor_parallel_size: int = 1


class RuntimeKvCache(ApiModel):
    free_gpu_memory_fraction: float = Field(gt=0, le=1)
    enable_block_reuse: bool = True


class RuntimeDraftTarget(ApiModel):
    draft: ServedModel
    draft_len: int = Field(ge=1)
    max_draft_len: int = Field(ge=1)
    use_logits: bool = False


class RuntimeReDrafter(ApiModel):
    num_beams: int
    draft_len_per_beam: int
    greedy: bool
    temperature: float | None = None


class RuntimeConfig(ApiModel):
    backend: Literal["tensorrt", "pytorch"]
    max_batch_size: int | None = Field(None, description="The engines' --max_batch_size, when the spec sets it.")
    mode: str = Field(description="spec.speculation.mode (specdec.modes.MODES).")
    served_model_name: str
    port: int = 8000
    target: ServedModel
    kv_cache: RuntimeKvCache
    # The engine path's modes (TensorRT-LLM 1.2.x, frozen): what Triton's BLS and trtllm-serve need.
    draft_target: RuntimeDraftTarget | None = None
    redrafter: RuntimeReDrafter | None = None
    # The PyTorch path: trtllm-serve's speculative_config, rendered by the mode (specdec.modes).
    speculative_config: dict[str, Any] | None = Field(None, description="speculative_config of the --extra_llm_api_options YAML (backend pytorch).")
