"""Reading the backends' own statistics: what cannot be read, or is not a finite number, counts nothing."""

from __future__ import annotations

from specdec.runtime.backend_stats import (
    IterationLoad,
    IterationSpeculation,
    iteration_load,
    iteration_speculation,
    triton_compute_us,
)

HEADER = "# TYPE nv_inference_compute_infer_duration_us counter\n"


def test_tritons_compute_time_is_summed_over_versions_and_skips_what_is_not_a_number():
    page = HEADER + "".join(
        f'nv_inference_compute_infer_duration_us{{model="{m}",version="{v}"}} {us}\n'
        for m, v, us in (("tensorrt_llm", 1, 100), ("tensorrt_llm", 2, 50), ("tensorrt_llm_draft", 1, "NaN"))
    )
    assert triton_compute_us(page) == {"tensorrt_llm": 150}
    assert triton_compute_us("<html>not metrics</html>") == {}


def test_an_iteration_with_non_finite_figures_counts_them_as_zero():
    item = (
        '{"iterLatencyMS": Infinity, "specDecodingStats": {"numDraftTokens": NaN, "numAcceptedTokens": 2, '
        '"numRequestsWithDraftTokens": 1, "iterLatencyMS": 5.0}}'
    )
    assert iteration_speculation(item) == IterationSpeculation(
        draft=0, accepted=2, steps=1, draft_seconds=None, target_seconds=None
    )
    assert iteration_speculation("not json") is None


def test_an_iteration_is_a_load_window_only_with_generation_requests_and_a_time():
    item = {
        "iterLatencyMS": 30.0,
        "inflightBatchingStats": {"numGenRequests": 3},
        "specDecodingStats": {"numDraftTokens": 9},
    }
    assert iteration_load(item) == IterationLoad(seconds=0.03, sequences=3, draft_tokens=3)
    assert iteration_load({"iterLatencyMS": 30.0, "inflightBatchingStats": {"numGenRequests": 0}}) is None
    assert iteration_load({"iterLatencyMS": "NaN", "inflightBatchingStats": {"numGenRequests": 2}}) is None
    assert iteration_load({"iterLatencyMS": 5.0, "inflightBatchingStats": "garbage"}) is None
    assert iteration_load("[1, 2]") is None and iteration_load("not json") is None
