"""The canary's decision (specdec.canary.decision) on simulated windows, or on the local cluster through the operator
(--cluster): 20 seeded canaries per case.

    PYTHONPATH=operator:. .venv/bin/python bench/canary_bench.py
    PYTHONPATH=operator:. .venv/bin/python bench/canary_bench.py --runs 200 --noise 0.2
    PYTHONPATH=operator:. .venv/bin/python bench/canary_bench.py --cluster --runs 6 --parallel 2

Without --cluster every number here is simulated: no GPU, no cluster, no HTTP client. Each request's steps come
from the local cluster's simulated backends' acceptance model, specdec_dev.simulator.speculate (each of the k = 4
draft tokens accepted with the arm's per-position acceptance until the first rejection, plus the target's own token;
a step costs targetStepSeconds, a draft token costRatio of it), one request at a time: the model of each request, not
of a batch, so an arm's TPOT here does not depend on its load; the load sets how many requests each window
holds. Each request's acceptance is moved by a uniform +-noise (the profile's `noise`: prompts differ).

A fixed offered load (Poisson arrivals, `--rate` requests/s) is spread uniformly over the pods, `--replicas`
of the current draft and `--canary-replicas` of the canary, as a Service spreads it; each scrape window
(`--window` seconds, the operator's default scrape interval) gives each arm its counters' increases and its
mean TPOT over its responses (what the runtime's specdec_time_per_output_token_seconds histogram gives, sum
over count), and the decision reads them window after window until it decides. Cases:

- better: per-position acceptance 0.55 (current) vs 0.70 (canary);
- equal: 0.62 vs 0.62;
- collapse: 0.55 vs 0.70, the canary's acceptance falling to 0.05 at a moment drawn uniformly within
  windows 1 to 4 (before the test may stop); every request arriving after it is served collapsed.
  Windows to rollback counts the window in which it collapsed as the first.

--cluster runs the same cases on the local cluster (bench/canary_cluster.py): the operator decides on the windows it
scrapes from the pods' fronts, the simulated trtllm-serve serving each arm with its acceptance, and clients count
the requests that fail through the Service. Its defaults differ where a canary must end well within a minute: 1
runtime pod beside the canary's, 6 s scrape windows.

Results: bench/results/canary-<timestamp>.json and the table on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import subprocess
import time
from pathlib import Path

from specdec.canary.decision import (
    ACCEPTANCE_COLLAPSED,
    INCONCLUSIVE,
    PROMOTED,
    REJECTED,
    ArmWindow,
    CanaryPolicy,
    CanaryState,
    Decision,
    observe,
)
from specdec_dev.simulation_profile import Profile
from specdec_dev.simulator import DEFAULT_DRAFT_LEN, speculate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
COLLAPSED_ACCEPTANCE = 0.05
MAX_WINDOWS = 1000  # a run that decides nothing by then is reported as undecided


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    current: float
    canary: float
    collapse: bool = False


CASES = (
    Case("better (0.55 -> 0.70)", 0.55, 0.70),
    Case("equal (0.62 -> 0.62)", 0.62, 0.62),
    Case("collapse (0.55 -> 0.70, then 0.05)", 0.55, 0.70, collapse=True),
)


@dataclasses.dataclass
class _Counts:
    requests: int = 0
    steps: int = 0
    draft: int = 0
    accepted: int = 0
    tokens: int = 0
    tpot_sum: float = 0.0

    def add(self, profile: Profile, rng: random.Random) -> None:
        steps = speculate(profile.max_tokens, DEFAULT_DRAFT_LEN, profile, rng)
        self.requests += 1
        self.steps += steps.steps
        self.draft += steps.draft_tokens
        self.accepted += steps.accepted_tokens
        self.tokens += profile.max_tokens
        self.tpot_sum += steps.seconds / profile.max_tokens

    def window(self, replicas: int, seconds: float) -> ArmWindow:
        return ArmWindow(
            requests=self.requests,
            errors=0,
            steps=self.steps,
            draft_tokens=self.draft,
            accepted_tokens=self.accepted,
            output_tokens=self.tokens,
            tpot_seconds=self.tpot_sum / self.requests if self.requests else 0.0,
            replicas=replicas,
            failed_pods=0,
            seconds=seconds,
        )


@dataclasses.dataclass(frozen=True)
class Run:
    decision: Decision | None
    state: CanaryState
    windows_to_rollback: int | None  # collapse case: windows from the one it collapsed in to the decision
    served_collapsed: int  # canary requests served after the collapse


def one_canary(case: Case, seed: int, args: argparse.Namespace, policy: CanaryPolicy) -> Run:
    rng = random.Random(seed)
    current = Profile(acceptance=case.current, noise=args.noise)
    canary = Profile(acceptance=case.canary, noise=args.noise)
    collapsed = Profile(acceptance=COLLAPSED_ACCEPTANCE, noise=args.noise)
    collapse_at = rng.uniform(1, 4) * args.window if case.collapse else float("inf")
    pods = args.replicas + args.canary_replicas
    state, t, served_collapsed = CanaryState(), rng.expovariate(args.rate), 0
    for w in range(MAX_WINDOWS):
        end = (w + 1) * args.window
        arms = _Counts(), _Counts()
        while t < end:
            if rng.randrange(pods) < args.canary_replicas:
                late = t >= collapse_at
                served_collapsed += late
                arms[1].add(collapsed if late else canary, rng)
            else:
                arms[0].add(current, rng)
            t += rng.expovariate(args.rate)
        state, decision = observe(
            state,
            arms[0].window(args.replicas, args.window),
            arms[1].window(args.canary_replicas, args.window),
            policy,
        )
        if decision is not None:
            to_rollback = w - int(collapse_at // args.window) + 1 if case.collapse and end > collapse_at else None
            return Run(decision, state, to_rollback, served_collapsed)
    return Run(None, state, None, served_collapsed)


def summary(case: Case, runs: list[Run], requests: tuple[int, int] | None = None) -> dict:
    """`requests`: (answered, failed) through the Service over the case's runs, where a client sent them."""
    decided = [r for r in runs if r.decision is not None]
    outcome = {o: sum(1 for r in decided if r.decision and r.decision.outcome == o) for o in (PROMOTED, REJECTED)}
    outcome[INCONCLUSIVE] = sum(1 for r in decided if r.decision and r.decision.outcome == INCONCLUSIVE)
    rollbacks = [r for r in runs if r.decision is not None and r.decision.reason == ACCEPTANCE_COLLAPSED]
    return {
        "case": case.name,
        "runs": len(runs),
        "promoted": sum(1 for r in decided if r.decision and r.decision.promote),
        "outcomes": outcome,
        "undecided": len(runs) - len(decided),
        "canary_requests": {"median": _median(r.state.canary_requests for r in runs), "max": _max(runs, "canary")},
        "current_requests": {"median": _median(r.state.current_requests for r in runs), "max": _max(runs, "current")},
        "windows": {"median": _median(r.state.windows for r in runs), "max": max(r.state.windows for r in runs)},
        "collapse_rollbacks": len(rollbacks) if case.collapse else None,
        "windows_to_rollback_max": max((r.windows_to_rollback or 0 for r in rollbacks), default=None)
        if case.collapse
        else None,
        "canary_requests_served_collapsed_max": max(r.served_collapsed for r in runs) if case.collapse else None,
        "client_requests": None if requests is None else {"answered": requests[0], "failed": requests[1]},
    }


def _median(values) -> float:
    return float(statistics.median(values))


def _max(runs: list[Run], arm: str) -> float:
    return max(r.state.canary_requests if arm == "canary" else r.state.current_requests for r in runs)


def table(rows: list[dict]) -> str:
    lines = [
        "| case | promoted | Promoted / Rejected / Inconclusive | requests per arm, canary (median, max) "
        "| current (median, max) | windows (median, max) | rolled back on collapse | windows to rollback (max) "
        "| client requests failed / answered |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        o = r["outcomes"]
        collapse = "—" if r["collapse_rollbacks"] is None else f"{r['collapse_rollbacks']} of {r['runs']}"
        to_rollback = "—" if r["windows_to_rollback_max"] is None else str(r["windows_to_rollback_max"])
        clients = r.get("client_requests")
        failed = "not measured" if clients is None else f"{clients['failed']} / {clients['answered']}"
        lines.append(
            f"| {r['case']} | {r['promoted']} of {r['runs']} | {o[PROMOTED]} / {o[REJECTED]} / {o[INCONCLUSIVE]} "
            f"| {r['canary_requests']['median']:.0f}, {r['canary_requests']['max']:.0f} "
            f"| {r['current_requests']['median']:.0f}, {r['current_requests']['max']:.0f} "
            f"| {r['windows']['median']:.0f}, {r['windows']['max']} | {collapse} | {to_rollback} | {failed} |"
        )
    return "\n".join(lines)


def main() -> None:
    from bench import canary_cluster  # it imports this module: imported here, not at the top, to avoid the cycle

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="seeded canaries per case")
    parser.add_argument("--rate", type=float, default=12.0, help="offered load, requests/s over all pods")
    parser.add_argument("--replicas", type=int, help="pods of the current draft (default 3; --cluster 1)")
    parser.add_argument("--canary-replicas", type=int, default=1, help="pods of the canary")
    parser.add_argument("--window", type=float, help="scrape window, seconds (default 15; --cluster 6)")
    parser.add_argument("--noise", type=float, default=0.1, help="per-request acceptance jitter (uniform +-)")
    parser.add_argument("--seed", type=int, default=0, help="first seed; run i of a case uses seed + i")
    parser.add_argument(
        "--cases", default="better,equal,collapse", help="the cases to run, by their first word, comma-separated"
    )
    canary_cluster.add_arguments(parser)
    args = parser.parse_args()
    args.replicas = args.replicas or (1 if args.cluster else 3)
    args.window = args.window or (6.0 if args.cluster else 15.0)
    if args.runs < 1 or args.rate <= 0 or args.window <= 0 or min(args.replicas, args.canary_replicas) < 1:
        parser.error("--runs, --replicas and --canary-replicas must be >= 1, --rate and --window > 0")
    if args.parallel < 1 or args.clients < 1 or args.max_tokens < 1:
        parser.error("--parallel, --clients and --max-tokens must be >= 1")
    names = args.cases.split(",")
    cases = tuple(c for c in CASES if c.name.split()[0] in names)
    if len(cases) != len(set(names)):
        parser.error(f"--cases: each of {', '.join(c.name.split()[0] for c in CASES)}, comma-separated")
    policy = CanaryPolicy()
    if args.cluster:
        measured = canary_cluster.run(args, cases)
        rows = [
            summary(
                c,
                [r for r, _, _ in measured[c.name]],
                (sum(a for _, a, _ in measured[c.name]), sum(f for _, _, f in measured[c.name])),
            )
            for c in cases
        ]
        print(
            f"LOCAL CLUSTER, simulated acceptance (the operator's decisions on the pods' fronts before the simulated "
            f"trtllm-serve): {args.rate:g} requests/s over {args.replicas} current + {args.canary_replicas} canary "
            f"pods, {args.max_tokens} tokens each, {args.window:g} s scrape windows, noise {args.noise:g}, draft "
            f"length 4, {args.parallel} deployment(s) per case at once, {args.clients} Service client(s) each; "
            f"default policy"
        )
    else:
        rows = [summary(c, [one_canary(c, args.seed + i, args, policy) for i in range(args.runs)]) for c in cases]
        print(
            f"SIMULATED (specdec_dev.simulator.speculate, one request at a time): {args.rate:g} requests/s over "
            f"{args.replicas} current + {args.canary_replicas} canary pods, {args.window:g} s windows, noise "
            f"{args.noise:g}, draft length {DEFAULT_DRAFT_LEN}; default policy {dataclasses.asdict(policy)}"
        )
    print(table(rows))
    if not args.cluster:
        print("Failed client requests: not measured here (no client; the arms' windows are simulated).")
    stamp = time.strftime("%Y-%m-%dT%H%M%S%z")
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"canary-{stamp}.json"
    options = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    document = {
        "command": f"bench/canary_bench.py {options}",
        "commit": commit,
        "date": stamp,
        "simulated": not args.cluster,
        "cluster": args.cluster,
        "policy": dataclasses.asdict(policy),
        "cases": rows,
    }
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"results: {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
