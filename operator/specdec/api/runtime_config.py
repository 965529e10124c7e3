"""The runtime configuration: what the operator writes into the ConfigMap and `specdec-runtime` reads.

One model shared by both sides, so a configuration the operator can write is one the runtime accepts.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag

from specdec import modes
from specdec.modes.draft_target import RuntimeDraftTarget
from specdec.schema.base import ApiModel
from specdec.schema.served_model import ServedModel

RUNTIME_CONFIG_KEY = "runtime.json"
# The draft length in effect (draftLen: auto), a key of its own in the runtime ConfigMap and outside the
# rollout hash: the operator changes it without restarting pods, the front re-reads the file (the kubelet
# refreshes ConfigMap volumes in place) and sends the new length with the next requests.
DRAFT_LEN_KEY = "draft_len"
# The concurrency from which speculation at that draft length stops paying (specdec.load_model.break_even),
# beside it and as live: at and above it (with hysteresis) the Triton route's front sends no draft tokens.
BREAK_EVEN_KEY = "speculation_break_even"
# Below it, the best draft length for the requests in flight (specdec.load_model.format_schedule: "1:4 6:2 14:1
# 47:0", from n in flight on, length k), capped by draft_len; live too.
SCHEDULE_KEY = "speculation_draft_lens"
# trtllm-serve with draftLen: auto: the draft_len_schedule the pods were started with (JSON, {"largest batch
# size": draft length}), a record for the operator after a restart; the pods read it from runtime.json.
DRAFT_LEN_SCHEDULE_KEY = "draft_len_schedule"
RUNTIME_CONFIG_DIR = "/etc/specdec"
CACHE_MOUNT = "/cache"
MODELS_MOUNT = "/models"


class RuntimeKvCache(ApiModel):
    free_gpu_memory_fraction: float = Field(gt=0, le=1)
    enable_block_reuse: bool = True


class RuntimeNone(ApiModel):
    mode: Literal["none"] = "none"


class RuntimeSpeculativeConfig(ApiModel):
    """A mode of the PyTorch path only: trtllm-serve's speculative_config is all the runtime needs."""

    mode: str = Field(description="spec.speculation.mode (specdec.modes.MODES).")
    speculative_config: dict[str, Any] = Field(description="speculative_config of the --extra_llm_api_options YAML.")


# Modes with a block of their own (Mode.runtime, in the mode's module) are tagged by name; every other
# mode (the PyTorch path's) is a RuntimeSpeculativeConfig, so adding a mode changes nothing here.
_TAGGED = {"none": RuntimeNone, **modes.runtime_blocks()}


def _tag(value: Any) -> str:
    mode = value.get("mode") if isinstance(value, dict) else getattr(value, "mode", None)
    return mode if mode in _TAGGED else "speculativeConfig"


# A union of members computed from the registry: `X | Y` has no spelling for a tuple of them.
RuntimeSpeculation = Annotated[  # type: ignore[valid-type]  # members known at run time only
    Union[  # noqa: UP007 - see above
        tuple(Annotated[cls, Tag(name)] for name, cls in _TAGGED.items())
        + (Annotated[RuntimeSpeculativeConfig, Tag("speculativeConfig")],)
    ],
    Discriminator(_tag),
]


class RuntimeConfig(ApiModel):
    backend: Literal["tensorrt", "pytorch"]
    max_batch_size: int | None = Field(None, description="The engines' --max_batch_size, when the spec sets it.")
    served_model_name: str
    port: int = 8000
    target: ServedModel
    kv_cache: RuntimeKvCache
    speculation: RuntimeSpeculation = Field(  # type: ignore[valid-type]  # members known at run time only
        default_factory=RuntimeNone, description="The mode and what it needs."
    )

    @property
    def mode(self) -> str:
        return self.speculation.mode  # type: ignore[attr-defined]  # every member has a mode

    @property
    def draft_target(self) -> RuntimeDraftTarget | None:
        return self.speculation if isinstance(self.speculation, RuntimeDraftTarget) else None

    @property
    def speculative_config(self) -> dict[str, Any] | None:
        return getattr(self.speculation, "speculative_config", None)
