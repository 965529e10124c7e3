"""spec.drafter.learning's loop: the pure step (specdec.status.drafter_loop), the round's objects
(specdec.builders.drafter_jobs), and the controller on an in-memory API server: samples -> replay -> train ->
decision in status.drafter, Events at each step, the promoted head served from status."""

from __future__ import annotations

import copy
import json

import pytest

from specdec.admission.validation import parse_spec
from specdec.builders import drafter_jobs
from specdec.modes import mode_of
from specdec.plan import Plan, plan
from specdec.status.drafter_loop import JobView, LoopView, job_phase, next_step, train_result
from tests.unit.apiserver import Cluster
from tests.unit.helpers import SETTINGS, make_plan
from tests.unit.invalid_specs import eagle3, spec
from tests.unit.test_reconcile_controllers import Operator

RESULT_BETTER = {
    "samples": 200,
    "acceptanceLength": {"baseline": 1.8, "candidate": 2.4},
    "better": True,
    "margin": 0.1,
    "seconds": {"train": 1.0},
    "reason": "",
}


def view(recorded: dict, samples: int = 0, **fields) -> LoopView:
    values = dict(
        samples=samples,
        min_samples=100,
        recorded=recorded,
        replay_server_ready=False,
        replay=None,
        train=None,
        replay_job="chat-replay",
        train_job="chat-train",
        head="pvc://cache/drafter-rounds/chat/1/head",
        basis="b1",
        now="2026-11-27T18:00:00Z",
    )
    return LoopView(**{**values, **fields})


def test_not_enough_samples_then_a_round_starts_with_the_replay():
    waiting = next_step(view({}, samples=99))
    assert (waiting.condition.status, waiting.condition.reason) == (None, "NotEnoughSamples")
    assert "99 of 100 samples" in waiting.condition.message and waiting.event is None
    assert not (waiting.replay_server or waiting.replay_job or waiting.train_job)
    started = next_step(view({}, samples=100))
    assert started.fields == {
        "round": 1,
        "roundSamples": 100,
        "roundBasis": "b1",
        "replayJob": "chat-replay",
        "replayPhase": "Pending",
    }
    assert started.condition.reason == "Replaying" and started.event[0] == "DraftReplayStarted"
    assert started.replay_server and not started.replay_job  # the Job waits for the server


def test_the_replay_job_runs_once_the_server_is_ready_then_training_starts_and_the_server_goes():
    replaying = {
        "round": 1,
        "roundSamples": 100,
        "roundBasis": "b1",
        "replayJob": "chat-replay",
        "replayPhase": "Pending",
    }
    step = next_step(view(replaying, 100, replay_server_ready=True))
    assert step.replay_server and step.replay_job and step.condition.reason == "Replaying"
    running = next_step(view(replaying, 100, replay_server_ready=True, replay=JobView(1, "Running")))
    assert running.fields["replayPhase"] == "Running" and running.event is None
    stale = next_step(view(replaying, 100, replay_server_ready=True, replay=JobView(0, "Succeeded")))
    assert stale.fields["replayPhase"] == "Pending"  # another round's Job says nothing of this one
    done = next_step(view(replaying, 100, replay=JobView(1, "Succeeded")))
    assert done.fields["replayPhase"] == "Succeeded" and done.fields["trainPhase"] == "Pending"
    assert not done.replay_server and done.train_job and done.condition.reason == "Training"
    assert done.event[0] == "DraftTrainingStarted"


def test_a_failed_replay_or_training_is_training_failed_with_a_warning():
    replaying = {"round": 1, "roundSamples": 100, "replayPhase": "Running"}
    failed = next_step(view(replaying, 100, replay=JobView(1, "Failed")))
    assert (failed.condition.status, failed.condition.reason) == (False, "TrainingFailed")
    assert failed.event[2] is True and not failed.replay_server and "kubectl logs job/chat-replay" in failed.event[1]
    training = {"round": 1, "roundSamples": 100, "replayPhase": "Succeeded", "trainPhase": "Running"}
    assert next_step(view(training, 100, train=JobView(1, "Failed"))).condition.reason == "TrainingFailed"
    garbled = next_step(view(training, 100, train=JobView(1, "Succeeded", "Traceback (most recent call last)")))
    assert garbled.condition.reason == "TrainingFailed" and "not JSON" in garbled.condition.message
    after = next_step(view({**training, "trainPhase": "Failed"}, 150))
    assert after.condition.reason == "TrainingFailed" and "150 of 200 samples for round 2" in after.condition.message


def test_the_decision_is_the_train_jobs_result():
    training = {
        "round": 1,
        "roundSamples": 100,
        "roundBasis": "b1",
        "replayPhase": "Succeeded",
        "trainPhase": "Running",
    }
    promoted = next_step(view(training, 120, train=JobView(1, "Succeeded", json.dumps(RESULT_BETTER))))
    assert promoted.fields["decision"] == "Promoted" and promoted.fields["acceptanceLength"] == {
        "baseline": 1.8,
        "candidate": 2.4,
    }
    assert promoted.fields["head"] == "pvc://cache/drafter-rounds/chat/1/head" and promoted.fields["trainedFor"] == "b1"
    assert promoted.fields["decidedAt"] == "2026-11-27T18:00:00Z" and promoted.condition.status is True
    assert "1.800 -> 2.400 on 200 held-out samples" in promoted.event[1]
    worse = {
        **RESULT_BETTER,
        "better": False,
        "acceptanceLength": {"baseline": 1.8, "candidate": 1.85},
        "reason": "below margin",
    }
    not_better = next_step(view(training, 120, train=JobView(1, "Succeeded", json.dumps(worse))))
    assert (not_better.condition.status, not_better.condition.reason) == (False, "NotBetter")
    assert "head" not in not_better.fields and "below margin" in not_better.condition.message
    # the next round starts minSamples later, and keeps the head that serves
    served = {**promoted.fields}
    assert next_step(view(served, 199)).fields == served
    again = next_step(view(served, 200))
    assert again.fields["round"] == 2 and again.fields["head"] == served["head"] and "decision" not in again.fields


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ("{}", "lacks better"),
        ('{"better": true, "acceptanceLength": {"candidate": "2"}}', "lacks better"),
        ('{"better": true, "acceptanceLength": {"candidate": 2, "baseline": "x"}}', "baseline is not a number"),
        ("[1]", "not a JSON object"),
    ],
)
def test_a_result_that_is_not_one_says_why(message, why):
    assert why in train_result(message)


def test_job_phases_as_kubectl_reads_them():
    assert job_phase({}) == "Pending"
    assert job_phase({"status": {"active": 1}}) == "Running"
    assert job_phase({"status": {"conditions": [{"type": "Failed", "status": "True"}]}}) == "Failed"
    assert job_phase({"status": {"succeeded": 1}}) == "Succeeded"


# --- the round's objects --------------------------------------------------------------------------------------------


def learning_spec(**learning) -> dict:
    return spec(
        backend="pytorch",
        speculation=eagle3(),
        drafter={"learning": {"enabled": True, "minSamples": 2, **learning}},
        cache={"claimName": "cache"},
    )


def test_the_replay_server_is_the_targets_save_state_runtime_owned_by_the_deployment():
    p = make_plan(learning_spec(), name="chat")
    learning = p.spec.drafter.learning
    derived = drafter_jobs.replay_spec(learning_spec(), learning, "chat", "cache", 3)
    server = plan({"metadata": {"name": "chat-replay", "namespace": "ns", "uid": "u"}, "spec": derived}, SETTINGS)
    assert isinstance(server, Plan)
    assert server.runtime.speculative_config["write_interval"] == 1
    config_map, deployment, service = drafter_jobs.replay_server(server, "chat", "uid-chat", SETTINGS)
    for obj in (config_map, deployment, service):
        assert obj["metadata"]["ownerReferences"][0]["name"] == "chat"
        assert obj["metadata"]["labels"]["specdec.io/deployment"] == "chat"
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/instance"] == "chat-replay"
    mount = next(
        m for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "captures"
    )
    assert mount["subPath"] == "drafter-rounds/chat/3/hidden-states"


def test_the_jobs_read_the_samples_and_write_the_round():
    p = make_plan(learning_spec(trafficClass="A", margin=0.2), name="chat")
    learning = p.spec.drafter.learning
    replay = drafter_jobs.replay_job(p, learning, "uid-chat", SETTINGS, 2)
    command = replay["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "specdec.drafter.replay"]
    assert command[command.index("--server") + 1] == "http://chat-replay.ns.svc:8000"
    assert command[command.index("--class") + 1] == "A"
    assert replay["metadata"]["annotations"] == {"specdec.io/drafter-round": "2"}
    assert "app.kubernetes.io/instance" not in replay["spec"]["template"]["metadata"]["labels"]
    train = drafter_jobs.train_job(p, learning, "uid-chat", SETTINGS, 2)
    pod = train["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[command.index("--baseline") + 1] == drafter_jobs.running_draft(p)
    assert command[command.index("--margin") + 1] == "0.2"
    assert command[command.index("--result") + 1] == "/dev/termination-log"
    rounds = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "round")
    assert rounds["subPath"] == "drafter-rounds/chat/2"


def test_a_promoted_head_serves_only_while_the_spec_is_what_it_was_trained_for():
    body = learning_spec()
    sd = {"spec": body, "status": {"drafter": {"head": "pvc://cache/h", "trainedFor": drafter_jobs.trained_for(body)}}}
    learned = drafter_jobs.learned_speculation(sd)
    assert (
        learned["eagle3"]["draftModel"] == "pvc://cache/h"
        and body["speculation"]["eagle3"]["draftModel"] != "pvc://cache/h"
    )
    assert mode_of(parse_spec({**body, "speculation": learned}).speculation).block.draft_model == "pvc://cache/h"
    changed = copy.deepcopy(sd)
    changed["spec"]["speculation"]["eagle3"]["maxDraftLen"] = 5
    assert drafter_jobs.learned_speculation(changed) is None
    off = copy.deepcopy(sd)
    off["spec"]["drafter"]["learning"]["enabled"] = False
    assert drafter_jobs.learned_speculation(off) is None


# --- the controller -------------------------------------------------------------------------------------------------


def learning_deployment() -> dict:
    return {
        "apiVersion": "specdec.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": "chat", "namespace": "ns"},
        "spec": learning_spec(),
    }


def reconcile(operator: Operator, cluster: Cluster, times: int = 1) -> dict:
    for _ in range(times):
        operator.reconciler.pacing.last_written.clear()
        operator.reconciler.reconcile_deployment("ns", "chat")
        cluster.run_controllers()
    return cluster.store.get("SpeculativeDeployment", "ns", "chat")


def draft_learning(sd: dict) -> dict:
    return next(c for c in sd["status"]["conditions"] if c["type"] == "DraftLearning")


def test_the_controller_runs_a_round_from_samples_to_a_promoted_head():
    cluster = Cluster()
    cluster.add(learning_deployment())
    operator = Operator(cluster)
    for _ in range(8):
        operator.resync()
        cluster.run_controllers()
    sd = cluster.store.get("SpeculativeDeployment", "ns", "chat")
    assert sd["status"]["phase"] == "Ready", sd["status"]
    assert draft_learning(sd)["reason"] == "NotEnoughSamples"
    runtime_config = cluster.store.get("ConfigMap", "ns", "chat-runtime")["data"]["runtime.json"]
    assert json.loads(runtime_config)["drafterCapture"]["directory"] == "/drafter-samples"

    from specdec.feedback.drafter_watch import DrafterFacts
    from specdec.status.drafter import DrafterSample, SamplesPlace

    operator.reconciler.speculation.drafter.account(
        sd,
        DrafterFacts(sd["metadata"]["generation"], SamplesPlace("cache", "drafter-samples/chat")),
        [DrafterSample(1, {"": 3}, {"": 300})],
    )
    sd = reconcile(operator, cluster)
    assert sd["status"]["drafter"]["samples"] == 3 and sd["status"]["drafter"]["replayPhase"] == "Pending"
    assert draft_learning(sd)["reason"] == "Replaying" and ("DraftReplayStarted", "chat") in cluster.events
    server = cluster.store.get("Deployment", "ns", "chat-replay")
    assert server["metadata"]["ownerReferences"][0]["uid"] == sd["metadata"]["uid"]
    sd = reconcile(operator, cluster)  # the server is ready (run_controllers): the replay Job starts
    assert cluster.store.get("Job", "ns", "chat-replay") is not None
    sd = reconcile(operator, cluster)  # the replay Job completed: the train Job starts, the server goes
    assert sd["status"]["drafter"]["replayPhase"] == "Succeeded" and draft_learning(sd)["reason"] == "Training"
    assert cluster.store.get("Deployment", "ns", "chat-replay") is None
    assert cluster.store.get("Job", "ns", "chat-train") is not None
    cluster.store.put(
        {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": "chat-train-x",
                "namespace": "ns",
                "labels": {"job-name": "chat-train", "app.kubernetes.io/managed-by": "specdec-operator"},
                "creationTimestamp": "2026-11-27T18:00:00Z",
            },
            "status": {
                "containerStatuses": [
                    {"name": "train", "state": {"terminated": {"exitCode": 0, "message": json.dumps(RESULT_BETTER)}}}
                ]
            },
        }
    )
    sd = reconcile(operator, cluster)
    drafter = sd["status"]["drafter"]
    assert drafter["decision"] == "Promoted" and drafter["acceptanceLength"] == {"baseline": 1.8, "candidate": 2.4}
    assert drafter["head"] == "pvc://cache/drafter-rounds/chat/1/head"
    assert draft_learning(sd)["reason"] == "Promoted" and ("Promoted", "chat") in cluster.events
    reconcile(operator, cluster)  # the runtime rolls to the head: status, not the spec, says which draft
    runtime = json.loads(cluster.store.get("ConfigMap", "ns", "chat-runtime")["data"]["runtime.json"])
    assert (
        runtime["speculation"]["speculativeConfig"]["speculative_model"] == "/models/cache/drafter-rounds/chat/1/head"
    )
    assert cluster.store.get("SpeculativeDeployment", "ns", "chat")["spec"] == learning_spec()

    # a second round starts afresh (status.drafter is replaced: round 1's decision does not outlive it), and its
    # replay deletes the rounds older than keepRounds, never round 1's: its head serves
    operator.reconciler.speculation.drafter.account(
        sd,
        DrafterFacts(sd["metadata"]["generation"], SamplesPlace("cache", "drafter-samples/chat")),
        [DrafterSample(1, {"": 6}, {"": 600})],
    )
    drafter = reconcile(operator, cluster)["status"]["drafter"]
    assert (drafter["round"], drafter["replayPhase"]) == (2, "Pending")
    assert drafter["head"] == "pvc://cache/drafter-rounds/chat/1/head"
    assert not {"decision", "decidedAt", "acceptanceLength", "trainPhase"} & set(drafter)
    reconcile(operator, cluster, times=2)  # the server is ready: round 1's Job goes, round 2's comes
    command = cluster.store.get("Job", "ns", "chat-replay")["spec"]["template"]["spec"]["containers"][0]["command"]
    assert " ".join(command).endswith("--round 2 --keep-rounds 3 --served-round 1")


def test_a_promoted_head_the_plan_refuses_leaves_the_specs_own_draft_serving():
    cluster = Cluster()
    body = learning_deployment()
    body["status"] = {
        "drafter": {"head": "pvc://Not A Claim/head", "trainedFor": drafter_jobs.trained_for(body["spec"])}
    }
    cluster.add(body)
    operator = Operator(cluster)
    for _ in range(8):
        operator.resync()
        cluster.run_controllers()
    sd = cluster.store.get("SpeculativeDeployment", "ns", "chat")
    assert sd["status"]["phase"] == "Ready", sd["status"]
    assert sd["status"]["drafter"]["head"] == "pvc://Not A Claim/head"  # kept: what the loop recorded
    assert drafter_jobs.learned_speculation(sd) is not None  # so the head was tried, and refused
    runtime = json.loads(cluster.store.get("ConfigMap", "ns", "chat-runtime")["data"]["runtime.json"])
    assert runtime["speculation"]["speculativeConfig"]["speculative_model"] == drafter_jobs.running_draft(
        make_plan(learning_spec(), name="chat")
    )


def test_with_the_canary_on_a_promoted_head_runs_as_the_canary_arm():
    cluster = Cluster()
    body = learning_deployment()
    body["spec"]["rollout"] = {"canary": {"enabled": True}}
    cluster.add(body)
    operator = Operator(cluster)
    for _ in range(8):
        operator.resync()
        cluster.run_controllers()
    sd = cluster.store.get("SpeculativeDeployment", "ns", "chat")
    assert (
        sd["status"]["phase"] == "Ready"
        and sd["status"]["canary"]["current"]["speculation"] == body["spec"]["speculation"]
    )
    spec_draft = json.loads(cluster.store.get("ConfigMap", "ns", "chat-runtime")["data"]["runtime.json"])
    head = "pvc://cache/drafter-rounds/chat/1/head"
    cluster.kube.patch(
        "SpeculativeDeployment",
        "ns",
        "chat",
        {"status": {"drafter": {"head": head, "trainedFor": drafter_jobs.trained_for(body["spec"])}}},
        subresource="status",
    )
    sd = reconcile(operator, cluster, 2)
    canary = json.loads(cluster.store.get("ConfigMap", "ns", "chat-canary-runtime")["data"]["runtime.json"])
    assert canary["speculation"]["speculativeConfig"]["speculative_model"] == "/models/cache/drafter-rounds/chat/1/head"
    main = json.loads(cluster.store.get("ConfigMap", "ns", "chat-runtime")["data"]["runtime.json"])
    assert main == spec_draft  # the runtime serves on with the current draft while the canary's test runs
    assert sd["status"]["canary"]["state"] == "InProgress"
