"""What the PyTorch path's modes share: the dynamic-speculation settings of trtllm-serve's
`speculative_config` (DecodingBaseConfig), the suffix-automaton enhancer (SAEnhancerConfig) and the
dynamic draft tree (Eagle3 and MTP), and where its literals and keys come from (each mode's `DECODING_TYPE`).

Read from NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412
(the newest version the search tool stores) and the pinned 1.4.0rc1 API reference pages where the search tool
stores them; tests/runtime/data/trtllm_speculative_config.json keeps the fields read and where, and tests
check every key we emit against it. The literals changed between releases (DraftTarget, then Draft_Target),
and so did field names (acceptance_window became acceptance_rate_window_size): take them from there, not
from blog posts.

draft_len_schedule (DecodingBaseConfig's validator): batch-size thresholds >= 1 to draft lengths >= 0, the
smallest threshold's length equal to max_draft_len, none above it, exclusive with max_concurrency (which
TensorRT-LLM turns into the schedule {max_concurrency: max_draft_len}); batch sizes above the largest
threshold get 0. A tier of 0 on a mode whose drafter runs inside the target's engine (TensorRT-LLM's
one-model path: every mode here but NGram) leaves the drafter's pools stale on the pinned release
(TensorRT-LLM PR 16888, open): refused.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from specdec.schema.base import ApiModel, cel, validations

PYTORCH_FP8 = (
    "quantization fp8 is prepared on the engine path only (quantize.py); with backend pytorch serve a "
    "checkpoint that is FP8 already, with quantization: none, or use backend tensorrt"
)


MAX_SCHEDULE_TIERS = 16
DraftLenTier = Annotated[int, Field(ge=0, le=64)]


SCHEDULE_RULES = (
    cel(
        "has(self.acceptanceRateWindowSize) == has(self.acceptanceRateThreshold)",
        "acceptanceRateWindowSize and acceptanceRateThreshold go together",
        ".acceptanceRateThreshold",
    ),
    cel(
        "!(has(self.maxConcurrency) && has(self.draftLenSchedule))",
        "set maxConcurrency (speculation off above a batch size) or draftLenSchedule (draft lengths by batch "
        "size, off above its largest), not both",
        ".draftLenSchedule",
    ),
    cel(
        "!has(self.draftLenSchedule) || self.draftLenSchedule.all(k, k.matches('^[1-9][0-9]{0,5}$'))",
        "draftLenSchedule's keys are batch sizes: integers from 1 to 999999",
        ".draftLenSchedule",
    ),
    cel(
        "!has(self.draftLenSchedule) || !has(self.maxDraftLen) || "
        "self.draftLenSchedule.all(k, self.draftLenSchedule[k] <= self.maxDraftLen)",
        "draftLenSchedule's draft lengths are at most maxDraftLen",
        ".draftLenSchedule",
    ),
)
SMALLEST_TIER = "draftLenSchedule's smallest batch size drafts maxDraftLen tokens"
# Where the drafter runs inside the target's engine (every mode here but NGram): no tier of 0 (above).
NO_ZERO_TIER = cel(
    "!has(self.draftLenSchedule) || self.draftLenSchedule.all(k, self.draftLenSchedule[k] > 0)",
    "a draftLenSchedule tier of 0 leaves this mode's drafter stale on the pinned TensorRT-LLM release "
    "(its drafter runs inside the target's engine): end the schedule at its last non-zero tier "
    "(batch sizes above the largest key draft nothing)",
    ".draftLenSchedule",
)


class DynamicSpeculation(ApiModel):
    """Speculation that turns itself off, or drafts less, where it stops paying (DecodingBaseConfig). Every
    subclass has a maxDraftLen; its rules are SCHEDULE_RULES plus, but for NGram, NO_ZERO_TIER, and
    (checked here, not in CEL: comparing every key with every other would be priced far above the API
    server's CEL budget for keys of unbounded length) SMALLEST_TIER."""

    model_config = validations(*SCHEDULE_RULES, NO_ZERO_TIER)

    max_concurrency: int | None = Field(
        None,
        ge=1,
        le=65536,
        description="Speculation is off at batch sizes above this (max_concurrency). Default: always on.",
    )
    draft_len_schedule: dict[str, DraftLenTier] | None = Field(
        None,
        min_length=1,
        max_length=MAX_SCHEDULE_TIERS,
        description="Draft length by batch size (draft_len_schedule): each key is the largest batch size of its "
        'tier, e.g. {"4": 4, "8": 2, "32": 1}; the smallest key\'s length is maxDraftLen, none is '
        "above it; batch sizes above the largest key draft nothing. A tier of 0 is refused where the "
        "drafter runs inside the target's engine (every mode but ngram on the pinned release).",
    )
    acceptance_rate_window_size: int | None = Field(
        None,
        ge=1,
        le=1000000,
        description="Decoding iterations averaged for the acceptance-rate cut-off (acceptance_rate_window_size).",
    )
    acceptance_rate_threshold: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Speculation turns off for good when the average acceptance rate over the window drops below this "
        "(acceptance_rate_threshold).",
    )

    @model_validator(mode="after")
    def _smallest_tier_drafts_max_draft_len(self):
        schedule, max_draft_len = self.draft_len_schedule, getattr(self, "max_draft_len", None)
        if schedule and max_draft_len is not None and all(key.isdigit() for key in schedule):
            smallest = min(schedule, key=int)
            if schedule[smallest] != max_draft_len:
                raise ValueError(f"{SMALLEST_TIER} ({smallest}: {schedule[smallest]}, maxDraftLen {max_draft_len})")
        return self

    def dynamic_config(self) -> dict[str, Any]:
        schedule = (
            {int(k): v for k, v in sorted(self.draft_len_schedule.items(), key=lambda kv: int(kv[0]))}
            if self.draft_len_schedule
            else None
        )
        fields = {
            "max_concurrency": self.max_concurrency,
            "draft_len_schedule": schedule,
            "acceptance_rate_window_size": self.acceptance_rate_window_size,
            "acceptance_rate_threshold": self.acceptance_rate_threshold,
        }
        return {k: v for k, v in fields.items() if v is not None}


class SAEnhancer(ApiModel):
    """The suffix-automaton enhancer (sa_config, SAEnhancerConfig, beta in TensorRT-LLM): a long enough suffix
    match in the request's tokens overrides the neural draft's tokens."""

    threshold: int = Field(
        4,
        ge=1,
        le=1024,
        description="Suffix-match length from which the automaton's tokens replace the draft's (threshold).",
    )
    enable_global_pool: bool = Field(
        False,
        description="Each request searches every active request's automaton, not only its own (enable_global_pool).",
    )

    def config(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "enable_global_pool": self.enable_global_pool}


class DynamicTree(ApiModel):
    """The dynamic draft tree (EAGLE-2 style) of Eagle3 and MTP: each draft step expands dynamicTreeMaxTopK
    candidates per node; the tree holds maxTotalDraftTokens tokens (default: dynamicTreeMaxTopK x maxDraftLen)."""

    use_dynamic_tree: bool = Field(
        False,
        description="Dynamic draft tree instead of a chain (use_dynamic_tree). "
        "Not for models with sliding-window attention or MLA.",
    )
    dynamic_tree_max_top_k: int | None = Field(
        None, ge=1, le=64, description="Candidates per node and draft step of the dynamic tree (dynamic_tree_max_topK)."
    )
    max_total_draft_tokens: int | None = Field(
        None,
        ge=1,
        le=2048,
        description="Draft tokens in the tree, from maxDraftLen to dynamicTreeMaxTopK x "
        "maxDraftLen (max_total_draft_tokens). Default: the latter.",
    )

    def tree_config(self) -> dict[str, Any]:
        if not self.use_dynamic_tree:
            return {}
        config: dict[str, Any] = {"use_dynamic_tree": True, "dynamic_tree_max_topK": self.dynamic_tree_max_top_k}
        if self.max_total_draft_tokens is not None:
            config["max_total_draft_tokens"] = self.max_total_draft_tokens
        return config


DYNAMIC_TREE_RULES = (
    cel(
        "!has(self.dynamicTreeMaxTopK) || self.useDynamicTree",
        "dynamicTreeMaxTopK applies with useDynamicTree: true",
        ".dynamicTreeMaxTopK",
    ),
    cel(
        "!self.useDynamicTree || has(self.dynamicTreeMaxTopK)",
        "useDynamicTree needs dynamicTreeMaxTopK",
        ".useDynamicTree",
    ),
    cel(
        "!has(self.maxTotalDraftTokens) || (self.useDynamicTree && has(self.maxDraftLen) && "
        "has(self.dynamicTreeMaxTopK) && "
        "self.maxTotalDraftTokens >= self.maxDraftLen && self.maxTotalDraftTokens <= "
        "self.dynamicTreeMaxTopK * self.maxDraftLen)",
        "maxTotalDraftTokens sizes a dynamic tree: from maxDraftLen to dynamicTreeMaxTopK x maxDraftLen",
        ".maxTotalDraftTokens",
    ),
)
