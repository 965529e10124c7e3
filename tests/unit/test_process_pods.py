"""The pod runner's stand-in of a kubelet for the learning loop's Job pods (specdec_dev.process_pods): the Jobs'
own command lines with their mounts at the local cluster's directories, and the end a kubelet reports."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specdec.builders import drafter_jobs
from specdec.builders.serving import build_deployment
from specdec.plan import Plan
from specdec_dev import process_pods
from tests.unit.helpers import SETTINGS, make_plan
from tests.unit.invalid_specs import eagle3, spec


def learning_plan() -> Plan:
    return make_plan(
        spec(backend="pytorch", speculation=eagle3(), drafter={"learning": {"enabled": True}}), name="chat"
    )


def job_pod(job: dict, name: str) -> dict:
    """The pod the Job controller makes of the Job's template."""
    template = job["spec"]["template"]
    return {"metadata": {**template["metadata"], "name": name, "namespace": "ns"}, "spec": template["spec"]}


def test_the_train_jobs_command_runs_here_with_its_mounts_at_the_claims_directories(tmp_path: Path):
    plan = learning_plan()
    pod = job_pod(drafter_jobs.train_job(plan, plan.spec.drafter.learning, "uid", SETTINGS, 3), "chat-train-x")
    claims, pod_dir = tmp_path / "claims", tmp_path / "pods" / "ns" / "chat-train-x"
    directories = process_pods.volume_directories(pod, claims, pod_dir)
    cache = plan.cache.claim_name
    assert directories["/round"] == claims / "ns" / cache / "drafter-rounds/chat/3"
    assert directories["/tmp"] == pod_dir / "volumes" / "tmp"
    argv = process_pods.host_command(pod, directories, pod_dir / "termination-log", {})
    assert argv[:3] == [sys.executable, "-m", "specdec.drafter.train"]
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert options["--hidden-states"] == str(claims / "ns" / cache / "drafter-rounds/chat/3/hidden-states")
    assert options["--out"] == str(claims / "ns" / cache / "drafter-rounds/chat/3/head")
    assert options["--result"] == str(pod_dir / "termination-log")
    target = process_pods.host_path(plan.runtime.target.checkpoint, directories)
    assert options["--target"] == str(target) and str(target).startswith(str(claims / "ns" / cache))
    assert options["--baseline"] == str(process_pods.host_path(drafter_jobs.running_draft(plan) or "", directories))


def test_the_replay_jobs_server_is_a_pod_of_its_service(tmp_path: Path):
    plan = learning_plan()
    pod = job_pod(drafter_jobs.replay_job(plan, plan.spec.drafter.learning, "uid", SETTINGS, 1), "chat-replay-x")
    url = drafter_jobs.endpoint_of(plan)
    assert process_pods.service_host(url) == ("chat-replay", plan.namespace)
    served = process_pods.at_pod(url, "127.0.10.7")
    assert served == f"http://127.0.10.7:{plan.spec.runtime.port}"
    directories = process_pods.volume_directories(pod, tmp_path, tmp_path / "pod")
    argv = process_pods.host_command(pod, directories, tmp_path / "t", {url: served})
    options = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert options["--server"] == served
    assert options["--samples"] == str(tmp_path / plan.namespace / plan.cache.claim_name / "drafter-samples/chat")
    assert options["--holdout-out"] == str(
        tmp_path / plan.namespace / plan.cache.claim_name / "drafter-rounds/chat/1/holdout"
    )


def test_paths_outside_every_mount_and_other_commands():
    directories = {"/round": Path("/here/round"), "/": Path("/root-claim")}
    assert process_pods.host_path("/round/head", directories) == Path("/here/round/head")
    assert process_pods.host_path("/roundabout", directories) == Path("/root-claim/roundabout")
    assert process_pods.host_path("/x", {"/round": Path("/r")}) is None
    assert process_pods.service_host("http://127.0.0.1:8000") is None
    pod = {"metadata": {"namespace": "ns"}, "spec": {"containers": [{"name": "c", "command": ["trtllm-serve"]}]}}
    with pytest.raises(process_pods.PodRunError, match="not python"):
        process_pods.host_command(pod, {}, Path("t"), {})
    pod["spec"]["containers"][0]["command"] = []
    with pytest.raises(process_pods.PodRunError, match="no command"):
        process_pods.host_command(pod, {}, Path("t"), {})


def test_the_end_is_reported_as_a_kubelet_does(tmp_path: Path):
    pod = {"spec": {"containers": [{"name": "train", "image": "img"}]}}
    termination, log = tmp_path / "termination-log", tmp_path / "log"
    log.write_text("".join(f"line {n}\n" for n in range(200)))
    assert process_pods.termination_message(termination, log, 1).splitlines() == [f"line {n}" for n in range(120, 200)]
    assert process_pods.termination_message(termination, log, 0) == ""  # no fallback on success
    termination.write_text('{"better": true}')
    assert process_pods.termination_message(termination, log, 1) == '{"better": true}'
    status = process_pods.terminated_status(pod, 0, '{"better": true}', "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z")
    assert status["status"]["phase"] == "Succeeded"
    (container,) = status["status"]["containerStatuses"]
    assert container["name"] == "train" and container["state"]["terminated"] == {
        "exitCode": 0,
        "reason": "Completed",
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": "2026-01-01T00:01:00Z",
        "message": '{"better": true}',
    }
    failed = process_pods.terminated_status(pod, 2, "", "a", "b")["status"]
    assert failed["phase"] == "Failed" and failed["containerStatuses"][0]["state"]["terminated"]["reason"] == "Error"
    assert "message" not in failed["containerStatuses"][0]["state"]["terminated"]


def test_only_labelled_running_job_pods_run_here():
    pod = {"metadata": {"labels": {process_pods.RUN_LABEL: "true"}}, "status": {"phase": "Running"}}
    assert process_pods.runs_command(pod)
    assert not process_pods.runs_command({**pod, "status": {"phase": "Pending"}})
    assert not process_pods.runs_command({**pod, "metadata": {"labels": {}}})
    assert not process_pods.runs_command({**pod, "metadata": {**pod["metadata"], "deletionTimestamp": "t"}})


def test_a_runtime_pod_serves_a_real_model_where_its_checkpoint_holds_one(tmp_path: Path):
    plan = learning_plan()
    template = build_deployment(plan, "uid", SETTINGS)["spec"]["template"]
    pod = {"metadata": {"namespace": "ns", "name": "chat-0"}, "spec": template["spec"]}
    directories = process_pods.volume_directories(pod, tmp_path / "claims", tmp_path / "pod")
    checkpoint = plan.runtime.target.checkpoint
    assert process_pods.real_model(checkpoint, directories) is None  # the simulated backend, then
    model = process_pods.host_path(checkpoint, directories)
    assert model is not None
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    assert process_pods.real_model(checkpoint, directories) == model
    argv = process_pods.transformers_serve_argv(
        model, "127.0.10.2", 8001, tmp_path / "o.yaml", {"decoding_type": "Eagle3"}
    )
    assert argv[1:4] == ["-m", "specdec_dev.transformers_serve", str(model)]
    assert (tmp_path / "o.yaml").read_text() == '{"speculative_config": {"decoding_type": "Eagle3"}}'
