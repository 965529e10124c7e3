"""PARD (PARallel Draft): a small target-independent draft model fills K mask tokens and proposes all K
draft tokens in one forward pass (PyTorch path, PARDDecodingConfig). One PARD checkpoint serves a whole
model family (amd/PARD-Llama-3.2-1B for Llama 3 targets); it is fetched into the cache by a ModelCache
like eagle3's draft head and given to trtllm-serve as speculative_model.

Fields, defaults and the literal as PARDDecodingConfig has them in NVIDIA/TensorRT-LLM
`tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412: decoding_type "PARD";
mask_token_id Optional[int], default None (read from the draft's config, typically its vocab_size);
sa_config Optional[SAEnhancerConfig] (beta: threshold PositiveInt default 4, enable_global_pool bool default
False); from DecodingBaseConfig max_draft_len Optional[NonNegativeInt] and speculative_model (also accepted
as speculative_model_dir; we emit speculative_model, as for eagle3). Backend pytorch only (supports_backend).
inferred: the search tool stores no 1.4.0rc1 source or reference page of this class, so that the pinned
1.4.0rc1 has the same fields is inferred from main; an older stored llm_args.py has PARD without sa_config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from specdec.modes.mode import Drafting, EngineDrafter, Mode, PyTorchPath
from specdec.modes.pytorch import DynamicSpeculation, SAEnhancer
from specdec.schema.base import MODEL_URI_HELP, ModelUri, cel, rules_of, validations

DECODING_TYPE = "PARD"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)


class PardSpec(DynamicSpeculation):
    """PARD speculation: the parallel draft model proposes maxDraftLen tokens per step in one forward."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        cel(
            "has(self.draftModel)",
            "pard needs its parallel draft checkpoint: set draftModel (e.g. hf://amd/PARD-Llama-3.2-1B for "
            "Llama 3 targets)",
            ".draftModel",
        ),
    )

    draft_model: ModelUri | None = Field(
        None, description=f"The PARD draft checkpoint (speculative_model), required: {MODEL_URI_HELP}."
    )
    max_draft_len: int = Field(
        4,
        ge=1,
        le=32,
        description="Draft tokens per step (max_draft_len); the target verifies 2 x this many tokens per request.",
    )
    mask_token_id: int | None = Field(
        None,
        ge=0,
        description="The mask token the draft fills (mask_token_id). Default: the draft "
        "checkpoint's config (typically its vocab_size).",
    )
    sa_config: SAEnhancer | None = Field(
        None, description="Combine with suffix-automaton drafting (sa_config, beta in TensorRT-LLM)."
    )


def _speculative_config(block: PardSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    assert block.draft_model is not None  # required by the block's rule
    config: dict[str, Any] = {
        "decoding_type": DECODING_TYPE,
        "max_draft_len": block.max_draft_len,
        "speculative_model": checkpoint(block.draft_model),
    }
    if block.mask_token_id is not None:
        config["mask_token_id"] = block.mask_token_id
    if block.sa_config is not None:
        config["sa_config"] = block.sa_config.config()
    return {**config, **block.dynamic_config()}


MODE = Mode(
    "pard",
    "a target-independent parallel draft model proposes all the tokens in one forward",
    PardSpec,
    drafting=Drafting(
        "model",
        in_engine=lambda block: EngineDrafter("PARD draft", block.draft_model),
        draft_len=lambda block: block.max_draft_len,
    ),
    pytorch=PyTorchPath(
        _speculative_config, checkpoints=lambda block: (block.draft_model,) if block.draft_model else ()
    ),
)
