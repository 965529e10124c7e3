"""SA (suffix automaton): a GPU suffix automaton over the prompt and the output proposes the tokens inside
the target's own forward pass, no draft model at all (PyTorch path, SADecodingConfig).

Fields, defaults and rules as SADecodingConfig has them in NVIDIA/TensorRT-LLM
`tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412 (the same class as the
1.3.0rc27 API reference page, nvidia.github.io/TensorRT-LLM/1.3.0rc27/llm-api/reference/SADecodingConfig.html).
inferred: the search tool stores no 1.4.0rc1 reference page of this class, so that it is the same in
the pinned 1.4.0rc1 is inferred from the releases on either side of it.

global_pool_size is left out: TensorRT-LLM wants it at least the server's max_batch_size, which the
operator does not set on the PyTorch path (trtllm-serve's default), so no value could be checked before
the pod starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import Field

from specdec.modes.mode import Drafting, Mode, PyTorchPath
from specdec.modes.pytorch import DynamicSpeculation
from specdec.schema.base import cel, rules_of, validations

DECODING_TYPE = "SA"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
LONGEST_MATCH = -1  # max_matching_ngram_size: the longest match the automaton finds
GLOBAL_POOL_MATCH = 64  # with enable_global_pool, suffix matching is capped at 64 tokens


class SASpec(DynamicSpeculation):
    """SA speculation: the longest (or a fixed-size) suffix match in the request's tokens proposes
    maxDraftLen tokens per step."""

    model_config = validations(
        *rules_of(DynamicSpeculation),
        cel(
            "self.maxMatchingNgramSize != 0",
            "maxMatchingNgramSize is -1 (the longest match) or a fixed n-gram size of 1 or more",
            ".maxMatchingNgramSize",
        ),
        cel(
            f"!self.enableGlobalPool || self.maxMatchingNgramSize <= {GLOBAL_POOL_MATCH}",
            f"with enableGlobalPool, maxMatchingNgramSize is -1 or at most {GLOBAL_POOL_MATCH}",
            ".maxMatchingNgramSize",
        ),
    )

    max_draft_len: int = Field(4, ge=1, le=32, description="Draft tokens per step (max_draft_len).")
    max_matching_ngram_size: int = Field(
        LONGEST_MATCH,
        ge=-1,
        le=1024,
        description="-1: the longest suffix match; a positive value: n-grams of that fixed size "
        "(max_matching_ngram_size).",
    )
    enable_global_pool: bool = Field(
        False,
        description="Each request searches every active request's automaton, not only its own "
        "(enable_global_pool; at most 1024 slots, matches capped at 64 tokens).",
    )


def _speculative_config(block: SASpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    return {
        "decoding_type": DECODING_TYPE,
        "max_draft_len": block.max_draft_len,
        "max_matching_ngram_size": block.max_matching_ngram_size,
        "enable_global_pool": block.enable_global_pool,
        **block.dynamic_config(),
    }


MODE = Mode(
    "sa",
    "a suffix automaton over the prompt and output proposes the tokens inside the target's forward (no draft model)",
    SASpec,
    drafting=Drafting("lookup", draft_len=lambda block: block.max_draft_len),
    pytorch=PyTorchPath(_speculative_config),
)
