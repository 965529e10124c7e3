"""AUTO: TensorRT-LLM picks a draft-model-free method itself (PyTorch path, AutoDecodingConfig).

AutoDecodingConfig in NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @
0004396720054fd8e205cbf616f21f0b57c6b412 has no field of its own beyond the literal, and says the
attributes it inherits are ignored; the 1.3.0rc29 API reference page
(nvidia.github.io/TensorRT-LLM/1.3.0rc29/llm-api/reference/AutoDecodingConfig.html) shows the same.
`tensorrt_llm/_torch/speculative/auto_heuristic.py` (suggest_spec_config, @ 7274a594b8) replaces it with
NGram from max_batch_size: max_draft_len 5 and n-grams of 3 up to batch size 4, else 3 and 5;
speculation off above 32 requests (max_concurrency 32). So the mode has no block: nothing to set.
inferred: the search tool stores no 1.4.0rc1 reference page of this class, so that it is the same in
the pinned 1.4.0rc1 is inferred from the releases on either side of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specdec.modes.mode import Drafting, Mode, PyTorchPath

DECODING_TYPE = "AUTO"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)


def _speculative_config(block: None, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    return {"decoding_type": DECODING_TYPE}


# draft_len: None, the runtime chooses it (3, or 5 when max_batch_size is at most 4).
MODE: Mode[None] = Mode(
    "auto",
    "TensorRT-LLM chooses a method without a draft model (NGram, sized by the batch size, off above 32 requests)",
    drafting=Drafting("lookup"),
    pytorch=PyTorchPath(_speculative_config),
)
