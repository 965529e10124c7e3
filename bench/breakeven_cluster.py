"""Speculation under load through the local cluster, simulated: the sweep of bench/breakeven_sweep.py against a
SpeculativeDeployment's runtime pod, with the break-even and the draft lengths by load that the operator itself
fits and writes.

    PYTHONPATH=operator:. .venv/bin/python bench/breakeven_cluster.py
    ... bench/breakeven_cluster.py --levels 1,16,64,256 --seconds 2                       # quicker

Brings up the local cluster the cluster tests use (`specdec-test`, as tests/conftest.py does; left running:
do not run the cluster tests at the same time), installs the CRDs, and in a fresh namespace (deleted after)
runs the operator as a process watching it and applies bench/breakeven_sweep.py's deployment (the Triton route,
draftTarget, draft length 4). Its runtime pod is served by the pod runner in this process
(specdec_dev.pod_runner_thread: the production front before the simulated Triton, on the pod's IP, the
ConfigMap's keys as files), with the sweep's profile and no simulated clients of its own; the sweep's
closed-loop clients run on the pod runner's event loop and send to the pod's front. Policies:
- on: the operator stopped (the pod keeps serving), so no break-even and no draft lengths by load are fitted or
  written: the front drafts 4 tokens at every load;
- off: every request opts out (header X-Specdec-Speculation: off): the front sends no draft tokens; measured
  beside on, and again beside auto;
- auto: the operator started again; closed-loop load at CALIBRATION clients in turn until its speculation
  monitor, scraping the pod's /metrics, has fitted the step time and written `speculation_break_even` and
  `speculation_draft_lens` into the runtime ConfigMap, and the front has read them (its gauge
  specdec_speculation_break_even); then the sweep up and back down, the operator still running (it may refit).
At each level the policies of a phase take turns, so the shared machine's drift stays out of their comparison;
auto is compared with on (operator-stopped phase) and with the off measured beside it, and the two measurements
of off show the drift between the phases. Nothing the operator owns is written by the bench. Goodput is the
simulated Triton's own count of generated tokens (in this process) per second of wall time; the front's counters
(scraped from the pod) show per level the requests sent with drafts and those sent without because of the load
(the gate). Every number is simulated.
Results: bench/results/breakeven-<timestamp>.json and the tables on stdout.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp
from bench.breakeven_sweep import (
    OFF,
    add_arguments,
    compare,
    deployment,
    level,
    profile_break_even_of,
    profile_of,
    write_results,
)
from tests.conftest import TEST_CLUSTER_NAME, free_port
from tests.kube_helpers import Kube, wait_for
from tests.operator_runner import OperatorProcess
from tests.runtime.helpers import parse_prometheus

from specdec.api.models import GROUP, VERSION
from specdec.api.runtime_config import BREAK_EVEN_KEY, SCHEDULE_KEY
from specdec.speculation import load_model
from specdec_dev import cluster, real_node, simulation_profile
from specdec_dev.cluster import DEV_OPERATOR_ENV
from specdec_dev.pod_runner_thread import Threaded, in_thread
from specdec_dev.podrunner import POD_SELECTOR
from specdec_dev.simulation_profile import Profile

# Loads whose windows span the batch sizes a fit needs (load_model.MIN_SPREAD). The front counts the target's
# iterations between its polls of Triton (every 5 s) only where Triton never idled, which a few closed-loop clients
# in step often make it do, and a poll that spans a change of level (the load drains between levels) is not
# counted either: a few long levels give the monitor its windows soonest.
CALIBRATION = (16, 64)
BREAK_EVEN_GAUGE = "specdec_speculation_break_even"
SCRAPE_SECONDS = float(DEV_OPERATOR_ENV["SPECDEC_SPECULATION_SCRAPE_SECONDS"])
OPERATOR_ENV = {**DEV_OPERATOR_ENV, "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:bench"}


def profile_entry(profile: Profile) -> dict:
    """The pod's simulation profile: the sweep's, without the pod runner's own (open-loop) clients."""
    return {**profile.model_dump(by_alias=True), "requestsPerSecond": 0}


def create_deployment(kube: Kube, namespace: str) -> str:
    body = deployment()
    kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", body)
    return body["metadata"]["name"]


def speculation_status(kube: Kube, namespace: str, name: str) -> dict:
    sd = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", name)
    return (sd.get("status") or {}).get("speculation") or {}


def wait_ready(kube: Kube, namespace: str, name: str, timeout: float = 120) -> None:
    def ready() -> bool:
        sd = kube.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", name)
        return any(
            c["type"] == "Ready" and c["status"] == "True" for c in (sd.get("status") or {}).get("conditions") or []
        )

    wait_for(ready, f"{namespace}/{name} Ready", timeout=timeout, interval=0.5)


def load_keys(kube: Kube, namespace: str, name: str) -> dict[str, str]:
    """The load model's keys of the runtime ConfigMap (none before the operator's fit)."""
    data = kube.core.read_namespaced_config_map(f"{name}-runtime", namespace).data or {}
    return {key: data[key] for key in (BREAK_EVEN_KEY, SCHEDULE_KEY) if key in data}


@dataclasses.dataclass(frozen=True)
class ServedPod:
    """The deployment's runtime pod as the pod runner serves it: its front's URL on the pod IP, its simulated
    Triton's token count, and closed-loop load through the front."""

    served: Threaded
    key: tuple[str, str]
    url: str

    @classmethod
    def find(cls, served: Threaded, kube: Kube, namespace: str) -> ServedPod:
        pod = wait_for(
            lambda: next(
                (
                    p
                    for p in kube.core.list_namespaced_pod(namespace, label_selector=POD_SELECTOR).items
                    if p.status.phase == "Running" and p.status.pod_ip
                ),
                None,
            ),
            "a running runtime pod",
            timeout=60,
        )
        port = next(p.container_port for p in pod.spec.containers[0].ports if p.name == "http")
        found = cls(served, (namespace, pod.metadata.name), f"http://{pod.status.pod_ip}:{port}")
        wait_for(lambda: found.key in served.runner.running, f"the pod runner to serve {pod.metadata.name}")
        return found

    def tokens(self) -> int:
        """Tokens the pod's simulated Triton generated (read on the runner's loop)."""
        return self.served.runner.running[self.key].backend.tokens_out

    async def counters(self) -> dict[str, float]:
        async with aiohttp.ClientSession() as session, session.get(f"{self.url}/metrics") as response:
            return parse_prometheus(await response.text())

    def scrape(self) -> dict[str, float]:
        return self.served.run(self.counters(), timeout=10)

    def level(self, clients: int, args: argparse.Namespace, headers: dict[str, str] | None = None) -> dict:
        return self.served.run(level(self.url, self.tokens, self.counters, clients, args, headers))


def wait_for_fit(
    pod: ServedPod, kube: Kube, namespace: str, name: str, timeout: float, seconds: float, max_tokens: int
) -> dict[str, str]:
    """Closed-loop load at CALIBRATION clients in turn until the operator's break-even is in the ConfigMap and the
    front has read it; the load model's keys then."""
    probe = argparse.Namespace(warmup=0.0, seconds=seconds, max_tokens=max_tokens)
    deadline, keys = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        for clients in CALIBRATION:
            pod.level(clients, probe)
            keys = load_keys(kube, namespace, name)
            if BREAK_EVEN_KEY in keys and pod.scrape().get(BREAK_EVEN_GAUGE) == int(keys[BREAK_EVEN_KEY]):
                return keys
    raise TimeoutError(
        f"no break-even from the operator's fit after {timeout:.0f}s of load at {CALIBRATION} clients: ConfigMap "
        f"{namespace}/{name}-runtime has {keys or 'none of its load keys'}. The speculation monitor fits once it has "
        f"{load_model.MIN_WINDOWS} windows of the target's iterations whose batches span {load_model.MIN_SPREAD:g}x "
        "(specdec.speculation.load_model.fit_step_time); "
        f"the front writes the key's value as {BREAK_EVEN_GAUGE} once it read it"
    )


def legs(
    pod: ServedPod,
    kube: Kube,
    namespace: str,
    name: str,
    levels: list[int],
    args: argparse.Namespace,
    policies: dict[str, dict[str, str] | None],
) -> dict[str, list[dict]]:
    """A sweep over `levels`, each policy (its requests' headers) in turn at each level, so a drift of the shared
    machine's load between policies stays small; the ConfigMap's load keys after each."""
    out: dict[str, list[dict]] = {policy: [] for policy in policies}
    for clients in levels:
        for policy, headers in policies.items():
            out[policy].append({**pod.level(clients, args, headers), "configMap": load_keys(kube, namespace, name)})
        print(
            f"  {clients:>4} clients: "
            + ", ".join(f"{policy} {out[policy][-1]['goodput']:7.1f}" for policy in policies)
            + " tok/s",
            flush=True,
        )
    return out


def gate_summary(rows: list[dict]) -> str:
    """Where the front stopped and resumed drafting, from the requests it sent without drafts for the load."""
    off = [r["clients"] for r in rows if r["autoUndrafted"] > r["autoDrafted"]]
    return f"mostly undrafted at {off} clients" if off else "drafted at every level"


def table(on: list[dict], stopped_off: list[dict], leg: dict[str, list[dict]], tolerance: float) -> list[dict]:
    """compare() of auto with on (same level, operator stopped) and off (measured beside it); and off as measured
    with the operator stopped, beside the off measured now: the machine's drift between the two phases."""
    at = {r["clients"]: i for i, r in enumerate(on)}
    rows = compare([on[at[r["clients"]]] for r in leg["auto"]], leg["off"], leg["auto"], tolerance)
    for row, auto in zip(rows, leg["auto"], strict=True):
        row["offOperatorStopped"] = round(stopped_off[at[row["clients"]]]["goodput"], 1)
        row["configMap"] = auto["configMap"]
    drift = [abs(r["off"] / r["offOperatorStopped"] - 1) for r in rows]
    print(
        f"off measured twice (operator stopped, beside auto): mean difference {sum(drift) / len(drift):.1%}, "
        f"largest {max(drift):.1%}"
    )
    return rows


def run(args: argparse.Namespace, kube: Kube, kubeconfig: Path, namespace: str, workdir: Path) -> dict:
    profile = profile_of(args)
    env = {**OPERATOR_ENV, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(args.scrape_seconds)}
    operator = OperatorProcess.watching(namespace, kubeconfig, workdir / "operator.log", free_port(), env)
    print(f"namespace {namespace}; operator log {operator.log_path}", flush=True)
    try:
        operator.start()
        name = create_deployment(kube, namespace)
        simulation_profile.update(workdir / simulation_profile.FILE_NAME, f"{namespace}/{name}", profile_entry(profile))
        wait_ready(kube, namespace, name)
        with in_thread(kubeconfig, workdir, namespace) as served:
            pod = ServedPod.find(served, kube, namespace)
            operator.stop()  # on and off: nothing fits or writes the load keys
            print("on and off, the operator stopped", flush=True)
            stopped = legs(pod, kube, namespace, name, args.levels, args, {"on": None, "off": OFF})
            operator.start()
            started = time.monotonic()
            try:
                fitted = wait_for_fit(
                    pod, kube, namespace, name, args.fit_timeout, args.calibration_seconds, args.max_tokens
                )
            except TimeoutError as error:
                raise SystemExit(f"{error}; operator log {operator.log_path}") from None
            fit_seconds = time.monotonic() - started
            status = wait_for(
                lambda: (s := speculation_status(kube, namespace, name)).get("breakEven") and s,
                "status.speculation.breakEven",
                timeout=60,
            )
            print(
                f"auto and off: the operator wrote {fitted} after {fit_seconds:.0f}s of load; "
                f"status.speculation.breakEven {status['breakEven']}",
                flush=True,
            )
            up = legs(pod, kube, namespace, name, args.levels, args, {"auto": None, "off": OFF})
            print("down", flush=True)
            down = legs(pod, kube, namespace, name, args.levels[-2::-1], args, {"auto": None, "off": OFF})
            final = load_keys(kube, namespace, name), speculation_status(kube, namespace, name)
    finally:
        operator.stop()
    print("\nup")
    rows_up = table(stopped["on"], stopped["off"], up, args.tolerance)
    print("down")
    rows_down = table(stopped["on"], stopped["off"], down, args.tolerance)
    draft_len = deployment()["spec"]["speculation"]["draftTarget"]["draftLen"]
    profile_break_even = profile_break_even_of(profile, draft_len)
    print(
        f"\nbreak-even: the operator's fit {fitted.get(BREAK_EVEN_KEY)} (after the sweep "
        f"{final[0].get(BREAK_EVEN_KEY)}; status {final[1].get('breakEven')}); the profile's own "
        f"{profile_break_even}; draft lengths by load {fitted.get(SCHEDULE_KEY)} "
        f"(after the sweep {final[0].get(SCHEDULE_KEY)})"
    )
    print(f"gate: up {gate_summary(rows_up)}; down {gate_summary(rows_down)}")
    return {
        "cluster": TEST_CLUSTER_NAME,
        "profile": profile_entry(profile),
        "draftLen": draft_len,
        "scrapeSeconds": args.scrape_seconds,
        "operator": {
            "fitted": fitted,
            "fitSeconds": round(fit_seconds, 1),
            "statusAtFit": status,
            "after": final[0],
            "statusAfter": final[1],
        },
        "profileBreakEven": profile_break_even,
        "tolerance": args.tolerance,
        "levels": rows_up,
        "down": rows_down,
        "allOk": all(r["ok"] for r in rows_up + rows_down),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument(
        "--scrape-seconds",
        type=float,
        default=SCRAPE_SECONDS,
        help="the operator's speculation scrape interval (the dev cluster's)",
    )
    parser.add_argument("--calibration-seconds", type=float, default=15.0, help="per calibration level")
    parser.add_argument("--fit-timeout", type=float, default=240.0, help="seconds to wait for the operator's fit")
    parser.add_argument("--keep", action="store_true", help="keep the namespace to look at")
    args = parser.parse_args()
    local = cluster.LocalCluster(name=TEST_CLUSTER_NAME)
    cluster.up(local, real_node=not real_node.problems())  # as tests/conftest.py creates it
    cluster.apply_crds(local)
    kube = Kube.from_kubeconfig(local.kubeconfig)
    namespace = f"breakeven-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    try:
        document = run(args, kube, local.kubeconfig, namespace, Path(tempfile.mkdtemp(prefix=f"{namespace}-")))
    finally:
        if not args.keep:
            kube.core.delete_namespace(namespace, propagation_policy="Background")
    write_results("bench/breakeven_cluster.py", args, document)


if __name__ == "__main__":
    main()
