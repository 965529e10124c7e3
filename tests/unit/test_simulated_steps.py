"""Simulated step durations: the --step-seconds option and the delays written into the kwok stages.

The delay expressions are run with jq (kwok runs them with gojq, the same language) where it is
installed; tests/cluster/test_simulated_steps.py runs them in kwok."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from specdec_dev import cluster, simulated_steps

STARTED = "2026-01-01T00:00:00Z"


def stage(name: str) -> dict:
    return {"metadata": {"name": name}, "spec": {}}


def delay_of(name: str, defaults: dict) -> str:
    return simulated_steps.with_step_delays(stage(name), defaults)["spec"]["delay"]["durationFrom"]["expressionFrom"]


def jq(expression: str, pod: dict) -> list:
    if not shutil.which("jq"):
        pytest.skip("jq is not installed")
    out = subprocess.run(["jq", "-c", expression], input=json.dumps(pod), capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def build_pod(annotations: dict | None = None, running: str = "convert") -> dict:
    states = {"quantize": {"terminated": {"exitCode": 0}}, "convert": {"waiting": {}}, "build": {"waiting": {}}}
    states[running] = {"running": {"startedAt": STARTED}}
    return {
        "metadata": {"annotations": annotations or {}},
        "status": {
            "initContainerStatuses": [{"name": n, "state": states[n]} for n in ("quantize", "convert")],
            "containerStatuses": [{"name": "build", "state": states["build"]}],
        },
    }


def test_step_seconds_are_parsed_per_known_step():
    assert simulated_steps.parse("fetch=20, convert=10,build=2.5") == {"fetch": 20, "convert": 10, "build": 2.5}
    assert simulated_steps.parse("") == {}
    for bad, why in [
        ("train=3", "STEP one of"),
        ("fetch", "STEP=SECONDS"),
        ("fetch=soon", "not a number"),
        ("fetch=-1", "negative"),
    ]:
        with pytest.raises(simulated_steps.StepSecondsError, match=why):
            simulated_steps.parse(bad)


def test_a_running_init_container_ends_after_its_steps_seconds():
    expression = delay_of("job-pod-simulated-step", {"convert": 10})
    assert jq(expression, build_pod()) == ["2026-01-01T00:00:10Z"]  # the cluster's default
    override = simulated_steps.annotations({"convert": 4})
    assert override == {"simulation.specdec.io/convert-seconds": "4"}
    assert jq(expression, build_pod(override)) == ["2026-01-01T00:00:04Z"]  # the pod's annotation wins
    assert jq(delay_of("job-pod-simulated-step", {}), build_pod()) == [STARTED]  # no seconds: at once


def test_no_delay_while_no_container_runs():
    pod = {"metadata": {}, "status": {"phase": "Pending"}}
    assert jq(delay_of("job-pod-simulated-step", {"fetch": 5}), pod) == []
    assert jq(delay_of("pod-complete", {"build": 5}), build_pod()) == []  # build waits: init containers run


def test_the_main_container_ends_after_its_seconds_unless_kwoks_delay_annotation_is_set():
    expression = delay_of("pod-complete", {"build": 30})
    assert jq(expression, build_pod(running="build")) == ["2026-01-01T00:00:30Z"]
    assert jq(expression, build_pod({simulated_steps.POD_COMPLETE_DELAY: "3s"}, running="build")) == ["3s"]


def test_only_the_stages_of_job_steps_get_a_delay():
    other = stage("pod-ready")
    assert simulated_steps.with_step_delays(other, {"build": 1}) is other
    assert set(simulated_steps.STAGE_STATUSES) <= {
        p.stem for p in Path(cluster.__file__).parent.joinpath("stages").glob("*.yaml")
    }


def test_kwokctl_config_writes_the_clusters_step_seconds_into_the_stages(tmp_path: Path):
    documents = yaml.safe_load_all(
        cluster.kwokctl_config(tmp_path, tmp_path / "pki", step_seconds={"fetch": 20, "build": 30})
    )
    delays = {
        d["metadata"]["name"]: d["spec"]["delay"]["durationFrom"]["expressionFrom"]
        for d in documents
        if d["kind"] == "Stage" and d["metadata"]["name"] in simulated_steps.STAGE_STATUSES
    }
    assert set(delays) == set(simulated_steps.STAGE_STATUSES)
    assert all('{"build": 30, "fetch": 20}[.name]' in d for d in delays.values()), delays


def test_a_deployment_gets_the_seconds_on_its_build_and_fetch_pods():
    body = {"spec": {"build": {"backoffLimit": 1}}}
    seconds = simulated_steps.annotations({"fetch": 5})
    simulated_steps.deployment_with_step_seconds(body, {"fetch": 5})
    assert body["spec"] == {
        "build": {"backoffLimit": 1, "podAnnotations": seconds},
        "cache": {"fetch": {"podAnnotations": seconds}},
    }
    older = simulated_steps.deployment_with_step_seconds({"spec": {}}, {"fetch": 5}, fetch_pods=False)
    assert older["spec"] == {"build": {"podAnnotations": seconds}}  # an API without fetch Jobs


def test_a_failing_step_is_kwoks_failure_stage_on_that_container():
    failing = simulated_steps.failing("fetch", exit_code=3, message="simulated-401")
    assert failing["podLabels"] == {simulated_steps.FAILURE: "true"}
    annotations = failing["podAnnotations"]
    assert annotations[f"{simulated_steps.FAILURE}/container-name"] == "fetch"
    assert annotations[f"{simulated_steps.FAILURE}/exit-code"] == "3"
    assert annotations[f"{simulated_steps.FAILURE}/message"] == "simulated-401"
    stage = Path(cluster.__file__).parent / "stages" / "pod-container-running-failed.yaml"
    selector = yaml.safe_load(stage.read_text())["spec"]["selector"]["matchExpressions"][0]
    assert selector["key"] == f'.metadata.labels["{simulated_steps.FAILURE}"]'
    with pytest.raises(ValueError, match="not a step"):
        simulated_steps.failing("compile")
