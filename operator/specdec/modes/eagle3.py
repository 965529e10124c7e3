"""EAGLE-3: a draft head trained on the target's hidden states (PyTorch path, Eagle3DecodingConfig).

Fields as the pinned release's API reference page lists them
(nvidia.github.io/TensorRT-LLM/1.4.0rc1/llm-api/reference/Eagle3DecodingConfig.html): use_dynamic_tree
(default False), dynamic_tree_max_topK, eagle3_layers_to_capture (Set[int], default: layers 1,
num_layers/2 - 1 and num_layers - 4), eagle3_model_arch Literal['llama3', 'mistral_large3'] = 'llama3',
sa_config (SAEnhancerConfig), and from the base max_total_draft_tokens. The page no longer has eagle_choices,
greedy_sampling, posterior_threshold or eagle3_one_model (the one-model implementation is the only one), so
none is emitted. Not exposed: num_eagle_layers (TensorRT-only, "do not use on the PyTorch backend" in
llm_args.py @ 0004396720054fd8e205cbf616f21f0b57c6b412, where the descriptions are read), max_non_leaves_per_layer
(internal to the tree), spec_dec_variant and moe_backend (the page gives their types only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from specdec.modes.mode import Drafting, EngineDrafter, Mode, PyTorchPath
from specdec.modes.pytorch import DYNAMIC_TREE_RULES, DynamicSpeculation, DynamicTree, SAEnhancer
from specdec.schema.base import MODEL_URI_HELP, ModelUri, cel, rules_of, validations

DECODING_TYPE = "Eagle3"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)

CapturedLayer = Annotated[int, Field(ge=-1, le=1023)]


class Eagle3Spec(DynamicTree, DynamicSpeculation):
    """EAGLE-3 speculation: the draft head proposes maxDraftLen tokens per step (a chain, or a dynamic tree)."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        *DYNAMIC_TREE_RULES,
        cel(
            "!has(self.eagle3LayersToCapture) || self.eagle3LayersToCapture.all(l, "
            "self.eagle3LayersToCapture.exists_one(m, m == l))",
            "eagle3LayersToCapture lists each layer once (a set in TensorRT-LLM)",
            ".eagle3LayersToCapture",
        ),
    )

    draft_model: ModelUri = Field(description=f"The EAGLE-3 draft head (speculative_model): {MODEL_URI_HELP}.")
    max_draft_len: int = Field(3, ge=1, le=32, description="Draft tokens per step (max_draft_len).")
    eagle3_model_arch: Literal["llama3", "mistral_large3"] = Field(
        "llama3", description="The draft head's architecture (eagle3_model_arch)."
    )
    eagle3_layers_to_capture: list[CapturedLayer] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Target layers whose hidden states the head reads, -1 for the last (eagle3_layers_to_capture). "
        "Default: layers 1, numLayers/2 - 1 and numLayers - 4 (-1 for mistral_large3); set the layers "
        "the head was trained on.",
    )
    sa_config: SAEnhancer | None = Field(
        None, description="Combine with suffix-automaton drafting (sa_config, beta in TensorRT-LLM)."
    )


def _speculative_config(block: Eagle3Spec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "decoding_type": DECODING_TYPE,
        "max_draft_len": block.max_draft_len,
        "speculative_model": checkpoint(block.draft_model),
        **block.tree_config(),
    }
    if block.eagle3_model_arch != "llama3":
        config["eagle3_model_arch"] = block.eagle3_model_arch
    if block.eagle3_layers_to_capture is not None:
        config["eagle3_layers_to_capture"] = sorted(block.eagle3_layers_to_capture)
    if block.sa_config is not None:
        config["sa_config"] = block.sa_config.config()
    return {**config, **block.dynamic_config()}


MODE = Mode(
    "eagle3",
    "an EAGLE-3 draft head on the target's hidden states proposes the tokens",
    Eagle3Spec,
    drafting=Drafting(
        "head",
        in_engine=lambda block: EngineDrafter("EAGLE-3 head", block.draft_model),
        draft_len=lambda block: block.max_draft_len,
    ),
    pytorch=PyTorchPath(_speculative_config, checkpoints=lambda block: (block.draft_model,)),
)
