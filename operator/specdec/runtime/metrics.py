"""What the front reports on /metrics (prometheus_client, one registry per front).

The operator scrapes these and computes rates over its own windows, so every speculation figure is a
counter (or a histogram): nothing here is averaged since start. The names are a contract with the operator.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from specdec.runtime.capture import CaptureTotals
from specdec.runtime.openai_request import APIError

log = logging.getLogger("specdec.runtime")

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOKEN_TIME_BUCKETS = (0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
RATE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
TOKENS_PER_STEP_BUCKETS = (1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 7, 8, 9)


class RuntimeMetrics:
    def __init__(self, *, mode: str, backend: str, model: str, route: str) -> None:
        r = self.registry = CollectorRegistry()
        Info("specdec_runtime", "The runtime's configuration (value is always 1).", registry=r).info(
            {"mode": mode, "backend": backend, "model": model, "route": route}
        )
        self.in_flight = Gauge("specdec_requests_in_flight", "Requests being served.", registry=r)
        self.backend_up = Gauge("specdec_backend_up", "1 when the last health check of the backend passed.", registry=r)
        self._draft_len: Gauge | None = None  # registered once known: no made-up value before
        self._request_children: dict[tuple[str, str], tuple] = {}
        self._requests = Counter(
            "specdec_requests_total",
            "Requests to the OpenAI endpoints, by endpoint and HTTP status.",
            ["endpoint", "status"],
            registry=r,
        )
        self._backend_errors = Counter(
            "specdec_backend_errors_total", "Failed calls to the backend, by kind.", ["kind"], registry=r
        )
        self._refusals = Counter(
            "specdec_front_refusals_total",
            "Requests and connections the front's server refused, by reason (bad_request, "
            "version, length_required, head_too_large, too_many_fields, body_too_large, "
            "bodies_buffered, head_timeout, body_timeout, send_timeout, "
            "too_many_connections).",
            ["reason"],
            registry=r,
        )
        self._prompt_tokens = Counter("specdec_prompt_tokens_total", "Prompt (input) tokens.", registry=r)
        self._completion_tokens = Counter("specdec_completion_tokens_total", "Generated (output) tokens.", registry=r)
        self._draft_tokens = Counter("specdec_draft_tokens_total", "Draft tokens proposed.", registry=r)
        self._accepted_tokens = Counter(
            "specdec_accepted_draft_tokens_total", "Draft tokens the target accepted.", registry=r
        )
        self._steps = Counter("specdec_speculative_steps_total", "Target steps that verified draft tokens.", registry=r)
        self._speculative_requests = Counter(
            "specdec_speculative_requests_total",
            "Responses whose request speculated (Triton route only: trtllm-serve does not say per request).",
            registry=r,
        )
        self._draft_seconds = Counter(
            "specdec_draft_seconds_total",
            "Time in the draft model where the route reports it (Triton: request time "
            "of the draft model; trtllm-serve: drafter time, two-model modes).",
            registry=r,
        )
        self._target_seconds = Counter(
            "specdec_target_seconds_total",
            "Time in the target model for speculative steps, where the route reports the draft time too.",
            registry=r,
        )
        self._undrafted = Counter(
            "specdec_undrafted_requests_total",
            "Requests the front sent without draft tokens although speculation is configured, "
            "by reason: load (at the break-even) or opt_out (the request asked).",
            ["reason"],
            registry=r,
        )
        self._break_even: Gauge | None = None  # registered once the operator has written one
        self._capture: dict[str, Gauge] | None = None  # registered in mode saveState only
        # The target model's iterations as the backend reports them (Triton's TensorRT-LLM backend: its gauges,
        # polled; trtllm-serve: its iteration statistics): the operator fits the step time t(T) = a + b*T from
        # these (specdec.load_model).
        self._iterations = Counter("specdec_target_iterations_total", "Iterations of the target model.", registry=r)
        self._iteration_seconds = Counter(
            "specdec_target_iteration_seconds_total", "Time between the target model's iterations, summed.", registry=r
        )
        self._batch_sequences = Counter(
            "specdec_target_batch_sequences_total",
            "Sequences in the target's batch, summed over its iterations.",
            registry=r,
        )
        self._batch_draft_tokens = Counter(
            "specdec_target_batch_draft_tokens_total",
            "Draft tokens per sequence, summed over the target's batch and iterations.",
            registry=r,
        )
        self._latency = Histogram(
            "specdec_request_duration_seconds",
            "Time from request to the last byte of the response, by endpoint.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._ttft = Histogram(
            "specdec_time_to_first_token_seconds",
            "Time to the first chunk of streamed responses.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self._tpot = Histogram(
            "specdec_time_per_output_token_seconds",
            "Time per generated token after the first (streamed), or per token of the whole answer (not streamed).",
            buckets=TOKEN_TIME_BUCKETS,
            registry=r,
        )
        self._tokens_per_step = Histogram(
            "specdec_accepted_tokens_per_step",
            "Tokens per target step of each response, the target's own token included (Triton route).",
            buckets=TOKENS_PER_STEP_BUCKETS,
            registry=r,
        )
        self._response_acceptance = Histogram(
            "specdec_response_acceptance_rate",
            "Acceptance rate reported with each backend response.",
            buckets=RATE_BUCKETS,
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def request(self, endpoint: str, status: str, seconds: float) -> None:
        # The labelled children kept: prometheus_client's labels() takes a lock and checks the names each time.
        children = self._request_children.get((endpoint, status))
        if children is None:
            children = self._request_children[endpoint, status] = (
                self._requests.labels(endpoint=endpoint, status=status),
                self._latency.labels(endpoint=endpoint),
            )
        children[0].inc()
        children[1].observe(seconds)

    def backend_error(self, kind: str) -> None:
        self._backend_errors.labels(kind=kind).inc()

    def refused(self, reason: str) -> None:
        self._refusals.labels(reason=reason).inc()

    def tokens(self, prompt: int, completion: int) -> None:
        self._prompt_tokens.inc(max(prompt, 0))
        self._completion_tokens.inc(max(completion, 0))

    def first_token(self, seconds: float) -> None:
        self._ttft.observe(seconds)

    def token_time(self, seconds: float, tokens: int | None, first_token: float | None = None) -> None:
        """Time per output token of a response that took `seconds`: after the first token when streamed
        (`first_token` given), otherwise over the whole answer (prefill included). Unknown counts are skipped."""
        if first_token is None:
            if tokens:
                self._tpot.observe(seconds / tokens)
        elif tokens and tokens > 1:
            self._tpot.observe(max(seconds - first_token, 0.0) / (tokens - 1))

    def speculation(self, draft: int, accepted: int, steps: int) -> None:
        if draft > 0:
            self._draft_tokens.inc(draft)
            self._accepted_tokens.inc(min(max(accepted, 0), draft))
        self._steps.inc(max(steps, 0))

    def speculative_response(self, draft: int, accepted: int, steps: int, rate: float | None) -> None:
        """One response's own speculation figures (Triton's perf metrics); nothing when it did not speculate."""
        if draft <= 0 or steps <= 0:
            return
        accepted = min(max(accepted, 0), draft)
        self.speculation(draft, accepted, steps)
        self._speculative_requests.inc()
        self._tokens_per_step.observe((accepted + steps) / steps)
        self._response_acceptance.observe(rate if rate is not None else accepted / draft)

    def compute_time(self, draft_seconds: float, target_seconds: float) -> None:
        self._draft_seconds.inc(max(draft_seconds, 0.0))
        self._target_seconds.inc(max(target_seconds, 0.0))

    def draft_length(self, value: int) -> None:
        if self._draft_len is None:
            self._draft_len = Gauge("specdec_draft_len", "The draft length in effect.", registry=self.registry)
        self._draft_len.set(value)

    def undrafted(self, reason: str) -> None:
        self._undrafted.labels(reason=reason).inc()

    def break_even(self, value: int | None) -> None:
        if self._break_even is None:
            self._break_even = Gauge(
                "specdec_speculation_break_even",
                "The concurrency from which the front sends no draft tokens (0: none set).",
                registry=self.registry,
            )
        self._break_even.set(value or 0)

    def target_iterations(self, iterations: float, seconds: float, sequences: float, draft_tokens: float) -> None:
        """`iterations` more target iterations in `seconds`, at `sequences` per iteration, each with
        `draft_tokens` draft tokens (what the front sends now)."""
        if iterations <= 0 or seconds <= 0:
            return
        self._iterations.inc(iterations)
        self._iteration_seconds.inc(seconds)
        self._batch_sequences.inc(iterations * max(sequences, 0.0))
        self._batch_draft_tokens.inc(iterations * max(sequences, 0.0) * max(draft_tokens, 0.0))

    def capture(self, totals: CaptureTotals) -> None:
        """What the capture directory holds (mode saveState): gauges, for a person may move files away."""
        if self._capture is None:
            r = self.registry
            self._capture = {
                "files": Gauge(
                    "specdec_capture_files",
                    "Hidden-state files (<file_prefix>_<n>.pt) in the capture directory.",
                    registry=r,
                ),
                "bytes": Gauge("specdec_capture_bytes", "Bytes of those files.", registry=r),
                "requests": Gauge(
                    "specdec_capture_requests", "Requests whose hidden states those files hold.", registry=r
                ),
                "tokens": Gauge("specdec_capture_tokens", "Token ids (input_ids) in those files.", registry=r),
                "unreadable": Gauge(
                    "specdec_capture_unreadable_files",
                    "Files not counted in requests and tokens: being written, or not of TensorRT-LLM's layout.",
                    registry=r,
                ),
                "last_write": Gauge(
                    "specdec_capture_last_write_timestamp_seconds",
                    "Modification time of the newest file (Unix seconds; 0: none yet).",
                    registry=r,
                ),
            }
        for name, gauge in self._capture.items():
            value = getattr(totals, name)
            gauge.set(value or 0)


class RequestRecord:
    """One request's accounting: in flight from its start, then counted once by endpoint and status with its
    latency. A failure of the backend (an error answered with a 5xx other than the front's own `server_error`)
    is counted by kind and logged too."""

    def __init__(self, metrics: RuntimeMetrics, endpoint: str):
        self.metrics, self.endpoint = metrics, endpoint
        self.started = time.monotonic()
        self.ended = False
        metrics.in_flight.inc()

    def end(self, status: int) -> None:
        if not self.ended:
            self.ended = True
            self.metrics.in_flight.dec()
            self.metrics.request(self.endpoint, str(status), time.monotonic() - self.started)

    def failed(self, error: APIError) -> None:
        if error.status >= 500 and error.kind != "server_error":  # the front's own faults are logged where they are
            self.metrics.backend_error(error.kind)
            log.warning("%s: %s", self.endpoint, error.message)
        self.end(error.status)
