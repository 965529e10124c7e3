"""A runtime pod on the real node: `specdec-runtime` in the runtime test image (its Dockerfile swaps only
NVIDIA's base and puts stand-ins for trtllm-serve and tritonserver on the PATH), started by a real kubelet
with the ConfigMap volume, probes and security context the operator gives it. The operator runs as a local
process here (tests/realnode/test_operator_pod.py runs it as a pod)."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import threading
import time
import urllib.request

import openai
import pytest

from specdec.speculation import payoff
from specdec_dev import images, node_config, real_node
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import Kube, wait_for
from tests.realnode.conftest import pod_exec

pytestmark = pytest.mark.cluster

SCRAPE_SECONDS = 2.0
PYTORCH_SAMPLE = "llama-3.1-8b-draft-1b-pytorch.yaml"  # trtllm-serve route, draft length 4
TRITON_SAMPLE = "llama-2-13b-draft-7b-logits.yaml"  # Triton route: the front follows the draft_len key live
START_SECONDS = 180  # the kubelet's first start of a pod in a new image: its layers are unpacked then


@pytest.fixture
def operator_env(operator_env):
    return {**operator_env, "SPECDEC_SPECULATION_SCRAPE_SECONDS": str(SCRAPE_SECONDS)}


def runtime_pods(kube: Kube, namespace: str, name: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={name}").items


def ready_pod(kube: Kube, namespace: str, name: str):
    def ready():
        pods = [p for p in runtime_pods(kube, namespace, name) if not p.metadata.deletion_timestamp]
        return (
            len(pods) == 1
            and all(s.ready for s in pods[0].status.container_statuses or [False])
            and pods[0].status.container_statuses
            and pods[0]
        )

    return wait_for(ready, f"{name}'s runtime pod Ready", timeout=START_SECONDS)


def metrics(ip: str) -> str:
    with urllib.request.urlopen(f"http://{ip}:8000/metrics", timeout=5) as answer:
        return answer.read().decode()


def gauge(text: str, name: str) -> float | None:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class Traffic:
    """Completions sent to a pod in the background, with the official `openai` client."""

    def __init__(self, ip: str, model: str, streams: int = 1, max_tokens: int = 16):
        self.client = openai.OpenAI(base_url=f"http://{ip}:8000/v1", api_key="unused", max_retries=0, timeout=30)
        self.model, self.max_tokens, self.answers, self.errors = model, max_tokens, 0, []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(streams)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                completion = self.client.completions.create(
                    model=self.model, prompt="The node is", max_tokens=self.max_tokens
                )
                assert completion.choices[0].text
                self.answers += 1
            except Exception as error:  # noqa: BLE001 - counted, and the test asserts on them
                self.errors.append(repr(error))
                time.sleep(0.2)

    def __enter__(self) -> Traffic:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(35)


def test_a_runtime_pod_on_the_real_node_serves_the_openai_client_and_feeds_status(
    kube: Kube, namespace: str, node, operator
):
    sd = SD(kube, namespace, real_node.on_real_node(example(PYTORCH_SAMPLE)))
    sd.wait_ready(timeout=START_SECONDS)
    pod = ready_pod(kube, namespace, sd.name)
    assert pod.spec.node_name == real_node.NODE_NAME
    assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(node_config.POD_SUBNET)
    container = pod.status.container_statuses[0]
    assert container.image_id and container.restart_count == 0  # an image containerd holds, started once
    # What the kubelet enforced: the image's non-root user (no runAsUser in the pod), the ConfigMap volume.
    assert pod_exec(node, namespace, pod.metadata.name, "id", "-u").stdout.strip() == "1000"
    touch = pod_exec(node, namespace, pod.metadata.name, "touch", "/probe")
    assert touch.returncode != 0 and "Permission denied" in touch.stderr, touch
    mounted = pod_exec(node, namespace, pod.metadata.name, "cat", "/etc/specdec/runtime.json")
    assert json.loads(mounted.stdout)["backend"] == "pytorch"

    client = openai.OpenAI(base_url=f"http://{pod.status.pod_ip}:8000/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    assert model == "meta-llama/Llama-3.1-8B-Instruct"
    with Traffic(pod.status.pod_ip, model) as traffic:
        # The operator scrapes the pod's /metrics at its IP, as Prometheus does, into status.speculation.
        speculation = wait_for(
            lambda: (
                (s := (sd.get().get("status") or {}).get("speculation") or {}).get("acceptanceRate") is not None and s
            ),
            "status.speculation from the pod's metrics",
            timeout=60,
        )
    assert traffic.answers > 0 and not traffic.errors, traffic.errors[:3]
    assert speculation["draftLen"] == 4 and speculation["pods"] == 1
    assert 0 < speculation["acceptanceRate"] <= 1


def test_draft_len_auto_reaches_the_running_front_through_the_kubelet(kube: Kube, namespace: str, node, operator):
    """`draftLen: auto` on the Triton route: the operator measures the pod's speculation (the test image's
    stand-ins: acceptance 0.45, a draft token at 0.15 of a target step, so the optimum is 2), writes the
    draft_len key of the runtime ConfigMap, and the kubelet's own ConfigMap-volume refresh carries it to the
    running front: no restart, no rollout."""
    body = example(TRITON_SAMPLE)
    body["spec"]["speculation"]["draftTarget"].update(draftLen="auto", maxDraftLen=8)
    sd = SD(kube, namespace, real_node.on_real_node(body))
    sd.wait_ready(timeout=START_SECONDS)
    pod = ready_pod(kube, namespace, sd.name)
    ip, started = pod.status.pod_ip, pod.status.container_statuses[0].container_id
    assert gauge(metrics(ip), "specdec_draft_len") == 4  # where auto starts
    optimum = payoff.best_draft_len(0.45, 0.15, 1, 8)
    model = openai.OpenAI(base_url=f"http://{ip}:8000/v1", api_key="unused").models.list().data[0].id
    with Traffic(ip, model, streams=4, max_tokens=64) as traffic:
        chosen = wait_for(
            lambda: (
                (k := kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["draft_len"]) != "4"
                and k
            ),
            "the operator's choice",
            timeout=120,
        )
        written = time.monotonic()
        wait_for(
            lambda: gauge(metrics(ip), "specdec_draft_len") == int(chosen),
            f"the front's draft length {chosen}",
            timeout=90,
        )
        print(
            f"draft_len {chosen} reached the front {time.monotonic() - written:.1f}s after the ConfigMap write "
            f"(kubelet syncFrequency {node_config.SYNC_FREQUENCY})"
        )
    assert abs(int(chosen) - optimum) <= 1 and not traffic.errors, (chosen, optimum, traffic.errors[:3])
    after = ready_pod(kube, namespace, sd.name).status.container_statuses[0]
    assert after.container_id == started and after.restart_count == 0  # no restart
    assert kube.apps.read_namespaced_deployment(sd.name, namespace).metadata.generation == 1  # no rollout


def test_the_kubelet_gates_readiness_and_restarts_a_killed_container(kube: Kube, namespace: str, node, operator):
    sd = SD(kube, namespace, real_node.on_real_node(example(PYTORCH_SAMPLE)))
    sd.wait_ready(timeout=START_SECONDS)
    pod = ready_pod(kube, namespace, sd.name)
    # A backend that stops answering: the front's /health fails, the readiness probe takes the pod out.
    backend = pid_of(node, pod, "trtllm-serve")
    os.kill(backend, signal.SIGSTOP)
    try:
        wait_for(
            lambda: not runtime_pods(kube, namespace, sd.name)[0].status.container_statuses[0].ready,
            "the pod not Ready while its backend hangs",
            timeout=90,
        )
        wait_for(lambda: sd.condition("Ready").get("status") == "False", "the deployment not Ready", timeout=30)
    finally:
        os.kill(backend, signal.SIGCONT)
    sd.wait_ready(timeout=90)
    # SIGKILL to the container's first process: the kubelet restarts it and the deployment recovers.
    os.kill(pid_of(node, pod, "specdec-runtime"), signal.SIGKILL)
    wait_for(
        lambda: runtime_pods(kube, namespace, sd.name)[0].status.container_statuses[0].restart_count == 1,
        "the container restarted",
        timeout=60,
    )
    ready_pod(kube, namespace, sd.name)
    sd.wait_ready(timeout=90)


def test_an_image_that_runs_as_root_is_refused_and_the_status_says_so(kube: Kube, namespace: str, node, operator):
    sd = SD(kube, namespace, real_node.on_real_node(example(PYTORCH_SAMPLE), image=images.BASE_IMAGE))
    refused = wait_for(
        lambda: (
            (c := sd.condition("RuntimeAvailable")).get("status") == "False"
            and "runAsNonRoot" in c.get("message", "")
            and c
        ),
        "RuntimeAvailable=False naming runAsNonRoot",
        timeout=START_SECONDS,
    )
    waiting = runtime_pods(kube, namespace, sd.name)[0].status.container_statuses[0].state.waiting
    assert waiting.reason == "CreateContainerConfigError"  # the kubelet's own verdict
    assert "root" in refused["message"] and sd.condition("Ready")["status"] == "False"


def pid_of(node: real_node.RealNode, pod, command: str) -> int:
    """The host PID of the pod's process whose command line names `command`, from its container's cgroup."""
    container_id = pod.status.container_statuses[0].container_id.split("//")[1]
    info = json.loads(node.crictl("inspect", container_id).stdout)
    init = info["info"]["pid"]
    if command == "specdec-runtime":
        return init
    for child in children(init):
        with open(f"/proc/{child}/cmdline", "rb") as cmdline:
            if command.encode() in cmdline.read():
                return child
    raise AssertionError(f"no {command} process under pid {init}")


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listing:
            for child in map(int, listing.read().split()):
                found += [child, *children(child)]
    return found
