"""What the PyTorch path's modes share: the dynamic-speculation settings of trtllm-serve's
`speculative_config`, and where its literals and keys come from (each mode's `DECODING_TYPE`).

Read from NVIDIA/TensorRT-LLM `tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412
(the newest version the search tool stores; tests/runtime/data/trtllm_speculative_config.json keeps the
fields read, and tests check every key we emit against it). The literals changed between releases
(DraftTarget, then Draft_Target), and so did field names (acceptance_window became
acceptance_rate_window_size): take them from there, not from blog posts.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from specdec.api.base import ApiModel, cel, validations

PYTORCH_FP8 = ("quantization fp8 is prepared on the engine path only (quantize.py); with backend pytorch serve a "
               "checkpoint that is FP8 already, with quantization: none, or use backend tensorrt")



class DynamicSpeculation(ApiModel):
    """Speculation that turns itself off where it stops paying (DecodingBaseConfig, PyTorch backend)."""

    model_config = validations(
        cel("has(self.acceptanceRateWindowSize) == has(self.acceptanceRateThreshold)",
            "acceptanceRateWindowSize and acceptanceRateThreshold go together", ".acceptanceRateThreshold"),
    )

    max_concurrency: int | None = Field(
        None, ge=1, le=65536, description="Speculation is off at batch sizes above this (max_concurrency). Default: always on.")
    acceptance_rate_window_size: int | None = Field(
        None, ge=1, le=1000000, description="Decoding iterations averaged for the acceptance-rate cut-off (acceptance_rate_window_size).")
    acceptance_rate_threshold: float | None = Field(
        None, ge=0, le=1, description="Speculation turns off for good when the average acceptance rate over the window drops below this (acceptance_rate_threshold).")

    def dynamic_config(self) -> dict[str, Any]:
        fields = {"max_concurrency": self.max_concurrency,
                  "acceptance_rate_window_size": self.acceptance_rate_window_size,
                  "acceptance_rate_threshold": self.acceptance_rate_threshold}
        return {k: v for k, v in fields.items() if v is not None}
