"""A small Prometheus registry (text exposition format 0.0.4): counters, gauges, histograms."""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
RATE_BUCKETS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

Labels = tuple[tuple[str, str], ...]


def _labels(labels: dict[str, str] | None) -> Labels:
    return tuple(sorted((labels or {}).items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_labels(labels: Iterable[tuple[str, str]]) -> str:
    items = list(labels)
    if not items:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in items) + "}"


def _fmt_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer():
        return str(int(value))
    return repr(float(value))


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str):
        self.name, self.help = name, help_text
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str):
        super().__init__(name, help_text)
        self._values: dict[Labels, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up")
        key = _labels(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(_labels(labels), 0.0)

    def total(self) -> float:
        return sum(self._values.values())

    def render(self) -> list[str]:
        lines = self.header()
        values = self._values or {(): 0.0}
        for key, value in sorted(values.items()):
            lines.append(f"{self.name}{_fmt_labels(key)} {_fmt_value(value)}")
        return lines


class Gauge(_Metric):
    kind = "gauge"

    def __init__(self, name: str, help_text: str, fn=None):
        super().__init__(name, help_text)
        self._values: dict[Labels, float] = {}
        self._fn = fn  # computed at render time when given

    def set(self, value: float, **labels: str) -> None:
        with self._lock:
            self._values[_labels(labels)] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = _labels(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)

    def value(self, **labels: str) -> float:
        if self._fn is not None:
            return float(self._fn())
        return self._values.get(_labels(labels), 0.0)

    def render(self) -> list[str]:
        lines = self.header()
        values = {(): float(self._fn())} if self._fn is not None else (self._values or {(): 0.0})
        for key, value in sorted(values.items()):
            lines.append(f"{self.name}{_fmt_labels(key)} {_fmt_value(value)}")
        return lines


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...] = LATENCY_BUCKETS):
        super().__init__(name, help_text)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[Labels, tuple[list[int], list[float]]] = {}  # bucket counts, [sum, count]

    def observe(self, value: float, **labels: str) -> None:
        key = _labels(labels)
        with self._lock:
            counts, totals = self._series.setdefault(key, ([0] * len(self.buckets), [0.0, 0.0]))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    counts[i] += 1
            totals[0] += value
            totals[1] += 1

    def count(self, **labels: str) -> int:
        series = self._series.get(_labels(labels))
        return int(series[1][1]) if series else 0

    def sum(self, **labels: str) -> float:
        series = self._series.get(_labels(labels))
        return series[1][0] if series else 0.0

    def render(self) -> list[str]:
        lines = self.header()
        for key, (counts, (total, count)) in sorted(self._series.items()):
            for bound, n in zip(self.buckets, counts):
                lines.append(f"{self.name}_bucket{_fmt_labels(key + (('le', _fmt_value(bound)),))} {n}")
            lines.append(f"{self.name}_bucket{_fmt_labels(key + (('le', '+Inf'),))} {int(count)}")
            lines.append(f"{self.name}_sum{_fmt_labels(key)} {_fmt_value(total)}")
            lines.append(f"{self.name}_count{_fmt_labels(key)} {int(count)}")
        return lines


class Registry:
    def __init__(self) -> None:
        self._metrics: list[_Metric] = []

    def add(self, metric: _Metric):
        self._metrics.append(metric)
        return metric

    def render(self) -> str:
        lines: list[str] = []
        for metric in self._metrics:
            lines += metric.render()
        return "\n".join(lines) + "\n"


class RuntimeMetrics:
    """What the front reports on /metrics."""

    def __init__(self, *, mode: str, backend: str, model: str, route: str) -> None:
        r = self.registry = Registry()
        info = r.add(Gauge("specdec_runtime_info", "The runtime's configuration (value is always 1)."))
        info.set(1, mode=mode, backend=backend, model=model, route=route)
        self.requests = r.add(Counter("specdec_requests_total",
                                      "Requests to the OpenAI endpoints, by endpoint and HTTP status."))
        self.in_flight = r.add(Gauge("specdec_requests_in_flight", "Requests being served."))
        self.prompt_tokens = r.add(Counter("specdec_prompt_tokens_total", "Prompt (input) tokens."))
        self.completion_tokens = r.add(Counter("specdec_completion_tokens_total", "Generated (output) tokens."))
        self.latency = r.add(Histogram("specdec_request_duration_seconds",
                                       "Time from request to the last byte of the response, by endpoint."))
        self.ttft = r.add(Histogram("specdec_time_to_first_token_seconds",
                                    "Time to the first content chunk of streamed responses."))
        self.draft_tokens = r.add(Counter("specdec_draft_tokens_total",
                                          "Draft tokens proposed, as the backend reports them."))
        self.accepted_tokens = r.add(Counter("specdec_accepted_draft_tokens_total",
                                             "Draft tokens the target accepted, as the backend reports them."))
        r.add(Gauge("specdec_acceptance_rate",
                    "Accepted / proposed draft tokens since start (NaN before any draft).",
                    fn=self.acceptance_rate))
        self.response_acceptance = r.add(Histogram(
            "specdec_response_acceptance_rate", "Acceptance rate reported with each backend response.",
            buckets=RATE_BUCKETS))
        self.backend_up = r.add(Gauge("specdec_backend_up", "1 when the last health check of the backend passed."))
        self.backend_errors = r.add(Counter("specdec_backend_errors_total",
                                            "Failed calls to the backend, by kind."))

    def acceptance_rate(self) -> float:
        drafted = self.draft_tokens.total()
        return self.accepted_tokens.total() / drafted if drafted else math.nan

    def speculation(self, draft: int, accepted: int) -> None:
        if draft > 0:
            self.draft_tokens.inc(draft)
            self.accepted_tokens.inc(min(max(accepted, 0), draft))

    def render(self) -> str:
        return self.registry.render()
