"""Speculation under load, simulated: goodput of always-on, always-off and the break-even gate over a
concurrency sweep.

    PYTHONPATH=operator:. .venv/bin/python bench/breakeven_sweep.py                  # 1..256 in flight
    PYTHONPATH=operator:. .venv/bin/python bench/breakeven_sweep.py --levels 1,16,64 --seconds 2

In one process: the simulated Triton (specdec_dev.simulator.SimulatedTriton: requests in flight are batched,
a step of T tokens costs targetStepSeconds + stepSecondsPerToken * T) behind the runtime's front
(specdec.runtime.front, the Triton route), and N closed-loop clients per level (each sends its next request
when its last is answered: specdec_dev.simulated_clients.closed_loop). Policies:
- on: draft length 4 at every load (no break-even file);
- off: every request opts out (header X-Specdec-Speculation: off), so the front sends no draft tokens;
- auto: the break-even and the draft lengths by load computed as the operator does, from measured figures
  only: the front's counters of the on and off sweeps (the target model's iterations, batch and draft
  tokens; acceptance and draft cost) fitted by specdec.speculation.load_model, then written to the front's files.
Goodput is the simulated Triton's generated tokens per second of wall time over each level's measured
window (after a warm-up). Every number here is simulated. Results: bench/results/breakeven-<timestamp>.json
and a table on stdout; auto passes a level when its goodput is at least max(on, off) * (1 - --tolerance).

The same sweep through the local cluster, with the operator's own fit: bench/breakeven_cluster.py (which
shares the deployment, the profile, the levels and the report from here).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import yaml
from tests.runtime.helpers import parse_prometheus, serving, serving_front

from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.plan import Settings, plan
from specdec.runtime import launch
from specdec.runtime.front import Front
from specdec.runtime.triton_route import OPT_OUT_HEADER
from specdec.speculation import load_model, payoff
from specdec_dev.simulated_clients import closed_loop
from specdec_dev.simulation_profile import Profile
from specdec_dev.simulator import SimulatedTriton

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
EXAMPLE = ROOT / "operator" / "specdec" / "examples" / "llama-2-13b-draft-7b-logits.yaml"  # Triton, draftLen 4
LEVELS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# 4x faster than the default profile, same break-even (a/b is what sets it)
PROFILE = {"targetStepSeconds": 0.005, "stepSecondsPerToken": 0.0002}
OFF = {OPT_OUT_HEADER: "off"}  # always-off: every request opts out of speculation
UNDRAFTED_LOAD = 'specdec_undrafted_requests_total{reason="load"}'
DRAFTED = "specdec_speculative_requests_total"


def deployment() -> dict:
    """The example, with an engine that batches as many sequences as the sweep's largest level (the example's
    maxBatchSize 4 would cap the batch of a real engine long before any break-even)."""
    doc = next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d)
    doc["spec"]["engine"]["maxBatchSize"] = max(LEVELS)
    return doc


def runtime_config():
    return plan(deployment(), Settings()).runtime


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both sweeps share."""
    parser.add_argument("--levels", type=lambda s: [int(x) for x in s.split(",")], default=list(LEVELS))
    parser.add_argument("--seconds", type=float, default=3.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--tolerance", type=float, default=0.05, help="noise allowed below max(on, off)")
    parser.add_argument("--profile", default="{}", help="simulation profile overrides (JSON, camelCase)")


def profile_of(args: argparse.Namespace) -> Profile:
    return Profile.model_validate({**PROFILE, **json.loads(args.profile)})


def profile_break_even_of(profile: Profile, draft_len: int) -> int | None:
    """The break-even the profile's own step time, acceptance and draft cost give (what a fit should find)."""
    return load_model.break_even(
        load_model.StepTime(profile.target_step_seconds, profile.step_seconds_per_token),
        profile.acceptance,
        profile.cost_ratio,
        1,
        draft_len,
    )


async def level(
    url: str,
    tokens: Callable[[], int],
    counters: Callable[[], Awaitable[dict[str, float]]],
    clients: int,
    args: argparse.Namespace,
    headers: dict[str, str] | None = None,
) -> dict:
    """Goodput at `clients` in flight (`tokens()`: the simulator's tokens generated so far), and the increase of
    the front's `counters()` over the measured window."""
    stop = asyncio.Event()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        load = asyncio.create_task(
            closed_loop(session, f"{url}/v1/completions", clients, args.max_tokens, stop, headers)
        )
        await asyncio.sleep(args.warmup)
        before, out, started = await counters(), tokens(), time.monotonic()
        await asyncio.sleep(args.seconds)
        goodput = (tokens() - out) / (time.monotonic() - started)
        after = await counters()
        stop.set()
        await load
    delta = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in {*before, *after}}
    return {"clients": clients, "goodput": goodput, "counters": delta}


def compare(on: list[dict], off: list[dict], auto: list[dict], tolerance: float) -> list[dict]:
    """Rows of the table (printed) per level: the three goodputs, and the front's requests under auto with and
    without drafts (the gate)."""
    rows = []
    print(
        f"{'clients':>7} {'on tok/s':>9} {'off tok/s':>9} {'auto tok/s':>10} {'auto/max':>8}  ok  "
        f"{'drafted':>7} {'undrafted':>9}"
    )
    for a, b, c in zip(on, off, auto, strict=True):
        best = max(a["goodput"], b["goodput"])
        ok = c["goodput"] >= best * (1 - tolerance)
        drafted, undrafted = c["counters"].get(DRAFTED, 0.0), c["counters"].get(UNDRAFTED_LOAD, 0.0)
        rows.append(
            {
                "clients": c["clients"],
                "on": round(a["goodput"], 1),
                "off": round(b["goodput"], 1),
                "auto": round(c["goodput"], 1),
                "autoOverBest": round(c["goodput"] / best, 3),
                "ok": ok,
                "autoDrafted": drafted,
                "autoUndrafted": undrafted,
            }
        )
        print(
            f"{c['clients']:>7} {a['goodput']:>9.1f} {b['goodput']:>9.1f} {c['goodput']:>10.1f} "
            f"{c['goodput'] / best:>8.3f}  {'yes' if ok else 'NO ':<3} {drafted:>7.0f} {undrafted:>9.0f}"
        )
    return rows


def write_results(script: str, args: argparse.Namespace, document: dict) -> Path:
    """bench/results/breakeven-<timestamp>.json: the command, the commit and the date before `document`."""
    options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k != "levels")
    stamp = time.strftime("%Y-%m-%dT%H%M%S%z")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"breakeven-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "command": f"{script} {options} --levels {','.join(map(str, args.levels))}",
                "commit": commit,
                "date": stamp,
                "simulated": True,
                **document,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")
    return out


def measured_model(on: list[dict], off: list[dict], draft_len: int) -> dict:
    """From the sweeps' counters only, as the operator's monitor: acceptance and draft cost at the lightest
    load, the step time fitted over every level (specdec.speculation.load_model.measured_fit)."""
    lightest = on[0]["counters"]
    keys = {key: lightest.get(name, 0.0) for key, name in payoff.COUNTERS.items()}
    m = payoff.measure(keys, draft_len, pods=1, max_draft_len=draft_len, estimated_cost=(0.1, "Assumed"))
    assert m is not None, "the lightest level of the on sweep did not speculate"
    windows = [
        w
        for w in (
            load_model.window_of({k: r["counters"].get(n, 0.0) for k, n in load_model.COUNTERS.items()})
            for r in on + off
        )
        if w
    ]
    fitted = load_model.measured_fit(windows, m.cost_ratio, on[0]["clients"], draft_len)
    assert fitted is not None, "not enough windows to fit the step time"
    fit, cost = fitted
    found = load_model.schedule(fit, m.alpha, cost, draft_len)
    return {
        "alpha": m.alpha,
        "measuredCostRatio": m.cost_ratio,
        "costRatio": cost,
        "windows": len(windows),
        "floorSeconds": fit.floor,
        "secondsPerToken": fit.per_token,
        "breakEven": load_model.schedule_break_even(found),
        "draftLens": load_model.format_schedule(found),
    }


async def sweep(
    args, profile: Profile, files: dict[str, str], tmp: Path, headers: dict[str, str] | None = None
) -> list[dict]:
    """One sweep, the front reading `files` (ConfigMap keys) beside its draft_len file."""
    config = runtime_config()
    for key in ("draft_len", BREAK_EVEN_KEY, SCHEDULE_KEY):
        (tmp / key).unlink(missing_ok=True)
    for key, text in files.items():
        (tmp / key).write_text(text + "\n")
    simulated = SimulatedTriton(profile, seed=args.seed)
    async with serving(simulated.app()) as triton_url, serving(simulated.metrics_app()) as metrics_url:
        backend = dataclasses.replace(
            launch.plan_launch(config).backend, url=triton_url, metrics_url=f"{metrics_url}/metrics"
        )
        front = Front(config, backend, stats_interval=0.25, draft_len_file=tmp / "draft_len")

        async def counters() -> dict[str, float]:
            return parse_prometheus(front.metrics.render().decode())

        async with serving_front(front) as url:
            return [await level(url, lambda: simulated.tokens_out, counters, n, args, headers) for n in args.levels]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    profile = profile_of(args)
    draft_len = runtime_config().draft_target.draft_len
    tmp = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True).stdout.strip())
    on = asyncio.run(sweep(args, profile, {}, tmp))
    off = asyncio.run(sweep(args, profile, {}, tmp, OFF))
    model = measured_model(on, off, draft_len)
    auto = asyncio.run(
        sweep(
            args,
            profile,
            {
                SCHEDULE_KEY: model["draftLens"],
                **({BREAK_EVEN_KEY: str(model["breakEven"])} if model["breakEven"] else {}),
            },
            tmp,
        )
    )
    truth = profile_break_even_of(profile, draft_len)
    print(
        f"break-even measured {model['breakEven']} (the profile's own: {truth}); draft lengths by load "
        f"{model['draftLens']}; draft length {draft_len}"
    )
    rows = compare(on, off, auto, args.tolerance)
    write_results(
        "bench/breakeven_sweep.py",
        args,
        {
            "profile": profile.model_dump(by_alias=True),
            "draftLen": draft_len,
            "model": model,
            "profileBreakEven": truth,
            "tolerance": args.tolerance,
            "levels": rows,
            "allOk": all(r["ok"] for r in rows),
        },
    )


if __name__ == "__main__":
    main()
