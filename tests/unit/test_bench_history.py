"""The fleet bench's regression guard (bench/history.py): a run is set beside the last one of the same machine
kind and fleet size, and a figure worse by more than its noise is flagged."""

from __future__ import annotations

import copy
from typing import Any

from bench.history import compare, previous_run, render_comparison


def run(
    date: str, commit: str = "abc1234", machine: str = "2 cores, x86_64", ready: float = 100.0, size: int = 1000
) -> dict[str, Any]:
    fleet = {
        "deployments": size,
        "ready": size,
        "all_ready_seconds": ready,
        "apply_seconds": ready - 10,
        "apply_to_job": {"p50": 0.3, "p95": 0.6, "loaded_ratio_p50": 1.0, "loaded_ratio_p95": 1.1},
        "jobs_done_to_deployment": {"loaded_ratio_p50": 1.1, "loaded_ratio_p95": 1.3},
        "cpu_seconds_by_process": {"kube-apiserver": 110.0, "etcd": 20.0},
        "operator_cpu_seconds": 35.0,
        "operator_peak_rss_mib": 190.0,
    }
    return {
        "date": date,
        "commit": commit,
        "machine": machine,
        "args": {},
        "scales": [fleet],
        "idle": {"resync": {"seconds": 2.0, "writes": None}, "operator_writes": 0},
    }


def test_the_last_run_of_the_same_machine_kind_and_size_is_the_reference():
    runs = [
        run("2026-01-01", "old"),
        run("2026-01-02", "other", machine="8 cores, arm64"),
        run("2026-01-03", "small", size=100),
        run("2026-01-04", "dirty+dirty"),
        run("2026-01-05", "new"),
    ]
    assert previous_run(runs, run("2026-01-06"))["commit"] == "new"
    assert previous_run(runs, run("2026-01-05"))["commit"] == "old"  # not another machine's, size's or dirty code's
    assert previous_run(runs, run("2026-01-01")) is None


def test_a_loss_beyond_noise_is_flagged_and_noise_is_not():
    before = run("2026-01-01", "before")
    noise = run("2026-01-02", "after", ready=110.0)  # +10 %: within the 15 % of all Ready
    assert not any(row.loss for row in compare(noise, before))
    assert "no loss beyond noise" in render_comparison(noise, before)
    slower = copy.deepcopy(noise)
    slower["scales"][0]["all_ready_seconds"] = 130.0
    slower["idle"]["operator_writes"] = 3
    losses = [row.figure.label for row in compare(slower, before) if row.loss]
    assert losses == ["all Ready (s)", "operator writes while idle"]
    assert "LOSS" in render_comparison(slower, before)


def test_a_better_figure_is_no_loss():
    before, after = run("2026-01-01"), run("2026-01-02", ready=60.0)
    assert not any(row.loss for row in compare(after, before))
