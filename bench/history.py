"""The fleet bench's figures against its last recorded run on the same kind of machine, and the runs' history.

`bench/run.py` prints its largest fleet's figures beside those of the newest earlier result in
`bench/results/` with the same machine (cores, architecture) and a fleet of the same size, and flags each
figure that got worse by more than the noise between runs of the same code (`Figure.tolerance`). Both runs'
load averages are printed with them: a busy machine slows every figure in seconds, less the ratios to the
loaded floor, which is measured beside the fleet.

    .venv/bin/python bench/history.py                # the history as the performance page's table
    .venv/bin/python bench/history.py --compare FILE # one result against the run before it
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.plots import RESULTS, clean, fleet_runs

Run = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Figure:
    label: str
    value: Callable[[Run, dict[str, Any]], float | None]  # of the run and its largest fleet
    # The largest rise (relative) that is still noise, from runs of the same code on this shared machine: ~10 %
    # in all Ready; the ratios to the loaded floor by up to 20 % at p50 and nearly 2x at p95 (a p95 of ~100
    # probes, and of fan-outs a shared Job's end releases at once); a resync pass's few seconds by 30 %.
    tolerance: float
    digits: int = 1


def _get(*keys: str) -> Callable[[Run, dict[str, Any]], float | None]:
    def value(run: Run, fleet: dict[str, Any]) -> float | None:
        node: Any = fleet
        for key in keys:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return float(node) if isinstance(node, (int, float)) else None

    return value


def _idle(*keys: str) -> Callable[[Run, dict[str, Any]], float | None]:
    return lambda run, fleet: _get(*keys)(run, run.get("idle") or {})


def _resync_writes(run: Run, fleet: dict[str, Any]) -> float | None:
    resync = (run.get("idle") or {}).get("resync")
    return None if resync is None else float(resync.get("writes") or 0)  # the bench records none as null


FIGURES = (
    Figure("all Ready (s)", _get("all_ready_seconds"), 0.15),
    Figure("all applied in (s)", _get("apply_seconds"), 0.15),
    Figure("apply → first Job p50 (s)", _get("apply_to_job", "p50"), 0.25, 3),
    Figure("apply → first Job p95 (s)", _get("apply_to_job", "p95"), 0.25, 3),
    Figure("apply → first Job, operator / loaded floor p50", _get("apply_to_job", "loaded_ratio_p50"), 0.2, 2),
    Figure("apply → first Job, operator / loaded floor p95", _get("apply_to_job", "loaded_ratio_p95"), 1.0, 2),
    Figure(
        "Jobs done → Deployment, operator / loaded floor p50",
        _get("jobs_done_to_deployment", "loaded_ratio_p50"),
        0.2,
        2,
    ),
    Figure(
        "Jobs done → Deployment, operator / loaded floor p95",
        _get("jobs_done_to_deployment", "loaded_ratio_p95"),
        1.0,
        2,
    ),
    Figure("kube-apiserver CPU (s)", _get("cpu_seconds_by_process", "kube-apiserver"), 0.15),
    Figure("etcd CPU (s)", _get("cpu_seconds_by_process", "etcd"), 0.15),
    Figure("operator CPU (s)", _get("operator_cpu_seconds"), 0.15),
    Figure("operator peak RSS (MiB)", _get("operator_peak_rss_mib"), 0.1, 0),
    Figure("resync pass (s)", _idle("resync", "seconds"), 0.3),
    Figure("resync pass writes", _resync_writes, 0.0, 0),
    Figure("operator writes while idle", _idle("operator_writes"), 0.0, 0),
)


def largest_fleet(run: Run) -> dict[str, Any]:
    return max(run["scales"], key=lambda fleet: fleet["deployments"])


def previous_run(runs: list[Run], run: Run) -> Run | None:
    """The newest clean run before `run` on the same kind of machine whose largest fleet has its size and
    all Ready."""
    size = largest_fleet(run)["deployments"]
    earlier = [
        r
        for r in runs
        if r["date"] < run["date"]
        and clean(r)
        and r.get("machine") == run.get("machine")
        and any(f["deployments"] == size and f.get("ready") == size for f in r["scales"])
    ]
    return earlier[-1] if earlier else None


@dataclasses.dataclass(frozen=True)
class Row:
    figure: Figure
    before: float | None
    after: float | None

    @property
    def loss(self) -> bool:
        """Worse than the earlier run by more than the figure's noise (every figure is better lower)."""
        if self.before is None or self.after is None:
            return False
        return self.after > self.before * (1 + self.figure.tolerance)


def compare(run: Run, before: Run) -> list[Row]:
    size = largest_fleet(run)["deployments"]
    earlier = next(f for f in before["scales"] if f["deployments"] == size)
    return [Row(f, f.value(before, earlier), f.value(run, largest_fleet(run))) for f in FIGURES]


def _load(run: Run) -> str:
    load = run.get("load_average")
    return f"load {load['before']:.1f} → {load['after']:.1f}" if load else "load not recorded"


def render_comparison(run: Run, before: Run | None) -> str:
    if before is None:
        fleet = largest_fleet(run)["deployments"]
        return f"no earlier run on {run.get('machine')} with a fleet of {fleet} to compare with"
    rows = compare(run, before)
    lines = [
        f"against {before['commit']} ({before['date']}, {before.get('file', '')}; {_load(before)}), this run "
        f"{_load(run)}:",
        "",
        f"| N = {largest_fleet(run)['deployments']} | {before['commit']} | {run['commit']} | change | beyond noise? |",
        "|---|---|---|---|---|",
    ]
    for row in rows:

        def show(x: float | None, digits: int = row.figure.digits) -> str:
            return "—" if x is None else f"{x:.{digits}f}"

        change = f"{(row.after / row.before - 1) * 100:+.0f} %" if row.before and row.after is not None else ""
        flag = f"LOSS (> +{row.figure.tolerance:.0%})" if row.loss else ""
        lines.append(f"| {row.figure.label} | {show(row.before)} | {show(row.after)} | {change} | {flag} |")
    losses = [row.figure.label for row in rows if row.loss]
    lines.append("")
    lines.append(f"losses beyond noise: {', '.join(losses)}" if losses else "no loss beyond noise")
    return "\n".join(lines)


def command(run: Run) -> str:
    """The command a run was taken with: recorded, or rebuilt from its arguments."""
    if run.get("command"):
        return str(run["command"])
    args = run.get("args") or {}
    scales = args.get("scales") if not args.get("scale") else args["scale"]
    return f"bench/run.py --reps {args.get('reps')} --scales {scales} --idle-seconds {args.get('idle_seconds'):g}"


def history(runs: list[Run], size: int = 1000) -> str:
    """Every clean run with a fleet of `size`, oldest first, as a Markdown table."""
    lines = [
        "| date | commit | command | all Ready (applied in) | apply → Job p50 / p95 | operator / loaded floor, "
        "apply → Job p50 / p95 | kube-apiserver CPU | operator CPU; peak RSS | resync | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        fleet = next((f for f in run["scales"] if f["deployments"] == size and f.get("ready") == size), None)
        if fleet is None or not clean(run):
            continue
        job, resync = fleet["apply_to_job"], (run.get("idle") or {}).get("resync") or {}
        ratios = f"{job['loaded_ratio_p50']:.2f} / {job['loaded_ratio_p95']:.2f}" if "loaded_ratio_p95" in job else "—"
        apiserver = (fleet.get("cpu_seconds_by_process") or {}).get("kube-apiserver")
        apiserver_cpu = "—" if apiserver is None else f"{apiserver:.1f} s"
        resync_seconds = "—" if resync.get("seconds") is None else f"{resync['seconds']:.1f} s"
        lines.append(
            f"| {run['date'][:16].replace('T', ' ')} | {run['commit']} | `{command(run)}` | "
            f"{fleet['all_ready_seconds']:.1f} s ({fleet['apply_seconds']:.1f} s) | "
            f"{job['p50']:.3f} / {job['p95']:.3f} s | {ratios} | {apiserver_cpu} | "
            f"{fleet['operator_cpu_seconds']:.1f} s; {fleet['operator_peak_rss_mib']:.0f} MiB | {resync_seconds} | "
            f"{_load(run).removeprefix('load ')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--compare", type=Path, help="a result file: print it against the run before it")
    parser.add_argument("--size", type=int, default=1000, help="the fleet size of the history (default: 1000)")
    args = parser.parse_args(argv)
    runs = fleet_runs(args.results)
    if args.compare:
        run = json.loads(args.compare.read_text(encoding="utf-8"))
        print(render_comparison(run, previous_run(runs, run)))
    else:
        print(history(runs, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
