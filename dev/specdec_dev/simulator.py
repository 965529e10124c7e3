"""Simulated backends for the local cluster, where no GPU runs a model: a simulated Triton (the BLS generate
endpoint, and Triton's Prometheus metrics on a port of their own) and a simulated trtllm-serve, speaking the
real servers' HTTP contracts (specdec_dev.backend_contracts) with numbers from an acceptance model.

The acceptance model (per request, a `simulation_profile.Profile`):
- each step, the draft proposes k tokens and each is accepted independently with probability
  `acceptance` until the first rejection; the step yields the accepted leading tokens plus one token of the
  target's own (the bonus token), so a step yields E(k) = (1 - a^(k+1)) / (1 - a) tokens on average
  (specdec.speculation.payoff.tokens_per_step) and the acceptance rate the servers report (accepted / drafted
  tokens) is (E(k) - 1) / k;
- both servers batch the requests in flight and a step's time depends on the batch's tokens
  (`targetStepSeconds`, `stepSecondsPerToken`, `costRatio`: see _Batching), so speculation stops paying above
  a concurrency; a request is answered once its steps have produced its tokens (one sleep per step of the
  whole batch: simulated time costs no CPU);
- `noise` moves the acceptance of each request by a uniform amount in [-noise, noise] (clipped to [0, 1]);
- `drafting` false: no draft tokens at all (k = 0), whatever is configured; one token per target step (a server
  whose speculation did not load, or that stopped speculating).

k is the request's `num_draft_tokens` on Triton (the front sends the draft length in effect), and the
configured max_draft_len (default 4) on trtllm-serve, by the step's batch size under a draft_len_schedule or
max_concurrency, where NGram's drafts cost nothing (a lookup, no model) and mode none drafts nothing. `profile`
may be replaced while serving; the next request uses it.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specdec.api.runtime_config import RuntimeConfig
from specdec.modes import MODES
from specdec.runtime import triton
from specdec.speculation.trtllm_schedule import draft_len_at
from specdec_dev.backend_contracts import Completion, Generation, TritonContract, TrtllmServeContract
from specdec_dev.simulation_profile import Profile

DEFAULT_DRAFT_LEN = 4
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # trtllm-serve's default, as OpenAI's
ITERATION_STATS_KEPT = 1000  # trtllm-serve keeps a bounded queue of iteration statistics too
TOKEN = " sim"


@dataclass(frozen=True)
class Steps:
    """How a request went: target steps, draft tokens proposed and accepted, and the simulated seconds."""

    steps: int
    draft_tokens: int
    accepted_tokens: int
    target_seconds: float
    draft_seconds: float

    @property
    def seconds(self) -> float:
        return self.target_seconds + self.draft_seconds


def accepted_prefix(draft_len: int, acceptance: float, rng: random.Random) -> int:
    """Leading accepted tokens of a draft of `draft_len`: P(at least m) = acceptance^m, from one draw."""
    if draft_len == 0 or acceptance <= 0:
        return 0
    if acceptance >= 1:
        return draft_len
    return min(draft_len, int(math.log(1.0 - rng.random()) / math.log(acceptance)))


def speculate(tokens: int, draft_len: int, profile: Profile, rng: random.Random, *, draft_costs: bool = True) -> Steps:
    """Steps until `tokens` tokens are out, at the profile's acceptance with this request's noise."""
    acceptance = min(1.0, max(0.0, profile.acceptance + rng.uniform(-profile.noise, profile.noise)))
    draft_len = draft_len if profile.drafting else 0
    produced = steps = accepted = 0
    while produced < tokens:
        prefix = accepted_prefix(draft_len, acceptance, rng)
        produced += prefix + 1
        accepted += prefix
        steps += 1
    step = profile.target_step_seconds
    draft_seconds = steps * draft_len * profile.cost_ratio * step if draft_costs else 0.0
    return Steps(steps, steps * draft_len, accepted, steps * step, draft_seconds)


class _Simulated:
    def __init__(self, profile: Profile, seed: int | None):
        self.profile = profile
        self.rng = random.Random(seed)


@dataclass(eq=False)
class _Sequence:
    """A request in a simulated server's batch."""

    remaining: int
    draft_len: int  # what the request or the configuration asks for
    acceptance: float
    done: asyncio.Future
    steps: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0


class _Batching(_Simulated):
    """In-flight batching as TensorRT-LLM's: one loop steps every request in flight together. A step of n
    sequences drafting k_i tokens each costs max(k_i) * costRatio * t(n) (the draft passes over the batch) plus
    t(sum(k_i + 1)) (the target verifies every sequence's drafts and its own token), with t(T) =
    targetStepSeconds + stepSecondsPerToken * T (specdec.speculation.load_model). A sequence joins at the next step."""

    def __init__(self, profile: Profile, seed: int | None = None):
        super().__init__(profile, seed)
        self.tokens_out = 0  # tokens generated, the bench's goodput
        self._batch: list[_Sequence] = []
        self._stepping: asyncio.Task | None = None

    async def _join(self, tokens: int, draft_len: int) -> _Sequence:
        """Generate `tokens` tokens in the batch; the sequence once done."""
        noise = self.profile.noise
        acceptance = min(1.0, max(0.0, self.profile.acceptance + self.rng.uniform(-noise, noise)))
        sequence = _Sequence(max(tokens, 1), draft_len, acceptance, asyncio.get_running_loop().create_future())
        self._batch.append(sequence)
        if self._stepping is None or self._stepping.done():
            self._stepping = asyncio.get_running_loop().create_task(self._step_all())
        try:
            await sequence.done
        finally:
            if sequence in self._batch:  # cancelled: it leaves the batch
                self._batch.remove(sequence)
        return sequence

    def _drafts(self, batch: list[_Sequence]) -> list[int]:
        """Draft tokens of each sequence in this step."""
        return [s.draft_len if self.profile.drafting else 0 for s in batch]

    def _draft_seconds(self, drafts: list[int], at_batch: float) -> float:
        return max(drafts) * self.profile.cost_ratio * at_batch

    def _stepped(
        self,
        batch: list[_Sequence],
        drafts: list[int],
        accepted: list[int],
        draft_seconds: float,
        verify_seconds: float,
        at_batch: float,
    ) -> None:
        """What the server counts of a step."""

    async def _step_all(self) -> None:
        while self._batch:
            batch, p = list(self._batch), self.profile
            drafts = self._drafts(batch)
            at_batch = p.target_step_seconds + p.step_seconds_per_token * len(batch)  # t(n)
            verify = p.target_step_seconds + p.step_seconds_per_token * sum(k + 1 for k in drafts)
            draft_seconds = self._draft_seconds(drafts, at_batch)
            await asyncio.sleep(draft_seconds + verify)
            accepted = [accepted_prefix(k, s.acceptance, self.rng) for s, k in zip(batch, drafts, strict=True)]
            self._stepped(batch, drafts, accepted, draft_seconds, verify, at_batch)
            for s, k, prefix in zip(batch, drafts, accepted, strict=True):
                self.tokens_out += min(prefix + 1, s.remaining)
                s.remaining -= prefix + 1
                s.steps += 1
                s.draft_tokens += k
                s.accepted_tokens += prefix
                if s.remaining <= 0 and s in self._batch:
                    self._batch.remove(s)
                    if not s.done.done():
                        s.done.set_result(None)


class SimulatedTriton(_Batching, TritonContract):
    """Triton with the target (`tensorrt_llm`) and draft (`tensorrt_llm_draft`) models behind the BLS, batching
    the requests in flight (_Batching); each request drafts its `num_draft_tokens`."""

    def __init__(self, profile: Profile, seed: int | None = None):
        super().__init__(profile, seed)
        # Triton's own counters, from which the draft's cost can be read.
        self.compute_us = {triton.TARGET_MODEL: 0.0, triton.DRAFT_MODEL: 0.0}
        self.executions = {triton.TARGET_MODEL: 0, triton.DRAFT_MODEL: 0}
        # The TensorRT-LLM backend's gauges of the target model's latest iteration.
        self.iterations, self.iteration_us, self.generation_requests = 0, 0.0, 0

    async def generate(self, body: dict[str, Any]) -> Generation:
        tokens = max(int(body["max_tokens"]), 1)
        sequence = await self._join(tokens, int(body.get("num_draft_tokens") or 0))
        return Generation(TOKEN * tokens, sequence.draft_tokens, sequence.accepted_tokens)

    def _stepped(
        self,
        batch: list[_Sequence],
        drafts: list[int],
        accepted: list[int],
        draft_seconds: float,
        verify_seconds: float,
        at_batch: float,
    ) -> None:
        self.iterations += 1
        self.iteration_us, self.generation_requests = time.time() * 1e6, len(batch)
        p = self.profile
        for k in drafts:
            # Triton's compute time by model is request time: each request counts its step's. With
            # stepSecondsPerToken 0, draft_us / (k * target_us) = costRatio, the cost the operator measures
            # (specdec.speculation.payoff.measure); under load it is costRatio * t(n) / t(T).
            self.compute_us[triton.TARGET_MODEL] += verify_seconds * 1e6
            self.executions[triton.TARGET_MODEL] += 1
            if k:
                self.compute_us[triton.DRAFT_MODEL] += k * p.cost_ratio * at_batch * 1e6
                self.executions[triton.DRAFT_MODEL] += 1

    def counters(self) -> dict[str, Mapping[str, float]]:
        return {"nv_inference_compute_infer_duration_us": self.compute_us, "nv_inference_exec_count": self.executions}

    def gauges(self) -> list[tuple[str, dict[str, str], float]]:
        target = {"model": triton.TARGET_MODEL}
        return [
            ("nv_trt_llm_general_metrics", {"general_type": "iteration_counter", **target}, self.iterations),
            ("nv_trt_llm_general_metrics", {"general_type": "timestamp", **target}, self.iteration_us),
            (
                "nv_trt_llm_inflight_batcher_metrics",
                {"inflight_batcher_specific_metric": "generation_requests", **target},
                self.generation_requests,
            ),
        ]


def draft_len_schedule(speculative: dict[str, Any], draft_len: int) -> dict[int, int] | None:
    """Draft length by batch size as TensorRT-LLM applies it (DecodingBaseConfig): draft_len_schedule's keys
    are the largest batch size of their tier, batch sizes above the largest draft nothing; max_concurrency
    is the schedule {max_concurrency: max_draft_len}. None: draft_len at every batch size."""
    schedule = speculative.get("draft_len_schedule")
    if isinstance(schedule, dict) and schedule:
        return {int(k): int(v) for k, v in sorted(schedule.items(), key=lambda kv: int(kv[0]))}
    if speculative.get("max_concurrency"):
        return {int(speculative["max_concurrency"]): draft_len}
    return None


def serve_drafts(config: RuntimeConfig) -> tuple[int, bool, dict[int, int] | None]:
    """On trtllm-serve: draft tokens per step, whether they cost draft-model time, and the draft length by
    batch size (draft_len_schedule)."""
    drafting = MODES[config.mode].drafting
    if drafting is None:  # none, saveState
        return 0, False, None
    speculative = config.speculative_config or {}
    draft_len = int(speculative.get("max_draft_len") or DEFAULT_DRAFT_LEN)
    return draft_len, drafting.drafter != "lookup", draft_len_schedule(speculative, draft_len)


def _prompt_words(body: dict[str, Any]) -> int:
    if "messages" in body:
        return sum(len(str(m.get("content", "")).split()) for m in body["messages"] if isinstance(m, dict))
    prompt = body.get("prompt", "")
    return len(prompt) if isinstance(prompt, list) else len(str(prompt).split())


class SimulatedTrtllmServe(_Batching, TrtllmServeContract):
    """trtllm-serve batching the requests in flight (_Batching), every sequence of a step drafting the
    configured length for the step's batch size (draft_len_schedule, max_concurrency), with one iteration
    statistic per step as TensorRT-LLM's IterationStats."""

    def __init__(
        self,
        profile: Profile,
        served_as: str,
        draft_len: int,
        draft_costs: bool,
        schedule: dict[int, int] | None = None,
        seed: int | None = None,
    ):
        super().__init__(profile, seed)
        self.served_as = served_as
        self.draft_len, self.draft_costs, self.schedule = draft_len, draft_costs, schedule
        self.stats: deque[dict[str, Any]] = deque(maxlen=ITERATION_STATS_KEPT)
        self.iterations = 0
        # SaveState (specdec_dev.hidden_state_writer): each request's prefill is captured, and TensorRT-LLM's
        # SaveHiddenStatesDrafter sets every new request's max new tokens to 1 (prepare_draft_tokens).
        self.capture: Callable[[int], Any] | None = None

    async def complete(self, body: dict[str, Any], chat: bool) -> Completion:
        asked = body.get("max_tokens") or body.get("max_completion_tokens") or COMPLETIONS_DEFAULT_MAX_TOKENS
        tokens = max(int(asked), 1) if self.capture is None else 1
        if self.capture is not None:
            self.capture(_prompt_words(body))
        await self._run(tokens, self.draft_len, self.draft_costs)
        return Completion((TOKEN,) * tokens, _prompt_words(body), tokens, finish_reason="length")

    async def _run(self, tokens: int, draft_len: int, draft_costs: bool = True) -> None:
        """The request's steps in the batch."""
        await self._join(tokens, draft_len)

    def _drafts(self, batch: list[_Sequence]) -> list[int]:
        k = draft_len_at(self.schedule, self.draft_len, len(batch)) if self.profile.drafting else 0
        return [k] * len(batch)

    def _draft_seconds(self, drafts: list[int], at_batch: float) -> float:
        return super()._draft_seconds(drafts, at_batch) if self.draft_costs else 0.0

    def _stepped(
        self,
        batch: list[_Sequence],
        drafts: list[int],
        accepted: list[int],
        draft_seconds: float,
        verify_seconds: float,
        at_batch: float,
    ) -> None:
        # As TensorRT-LLM's IterationStats: iterLatencyMS the whole step, specDecodingStats.iterLatencyMS the
        # drafter's (0 where no drafter is timed, as NGram's), numRequestsWithDraftTokens the sequences that
        # carried drafts, inflightBatchingStats.numGenRequests the batch.
        self.iterations += 1
        seconds = draft_seconds + verify_seconds
        self.stats.append(
            {
                "iter": self.iterations,
                "iterLatencyMS": seconds * 1000,
                "numActiveRequests": len(batch),
                "inflightBatchingStats": {"numGenRequests": len(batch), "numContextRequests": 0},
                "specDecodingStats": {
                    "numDraftTokens": sum(drafts),
                    "numAcceptedTokens": sum(accepted),
                    "numRequestsWithDraftTokens": sum(1 for k in drafts if k),
                    "acceptanceLength": (sum(accepted) + len(batch)) / len(batch),
                    "iterLatencyMS": draft_seconds * 1000,
                    "draftOverhead": draft_seconds / seconds,
                },
            }
        )

    def iteration_stats(self) -> list[Any]:
        stats = list(self.stats)
        self.stats.clear()
        return stats
