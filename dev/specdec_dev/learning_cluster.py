"""spec.drafter.learning end to end on the local cluster, with the real replay and train Jobs on CPU.

The pieces `specdec dev learn` and tests/cluster/test_drafter_learning.py share:

- `prepare`: the tiny target (specdec_dev.tiny_target) and the running draft, an EAGLE-3 head trained on a small
  mixed sample of both traffic classes (specdec_dev.learning_chain: a generic draft, what a deployment serves
  before it has learnt from its traffic);
- `place`: both copied where the deployment's cache claim keeps its target and draft checkpoints (the directory
  standing for the claim: <cluster dir>/claims/<namespace>/<claim>/models/...), so that the pod runner serves its
  runtime pods and the round's SaveState server with the transformers stand-in of trtllm-serve over the tiny
  target (specdec_dev.process_pods), and the train Job reads them;
- `deployment`: the EAGLE-3 example with spec.drafter.learning on, learning from one traffic class, its Jobs'
  pods labelled to run their command lines here (process_pods.RUN_LABEL);
- `drive`: conversations of a traffic class through the deployment's front (its pod's IP: no kube-proxy here),
  which captures them;
- `watch`: status.drafter and the condition DraftLearning until a decision, each change printed with its time.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from specdec.admission.validation import parse_spec
from specdec.api.drafter import TRAFFIC_CLASS_HEADER  # spec.drafter.learning.trafficClassHeader's default
from specdec.kube.client import KINDS
from specdec.plan import cache_claim_name, cache_path
from specdec.problem import Problem
from specdec.schema.base import GROUP, VERSION
from specdec_dev import process_pods, tiny_target
from specdec_dev.learning_chain import Chain

EXAMPLE = "llama-3.1-8b-eagle3.yaml"
PLURAL = KINDS["SpeculativeDeployment"].plural
DECIDED = ("Promoted", "NotBetter", "TrainingFailed")  # DraftLearning's reasons that end a round


def prepare(root: Path, baseline_conversations: int = 100) -> tuple[Path, Path]:
    """(the tiny target's directory, the running draft's head directory), built under `root`."""
    chain = Chain(root, conversations=baseline_conversations, baseline_conversations=baseline_conversations)
    chain.capture()
    for traffic_class in tiny_target.CLASSES:
        chain.replay(traffic_class)
    head, _ = chain.running_draft()
    return chain.target, head


def deployment(name: str, min_samples: int, traffic_class: str = "a") -> dict[str, Any]:
    """The EAGLE-3 example learning from `traffic_class` once it has `min_samples` of it, every request sampled."""
    body: dict[str, Any] = yaml.safe_load(resources.files("specdec").joinpath("examples", EXAMPLE).read_text())
    body = copy.deepcopy(body)
    body["metadata"] = {"name": name}
    body["spec"]["drafter"] = {
        "learning": {
            "enabled": True,
            "sampleRate": 1,
            "minSamples": min_samples,
            "trafficClass": traffic_class,
            "trainer": {"podLabels": {process_pods.RUN_LABEL: "true"}},
        }
    }
    return body


def checkpoint_directories(claims_dir: Path, namespace: str, body: dict[str, Any]) -> tuple[Path, Path]:
    """Where the deployment's target and draft checkpoints are kept here (its cache claim's directory)."""
    spec = body["spec"]
    parsed = parse_spec(spec)
    if isinstance(parsed, Problem):
        raise ValueError(f"{parsed.reason}: {parsed.message}")
    claim = claims_dir / namespace / cache_claim_name(parsed)
    eagle3 = spec["speculation"]["eagle3"]
    return (
        claim / cache_path(spec["target"]["model"], spec["target"].get("revision")),
        claim / cache_path(eagle3["draftModel"], eagle3.get("draftRevision")),
    )


def place(claims_dir: Path, namespace: str, body: dict[str, Any], target: Path, head: Path) -> tuple[Path, Path]:
    """The tiny target and the running draft where the deployment's runtime pods read its checkpoints."""
    places = checkpoint_directories(claims_dir, namespace, body)
    for source, destination in zip((target, head), places, strict=True):
        shutil.rmtree(destination, ignore_errors=True)
        shutil.copytree(source, destination)
    return places


def front_url(core: client.CoreV1Api, namespace: str, name: str) -> str | None:
    """The front of the deployment's running pod (its IP and the runtime port), or None while none runs."""
    pods = core.list_namespaced_pod(
        namespace, label_selector=f"app.kubernetes.io/instance={name},app.kubernetes.io/component=runtime"
    )
    for pod in core.api_client.sanitize_for_serialization(pods)["items"]:
        status = pod.get("status") or {}
        if status.get("phase") == "Running" and status.get("podIP") and not pod["metadata"].get("deletionTimestamp"):
            port = next(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"] if p["name"] == "http")
            return f"http://{status['podIP']}:{port}"
    return None


def served_model(url: str) -> str | None:
    """The model the front serves once its backend answers (its /health), else None."""
    try:
        with urllib.request.urlopen(url + "/health", timeout=10) as answer:
            return str(json.load(answer)["model"])
    except (OSError, ValueError, KeyError):
        return None


def complete(url: str, model: str, prompt: str, traffic_class: str, timeout: float = 120) -> str:
    """The target's answer to one prompt of a traffic class, through the front."""
    headers = {"Content-Type": "application/json", TRAFFIC_CLASS_HEADER: traffic_class}
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": tiny_target.ANSWER_TOKENS}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/v1/completions", body, headers), timeout=timeout) as r:
        return str(json.load(r)["choices"][0]["text"])


def drive(url: str, model: str, traffic_class: str, count: int, seed: int, workers: int = 4) -> int:
    """`count` conversations of a class through the front; how many were answered."""
    rng = random.Random(seed)
    prompts = [tiny_target.prompt(traffic_class, rng) for _ in range(count)]
    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(lambda p: complete(url, model, p, traffic_class), prompts))
    return sum(1 for a in answers if a)


def draft_learning(sd: dict[str, Any]) -> dict[str, Any]:
    """The deployment's condition DraftLearning ({} before it has one)."""
    conditions: list[dict[str, Any]] = (sd.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "DraftLearning"), {})


def status_line(sd: dict[str, Any]) -> str:
    """status.drafter and the condition DraftLearning, in one line."""
    condition = draft_learning(sd)
    drafter = json.dumps((sd.get("status") or {}).get("drafter") or {}, sort_keys=True)
    return f"DraftLearning={condition.get('status')} {condition.get('reason')}: {condition.get('message')} | {drafter}"


def watch(
    custom: client.CustomObjectsApi,
    namespace: str,
    name: str,
    timeout: float,
    say: Callable[[str], None] = print,
    poll_seconds: float = 2.0,
) -> dict[str, Any]:
    """The deployment once DraftLearning names a decision (or TrainingFailed), each change said with its time;
    TimeoutError after `timeout` seconds."""
    started, last = time.monotonic(), ""
    while True:
        sd: dict[str, Any] = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)  # type: ignore[assignment]  # the client's objects are untyped
        line = status_line(sd)
        if line != last:
            say(f"[{time.monotonic() - started:6.1f} s] {line}")
            last = line
        if draft_learning(sd).get("reason") in DECIDED:
            return sd
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"no decision in {timeout:.0f} s; last: {line}")
        time.sleep(poll_seconds)
