"""`specdec dev learn`: spec.drafter.learning end to end on the local cluster, the real replay and training on CPU.

Brings the cluster up with the operator and the pod runner if they are not running, installs the train extra
(torch, transformers, nvidia-modelopt) into this Python when it lacks it, builds the tiny target and the running
draft and places them in the deployment's cache claim (specdec_dev.learning_cluster), applies the EAGLE-3 example
with spec.drafter.learning on, drives two traffic classes through its front, and watches the round: samples,
replay, train, decision. Prints status.drafter and the condition DraftLearning as they change, then the
acceptance lengths and each step's seconds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException
from packaging.requirements import Requirement

from specdec_dev import cluster, learning_cluster

DISTRIBUTION = "specdec-operator"
TRAIN_MODULES = ("torch", "transformers", "modelopt")


class LearnError(Exception):
    """A step of `specdec dev learn` that cannot go on; the message says which and why."""


def train_requirements() -> list[str]:
    """The train extra's requirements, as this installation of the project declares them."""
    found = []
    for text in importlib.metadata.requires(DISTRIBUTION) or []:
        requirement = Requirement(text)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": "train"}):
            requirement.marker = None
            found.append(str(requirement))
    return found


def ensure_train_extra(say: Callable[[str], None]) -> float:
    """Install the train extra into this Python when one of its modules is missing; the seconds it took."""
    missing = [m for m in TRAIN_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return 0.0
    requirements = train_requirements()
    say(f"installing the train extra ({', '.join(missing)} missing): {' '.join(requirements)}")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *requirements])
    if done.returncode != 0:
        raise LearnError(f"pip could not install the train extra (exit {done.returncode})")
    return time.monotonic() - started


def fresh(claims_dir: Path, namespace: str, body: dict[str, Any], custom: client.CustomObjectsApi) -> None:
    """No deployment of that name, and none of its samples or rounds from an earlier run."""
    name = body["metadata"]["name"]
    try:
        custom.delete_namespaced_custom_object(
            learning_cluster.GROUP, learning_cluster.VERSION, namespace, learning_cluster.PLURAL, name
        )
    except ApiException as error:
        if error.status != 404:
            raise
    deadline = time.monotonic() + 120
    while True:
        try:
            custom.get_namespaced_custom_object(
                learning_cluster.GROUP, learning_cluster.VERSION, namespace, learning_cluster.PLURAL, name
            )
        except ApiException as error:
            if error.status == 404:
                break
            raise
        if time.monotonic() > deadline:
            raise LearnError(f"the earlier {namespace}/{name} is not gone after 120 s")
        time.sleep(1)
    claim = learning_cluster.checkpoint_directories(claims_dir, namespace, body)[0].parents[2]
    for path in (claim / "drafter-samples" / name, claim / "drafter-rounds" / name):
        shutil.rmtree(path, ignore_errors=True)


def wait(check: Callable[[], Any], what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise LearnError(f"{what}: not within {timeout:.0f} s")
        time.sleep(1)
    return found


def run(
    local: cluster.LocalCluster,
    namespace: str,
    name: str,
    min_samples: int,
    class_a: int,
    class_b: int,
    timeout: float,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The whole run; status.drafter at the decision, with each step's seconds under "seconds"."""
    seconds: dict[str, float] = {}
    started = step = time.monotonic()

    def lap(what: str) -> None:
        nonlocal step
        seconds[what] = round(time.monotonic() - step, 1)
        say(f"{what}: {seconds[what]:.1f} s")
        step = time.monotonic()

    seconds_install = ensure_train_extra(say)
    if seconds_install:
        seconds["install the train extra"] = round(seconds_install, 1)
    step = time.monotonic()
    cluster.up(local, step_seconds=None if local.exists() else cluster.QUICK_START_STEP_SECONDS)
    cluster.install(local, sample=False)
    lap("cluster up")
    api = config.new_client_from_config(config_file=str(local.kubeconfig))
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    body = learning_cluster.deployment(name, min_samples, traffic_class="a")
    claims_dir = local.directory / "claims"
    fresh(claims_dir, namespace, body, custom)
    target, head = learning_cluster.prepare(local.directory / "learning" / name)
    learning_cluster.place(claims_dir, namespace, body, target, head)
    lap("tiny target and running draft built and placed")
    custom.create_namespaced_custom_object(
        learning_cluster.GROUP, learning_cluster.VERSION, namespace, learning_cluster.PLURAL, body
    )
    url = wait(lambda: learning_cluster.front_url(core, namespace, name), "the deployment's runtime pod", 300)
    model = wait(lambda: learning_cluster.served_model(url), f"the tiny target served at {url}", 180)
    lap(f"deployment {namespace}/{name} serving at {url}")
    for traffic_class, count, seed in (("b", class_b, 1), ("a", class_a, 0)):
        answered = learning_cluster.drive(url, model, traffic_class, count, seed)
        say(f"class {traffic_class}: {answered} of {count} conversations answered through the front")
    lap("traffic driven (captured by the front)")
    sd = learning_cluster.watch(custom, namespace, name, timeout, say)
    lap("samples counted, replayed, trained, decided")
    seconds["total"] = round(time.monotonic() - started, 1)
    api.close()
    return {**sd["status"]["drafter"], "condition": learning_cluster.draft_learning(sd), "seconds": seconds}


def report(result: dict[str, Any]) -> str:
    lengths = result.get("acceptanceLength") or {}
    baseline, candidate = lengths.get("baseline"), lengths.get("candidate")
    lines = [
        f"decision: {result['condition'].get('reason')}: {result['condition'].get('message')}",
        f"samples: {result.get('samples')} ({result.get('bytes')} bytes), round {result.get('round')} on "
        f"{result.get('roundSamples')} of class a",
    ]
    if baseline and candidate:
        lines.append(
            f"offline acceptance length, running draft -> new head: {baseline:.3f} -> {candidate:.3f} "
            f"({candidate / baseline - 1:+.1%})"
        )
    lines += [f"  {what}: {value:.1f} s" for what, value in result["seconds"].items()]
    return "\n".join(lines)
