"""The operator's Prometheus metrics (`specdec operator --metrics-port`).

Reconcile counts and durations, API requests by verb and outcome, and gauges of the watched
SpeculativeDeployments, EngineBuilds and ModelCaches by phase, read from the watch cache at scrape time.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

REGISTRY = CollectorRegistry()

RECONCILES = Counter(
    "specdec_reconcile", "Reconciles by kind and result (ok, error).", ["kind", "result"], registry=REGISTRY
)
RECONCILE_SECONDS = Histogram(
    "specdec_reconcile_duration_seconds",
    "Time one reconcile takes.",
    ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
RESYNC_SECONDS = Histogram(
    "specdec_resync_duration_seconds",
    "Time one resync pass (re-list and reconcile everything) takes.",
    buckets=(0.5, 1, 2.5, 5, 10, 20, 40, 80),
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter("specdec_events_dropped", "Events not posted because the queue was full.", registry=REGISTRY)
API_REQUESTS = Counter(
    "specdec_api_requests",
    "Requests to the API server by verb and HTTP status class.",
    ["verb", "code"],
    registry=REGISTRY,
)
# Where a slow reconcile spends its time, as client-go and controller-runtime report it
# (rest_client_request_duration_seconds, workqueue_queue_duration_seconds).
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
API_REQUEST_SECONDS = Histogram(
    "specdec_api_request_duration_seconds",
    "Time one API request takes (each attempt), by verb.",
    ["verb"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    "specdec_workqueue_wait_seconds",
    "Time a key waits in its work queue before a worker takes it, by kind.",
    ["kind"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)


@contextmanager
def reconciling(kind: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    except Exception:
        RECONCILES.labels(kind, "error").inc()
        raise
    else:
        RECONCILES.labels(kind, "ok").inc()
    finally:
        RECONCILE_SECONDS.labels(kind).observe(time.perf_counter() - start)


class PhaseCollector:
    """specdec_speculative_deployments / specdec_engine_builds / specdec_model_caches by phase, from the cache."""

    def __init__(self, cached: Callable[[str], Iterable[dict[str, Any]]]):
        self.cached = cached  # a kind's objects in the watch cache, in every namespace

    def collect(self) -> Iterator[GaugeMetricFamily]:
        for kind, name in (
            ("SpeculativeDeployment", "specdec_speculative_deployments"),
            ("EngineBuild", "specdec_engine_builds"),
            ("ModelCache", "specdec_model_caches"),
        ):
            family = GaugeMetricFamily(name, f"{kind}s by status.phase.", labels=["phase"])
            phases = collections.Counter((o.get("status") or {}).get("phase") or "Unknown" for o in self.cached(kind))
            for phase, count in sorted(phases.items()):
                family.add_metric([phase], count)
            yield family


def serve(port: int, cached: Callable[[str], Iterable[dict[str, Any]]]) -> None:
    REGISTRY.register(PhaseCollector(cached))
    start_http_server(port, registry=REGISTRY)
