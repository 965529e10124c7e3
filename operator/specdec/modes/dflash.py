"""DFlash: a parallel drafter that cross-attends to hidden states of chosen target layers and proposes all
its draft tokens in one forward pass (PyTorch path, DFlashDecodingConfig). Target-dependent: a DFlash
checkpoint is trained against one target (z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat for Llama 3.1 8B
Instruct, z-lab/Qwen3-8B-DFlash-b16 for Qwen3 8B, ...); it is fetched into the cache by a ModelCache like
eagle3's head and given to trtllm-serve as speculative_model.

Fields, defaults and the literal as the pinned release's API reference page has them
(nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/DFlashDecodingConfig.html): decoding_type
"DFlash"; mask_token_id Optional[int] = None and target_layer_ids Optional[List[int]] = None (both read
from the draft's dflash_config when unset); context_recompute_tail Optional[int] = 0; attention_backend
Literal['VANILLA', 'TRTLLM', 'FA4'] = 'VANILLA'; skip_ctx_buffer_budget_check bool = False. Descriptions from
`tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412 (which predates the two last
fields: context_recompute_tail's meaning is from TensorRT-LLM's own test of it, the spec-recompute tail;
skip_ctx_buffer_budget_check's from TensorRT-LLM PR 19466, DFlash's token-budget and pooled-context checks at
configuration and the flag that skips them). Not exposed: spec_dec_variant and
moe_backend (new on every 1.4.0rc1 decoding config; the page gives their types only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from specdec.modes.mode import Drafting, EngineDrafter, Mode, PyTorchPath
from specdec.modes.pytorch import DynamicSpeculation
from specdec.schema.base import MODEL_URI_HELP, ModelUri, cel, rules_of, validations

DECODING_TYPE = "DFlash"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
MAX_LAYER = 1023  # a layer index bound, far above any served model's layer count

LayerIndex = Annotated[int, Field(ge=0, le=MAX_LAYER)]


class TargetLayerDrafter(DynamicSpeculation):
    """What DFlash and DSpark share: a draft checkpoint of its own (required), a mask token it fills, and
    the target layers whose hidden states it reads (both read from the draft's config when unset)."""

    draft_model: ModelUri | None = Field(
        None, description=f"The draft checkpoint (speculative_model), required: {MODEL_URI_HELP}."
    )
    max_draft_len: int = Field(
        4,
        ge=1,
        le=32,
        description="Draft tokens per step (max_draft_len); the target verifies this many plus one per request.",
    )
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="The mask token the draft fills for parallel prediction (mask_token_id). "
        "Default: the draft checkpoint's config.",
    )
    target_layer_ids: list[LayerIndex] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Target layers whose hidden states the draft cross-attends to (target_layer_ids). "
        "Default: the draft checkpoint's config; set it only to match how the draft was trained.",
    )

    def drafter_config(self, checkpoint: Callable[[str], str]) -> dict[str, Any]:
        assert self.draft_model is not None  # required by the block's rule
        config: dict[str, Any] = {
            "max_draft_len": self.max_draft_len,
            "speculative_model": checkpoint(self.draft_model),
        }
        if self.mask_token_id is not None:
            config["mask_token_id"] = self.mask_token_id
        if self.target_layer_ids is not None:
            config["target_layer_ids"] = list(self.target_layer_ids)
        return {**config, **self.dynamic_config()}


def needs_draft_model(mode: str, example: str) -> dict[str, str]:
    return cel(
        "has(self.draftModel)",
        f"{mode} needs its draft checkpoint, trained against this target: set draftModel (e.g. {example})",
        ".draftModel",
    )


class DFlashSpec(TargetLayerDrafter):
    """DFlash speculation: the draft proposes maxDraftLen tokens in one forward over the target's hidden states."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        needs_draft_model("dflash", "hf://z-lab/LLaMA3.1-8B-Instruct-DFlash-UltraChat for Llama 3.1 8B Instruct"),
    )

    context_recompute_tail: int = Field(
        0,
        ge=0,
        le=65536,
        description="On a prefix-cache hit, the prompt tokens run through the target again so the draft gets "
        "their hidden states: reuse stops at a block boundary leaving at least this many "
        "(context_recompute_tail). 0: reuse everything.",
    )
    attention_backend: Literal["VANILLA", "TRTLLM", "FA4"] = Field(
        "VANILLA",
        description="Attention of the draft's cross-attention to the pooled target context "
        "(attention_backend): VANILLA (FlashAttention, contiguous cache); TRTLLM needs "
        "FlashInfer and a Blackwell GPU (SM100 or SM103); FA4.",
    )
    skip_ctx_buffer_budget_check: bool = Field(
        False,
        description="Skip TensorRT-LLM's start-up check that the pooled-context buffer fits its token "
        "and memory budget (skip_ctx_buffer_budget_check).",
    )


def _speculative_config(block: DFlashSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    return {
        "decoding_type": DECODING_TYPE,
        **block.drafter_config(checkpoint),
        "context_recompute_tail": block.context_recompute_tail,
        "attention_backend": block.attention_backend,
        "skip_ctx_buffer_budget_check": block.skip_ctx_buffer_budget_check,
    }


def draft_checkpoint(block: TargetLayerDrafter) -> tuple[str, ...]:
    return (block.draft_model,) if block.draft_model else ()


MODE = Mode(
    "dflash",
    "a parallel draft model cross-attending to target layers proposes all the tokens in one forward",
    DFlashSpec,
    drafting=Drafting(
        "model",
        in_engine=lambda block: EngineDrafter("DFlash draft", block.draft_model),
        draft_len=lambda block: block.max_draft_len,
    ),
    pytorch=PyTorchPath(_speculative_config, checkpoints=draft_checkpoint),
)
