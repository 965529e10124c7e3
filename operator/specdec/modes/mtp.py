"""MTP: the model's own multi-token-prediction layers draft (DeepSeek-V3/R1 and others that ship
them; PyTorch path, MTPDecodingConfig).

Fields as the pinned release's API reference page lists them
(nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/MTPDecodingConfig.html): use_relaxed_acceptance_for_thinking
(default False), relaxed_topk (PositiveInt, 1), relaxed_delta (>= 0, 0.0), use_mtp_vanilla (False),
use_dynamic_tree (False), dynamic_tree_max_topK, sa_config, begin_thinking_phase_token (128798),
end_thinking_phase_token (128799), and from the base max_total_draft_tokens. The page no longer has
mtp_eagle_one_model (the one-model implementation is the only one). Not exposed: num_nextn_predict_layers
(deprecated, remapped to max_draft_len), spec_dec_variant and moe_backend (types only on the page).
Descriptions from `tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from specdec.modes.mode import Drafting, EngineDrafter, Mode, PyTorchPath
from specdec.modes.pytorch import DYNAMIC_TREE_RULES, DynamicSpeculation, DynamicTree, SAEnhancer
from specdec.schema.base import ApiModel, cel, rules_of, validations

DECODING_TYPE = "MTP"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
THINKING_TOKEN_MAX = 10_000_000


class RelaxedAcceptance(ApiModel):
    """Relaxed acceptance inside a reasoning model's thinking phase (use_relaxed_acceptance_for_thinking)."""

    top_k: int = Field(
        1, ge=1, le=64, description="A draft token is accepted if it is among the target's top-k (relaxed_topk)."
    )
    delta: float = Field(
        0.0, ge=0, le=1, description="Only candidates with probability >= top-1 minus delta count (relaxed_delta)."
    )
    begin_thinking_phase_token: int = Field(
        128798,
        ge=0,
        le=THINKING_TOKEN_MAX,
        description="Token id that opens the thinking phase, where relaxed acceptance applies "
        "(begin_thinking_phase_token).",
    )
    end_thinking_phase_token: int = Field(
        128799,
        ge=0,
        le=THINKING_TOKEN_MAX,
        description="Token id that closes it; strict acceptance resumes (end_thinking_phase_token).",
    )


class MtpSpec(DynamicTree, DynamicSpeculation):
    """MTP speculation with the target checkpoint's own MTP layers."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        *DYNAMIC_TREE_RULES,
        cel("!self.useDynamicTree || has(self.maxDraftLen)", "useDynamicTree needs maxDraftLen", ".maxDraftLen"),
    )

    max_draft_len: int | None = Field(
        None,
        ge=1,
        le=16,
        description="Draft tokens per step (max_draft_len). Default: the checkpoint's number of MTP layers.",
    )
    relaxed_acceptance: RelaxedAcceptance | None = Field(
        None, description="Set to accept near-misses in the thinking phase (reasoning models)."
    )
    use_mtp_vanilla: bool = Field(
        False,
        description="Run the MTP layers one after another (vanilla MTP); else a "
        "single-layer checkpoint drafts EAGLE-style (use_mtp_vanilla).",
    )
    sa_config: SAEnhancer | None = Field(
        None, description="Combine with suffix-automaton drafting (sa_config, beta in TensorRT-LLM)."
    )


def _speculative_config(block: MtpSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    config: dict[str, Any] = {"decoding_type": DECODING_TYPE, **block.tree_config()}
    if block.max_draft_len is not None:
        config["max_draft_len"] = block.max_draft_len
    relaxed = block.relaxed_acceptance
    if relaxed is not None:
        config.update(
            use_relaxed_acceptance_for_thinking=True,
            relaxed_topk=relaxed.top_k,
            relaxed_delta=relaxed.delta,
            begin_thinking_phase_token=relaxed.begin_thinking_phase_token,
            end_thinking_phase_token=relaxed.end_thinking_phase_token,
        )
    if block.use_mtp_vanilla:
        config["use_mtp_vanilla"] = True
    if block.sa_config is not None:
        config["sa_config"] = block.sa_config.config()
    return {**config, **block.dynamic_config()}


def _mtp_layers(block: MtpSpec) -> EngineDrafter:
    """The MTP layers are in the target checkpoint (and its parameter count). TensorRT-LLM caches K and V of
    num_nextn_predict_layers of them with use_mtp_vanilla (max_draft_len on the pinned release, the
    checkpoint's count when unset: at least one), else of one (MTP-Eagle): get_num_spec_layers in
    tensorrt_llm/_torch/speculative/utils.py."""
    layers = (block.max_draft_len or 1) if block.use_mtp_vanilla else 1
    return EngineDrafter("MTP layers", kv_layers=layers)


MODE = Mode(
    "mtp",
    "the target's own multi-token-prediction layers propose the tokens",
    MtpSpec,
    drafting=Drafting("head", in_engine=_mtp_layers, draft_len=lambda block: block.max_draft_len),
    pytorch=PyTorchPath(_speculative_config),
)
