"""A model as the runtime serves it: the piece of the runtime configuration the modes' runtime blocks
share with `RuntimeConfig` (specdec.api.runtime_config), kept below both."""

from __future__ import annotations

from pydantic import Field

from specdec.schema.base import ApiModel


class ServedModel(ApiModel):
    engine_dir: str | None = Field(None, description="Engine directory (tensorrt backend).")
    checkpoint: str = Field(
        description="Hugging Face checkpoint dir or hub id: tokenizer, and the model itself for pytorch."
    )
    revision: str | None = Field(None, description="Hub revision, when checkpoint is a hub id.")
    devices: list[int] = Field(description="GPU indices within the pod.")
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int | None = Field(None, description="trtllm-serve --pp_size, when above 1.")
