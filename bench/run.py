"""Benchmark the operator on the local control plane: latency, its floor, scale and idle cost.

    .venv/bin/python bench/run.py [--reps 20] [--scales 100,300,1000] [--models 10] [--idle-seconds 60]

Starts its own cluster (`specdec-bench`, with an audit log of write requests), runs the operator
as a process, prints a table and writes bench/results/<timestamp>.json. Figures are medians and
ratios from one run: the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the bench's modules, when run as a script without PYTHONPATH=.

from bench.audit_log import AUDIT_POLICY, apply_chain, audit_writes, release_chain, writes_by_client  # noqa: E402
from bench.floor import floor, floor_fanout, floor_scale  # noqa: E402
from bench.history import previous_run, render_comparison  # noqa: E402
from bench.idle import idle  # noqa: E402
from bench.metrics import METRICS_PORT, delta, scrape  # noqa: E402
from bench.observer import Observer  # noqa: E402
from bench.plots import fleet_runs  # noqa: E402
from bench.processes import cpu_by_process, process_stats  # noqa: E402
from bench.rollouts import latency, scale  # noqa: E402
from bench.table import render_table  # noqa: E402
from bench.timing import percentile  # noqa: E402
from kubernetes import config  # noqa: E402

from specdec.api.crd import render_crds  # noqa: E402
from specdec.settings import Settings  # noqa: E402
from specdec_dev import cluster as dev  # noqa: E402


def delete_namespaces(local: dev.LocalCluster, names: list[str]) -> None:
    """Delete and wait until gone: the next measurement must not share the API server with a cleanup."""
    local.kubectl("delete", "namespace", "--wait=false", *names)
    local.kubectl("wait", "--for=delete", "--timeout=600s", *(f"namespace/{n}" for n in names), check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--scale", type=int, help="one fleet size (the same as --scales N)")
    parser.add_argument(
        "--scales",
        default="100,300,1000",
        help="fleet sizes, comma-separated, each with a fresh operator (default: %(default)s)",
    )
    parser.add_argument("--models", type=int, default=10, help="target models the fleet shares")
    parser.add_argument(
        "--own-every", type=int, default=10, help="every Nth deployment has a model of its own (0: none)"
    )
    parser.add_argument(
        "--idle-seconds",
        type=float,
        default=60,
        help="idle window after the largest fleet is Ready (must be under --resync-seconds)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=float,
        default=Settings().resync_seconds,
        help="the operator's resync interval (default: the operator's own, %(default)s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the bench cluster afterwards")
    parser.add_argument(
        "--profile",
        type=Path,
        help="record the operator with py-spy during the largest fleet "
        "into this file (collapsed stacks; `pip install py-spy`)",
    )
    args = parser.parse_args()
    scales = [args.scale] if args.scale else sorted(int(n) for n in args.scales.split(","))
    if args.idle_seconds >= args.resync_seconds:
        parser.error("--idle-seconds must be under --resync-seconds: the idle window is between resyncs")

    local = dev.LocalCluster(name="specdec-bench", operator_port=18090)
    dev.down(local)
    policy = local.workdir / "bench-audit-policy.yaml"
    policy.parent.mkdir(parents=True, exist_ok=True)
    policy.write_text(AUDIT_POLICY)
    # Each runtime pod of the example takes 2 GPUs; each fleet's namespace is deleted after it.
    gpu_nodes = math.ceil(max(scales) * 2 / 8) + 4
    dev.up(local, gpu_nodes=gpu_nodes, audit_policy=policy)
    local.kubectl("apply", "--server-side", "-f", "-", input="\n---\n".join(render_crds().values()))
    local.kubectl(
        "wait", "--for=condition=Established", "crd/speculativedeployments.specdec.io", "crd/enginebuilds.specdec.io"
    )
    os.environ["SPECDEC_RESYNC_SECONDS"] = str(args.resync_seconds)  # the operator inherits it
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "operator", "bench"], capture_output=True, text=True
    ).stdout.strip()
    results: dict = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": commit + ("+dirty" if dirty else ""),
        "machine": f"{os.cpu_count()} cores, {os.uname().machine}",
        "args": vars(args),
        "command": " ".join(["bench/run.py", *sys.argv[1:]]),
        # 1-minute load averages: how busy the shared machine was, beside the figures
        "load_average": {"before": os.getloadavg()[0]},
    }
    try:
        api = config.new_client_from_config(config_file=str(local.kubeconfig))
        api.configuration.connection_pool_maxsize = 16
        # The floor first, before the operator runs: it would otherwise act on the floor's objects.
        print(f"floor: {args.reps} repetitions, fleets {scales}", file=sys.stderr)
        floor_times = floor(api, args.reps)
        floor_fleets = {n: floor_scale(api, n, args.models, args.own_every) for n in scales}
        for n in scales:
            floor_fleets[n]["fanout"] = floor_fanout(api, n)
        delete_namespaces(
            local,
            [f"bench-floor-{i}" for i in range(args.reps)]
            + [f"bench-floor-scale-{n}" for n in scales]
            + [f"bench-floor-fanout-{n}" for n in scales],
        )
        dev.start_operator(local, metrics_port=METRICS_PORT)
        observer = Observer(api)
        observer.start()
        time.sleep(1)  # let the watches connect before the first measurement
        print(f"latency: {args.reps} repetitions", file=sys.stderr)
        operator_times = latency(api, observer, args.reps)
        results["latency"] = {}
        for stage, values in operator_times.items():
            p50, p95, f50 = statistics.median(values), percentile(values, 0.95), statistics.median(floor_times[stage])
            results["latency"][stage] = {"p50": p50, "p95": p95, "floor_p50": f50, "ratio_p50": p50 / f50}
        results["scales"] = []
        for n in scales:
            if n != scales[0]:  # a fresh operator per fleet: its peak RSS and counters are this fleet's
                dev.stop_operator(local)
                dev.start_operator(local, metrics_port=METRICS_PORT)
            pid = local.operator_pid()
            if args.profile and n == scales[-1]:  # py-spy stops and writes the file when the operator exits
                # --nonblocking: py-spy pausing the operator 50 times a second (its default) slowed the fleet
                # it measured by minutes; unpaused samples may be torn now and then (py-spy counts them).
                py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))  # e.g. in .venv
                subprocess.Popen(
                    [
                        py_spy,
                        "record",
                        "--pid",
                        str(pid),
                        "--format",
                        "raw",
                        "--rate",
                        "20",
                        "--nonblocking",
                        "--gil",
                        "--output",
                        str(args.profile),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            print(f"scale: {n} deployments", file=sys.stderr)
            audit = local.logs_dir / "audit.log"
            counters, stats, offset = scrape(METRICS_PORT), process_stats(pid), audit.stat().st_size
            cpu = cpu_by_process(pid, local.directory)
            row = scale(api, observer, n, args.models, args.own_every)
            ready_at = row.pop("ready_at")  # this process's clock (now())
            after = process_stats(pid)
            row["cpu_seconds_by_process"] = {
                k: round(v - cpu.get(k, 0.0), 1) for k, v in cpu_by_process(pid, local.directory).items()
            }
            row["requests"] = delta(scrape(METRICS_PORT), counters)
            row["writes"] = audit_writes(audit, offset)
            row["apply_chain"] = apply_chain(
                audit, offset, f"bench-scale-{n}", row.pop("first_jobs"), row.pop("sent_at")
            )
            row["release_chain"] = release_chain(audit, offset, f"bench-scale-{n}", row.pop("released_by"))
            row["writes_by_client"] = writes_by_client(audit, offset)
            row["operator_cpu_seconds"] = after["cpu_seconds"] - stats["cpu_seconds"]
            row["operator_peak_rss_mib"] = after["peak_rss_mib"]
            row["floor"] = floor_fleets[n]
            for stage in ("apply_to_job", "jobs_done_to_deployment"):
                row[stage]["floor_p50"] = floor_fleets[n][stage]["p50"]
                row[stage]["ratio_p50"] = row[stage]["p50"] / floor_fleets[n][stage]["p50"]
            for stage, floor_row in row["loaded_floor"].items():
                row[stage]["loaded_floor_p50"] = floor_row["p50"]
                row[stage]["loaded_ratio_p50"] = row[stage]["p50"] / floor_row["p50"]
                row[stage]["loaded_ratio_p95"] = row[stage]["p95"] / floor_row["p95"]
            fanout = floor_fleets[n]["fanout"]
            row["jobs_done_to_deployment"]["fanout_floor_p50"] = fanout["p50"]
            row["jobs_done_to_deployment"]["fanout_ratio_p50"] = row["jobs_done_to_deployment"]["p50"] / fanout["p50"]
            results["scales"].append(row)
            if n == scales[-1]:  # its namespace goes with the cluster
                results["idle"] = idle(local, pid, args.idle_seconds, args.resync_seconds, ready_at)
            else:
                delete_namespaces(local, [f"bench-scale-{n}", f"bench-probe-{n}"])
        observer.stop.set()
    finally:
        if not args.keep:
            dev.down(local)
    results["load_average"]["after"] = os.getloadavg()[0]
    out = ROOT / "bench" / "results" / f"{results['date'].replace(':', '')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(render_table(results))
    print(f"\nwritten: {out}\n")
    print(render_comparison(results, previous_run(fleet_runs(), results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
