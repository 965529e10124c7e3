"""bench/canary_bench.py --cluster: the canaries of its cases on the local cluster, through the real operator.

Brings up the local cluster the cluster tests use (`specdec-test`, as tests/conftest.py does: not while they run;
stopped after unless --keep-cluster), installs the CRDs, and in a
fresh namespace (deleted after) runs the operator as a process watching it, with the scrape window `--window`.
Each case runs on SpeculativeDeployments of its own (`--parallel` per case, all cases at once), the pytorch sample
(trtllm-serve, draftTarget, draft length 4) with spec.rollout.canary on at its defaults, `--replicas` runtime pods
and `--canary-replicas` canary pods. Their pods are served by the pod runner in this process (the production front
before the simulated trtllm-serve, specdec_dev.pod_runner_thread), each pod with its simulated clients at
`--rate` / (replicas + canary replicas) requests/s (the profile's requestsPerSecond), `--max-tokens` tokens each.
The current arm's acceptance is the case's current, the canary's the case's canary (the simulation profile's
`<namespace>/<name>/canary` entry). Run i of a case seeds the pods it starts with `--seed` + i (the profile's seed:
the simulated acceptance draws and the arrivals; the time the machine gives each request is not seeded).

A run changes the draft's dtype (bfloat16 <-> float16: a speculation block the simulator serves alike) when the
current block is the spec's, else (the last canary was not promoted) sets the specdec.io/canary-retry annotation:
either starts a canary, whose decision the operator writes into status.canary. The run ends once the canary's pods
are gone and the deployment is Ready again (a promotion rolled the runtime). Collapse case: once status.canary has
its first window, the canary's acceptance falls to 0.05 after a wait drawn uniformly within 0 to 3 windows (so
before the test may stop at its fifth pair); windows to rollback are status.canary.test's windows at the decision
minus those at the fall (the window in which it fell counts as the first).

Throughout, `--clients` closed-loop clients per deployment send requests through its Service (tests.service_clients:
to the ready pods of both arms, as kube-proxy would), and every failed request is counted.
"""

from __future__ import annotations

import argparse
import datetime
import random
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from bench.canary_bench import COLLAPSED_ACCEPTANCE, Case, Run
from tests.conftest import TEST_CLUSTER_NAME, free_port
from tests.kube_helpers import Kube, wait_for
from tests.operator_runner import OperatorProcess
from tests.service_clients import ServiceClients

from specdec.api.canary import ANNOTATION_CANARY_RETRY
from specdec.api.models import GROUP, VERSION
from specdec.builders.common import LABEL_COMPONENT, LABEL_INSTANCE
from specdec.canary import rollout
from specdec.canary.decision import Decision
from specdec_dev import cluster, real_node, simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "examples" / "llama-3.1-8b-draft-1b-pytorch.yaml"
PLURAL = "speculativedeployments"
TARGET_STEP_SECONDS = 0.02  # as bench/canary_bench.py's simulated requests
DTYPES = ("bfloat16", "float16")
DECISION_TIMEOUT = 600.0
# The deployments' threads share one profiles file: an update reads, changes and replaces it.
PROFILES_LOCK = threading.Lock()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--cluster")
    group.add_argument("--cluster", action="store_true", help="run the canaries on the local cluster")
    group.add_argument("--parallel", type=int, default=1, help="deployments per case, running at once")
    group.add_argument("--clients", type=int, default=1, help="closed-loop clients of each deployment's Service")
    group.add_argument("--max-tokens", type=int, default=64, help="tokens each simulated request asks for")
    group.add_argument("--keep-cluster", action="store_true", help="leave the local cluster running")


class Deployment:
    """One SpeculativeDeployment with the canary on, and its runs."""

    def __init__(self, kube: Kube, namespace: str, name: str, profiles: Path, args: argparse.Namespace):
        self.kube, self.namespace, self.name, self.profiles, self.args = kube, namespace, name, profiles, args
        self.key = f"{namespace}/{name}"

    def get(self) -> dict[str, Any]:
        return self.kube.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name)

    def patch(self, body: dict[str, Any]) -> None:
        self.kube.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, self.name, body)

    def create(self) -> None:
        body = yaml.safe_load(SAMPLE.read_text())
        body["metadata"] = {"name": self.name}
        body["spec"]["runtime"]["replicas"] = self.args.replicas
        body["spec"]["rollout"] = {"canary": {"enabled": True, "replicas": self.args.canary_replicas}}
        self.kube.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def profile(self, case: Case, seed: int) -> None:
        pods = self.args.replicas + self.args.canary_replicas
        entry = {
            "acceptance": case.current,
            "noise": self.args.noise,
            "targetStepSeconds": TARGET_STEP_SECONDS,
            "stepSecondsPerToken": 0.0,
            "requestsPerSecond": self.args.rate / pods,
            "maxTokens": self.args.max_tokens,
            "seed": seed,
        }
        with PROFILES_LOCK:
            simulation_profile.update(self.profiles, self.key, entry)
        self.canary_acceptance(case.canary)

    def canary_acceptance(self, acceptance: float) -> None:
        with PROFILES_LOCK:
            simulation_profile.update(
                self.profiles, simulation_profile.canary_key(self.key), {"acceptance": acceptance}
            )

    def ready(self) -> bool:
        sd = self.get()
        status = sd.get("status") or {}
        return status.get("observedGeneration") == sd["metadata"]["generation"] and any(
            c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or []
        )

    def canary_pods(self) -> list:
        selector = f"{LABEL_INSTANCE}={self.name},{LABEL_COMPONENT}=runtime-canary"
        return self.kube.core.list_namespaced_pod(self.namespace, label_selector=selector).items

    def start_canary(self, run: str) -> tuple[int, str]:
        """A new canary: another dtype of the draft when the spec's block serves, else a retry; its test's key."""
        sd = self.get()
        canary = (sd.get("status") or {}).get("canary") or {}
        if (canary.get("current") or {}).get("speculation") == rollout.spec_block(sd):
            dtype = sd["spec"]["speculation"]["draftTarget"]["draft"]["dtype"]
            other = DTYPES[(DTYPES.index(dtype) + 1) % len(DTYPES)]
            self.patch({"spec": {"speculation": {"draftTarget": {"draft": {"dtype": other}}}}})
        else:
            self.patch({"metadata": {"annotations": {ANNOTATION_CANARY_RETRY: run}}})
        sd = self.get()
        return sd["metadata"]["generation"], rollout.retry_of(sd)

    def canary_status(self, test: tuple[int, str]) -> dict[str, Any] | None:
        """status.canary once it is this test's."""
        status = (self.get().get("status") or {}).get("canary") or {}
        return status if (status.get("generation"), status.get("retry")) == test else None

    def one_run(self, case: Case, run: str, seed: int) -> tuple[Run, int, int]:
        """(the run as bench/canary_bench.py's, requests answered and failed through the Service)."""
        rng = random.Random(seed)
        self.profile(case, seed)
        with ServiceClients(self.kube, self.namespace, self.name, clients=self.args.clients) as clients:
            test = self.start_canary(run)
            wait_for(lambda: self.canary_status(test), f"{self.key}: canary {run} started", timeout=60, interval=0.5)
            at_collapse: dict[str, Any] | None = None
            fell = datetime.datetime.now(datetime.UTC)
            if case.collapse:
                first = wait_for(
                    lambda: (s := self.canary_status(test)) and (s.get("test") or {}).get("windows", 0) >= 1 and s,
                    f"{self.key}: the first window of canary {run}",
                    timeout=DECISION_TIMEOUT,
                    interval=0.2,
                )
                fall = time.monotonic() + rng.uniform(0, 3) * self.args.window
                while time.monotonic() < fall and first.get("state") == rollout.IN_PROGRESS:
                    time.sleep(0.2)
                    first = self.canary_status(test) or first
                at_collapse = first
                self.canary_acceptance(COLLAPSED_ACCEPTANCE)
                fell = datetime.datetime.now(datetime.UTC)
            done = wait_for(
                lambda: (s := self.canary_status(test)) and s.get("state") != rollout.IN_PROGRESS and s,
                f"{self.key}: the decision of canary {run}",
                timeout=DECISION_TIMEOUT,
                interval=0.5,
            )
            wait_for(lambda: not self.canary_pods(), f"{self.key}: canary {run} removed", timeout=180, interval=0.5)
            wait_for(self.ready, f"{self.key} Ready after canary {run}", timeout=180, interval=0.5)
            time.sleep(1.0)  # requests to the pods that serve on
        decision = done["decision"]
        state = rollout.resumed_state(done)
        to_rollback = served_collapsed = 0
        if at_collapse is not None:
            before = rollout.resumed_state(at_collapse)
            to_rollback = state.windows - before.windows if at_collapse.get("state") == rollout.IN_PROGRESS else 0
            served_collapsed = int(state.canary_requests - before.canary_requests)
        result = Run(
            Decision(decision["outcome"], decision["reason"], decision["message"], bool(decision["promote"])),
            state,
            to_rollback if case.collapse else None,
            served_collapsed,
        )
        print(
            f"{self.key} {run}: {decision['outcome']} ({decision['reason']}) after {state.windows} windows, "
            f"{state.canary_requests:.0f} canary / {state.current_requests:.0f} current requests"
            + (f", {to_rollback} window(s) after the fall" if case.collapse else "")
            + (f" ({seconds_since(fell, decision['at']):.0f} s)" if at_collapse is not None else "")
            + f"; through the Service {clients.ok} answered, {len(clients.failures)} failed",
            flush=True,
        )
        for failure in clients.failures[:5]:
            print(f"  failed: {failure}", flush=True)
        return result, clients.ok, len(clients.failures)


def seconds_since(then: datetime.datetime, at: str) -> float:
    """From `then` to status.canary.decision.at (whole seconds: the status records no finer)."""
    return (datetime.datetime.fromisoformat(at.replace("Z", "+00:00")) - then).total_seconds()


def run_case(deployment: Deployment, case: Case, seeds: list[int]) -> list[tuple[Run, int, int]]:
    deployment.profile(case, seeds[0])
    deployment.create()
    wait_for(deployment.ready, f"{deployment.key} Ready", timeout=180, interval=0.5)
    return [deployment.one_run(case, f"{deployment.name}-{seed}", seed) for seed in seeds]


def run(args: argparse.Namespace, cases: tuple[Case, ...]) -> dict[str, list[tuple[Run, int, int]]]:
    """Each case's runs on the local cluster: (run, answered, failed) by case name."""
    local = cluster.LocalCluster(name=TEST_CLUSTER_NAME)
    cluster.up(local, real_node=not real_node.problems())  # as tests/conftest.py creates it
    cluster.apply_crds(local)
    kube = Kube.from_kubeconfig(local.kubeconfig)
    namespace = f"canary-bench-{uuid.uuid4().hex[:6]}"
    kube.core.create_namespace({"metadata": {"name": namespace}})
    workdir = Path(tempfile.mkdtemp(prefix=f"{namespace}-"))
    env = {
        "SPECDEC_RUNTIME_IMAGE": "registry.invalid/specdec-runtime:bench",
        "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(args.window),
    }
    operator = OperatorProcess.watching(namespace, local.kubeconfig, workdir / "operator.log", free_port(), env)
    print(f"namespace {namespace}; operator log {operator.log_path}", flush=True)
    results: dict[str, list[tuple[Run, int, int]]] = {c.name: [] for c in cases}
    try:
        operator.start()
        with pod_runner(local.kubeconfig, workdir, namespace), ThreadPoolExecutor(len(cases) * args.parallel) as pool:
            jobs = []
            for i, case in enumerate(cases):
                for j in range(args.parallel):
                    seeds = [args.seed + r for r in range(j, args.runs, args.parallel)]
                    deployment = Deployment(kube, namespace, f"canary-{i}-{j}", workdir / "simulator.json", args)
                    jobs.append((case, pool.submit(run_case, deployment, case, seeds)))
            for case, job in jobs:
                results[case.name].extend(job.result())
    finally:
        operator.stop()
        kube.core.delete_namespace(namespace, propagation_policy="Background")
        if not args.keep_cluster:
            real_node.down(local)
    return results
