"""What reading the runtime pods' metrics costs the operator (the aim: < 10 % of one core at 300 pods).

    .venv/bin/python bench/scrape.py [--pods 300] [--passes 8] [--interval 15]

The operator's own SpeculationMonitor (specdec.feedback.monitor) scrapes N real HTTP endpoints, each on its own
loopback address (127.66.x.y, port 8000, like pod IPs) and serving what a runtime pod serves: the
front's metrics (specdec.runtime.metrics, with traffic recorded), counters growing between passes. The
endpoints run in a separate process, so this process's CPU time is the monitor's alone. Passes run
back to back; the cost at the production interval is CPU seconds per pass / interval. Writes
bench/results/scrape-<timestamp>.json. One run, medians: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec.feedback.monitor import SpeculationMonitor
from specdec.kube.cache import Store

ROOT = Path(__file__).resolve().parent.parent
PORT = 8000


def address(i: int) -> str:
    return f"127.66.{i // 250}.{i % 250 + 1}"


def serve(pods: int, ready) -> None:
    """The pods: one aiohttp server per address, each with its own front metrics and traffic."""
    import asyncio

    from aiohttp import web

    from specdec.runtime.metrics import RuntimeMetrics

    async def main() -> None:
        runners = []
        for i in range(pods):
            metrics = RuntimeMetrics(mode="draftTarget", backend="tensorrt", model=f"m{i}", route="triton")
            metrics.draft_length(4)

            async def handler(_request, metrics=metrics):
                for _ in range(20):  # the traffic between two scrapes
                    metrics.speculative_response(draft=4, accepted=3, steps=1, rate=0.75)
                    metrics.request("/v1/completions", "200", 0.8)
                    metrics.tokens(120, 64)
                    metrics.token_time(0.8, 64)
                metrics.compute_time(0.2, 4.0)
                return web.Response(body=metrics.render(), content_type="text/plain")

            app = web.Application()
            app.router.add_get("/metrics", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, address(i), PORT).start()
            runners.append(runner)
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def store_of(pods: int) -> Store:
    store = Store(("SpeculativeDeployment", "Pod"), indexed_labels=(LABEL_INSTANCE,))
    for i in range(pods):
        name = f"sd-{i}"
        store.put(
            {
                "kind": "SpeculativeDeployment",
                "metadata": {"name": name, "namespace": "bench", "uid": f"u{i}", "generation": 1},
                "spec": {
                    "target": {"model": "hf://meta-llama/Llama-3.1-70B-Instruct"},
                    "speculation": {
                        "mode": "draftTarget",
                        "draftTarget": {
                            "draft": {"model": "hf://meta-llama/Llama-3.2-1B-Instruct"},
                            "draftLen": "auto",
                            "maxDraftLen": 8,
                        },
                    },
                },
            }
        )
        store.put(
            {
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-pod",
                    "namespace": "bench",
                    "uid": f"p{i}",
                    "labels": {LABEL_INSTANCE: name, LABEL_COMPONENT: "runtime"},
                },
                "status": {"podIP": address(i), "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )
    return store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0, help="the production scrape interval")
    args = parser.parse_args()
    ready = multiprocessing.Event()
    server = multiprocessing.Process(target=serve, args=(args.pods, ready), daemon=True)
    server.start()
    if not ready.wait(120):
        print("the endpoints did not start", file=sys.stderr)
        return 1
    enqueued = []
    monitor = SpeculationMonitor(
        store_of(args.pods), lambda *a: None, lambda ns, name: enqueued.append(name), interval=args.interval
    )
    cpu, wall = [], []
    for n in range(args.passes + 1):
        c0, w0 = time.process_time(), time.monotonic()
        monitor.run_once(now=n * args.interval)
        if n:  # the first pass only takes baselines
            cpu.append(time.process_time() - c0)
            wall.append(time.monotonic() - w0)
        time.sleep(0.5)
    server.terminate()
    published = sum(1 for i in range(args.pods) if monitor.published("bench", f"sd-{i}", 1))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    result = {
        "commit": commit,
        "pods": args.pods,
        "interval_seconds": args.interval,
        "passes": args.passes,
        "cpu_seconds_per_pass_median": round(statistics.median(cpu), 3),
        "wall_seconds_per_pass_median": round(statistics.median(wall), 3),
        "core_share_at_interval": round(statistics.median(cpu) / args.interval, 4),
        "deployments_published": published,
    }
    print(json.dumps(result, indent=2))
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H%M%S%z")
    out = ROOT / "bench" / "results" / f"scrape-{stamp}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}", file=sys.stderr)
    return 0 if published == args.pods else 1


if __name__ == "__main__":
    sys.exit(main())
