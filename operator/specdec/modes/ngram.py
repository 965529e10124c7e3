"""NGram (prompt lookup): draft tokens come from n-grams already seen, no draft model at all
(PyTorch path, NGramDecodingConfig)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from specdec.modes.mode import Drafting, Mode, PyTorchPath
from specdec.modes.pytorch import SCHEDULE_RULES, DynamicSpeculation
from specdec.schema.base import validations

DECODING_TYPE = "NGram"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)


class NGramSpec(DynamicSpeculation):
    """NGram speculation: continuations of matching n-grams are proposed as draft tokens."""

    # The n-gram drafter runs outside the target's engine: a tier of 0 is fine (specdec.modes.pytorch).
    model_config = validations(*SCHEDULE_RULES)

    max_draft_len: int = Field(4, ge=1, le=32, description="Draft tokens per step (max_draft_len).")
    max_matching_ngram_size: int = Field(
        2, ge=1, le=32, description="Longest n-gram matched against the pool (max_matching_ngram_size)."
    )
    is_keep_all: bool = Field(
        True, description="Keep every candidate continuation of a pattern, else only one (is_keep_all)."
    )
    is_use_oldest: bool = Field(
        True, description="Propose the oldest continuation of a match, else the newest (is_use_oldest)."
    )
    is_public_pool: bool = Field(True, description="One pool for all requests, else one per request (is_public_pool).")


def _speculative_config(block: NGramSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    return {
        "decoding_type": DECODING_TYPE,
        "max_draft_len": block.max_draft_len,
        "max_matching_ngram_size": block.max_matching_ngram_size,
        "is_keep_all": block.is_keep_all,
        "is_use_oldest": block.is_use_oldest,
        "is_public_pool": block.is_public_pool,
        **block.dynamic_config(),
    }


MODE = Mode(
    "ngram",
    "n-grams already seen in the prompt and output propose the tokens (no draft model)",
    NGramSpec,
    drafting=Drafting("lookup", draft_len=lambda block: block.max_draft_len),
    pytorch=PyTorchPath(_speculative_config),
)
