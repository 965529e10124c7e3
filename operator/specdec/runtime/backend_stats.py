"""Reading what the backends report about speculation, for the front's metrics.

- trtllm-serve's GET /metrics: a list of iteration statistics (executor IterationStats as JSON). Fields per
  TensorRT-LLM's cpp/include/tensorrt_llm/executor/types.h (SpecDecodingStats, IterationStats) and their JSON
  names in cpp/tensorrt_llm/executor/jsonSerialization.cpp. The PyTorch backend fills them in
  tensorrt_llm/_torch/pyexecutor/py_executor.py (_update_iter_stats): numRequestsWithDraftTokens counts the
  generation requests that carried draft tokens in the iteration (one target step each);
  specDecodingStats.iterLatencyMS is the draft model's time only (tensorrt_llm/_torch/speculative/
  model_drafter.py, last_draft_latency_ms), 0 in the one-model modes (eagle3 one-model, MTP) and ngram,
  where no drafter is timed; draftOverhead is that time over the whole iteration's iterLatencyMS.
  inflightBatchingStats.numGenRequests is the iteration's generation requests (its batch of sequences in
  decode), the batch the load model (specdec.load_model) prices an iteration's time at.
- Triton's Prometheus metrics: nv_inference_compute_infer_duration_us per model. The TensorRT-LLM backend
  reports each request's compute time from enqueue to its final response
  (triton_backend/inflight_batcher_llm/src/model_instance_state.cc, reportBaseMetrics), so concurrent
  requests each count their own time: it is request time, not GPU time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

TRITON_COMPUTE_METRIC = "nv_inference_compute_infer_duration_us"
# The TensorRT-LLM backend's gauges of a model's latest iteration (inflight_batcher_llm/src/
# custom_metrics_reporter.cc): its iteration counter, its timestamp (µs) and the generation requests it held.
TRITON_ITERATION_GAUGES = {
    ("nv_trt_llm_general_metrics", "general_type", "iteration_counter"): "iterations",
    ("nv_trt_llm_general_metrics", "general_type", "timestamp"): "timestamp_us",
    (
        "nv_trt_llm_inflight_batcher_metrics",
        "inflight_batcher_specific_metric",
        "generation_requests",
    ): "generation_requests",
}


@dataclass(frozen=True)
class IterationSpeculation:
    draft: int
    accepted: int
    steps: int
    # None when the iteration did not time its drafter (nothing to split the iteration with).
    draft_seconds: float | None
    target_seconds: float | None


@dataclass(frozen=True)
class IterationLoad:
    """One target iteration: its time, the sequences it stepped and their draft tokens (mean per sequence)."""

    seconds: float
    sequences: float
    draft_tokens: float


def _number(value: Any) -> float:
    """A finite number, else 0 (JSON may say NaN or Infinity, which no counter can take)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    return float(value) if math.isfinite(value) else 0.0


def iteration_speculation(item: Any) -> IterationSpeculation | None:
    """One iteration statistic of trtllm-serve (a dict, or a JSON string in some versions); None without
    speculation figures."""
    if isinstance(item, str):
        try:
            item = json.loads(item)
        except ValueError:
            return None
    spec = item.get("specDecodingStats") if isinstance(item, dict) else None
    if not isinstance(spec, dict):
        return None
    steps = int(_number(spec.get("numRequestsWithDraftTokens")))
    draft_ms, iteration_ms = _number(spec.get("iterLatencyMS")), _number(item.get("iterLatencyMS"))
    timed = steps > 0 and 0 < draft_ms <= iteration_ms
    return IterationSpeculation(
        draft=int(_number(spec.get("numDraftTokens"))),
        accepted=int(_number(spec.get("numAcceptedTokens"))),
        steps=steps,
        draft_seconds=draft_ms / 1000 if timed else None,
        target_seconds=(iteration_ms - draft_ms) / 1000 if timed else None,
    )


def iteration_load(item: Any) -> IterationLoad | None:
    """A trtllm-serve iteration statistic (as iteration_speculation reads it) as a window of the load model;
    None when the iteration stepped no generation request or was not timed."""
    if isinstance(item, str):
        try:
            item = json.loads(item)
        except ValueError:
            return None
    if not isinstance(item, dict):
        return None
    batching = item.get("inflightBatchingStats")
    sequences = _number(batching.get("numGenRequests")) if isinstance(batching, dict) else 0.0
    seconds = _number(item.get("iterLatencyMS")) / 1000
    if sequences <= 0 or seconds <= 0:
        return None
    spec = item.get("specDecodingStats")
    draft = _number(spec.get("numDraftTokens")) if isinstance(spec, dict) else 0.0
    return IterationLoad(seconds, sequences, draft / sequences)


def triton_compute_us(text: str) -> dict[str, float]:
    """Triton's cumulative compute time (µs) by model, summed over versions; {} when unreadable."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name != TRITON_COMPUTE_METRIC:
                continue
            for sample in family.samples:
                if not sample.name.endswith("_created") and math.isfinite(sample.value):
                    model = sample.labels.get("model", "")
                    totals[model] = totals.get(model, 0.0) + sample.value
    except ValueError:
        return {}
    return totals


def triton_iteration_gauges(text: str, model: str) -> dict[str, float]:
    """`model`'s latest iteration (keys: iterations, timestamp_us, generation_requests); {} when unreadable."""
    found: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                for (name, label, value), key in TRITON_ITERATION_GAUGES.items():
                    if (
                        sample.name == name
                        and sample.labels.get(label) == value
                        and sample.labels.get("model") == model
                        and math.isfinite(sample.value)
                    ):
                        found[key] = sample.value
    except ValueError:
        return {}
    return found


class Increases:
    """How much polled cumulative counters grew since the last poll. One that went down was reset (its
    server restarted), so all of its new value is new."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def __call__(self, key: str, value: float) -> float:
        last = self._last.get(key, 0.0)
        self._last[key] = value
        return value - last if value >= last else value
