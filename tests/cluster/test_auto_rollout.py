"""End to end on trtllm-serve (backend pytorch): draftLen: auto moves the draft length, and the draft lengths
by load, by one surge rollout of the runtime pods each (trtllm-serve takes them at start), and no request sent
through the Service fails meanwhile.

The requests go where the Service sends them: to a random ready endpoint, re-read every 0.2 s (what
kube-proxy does). The local cluster runs no EndpointSlice controller (the API server refuses the loopback
addresses of its pods there), so the endpoints are derived from the pods as that controller does. kwok marks a
pod Ready the moment it runs, before the local pod runner
serves it (a kubelet would wait for the readiness probe): an endpoint that refuses a connection before it
ever answered is skipped, not counted. Any other failure counts, among them a refused connection from an
endpoint that had answered (an old pod stopping too early).
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specdec.speculation import payoff
from specdec_dev import simulation_profile
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, scrape, scrape_if_served, wait_for

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 3.0
SAMPLE = "llama-3.1-8b-draft-1b-pytorch.yaml"  # trtllm-serve, Draft_Target
ALPHA, COST = 0.55, 0.2  # the simulated acceptance per token and draft cost


@pytest.fixture
def operator_env(operator_env):
    return {
        **operator_env,
        "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS),
        "SPECDEC_DRAFT_LEN_ROLLOUT_SECONDS": "60",
    }


class ServiceClients:
    """Closed-loop clients of a Service, sending /v1/completions to its ready endpoints."""

    def __init__(self, kube: Kube, namespace: str, service: str, clients: int = 4):
        self.kube, self.namespace, self.service = kube, namespace, service
        self.endpoints: list[str] = []
        self.answered: set[str] = set()
        self.ok, self.failures, self.skipped = 0, [], 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._watch_endpoints, daemon=True)]
        self._threads += [threading.Thread(target=self._send, daemon=True) for _ in range(clients)]

    def __enter__(self):
        self._read_endpoints()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for thread in self._threads:
            thread.join(15)

    def _read_endpoints(self) -> None:
        """The Service's ready endpoints as the EndpointSlice controller derives them: its selector's pods that
        are Ready and not terminating, at their port "http"."""
        service = self.kube.core.read_namespaced_service(self.service, self.namespace)
        selector = ",".join(f"{k}={v}" for k, v in service.spec.selector.items())
        found = []
        for pod in self.kube.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            ports = [p.container_port for c in pod.spec.containers for p in c.ports or [] if p.name == "http"]
            if ready and ports and pod.status.pod_ip and not pod.metadata.deletion_timestamp:
                found.append(f"{pod.status.pod_ip}:{ports[0]}")
        self.endpoints = found

    def _watch_endpoints(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self._read_endpoints()
            except Exception:  # the API server busy for a moment: keep the last list
                pass

    def _send(self) -> None:
        body = json.dumps({"prompt": "hello", "max_tokens": 32}).encode()
        while not self._stop.is_set():
            endpoints = self.endpoints
            if not endpoints:
                time.sleep(0.05)
                continue
            endpoint = random.choice(endpoints)
            request = urllib.request.Request(
                f"http://{endpoint}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    response.read()
                with self._lock:
                    self.ok += 1
                    self.answered.add(endpoint)
            except urllib.error.HTTPError as error:
                with self._lock:
                    self.failures.append(f"{endpoint}: HTTP {error.code}")
            except urllib.error.URLError as error:
                refused = isinstance(error.reason, ConnectionRefusedError)
                with self._lock:
                    if refused and endpoint not in self.answered:
                        self.skipped += 1  # not served yet (see the module's doc)
                        time.sleep(0.05)
                    else:
                        self.failures.append(f"{endpoint}: {error.reason}")
            except OSError as error:
                with self._lock:
                    self.failures.append(f"{endpoint}: {error}")


def test_auto_draft_len_on_trtllm_serve_converges_with_one_surge_rollout(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    body = example(SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=8)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    optimum = payoff.best_draft_len(ALPHA, COST, 1, 8)
    assert optimum == 2  # from where auto starts (4): an estimated 13 % more, above the 5 % a rollout needs
    simulation_profile.update(
        tmp_path / simulation_profile.FILE_NAME,
        f"{namespace}/{sd.name}",
        {**FAST_PROFILE, "acceptance": ALPHA, "costRatio": COST, "noise": 0.05},
    )
    apps = kube.apps
    phases = []  # the SpeculativeDeployment's, at every look: the old pod serves during the rollout

    def chosen():
        status = sd.get().get("status") or {}
        phases.append(status.get("phase"))
        return (status.get("speculation") or {}).get("draftLen") == optimum and status["speculation"]

    def rolled_out():
        phases.append((sd.get().get("status") or {}).get("phase"))
        d = apps.read_namespaced_deployment(sd.name, namespace)
        return d.status.updated_replicas == 1 and d.status.replicas == 1 and d.status.ready_replicas == 1

    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name) as clients:
        status = wait_for(chosen, f"status.speculation.draftLen {optimum}", timeout=150)
        wait_for(rolled_out, "the rollout to finish", timeout=60)
        time.sleep(4 * SCRAPE_SECONDS)  # it holds: no second rollout
        print(
            f"requests: {clients.ok} answered, {len(clients.failures)} failed, {clients.skipped} skipped "
            f"(endpoint not served yet); status {status}"
        )
    assert clients.failures == [], clients.failures[:10]
    assert clients.ok > 100
    assert set(phases) == {"Ready"}, phases
    deployment = apps.read_namespaced_deployment(sd.name, namespace)
    assert deployment.metadata.annotations["deployment.kubernetes.io/revision"] == "2"  # one rollout
    config = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert config["speculation"]["speculativeConfig"]["max_draft_len"] == optimum
    changes = [e for e in kube.events_for(namespace, sd.name) if e.reason == "DraftLenChanged"]
    assert len(changes) == 1 and changes[0].message.startswith(f"draftLen 4 -> {optimum}: "), [
        e.message for e in changes
    ]
    assert "rolling the pods" in changes[0].message
    assert (sd.get()["status"]["speculation"]["draftLen"]) == optimum


def test_auto_on_trtllm_serve_rolls_out_draft_lengths_by_load_once_they_pay(
    kube: Kube, kubeconfig: Path, namespace: str, operator, tmp_path: Path
):
    """A load that grows from a couple of sequences in flight to 64: the operator fits the step time from
    trtllm-serve's iteration statistics, and at the high load rolls out a draft_len_schedule (shorter drafts
    for larger batches, never 0 on Draft_Target); the new pods draft less under that load."""
    body = example(SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=4)
    sd = SD(kube, namespace, body)
    sd.wait_ready()
    profiles, deployment = tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}"
    load = {
        "acceptance": 0.8,
        "costRatio": 0.05,
        "targetStepSeconds": 0.005,
        "stepSecondsPerToken": 0.0002,
        "maxTokens": 32,
        "noise": 0.0,
    }
    simulation_profile.update(profiles, deployment, {**load, "requestsPerSecond": 20})
    port = body["spec"]["runtime"].get("port", 8000)

    def runtime_pods():
        return [
            p
            for p in kube.core.list_namespaced_pod(
                namespace, label_selector=f"app.kubernetes.io/instance={sd.name}"
            ).items
            if not p.metadata.deletion_timestamp and p.status.pod_ip
        ]

    with pod_runner(kubeconfig, tmp_path, namespace), ServiceClients(kube, namespace, sd.name, clients=2) as clients:
        time.sleep(5 * SCRAPE_SECONDS)  # windows at a low load
        simulation_profile.update(profiles, deployment, {**load, "requestsPerSecond": 200})  # 64 in flight
        changed = wait_for(
            lambda: next(
                (e for e in kube.events_for(namespace, sd.name) if e.reason == "DraftLenScheduleChanged"), None
            ),
            "a DraftLenScheduleChanged Event",
            timeout=120,
        )
        wait_for(
            lambda: (
                (d := kube.apps.read_namespaced_deployment(sd.name, namespace)).status.updated_replicas == 1
                and d.status.replicas == 1
                and d.status.ready_replicas == 1
                and d.metadata.annotations.get("deployment.kubernetes.io/revision") == "2"
            ),
            "the rollout to finish",
            timeout=60,
        )
        (pod,) = wait_for(lambda: len(p := runtime_pods()) == 1 and p, "one runtime pod")
        metrics = f"http://{pod.status.pod_ip}:{port}/metrics"
        before = wait_for(lambda: scrape_if_served(metrics), "the new pod's front")
        time.sleep(3 * SCRAPE_SECONDS)
        after = scrape(metrics)
        print(f"{changed.message}; requests: {clients.ok} answered, {len(clients.failures)} failed")
    sequences = after["specdec_target_batch_sequences_total"] - before["specdec_target_batch_sequences_total"]
    drafts = after["specdec_target_batch_draft_tokens_total"] - before["specdec_target_batch_draft_tokens_total"]
    iterations = after["specdec_target_iterations_total"] - before["specdec_target_iterations_total"]
    assert sequences / iterations > 20  # the high load
    assert 1 <= drafts / sequences < 4  # shorter drafts than draftLen 4 at that load, never none
    config = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    schedule = config["speculation"]["speculativeConfig"]["draft_len_schedule"]
    assert schedule[min(schedule, key=int)] == 4 and min(schedule.values()) >= 1, schedule
    assert "tokens/s at the" in changed.message and "rolling the pods" in changed.message
    assert clients.failures == [], clients.failures[:10]
    assert sd.get()["status"]["speculation"].get("breakEven") is not None
