"""Draft-target: a small draft model proposes, the target verifies.

Engine path (TensorRT-LLM 1.2.x): the target engine is built with `--speculative_decoding_mode
draft_tokens_external --max_draft_len N`, both engines with `--gather_generation_logits` for logits
acceptance; Triton's BLS serves the pair. PyTorch path: trtllm-serve's `Draft_Target` speculative
config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from specdec.modes.mode import AutoDraftLen, Drafting, EnginePath, Mode, PyTorchPath, Rule, RuntimeBlock
from specdec.modes.pytorch import PYTORCH_FP8
from specdec.schema.base import ApiModel, ModelSource, cel, validations
from specdec.schema.served_model import ServedModel

DECODING_TYPE = "Draft_Target"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
AUTO = "auto"
AUTO_START = 4  # where draftLen: auto starts (capped by maxDraftLen), then moves to what the traffic says
_IS_AUTO = "type(self.draftLen) == string"

DraftLen = Annotated[int, Field(ge=1, le=64)] | Annotated[str, Field(pattern=f"^{AUTO}$")]


class DraftTargetSpec(ApiModel):
    """Draft-target-model speculation: a small draft model proposes, the target verifies."""

    model_config = validations(
        cel(
            f"{_IS_AUTO} || !has(self.maxDraftLen) || self.draftLen <= self.maxDraftLen",
            "draftLen must be <= maxDraftLen (the target engine's capacity)",
            ".draftLen",
        ),
        cel(
            f"!({_IS_AUTO}) || has(self.maxDraftLen)",
            "draftLen: auto needs maxDraftLen: the engine's capacity is the longest draft it may choose",
            ".maxDraftLen",
        ),
    )

    draft: ModelSource = Field(description="The draft model (same fields as target).")
    draft_len: DraftLen = Field(
        description=(
            "Tokens the draft proposes per iteration (typically 4-10), or auto: the operator measures acceptance "
            "and moves it, within 1..maxDraftLen, to the length with the best estimated speedup; every change is an "
            "Event. Backend tensorrt: changed live, without restarting pods. Backend pytorch: trtllm-serve takes it "
            "at start, so a change is a surge rollout (a new pod ready before an old one goes), made only for a "
            "predicted gain of 5 % or more and at most once per the operator's draftLenRolloutSeconds (default 15 "
            "minutes)."
        )
    )
    max_draft_len: int | None = Field(
        None,
        ge=1,
        le=64,
        description="Draft capacity the target engine is built with (--max_draft_len). Default: draftLen.",
    )
    acceptance: Literal["tokens", "logits"] = Field(
        "tokens",
        description="tokens: accept by comparing tokens; logits: rejection sampling on draft/target logits (builds "
        "both engines with --gather_generation_logits).",
    )

    @property
    def auto(self) -> bool:
        return self.draft_len == AUTO

    @property
    def effective_max_draft_len(self) -> int:
        return self.max_draft_len or int(self.draft_len)  # auto has a maxDraftLen (the rule above)

    @property
    def start_draft_len(self) -> int:
        """The configured draft length, or where auto starts."""
        return min(AUTO_START, self.effective_max_draft_len) if self.auto else int(self.draft_len)


class RuntimeDraftTarget(ApiModel):
    mode: Literal["draftTarget"] = "draftTarget"
    draft: ServedModel
    draft_len: int = Field(ge=1)
    max_draft_len: int = Field(ge=1)
    use_logits: bool = False
    speculative_config: dict[str, Any] | None = Field(
        None, description="Backend pytorch: trtllm-serve's speculative_config."
    )


def _recipe(block: DraftTargetSpec, role: str) -> dict[str, Any]:
    fields: dict[str, Any] = {"gather_generation_logits": block.acceptance == "logits"}  # both engines need it
    if role == "target":
        fields.update(max_draft_len=block.effective_max_draft_len)
    return fields


def _speculative_config(block: DraftTargetSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    # No engine to size on this path: the draft proposes draftLen tokens per step.
    return {
        "decoding_type": DECODING_TYPE,
        "max_draft_len": block.start_draft_len,
        "speculative_model": checkpoint(block.draft.model),
    }


def _served_at(speculation: RuntimeDraftTarget, draft_len: int, schedule: dict[int, int] | None) -> RuntimeDraftTarget:
    """trtllm-serve takes the draft length and its draft_len_schedule at start: both in speculative_config."""
    config: dict[str, Any] = {**(speculation.speculative_config or {}), "max_draft_len": draft_len}
    if schedule:
        config["draft_len_schedule"] = schedule
    return speculation.model_copy(update={"speculative_config": config, "draft_len": draft_len})


def _runtime(
    block: DraftTargetSpec, draft: ServedModel | None, speculative_config: dict[str, Any] | None
) -> RuntimeDraftTarget:
    assert draft is not None  # the block's draft, always served
    return RuntimeDraftTarget(
        draft=draft,
        draft_len=block.start_draft_len,
        max_draft_len=block.effective_max_draft_len,
        use_logits=block.acceptance == "logits",
        speculative_config=speculative_config,
    )


MODE = Mode(
    "draftTarget",
    "a draft model proposes draftLen tokens, the target verifies them",
    DraftTargetSpec,
    rules=(
        Rule(
            "self.backend != 'pytorch' || self.speculation.draftTarget.draft.quantization == 'none'",
            PYTORCH_FP8,
            ".speculation.draftTarget.draft.quantization",
        ),
        Rule(
            "self.runtime.kvCache.enableBlockReuse",
            "draftTarget needs KV-cache block reuse (runtime.kvCache.enableBlockReuse: true)",
            ".runtime.kvCache.enableBlockReuse",
        ),
        Rule(
            "self.backend != 'pytorch' || !has(self.speculation.draftTarget.maxDraftLen) || "
            "type(self.speculation.draftTarget.draftLen) == string || "
            "self.speculation.draftTarget.maxDraftLen == self.speculation.draftTarget.draftLen",
            "maxDraftLen sizes the target engine of backend tensorrt; with backend pytorch the draft proposes "
            "draftLen tokens: leave maxDraftLen unset",
            ".speculation.draftTarget.maxDraftLen",
        ),
    ),
    drafting=Drafting(
        "model",
        draft=lambda block: block.draft,
        acceptance=lambda block: block.acceptance,
        draft_len=lambda block: block.start_draft_len,
        auto=AutoDraftLen(
            chosen=lambda block: block.auto,
            range=lambda block: (1, block.effective_max_draft_len),
            served_at=_served_at,
        ),
    ),
    # Triton's BLS model drives the draft's engine and the target's, built with --max_draft_len.
    engine=EnginePath("draft_tokens_external", _recipe, triton=True),
    pytorch=PyTorchPath(_speculative_config),
    runtime=RuntimeBlock(RuntimeDraftTarget, _runtime),
)
