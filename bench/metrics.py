"""The operator's own counters, scraped from its /metrics."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

METRICS_PORT = 18091  # the bench's operator serves its metrics here


TIMINGS = {
    "specdec_api_request_duration_seconds": "request seconds",  # histograms: where time goes
    "specdec_workqueue_wait_seconds": "queue wait",
    "specdec_reconcile_duration_seconds": "reconcile seconds",
}


def mean_timings(counters: dict[str, float]) -> dict[str, float]:
    """'<what> <verb or kind>' -> mean seconds, from the histograms' sums and counts."""
    return {
        key.removesuffix(" sum"): value / counters[key.removesuffix("sum") + "count"]
        for key, value in counters.items()
        if key.endswith(" sum") and counters.get(key.removesuffix("sum") + "count")
    }


def scrape(port: int) -> dict[str, float]:
    """The operator's own counters: API requests by verb, reconciles by kind, resync passes."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "specdec_api_requests_total":
                key = f"requests {sample.labels['verb']}"
            elif sample.name == "specdec_reconcile_total":
                key = f"reconciles {sample.labels['kind']}"
            elif sample.name in ("specdec_resync_duration_seconds_count", "specdec_resync_duration_seconds_sum"):
                key = sample.name.removeprefix("specdec_")
            elif sample.name.endswith(("_sum", "_count")) and sample.name.rsplit("_", 1)[0] in TIMINGS:
                stem, part = sample.name.rsplit("_", 1)
                key = f"{TIMINGS[stem]} {sample.labels.get('verb') or sample.labels.get('kind')} {part}"
            else:
                continue
            out[key] = out.get(key, 0) + sample.value
    return out


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}
