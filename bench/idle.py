"""Resync and idle cost after the largest fleet is Ready: the first resync pass that starts after it, then
an idle window before the next pass."""

from __future__ import annotations

import sys
import time

from bench.audit_log import audit_writes
from bench.metrics import METRICS_PORT, delta, scrape
from bench.processes import process_stats
from bench.timing import now

from specdec_dev import cluster as dev

RESYNC_POLL_SECONDS = 0.5


def wait_resync_pass(before: dict[str, float], resync_seconds: float) -> dict[str, float]:
    """The operator's counters once a resync pass has ended after `before` was scraped."""
    deadline = now() + resync_seconds + 120
    while now() < deadline:
        after = scrape(METRICS_PORT)
        if after.get("resync_duration_seconds_count", 0) > before.get("resync_duration_seconds_count", 0):
            return after
        time.sleep(RESYNC_POLL_SECONDS)
    raise SystemExit(f"no resync pass ended within {resync_seconds + 120:.0f}s")


def idle(local: dev.LocalCluster, pid: int, seconds: float, resync_seconds: float, ready_at: float) -> dict:
    """The first resync pass that starts after the fleet is Ready (one under way then began during its
    rollout), measured (duration and writes), then an idle window before the next pass."""
    audit = local.logs_dir / "audit.log"
    before, offset = scrape(METRICS_PORT), audit.stat().st_size
    while True:
        after = wait_resync_pass(before, resync_seconds)
        passes = delta(after, before)
        if now() - passes.get("resync_duration_seconds_sum", 0.0) >= ready_at:
            break
        before, offset = after, audit.stat().st_size
    # The pass's own writes: from its start (its end, seen within a poll, less its duration) on. Before it, the
    # Event poster may still be posting the fleet's Events: those are the rollout's, counted apart.
    began = time.time() - passes.get("resync_duration_seconds_sum", 0.0) - RESYNC_POLL_SECONDS
    resync = {
        "seconds": passes.get("resync_duration_seconds_sum", float("nan")),
        "writes": audit_writes(audit, offset, since=began),
        "writes_before_it": audit_writes(audit, offset, until=began),
        "requests": {k: v for k, v in passes.items() if k.startswith("requests")},
    }
    offset = audit.stat().st_size
    stats = process_stats(pid)
    print(f"idle: {seconds:.0f}s", file=sys.stderr)
    time.sleep(seconds)
    after_stats = process_stats(pid)
    writes = audit_writes(audit, offset)
    cpu = after_stats["cpu_seconds"] - stats["cpu_seconds"]
    return {
        "seconds": seconds,
        "operator_writes": sum(writes.values()),
        "writes_by_kind": writes,
        "cpu_seconds": cpu,
        "cpu_percent_of_a_core": 100 * cpu / seconds,
        "rss_mib": after_stats["rss_mib"],
        "resync": resync,
    }
