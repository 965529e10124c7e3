"""`specdec dev learn`'s parts that need no cluster: the train extra it installs, where the tiny target and the
running draft go, the deployment it applies and what it prints."""

from __future__ import annotations

from pathlib import Path

from specdec_dev import learn, learning_cluster, process_pods
from tests.unit.helpers import make_plan


def test_the_train_extra_is_the_projects_own():
    names = {r.split("<")[0].split(">")[0].split("=")[0] for r in learn.train_requirements()}
    assert {"torch", "transformers", "nvidia-modelopt"} <= names
    assert not any(";" in r for r in learn.train_requirements())  # markers dropped: pip installs each as is


def test_the_checkpoints_go_where_the_runtime_pods_read_them(tmp_path: Path):
    body = learning_cluster.deployment("learns", 300)
    learning = body["spec"]["drafter"]["learning"]
    assert (learning["trafficClass"], learning["minSamples"], learning["sampleRate"]) == ("a", 300, 1)
    assert learning["trainer"]["podLabels"] == {process_pods.RUN_LABEL: "true"}
    target, draft = learning_cluster.checkpoint_directories(tmp_path, "ns", body)
    plan = make_plan(body["spec"], name="learns")
    claim = tmp_path / "ns" / plan.cache.claim_name
    assert target == claim / plan.runtime.target.checkpoint.removeprefix("/cache/")
    assert draft == claim / plan.runtime.speculative_config["speculative_model"].removeprefix("/cache/")


def test_the_report_names_the_decision_the_lengths_and_the_times():
    result = {
        "samples": 2622,
        "bytes": 5_000_000,
        "round": 1,
        "roundSamples": 2222,
        "acceptanceLength": {"baseline": 1.5, "candidate": 2.4},
        "condition": {"reason": "Promoted", "message": "round 1: ..."},
        "seconds": {"cluster up": 30.0, "total": 600.0},
    }
    text = learn.report(result)
    assert "decision: Promoted" in text and "1.500 -> 2.400 (+60.0%)" in text and "total: 600.0 s" in text
