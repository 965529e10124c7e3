"""The numbers the operator reads from a runtime pod's Prometheus text page."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families


def metric_values(text: str, prefixes: tuple[str, ...]) -> dict[str, float]:
    """Each sample of the lines that start with one of `prefixes`, by name, summed over its labels. Only those
    lines go through prometheus_client's (pure-Python) parser: the rest of a pod's metrics (histograms,
    per-endpoint counters) would cost most of the time. NaN, infinities and negative values are left out:
    what is read ends up in status (valid JSON), and none of these counters or gauges goes below 0."""
    lines = "\n".join(line for line in text.splitlines() if line.startswith(prefixes)) + "\n"
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(lines):
        for sample in family.samples:
            if math.isfinite(sample.value) and sample.value >= 0:
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values
