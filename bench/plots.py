"""The performance plots of the documentation, from the fleet bench's results (bench/results/*.json).

    .venv/bin/python bench/plots.py            # writes docs/performance/*.svg (matplotlib: the docs extra)
    .venv/bin/python bench/plots.py --table    # also prints the current figures as a Markdown table

Plots (SVG, text kept as text, no timestamps, so an unchanged input gives the same file):

- ready-vs-n.svg: seconds until every deployment of a fleet of N is Ready (and until all N were applied),
  the newest result for each N, each point labelled with its commit and date.
- operator-floor-ratios.svg: the newest fleet run's operator / loaded floor ratios (p50, p95) of its two
  stages, and the newest single-deployment ratios to the sequential floor, against their targets.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "docs" / "performance"


def fleet_runs(results: Path = RESULTS) -> list[dict]:
    """Every bench/run.py result with fleets, oldest first (timestamped names sort by time)."""
    runs = []
    for path in sorted(results.glob("2*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("scales"):
            data["file"] = path.name
            runs.append(data)
    return runs


def clean(run: dict) -> bool:
    """A run of committed code without a profiler attached."""
    commit = str(run.get("commit") or "")
    return bool(commit) and " " not in commit and "+" not in commit and not run.get("args", {}).get("profile")


def newest_per_n(runs: list[dict]) -> dict[int, tuple[dict, dict]]:
    """N -> (run, fleet) of the newest clean run with a fleet of N."""
    out: dict[int, tuple[dict, dict]] = {}
    for run in runs:
        if not clean(run):
            continue
        for fleet in run["scales"]:
            if fleet.get("all_ready_seconds") and fleet.get("ready") == fleet.get("deployments"):
                out[fleet["deployments"]] = (run, fleet)
    return dict(sorted(out.items()))


def latest(runs: list[dict]) -> dict:
    return [r for r in runs if clean(r)][-1]


def _setup():
    import matplotlib

    matplotlib.use("svg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "specdec",
            "font.size": 10,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


def _save(fig, path: Path) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "bench/plots.py"}, bbox_inches="tight")


def plot_ready_vs_n(runs: list[dict], path: Path) -> None:
    plt = _setup()
    points = newest_per_n(runs)
    ns = list(points)
    ready = [points[n][1]["all_ready_seconds"] for n in ns]
    applied = [points[n][1].get("apply_seconds") for n in ns]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(ns, ready, "o-", color="#1f77b4", label="all Ready")
    if all(a is not None for a in applied):
        ax.plot(ns, applied, "s--", color="#7f7f7f", label="all applied (the bench's creates)")
    ax.axhline(120, color="#d62728", linestyle=":", linewidth=1)
    ax.annotate(
        "target at N = 1000: 120 s",
        (ns[0], 120),
        xytext=(0, 4),
        textcoords="offset points",
        color="#d62728",
        fontsize=8,
    )
    for n, seconds in zip(ns, ready, strict=True):
        run = points[n][0]
        ax.annotate(
            f"{seconds:.0f} s\n{run['commit']}, {run['date'][:10]}",
            (n, seconds),
            xytext=(6, -24),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlim(0, max(ns) * 1.15)
    ax.set_xlabel("deployments in the fleet (N), applied at once")
    ax.set_ylabel("seconds")
    ax.set_ylim(0, max(ready + [120]) * 1.25)
    ax.set_title("Fleet rollout on the local control plane (2 cores)", fontsize=10)
    ax.legend(loc="upper left", fontsize=8, frameon=False)
    _save(fig, path)
    plt.close(fig)


def plot_ratios(runs: list[dict], path: Path) -> None:
    plt = _setup()
    run = latest(runs)
    fleet = max(run["scales"], key=lambda f: f["deployments"])
    n = fleet["deployments"]
    bars = [  # (label, value, target)
        (f"N={n}: apply → first Job\n/ loaded floor, p50", fleet["apply_to_job"]["loaded_ratio_p50"], 1.5),
        (f"N={n}: apply → first Job\n/ loaded floor, p95", fleet["apply_to_job"]["loaded_ratio_p95"], 1.5),
        (
            f"N={n}: Jobs done → Deployment\n/ loaded floor, p50",
            fleet["jobs_done_to_deployment"]["loaded_ratio_p50"],
            1.5,
        ),
        (
            f"N={n}: Jobs done → Deployment\n/ loaded floor, p95",
            fleet["jobs_done_to_deployment"]["loaded_ratio_p95"],
            1.5,
        ),
    ]
    latency = run.get("latency") or {}
    for key, label in (
        ("apply_to_job", "apply → Job"),
        ("jobs_done_to_deployment", "last Job done → Deployment"),
        ("available_to_ready", "Deployment available → Ready"),
    ):
        if key in latency:
            bars.append((f"one deployment: {label}\n/ sequential floor, p50", latency[key]["ratio_p50"], 3.0))
    fig, ax = plt.subplots(figsize=(6.4, 0.55 * len(bars) + 1.2))
    ys = list(range(len(bars)))[::-1]
    for y, (_label, value, target) in zip(ys, bars, strict=True):
        ax.barh(y, value, color="#1f77b4" if value <= target else "#ff7f0e", height=0.6)
        ax.plot([target, target], [y - 0.4, y + 0.4], color="#d62728", linewidth=1.5)
        ax.annotate(
            f"{value:.2f} (target ≤ {target:g})", (value, y), xytext=(4, -3), textcoords="offset points", fontsize=8
        )
    ax.set_yticks(ys, [b[0] for b in bars], fontsize=8)
    ax.set_xlabel("operator / floor (1 = as fast as the same writes made directly)")
    ax.set_xlim(0, max(max(b[1] for b in bars), 3.0) * 1.35)
    ax.set_title(f"Operator against its floors: {run['commit']}, {run['date'][:10]}", fontsize=10)
    _save(fig, path)
    plt.close(fig)


def _f(x: float, digits: int = 2) -> str:
    return f"{x:.{digits}f}"


def table(runs: list[dict]) -> str:
    """The newest run's figures, as the performance page's table."""
    run = latest(runs)
    fleet = max(run["scales"], key=lambda f: f["deployments"])
    a, j = fleet["apply_to_job"], fleet["jobs_done_to_deployment"]
    lf = fleet["loaded_floor"]
    idle = run.get("idle") or {}
    lat = run.get("latency") or {}
    rows = [
        (
            "all Ready (all applied in)",
            "≤ 120 s",
            f"{fleet['all_ready_seconds']:.1f} s ({fleet['apply_seconds']:.1f} s)",
        ),
        ("apply → first Job, p50 / p95", "p95 ≤ 0.5 s", f"{_f(a['p50'])} / {_f(a['p95'])} s"),
        ("  its loaded floor, p50 / p95", "", f"{_f(lf['apply_to_job']['p50'])} / {_f(lf['apply_to_job']['p95'])} s"),
        ("  operator / loaded floor, p50 / p95", "≤ 1.5", f"{_f(a['loaded_ratio_p50'])} / {_f(a['loaded_ratio_p95'])}"),
        ("Jobs done → Deployment, p50 / p95", "", f"{_f(j['p50'])} / {_f(j['p95'])} s"),
        (
            "  its loaded floor, p50 / p95",
            "",
            f"{_f(lf['jobs_done_to_deployment']['p50'])} / {_f(lf['jobs_done_to_deployment']['p95'])} s",
        ),
        ("  operator / loaded floor, p50 / p95", "≤ 1.5", f"{_f(j['loaded_ratio_p50'])} / {_f(j['loaded_ratio_p95'])}"),
        ("  operator / fan-out floor, p50", "", _f(j["fanout_ratio_p50"])),
        (
            "EngineBuilds / Jobs / distinct recipes",
            "= recipes",
            f"{fleet['engine_builds']} / {fleet['jobs']} / {fleet['distinct_recipes']}",
        ),
        ("operator CPU during the fleet", "", f"{fleet['operator_cpu_seconds']:.1f} s"),
        (
            "operator peak RSS (fleet; idle after it)",
            "≤ 250 MiB",
            f"{fleet['operator_peak_rss_mib']:.0f} MiB; {idle.get('rss_mib', 0):.0f} MiB",
        ),
        ("resync pass after the fleet", "< 10 s", f"{idle.get('resync', {}).get('seconds', 0):.1f} s"),
        (
            "operator writes while idle; idle CPU",
            "0; < 2 %",
            f"{idle.get('operator_writes')}; {idle.get('cpu_percent_of_a_core', 0):.1f} % of a core",
        ),
    ]
    for key, label in (
        ("apply_to_job", "apply → first Job"),
        ("jobs_done_to_deployment", "last Job done → Deployment"),
        ("available_to_ready", "Deployment available → Ready"),
    ):
        if key in lat:
            rows.append(
                (
                    f"one deployment: {label}, p50 / p95; / sequential floor",
                    "≤ 3",
                    f"{_f(lat[key]['p50'], 3)} / {_f(lat[key]['p95'], 3)} s; {_f(lat[key]['ratio_p50'])}",
                )
            )
    out = [f"| N = {fleet['deployments']} | target | {run['commit']}, {run['date'][:10]} |", "|---|---|---|"]
    out += [
        f"| {name.strip() if not name.startswith('  ') else '&nbsp;&nbsp;' + name.strip()} | {target} | {value} |"
        for name, target, value in rows
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--table", action="store_true", help="print the newest run's figures as a Markdown table")
    args = parser.parse_args(argv)
    runs = fleet_runs(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    plot_ready_vs_n(runs, args.out / "ready-vs-n.svg")
    plot_ratios(runs, args.out / "operator-floor-ratios.svg")
    if args.table:
        print(table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
