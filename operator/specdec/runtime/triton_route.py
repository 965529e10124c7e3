"""The Triton route: OpenAI requests translated to Triton's generate endpoint of the tensorrt_llm_bls model.
The translation itself is pure (specdec.runtime.triton_openai); here are its I/O, draft length and metrics.

Every request gets `num_draft_tokens` (the draft length) and `use_draft_logits` (logit acceptance), which is
what makes the BLS speculate, and `return_perf_metrics`, whose `acceptance_rate`,
`total_accepted_draft_tokens` and `total_draft_tokens` feed the metrics. The BLS does not stream while
speculating, so a streamed request gets the whole answer as one SSE chunk (and the usage chunk after it,
when asked for). One choice (n = 1) and text prompts only. The draft length follows the operator's draft_len
file (next to runtime.json) while serving; Triton's own metrics are polled for the draft and target compute
time and for the target model's iterations (step time and batch, from which the operator fits the load model).

Under load speculation stops paying (specdec.load_model). The operator writes the concurrency from which it
does, the break-even, beside draft_len (`speculation_break_even`); with this many requests in flight at Triton
(and a hysteresis band) the front sends `num_draft_tokens` 0, and the draft length again once the load is
below. Below the break-even the best length falls with the load too: the operator's schedule
(`speculation_draft_lens`) gives it for the requests in flight, capped by draft_len. A request with the header
`X-Specdec-Speculation: off` is sent without draft tokens whatever the load.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from specdec.api.runtime_config import BREAK_EVEN_KEY, DRAFT_LEN_KEY, SCHEDULE_KEY, RuntimeConfig
from specdec.runtime import triton, triton_openai
from specdec.runtime.backend_stats import Increases, triton_compute_us, triton_iteration_gauges
from specdec.runtime.chat import Tokenizer
from specdec.runtime.config_map_key import ConfigMapKey
from specdec.runtime.exchange import Page
from specdec.runtime.in_flight import InFlight
from specdec.runtime.launch import Backend
from specdec.runtime.metrics import RuntimeMetrics
from specdec.runtime.openai_request import invalid
from specdec.runtime.route import JSON_HEADERS, Events, FrontError, Route, backend_errors
from specdec.speculation import load_model

log = logging.getLogger("specdec.runtime")

OPT_OUT_HEADER = "X-Specdec-Speculation"  # "off": this request is sent without draft tokens


def _parse_draft_len(text: str, limit: int) -> int | None:
    value = int(text) if text.isascii() and text.isdigit() else 0
    return value if 1 <= value <= limit else None


class TritonRoute(Route):
    kind = "triton"
    text_prompts_only = True

    def __init__(
        self,
        config: RuntimeConfig,
        backend: Backend,
        metrics: RuntimeMetrics,
        *,
        request_timeout: float,
        tokenizer: Tokenizer,
        draft_len_file: Path | None = None,
    ):
        super().__init__(config, backend, metrics, request_timeout=request_timeout)
        self.tokenizer = tokenizer
        self.draft_len = backend.draft_len  # num_draft_tokens for the next requests
        self._compute_us = Increases()
        self.break_even: int | None = None  # None: speculate at any load
        self.schedule: list[tuple[int, int]] | None = None  # None: draft_len below the break-even
        # What the operator writes for this pod, beside the draft length's key (none without it).
        self.operator_keys = (
            [
                ConfigMapKey(draft_len_file, self._apply_draft_len),
                ConfigMapKey(draft_len_file.with_name(BREAK_EVEN_KEY), self._apply_break_even),
                ConfigMapKey(draft_len_file.with_name(SCHEDULE_KEY), self._apply_schedule),
            ]
            if draft_len_file
            else []
        )
        self._gate = load_model.Gate()
        self.load = InFlight()  # requests at Triton: the sequences of its batch
        self._iteration: dict[str, float] = {}  # the target model's latest iteration gauges

    @property
    def in_flight(self) -> int:
        return self.load.requests

    def known_draft_len(self) -> int | None:
        return self.backend.draft_len

    def start(self) -> None:
        self._read_operator_keys()  # before the first request

    def polls(self):
        polls = [self._poll_triton_metrics] if self.backend.metrics_url else []
        return polls + ([self._poll_operator_keys] if self.operator_keys else [])

    async def reply(
        self, body: dict[str, Any], *, chat: bool, started: float, fields: Mapping[bytes, bytes]
    ) -> Page | Events:
        opted_out = fields.get(OPT_OUT_HEADER.lower().encode(), b"").strip().lower() == b"off"
        if chat:
            return await self._triton_chat(body, started, opted_out)
        return await self._triton_completions(body, started, opted_out)

    async def _poll_triton_metrics(self) -> None:
        """Triton's cumulative compute time of the draft and target models, counted as it grows."""
        assert self.backend.metrics_url is not None
        text = await self.fetch(self.backend.metrics_url)
        totals = triton_compute_us(text) if text else {}
        # A model missing from this page was not reset: skipped, so its next value is not counted twice.
        seconds = {
            m: self._compute_us(m, totals[m]) / 1e6 for m in (triton.DRAFT_MODEL, triton.TARGET_MODEL) if m in totals
        }
        self.metrics.compute_time(seconds.get(triton.DRAFT_MODEL, 0.0), seconds.get(triton.TARGET_MODEL, 0.0))
        if text:
            self._count_iterations(text)

    async def _poll_operator_keys(self) -> None:
        self._read_operator_keys()

    def _read_operator_keys(self) -> None:
        for key in self.operator_keys:
            key.poll()

    def _apply_break_even(self, text: str | None) -> None:
        """The operator's break-even: a whole number of requests in flight (1 or more), or no key (none)."""
        value = int(text) if text and text.isascii() and text.isdigit() and int(text) >= 1 else None
        if text and value is None:
            log.warning("ignoring %s: %r is not a number of requests (1 or more)", BREAK_EVEN_KEY, text)
        log.info("speculation break-even %s -> %s", self.break_even, value)
        self.break_even = value
        self.metrics.break_even(value)

    def _apply_schedule(self, text: str | None) -> None:
        """The operator's best draft length by load (specdec.load_model.format_schedule), or no key (none)."""
        self.schedule = load_model.parse_schedule(text) if text else None
        if text and self.schedule is None:
            log.warning("ignoring %s: %r is not a schedule of n:k from n = 1", SCHEDULE_KEY, text)
        log.info("draft lengths by load: %s", text if self.schedule else "none")

    def _draft_len_now(self, opted_out: bool) -> int:
        """num_draft_tokens for a request joining the batch of `in_flight` requests (itself counted)."""
        in_flight = self.in_flight + 1
        self._gate = self._gate.next(in_flight, self.break_even)
        assert self.draft_len is not None  # the Triton route always has one
        if opted_out or not self._gate.drafting:
            self.metrics.undrafted("opt_out" if opted_out else "load")
            return 0
        if self.schedule:  # 0 there only inside the gate's band: the shortest draft
            return min(self.draft_len, max(load_model.scheduled_draft_len(self.schedule, in_flight), 1))
        return self.draft_len

    def _count_iterations(self, text: str) -> None:
        """The target model's iterations since the last poll, at the batch its latest one held, where the load
        held steady (specdec.runtime.in_flight), with the mean draft length of the interval's sequences."""
        now = triton_iteration_gauges(text, triton.TARGET_MODEL)
        before, self._iteration = self._iteration, now
        draft_len = self.load.interval()
        if (
            draft_len is None
            or {"iterations", "timestamp_us"} - now.keys()
            or {"iterations", "timestamp_us"} - before.keys()
        ):
            return
        iterations = now["iterations"] - before["iterations"]
        seconds = (now["timestamp_us"] - before["timestamp_us"]) / 1e6
        self.metrics.target_iterations(iterations, seconds, now.get("generation_requests", 0.0), draft_len)

    def _apply_draft_len(self, text: str | None) -> None:
        """The operator's live draft length: the key's value when it is one, the configured length without
        the key. A value out of 1..max_draft_len is logged once and ignored."""
        assert self.config.draft_target is not None
        limit = self.config.draft_target.max_draft_len
        value = self.backend.draft_len if text is None else _parse_draft_len(text, limit)
        if value is None:
            log.warning("ignoring %s: %r is not a draft length in 1..%d", DRAFT_LEN_KEY, text, limit)
            return
        if value != self.draft_len:
            log.info(
                "draft length %s -> %d (%s)", self.draft_len, value, DRAFT_LEN_KEY if text is not None else "configured"
            )
            self.draft_len = value
            self.metrics.draft_length(value)

    async def _generate(self, prompt: str, max_tokens: int, sampling: dict[str, Any], draft_len: int) -> dict[str, Any]:
        assert self.session is not None
        payload = triton_openai.generate_request(prompt, max_tokens, sampling, draft_len, self.backend.use_draft_logits)
        url = f"{self.backend.url}/v2/models/{triton.BLS_MODEL}/generate"
        with backend_errors("the Triton server", self.request_timeout):
            async with self.session.post(
                url,
                data=orjson.dumps(payload),
                headers=JSON_HEADERS,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout),
            ) as resp:
                raw = await resp.read()
                status = resp.status
        try:
            data = orjson.loads(raw)
        except ValueError:
            data = None
        if status != 200 or not isinstance(data, dict) or "error" in data:
            message = data.get("error") if isinstance(data, dict) else raw[:500].decode(errors="replace")
            raise FrontError(502, f"Triton answered HTTP {status}: {message}")
        if "text_output" not in data:
            raise FrontError(502, "Triton's answer has no text_output")
        return data

    def _usage(self, prompt: str, text: str) -> dict[str, int] | None:
        prompt_tokens = self.tokenizer.count(prompt)
        completion_tokens = self.tokenizer.count(text)
        if prompt_tokens is None or completion_tokens is None:
            return None
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    async def _triton_one(self, prompt: str, body: dict[str, Any], max_tokens: int, opted_out: bool) -> dict[str, Any]:
        sampling, started = triton_openai.sampling(body), time.monotonic()
        draft_len = self._draft_len_now(opted_out)
        self.load.join(draft_len)
        try:
            data = await self._generate(prompt, max_tokens, sampling, draft_len)
        finally:
            self.load.leave(draft_len)
        seconds = time.monotonic() - started
        text = triton_openai.strip_prompt(str(triton_openai.scalar(data["text_output"]) or ""), prompt)
        usage = self._usage(prompt, text)
        draft = int(triton_openai.number(data.get("total_draft_tokens")) or 0)
        accepted = int(triton_openai.number(data.get("total_accepted_draft_tokens")) or 0)
        rate = triton_openai.number(data.get("acceptance_rate"))
        # The BLS proposes draft_len tokens a step (fewer only on the last), so this counts its steps. Today's
        # BLS answers with its last target request's perf metrics only (tensorrt_llm_bls/1/lib/decode.py,
        # _spec_generate): one step per response, a sample of the request rather than its total.
        if draft_len:
            self.metrics.speculative_response(draft, accepted, math.ceil(draft / draft_len), rate)
        if usage:
            self.metrics.tokens(usage["prompt_tokens"], usage["completion_tokens"])
        # The answer comes whole (no streaming while speculating): time per token over all of it.
        self.metrics.token_time(seconds, usage["completion_tokens"] if usage else None)
        finish = "length" if usage and usage["completion_tokens"] >= max_tokens else "stop"
        speculation = {"acceptance_rate": rate, "accepted_draft_tokens": accepted, "draft_tokens": draft}
        return {"text": text, "usage": usage, "finish_reason": finish, "speculation": speculation}

    async def _triton_completions(self, body: dict[str, Any], started: float, opted_out: bool) -> Page | Events:
        prompt = body["prompt"]
        prompts = [prompt] if isinstance(prompt, str) else prompt
        max_tokens = triton_openai.max_tokens(body, triton_openai.COMPLETIONS_DEFAULT_MAX_TOKENS)
        results = await asyncio.gather(*(self._triton_one(p, body, max_tokens, opted_out) for p in prompts))
        rid, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        if body.get("stream"):
            chunks = triton_openai.completion_chunks(results, rid, created, self.model)
            usage = triton_openai.sum_usage([r["usage"] for r in results])
            return self._sse(chunks, usage, body, rid, created, "text_completion", started)
        return Page.json(triton_openai.completion(results, prompts, body, rid, created, self.model))

    async def _triton_chat(self, body: dict[str, Any], started: float, opted_out: bool) -> Page | Events:
        try:
            prompt = self.tokenizer.chat_prompt(body["messages"])
        except ValueError as error:
            raise invalid(str(error), "messages", None) from None
        max_tokens = triton_openai.max_tokens(body, triton_openai.CHAT_DEFAULT_MAX_TOKENS)
        result = await self._triton_one(prompt, body, max_tokens, opted_out)
        rid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        if body.get("stream"):
            chunks = triton_openai.chat_chunks(result, rid, created, self.model)
            return self._sse(chunks, result["usage"], body, rid, created, "chat.completion.chunk", started)
        return Page.json(triton_openai.chat_completion(result, rid, created, self.model))

    def _sse(
        self,
        chunks: list[dict[str, Any]],
        usage: dict[str, int] | None,
        body: dict[str, Any],
        rid: str,
        created: int,
        kind: str,
        started: float,
    ) -> Events:
        events = triton_openai.events(chunks, usage, body, rid, created, kind, self.model)
        self.metrics.first_token(time.monotonic() - started)
        return Events(events)
