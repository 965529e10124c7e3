"""How late a fall of the acceptance reaches a scrape of the runtime front's /metrics, on the trtllm-serve route.

One front (specdec.runtime.front.Front, as `specdec-runtime` builds it, its statistics polled every 5 s) before the
local cluster's simulated trtllm-serve (specdec_dev.simulator: per-position acceptance 0.70, draft length 4, 20 ms
target steps), loaded by the pod runner's simulated clients (`--rate` requests/s, 64 tokens each). A scraper reads
/metrics every `--window` seconds, as the operator's monitor does, and takes each window's acceptance (accepted /
draft tokens over the window). Each fall: two windows at 0.70, then the acceptance falls to 0.05 at a moment drawn
uniformly within the next window. Per fall it records the seconds from the fall to the first scrape whose window
shows it (acceptance below 0.9 of the level before) and the windows until one is collapsed by the canary's rule (at
most `collapse_ratio` of 0.55's acceptance, the current arm of bench/canary_bench.py's collapse case), the window of
the fall counting as the first.

Two variants: `scrape-polls`, the front as it is (a scrape polls the iteration statistics before it answers), and
`periodic-only`, the front with its scrape polls taken away (the iteration statistics polled every 5 s only).
Everything here is simulated: no GPU, no cluster; the timings are this machine's.

    PYTHONPATH=operator:. .venv/bin/python bench/counter_lag.py --falls 6
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import random
import statistics
import time

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from tests.runtime.helpers import scenario_configs, serving, serving_front

from specdec.canary.decision import CanaryPolicy
from specdec.runtime import launch
from specdec.runtime.front import Front
from specdec_dev import simulated_clients
from specdec_dev.simulation_profile import Profile
from specdec_dev.simulator import SimulatedTrtllmServe, serve_drafts

CONFIG = scenario_configs()["pytorch-llama-3.1-8b-draft-1b"]
BEFORE, AFTER, CURRENT = 0.70, 0.05, 0.55
DRAFT_LEN = 4


def acceptance_rate(per_position: float) -> float:
    """Accepted / proposed draft tokens when each of 4 is accepted with `per_position` until the first rejection."""
    return sum(per_position**i for i in range(1, DRAFT_LEN + 1)) / DRAFT_LEN


@dataclasses.dataclass
class Fall:
    offset: float  # seconds into its window
    seen_after: float | None  # seconds from the fall to the first scrape whose window shows it
    windows: int | None  # windows to a collapsed one, the window of the fall the first


async def counters(client: aiohttp.ClientSession, url: str) -> tuple[float, float]:
    async with client.get(f"{url}/metrics") as resp:
        text = await resp.text()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    return values.get("specdec_draft_tokens_total", 0.0), values.get("specdec_accepted_draft_tokens_total", 0.0)


async def variant(name: str, args: argparse.Namespace) -> list[Fall]:
    profile = Profile(acceptance=BEFORE, requests_per_second=args.rate, step_seconds_per_token=0.0, seed=args.seed)
    served = SimulatedTrtllmServe(profile, CONFIG.served_model_name, *serve_drafts(CONFIG), seed=args.seed)
    collapsed_at = CanaryPolicy().collapse_ratio * acceptance_rate(CURRENT)
    rng = random.Random(args.seed)
    falls: list[Fall] = []
    async with serving(served.app()) as backend_url:
        backend = dataclasses.replace(launch.plan_launch(CONFIG).backend, url=backend_url)
        front = Front(CONFIG, backend, stats_interval=5.0)
        if name == "periodic-only":
            front.route.scrape_polls = list  # type: ignore[method-assign]  # no poll before /metrics answers
        async with serving_front(front) as url, aiohttp.ClientSession() as client:
            load = asyncio.create_task(
                simulated_clients.open_loop(client, f"{url}/v1/completions", lambda: profile, random.Random(args.seed))
            )
            last = await counters(client, url)
            next_scrape = time.monotonic() + args.window

            async def window() -> float | None:
                """The next window's acceptance; None on fewer draft tokens than the collapse rule compares."""
                nonlocal last, next_scrape
                await asyncio.sleep(max(next_scrape - time.monotonic(), 0))
                now = await counters(client, url)
                next_scrape += args.window
                draft, accepted = now[0] - last[0], now[1] - last[1]
                last = now
                return accepted / draft if draft >= CanaryPolicy().min_draft_tokens else None

            for _ in range(args.falls):
                served.profile = profile
                levels = [rate for rate in [await window(), await window()] if rate is not None]
                level = statistics.mean(levels) if levels else acceptance_rate(BEFORE)
                offset = rng.uniform(0, args.window)
                await asyncio.sleep(max(next_scrape - args.window + offset - time.monotonic(), 0))
                fell = time.monotonic()
                served.profile = profile.model_copy(update={"acceptance": AFTER})
                fall = Fall(offset, None, None)
                for n in range(1, 5):
                    rate = await window()
                    if rate is None:
                        continue
                    if fall.seen_after is None and rate < 0.9 * level:
                        fall.seen_after = time.monotonic() - fell
                    if rate <= collapsed_at:
                        fall.windows = n
                        break
                falls.append(fall)
                seen = "never" if fall.seen_after is None else f"{fall.seen_after:.1f} s"
                print(
                    f"{name}: fell {offset:.1f} s into its window; seen after {seen}; collapsed: window {fall.windows}",
                    flush=True,
                )
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
    return falls


def main() -> None:
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # the clients' requests cut off at each end
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--falls", type=int, default=6, help="falls per variant")
    parser.add_argument("--window", type=float, default=6.0, help="scrape window, seconds")
    parser.add_argument("--rate", type=float, default=6.0, help="requests/s of the simulated clients")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.falls < 1 or args.window <= 0 or args.rate <= 0:
        parser.error("--falls must be >= 1, --window and --rate > 0")
    print(
        "| variant | falls | seconds to the first scrape showing it (median, max) | windows to a collapsed one (max) |"
    )
    print("|---|---|---|---|")
    rows = []
    for name in ("periodic-only", "scrape-polls"):
        falls = asyncio.run(variant(name, args))
        seen = [f.seen_after for f in falls if f.seen_after is not None]
        windows = [f.windows for f in falls]
        worst = "never" if None in windows else max(w for w in windows if w is not None)
        rows.append(
            f"| {name} | {len(falls)} | {statistics.median(seen):.1f}, {max(seen):.1f} | {worst} "
            f"({sum(1 for w in windows if w is not None and w <= 2)} of {len(falls)} within 2) |"
        )
    print("\n".join(rows))


if __name__ == "__main__":
    main()
