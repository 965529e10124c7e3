"""The load model's draft lengths by load as trtllm-serve's `draft_len_schedule`, and whether rolling one out
pays. Pure: no I/O.

specdec.speculation.load_model gives the best length from each number of sequences in flight on: [(1, 4), (4, 3),
(8, 2), (19, 1), (61, 0)]. TensorRT-LLM's draft_len_schedule (DecodingBaseConfig; tensorrt_llm/_torch/speculative/
utils.py get_draft_len_for_batch_size) keys each tier by the largest batch size it covers, {3: 4, 7: 3, 18: 2,
60: 1}, draws nothing above the largest key, and needs the smallest key's length to be max_draft_len. A tier
of 0 on a one-engine mode leaves the drafter's pools stale on the pinned release (TensorRT-LLM PR 16888):
there the lengths are floored at 1 and the last tier runs to LAST_BATCH, so no batch size drafts 0.
"""

from __future__ import annotations

from itertools import pairwise

from specdec.speculation import load_model

LAST_BATCH = 65536  # the largest key of a schedule that never drafts 0: above any batch a server runs
Schedule = dict[int, int]  # largest batch size of the tier -> draft length


def from_load_schedule(entries: list[tuple[int, int]], draft_len: int, floor: int) -> Schedule | None:
    """The draft_len_schedule for a server at max_draft_len `draft_len`; None when it would draft draft_len
    at every batch size (no schedule needed)."""
    tiers: list[tuple[int, int]] = []  # (from n, k)
    for i, (n, k) in enumerate(entries):
        k = draft_len if i == 0 else max(min(k, draft_len), floor)
        if tiers and tiers[-1][1] == k:
            continue
        tiers.append((n, k))
    if tiers == [(1, draft_len)]:
        return None
    schedule = {later[0] - 1: k for (_, k), later in pairwise(tiers)}
    if tiers[-1][1] > 0:
        schedule[LAST_BATCH] = tiers[-1][1]
    return {n: k for n, k in schedule.items() if k > 0}


def draft_len_at(schedule: Schedule | None, draft_len: int, batch: float) -> int:
    """What TensorRT-LLM drafts at this batch size."""
    if schedule is None:
        return draft_len
    return next((k for largest, k in sorted(schedule.items()) if batch <= largest), 0)


def predicted_gain(
    fit: load_model.StepTime,
    alpha: float,
    cost_ratio: float,
    batch: float,
    draft_len: int,
    current: Schedule | None,
    proposed: Schedule | None,
) -> float:
    """Relative gain in tokens per second at `batch` sequences in flight of `proposed` over `current`."""

    def rate(schedule: Schedule | None) -> float:
        return load_model.speedup(fit, batch, draft_len_at(schedule, draft_len, batch), alpha, cost_ratio)

    return rate(proposed) / rate(current) - 1.0


def clamped(schedule: Schedule | None, draft_len: int) -> Schedule | None:
    """A schedule made for another max_draft_len, for this one: no length above it, the first tier at it."""
    if not schedule:
        return None
    items = sorted(schedule.items())
    entries = [(1, items[0][1])] + [(largest + 1, k) for (largest, _), (_, k) in pairwise(items)]
    if items[-1][0] != LAST_BATCH:  # above the largest key, nothing is drafted
        entries.append((items[-1][0] + 1, 0))
    return from_load_schedule(entries, draft_len, floor=0)
