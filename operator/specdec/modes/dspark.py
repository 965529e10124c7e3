"""DSpark: DeepSeek's block drafter. Like DFlash it cross-attends to hidden states of chosen target layers
and drafts a whole block in one forward, then refines the block position by position with a small
sequential head (a low-rank Markov head, gated or RNN variants) (PyTorch path, DSparkDecodingConfig).
Two shapes, one literal: a standalone draft checkpoint (deepseek-ai/dspark_qwen3_4b_block7 for Qwen3 4B),
or, for DeepSeek-V4, the draft embedded in the target checkpoint's mtp.* weights (draftModel: the target).

Fields, defaults and the literal as the pinned release's API reference page has them
(nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/DSparkDecodingConfig.html): decoding_type
"DSpark"; mask_token_id, target_layer_ids, block_size (PositiveInt), markov_rank (int) and markov_head_type
(Literal['vanilla', 'gated', 'rnn']), all Optional, None: read from the draft's config (dspark_*);
attention_backend Literal['AUTO', 'VANILLA', 'TRTLLM', 'CUTEDSL'] = 'AUTO'. Descriptions and the rule that
block_size should equal max_draft_len from `tensorrt_llm/llmapi/llm_args.py` @
0004396720054fd8e205cbf616f21f0b57c6b412. Not exposed: spec_dec_variant (default 1) and moe_backend (the
page gives their types only). The example's pair is from TensorRT Edge-LLM's speculative-decoding page
(nvidia.github.io/TensorRT-Edge-LLM/0.10.1/user_guide/examples/speculative-decoding.html).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from specdec.modes.dflash import TargetLayerDrafter, draft_checkpoint, needs_draft_model
from specdec.modes.mode import Drafting, EngineDrafter, Mode, PyTorchPath
from specdec.modes.pytorch import DynamicSpeculation
from specdec.schema.base import cel, rules_of, validations

DECODING_TYPE = "DSpark"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
# The architecture whose checkpoint embeds a DSpark draft (its mtp.* weights; TensorRT-LLM also accepts
# config.json model_type deepseek_v4): config.json of nvidia/DeepSeek-V4-Pro-NVFP4, as ai-dynamo/aiconfigurator
# keeps it @ 7b359652cc600f4e157258117719c380aaadfb47.
EMBEDDED = "DeepseekV4ForCausalLM"


class DSparkSpec(TargetLayerDrafter):
    """DSpark speculation: the draft proposes a block of maxDraftLen tokens per step."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        needs_draft_model(
            "dspark", "hf://deepseek-ai/dspark_qwen3_4b_block7 for Qwen3 4B, or the DeepSeek-V4 target itself"
        ),
        cel(
            "!has(self.blockSize) || self.blockSize == self.maxDraftLen",
            "blockSize is the draft's block length: it equals maxDraftLen (leave it unset to read it from the "
            "draft's config)",
            ".blockSize",
        ),
    )

    max_draft_len: int = Field(
        4,
        ge=1,
        le=32,
        description="Draft tokens per step (max_draft_len): the draft's block size (7 for dspark_qwen3_4b_block7).",
    )
    block_size: int | None = Field(
        None,
        ge=1,
        le=32,
        description="Draft positions per block (block_size), equal to maxDraftLen. Default: "
        "the draft checkpoint's config (dspark_block_size).",
    )
    markov_rank: int | None = Field(
        None,
        ge=0,
        le=65536,
        description="Rank of the Markov head's logit bias (markov_rank); 0 turns the head "
        "off. Default: the draft checkpoint's config (dspark_markov_rank).",
    )
    markov_head_type: Literal["vanilla", "gated", "rnn"] | None = Field(
        None,
        description="The sequential head that refines a block (markov_head_type). Default: the draft "
        "checkpoint's config (dspark_markov_head_type), else vanilla.",
    )
    attention_backend: Literal["AUTO", "VANILLA", "TRTLLM", "CUTEDSL"] = Field(
        "AUTO",
        description="Attention of a standalone draft's cross-attention to the pooled target context "
        "(attention_backend; the draft embedded in DeepSeek-V4 uses its own). TRTLLM needs "
        "FlashInfer and a Blackwell GPU (SM100 or SM103).",
    )


def _speculative_config(block: DSparkSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "decoding_type": DECODING_TYPE,
        **block.drafter_config(checkpoint),
        "attention_backend": block.attention_backend,
    }
    optional = {
        "block_size": block.block_size,
        "markov_rank": block.markov_rank,
        "markov_head_type": block.markov_head_type,
    }
    return {**config, **{k: v for k, v in optional.items() if v is not None}}


MODE = Mode(
    "dspark",
    "DeepSeek's block drafter: a draft model over target layers proposes a block in one forward, "
    "refined token by token by a small Markov head",
    DSparkSpec,
    drafting=Drafting(
        "model",
        in_engine=lambda block: EngineDrafter("DSpark draft", block.draft_model),
        draft_len=lambda block: block.max_draft_len,
    ),
    pytorch=PyTorchPath(_speculative_config, checkpoints=draft_checkpoint),
)
