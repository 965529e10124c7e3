"""The local cluster's pod runner serves a multi-node deployment's leader: the leader's launch reads its group from
the variables LeaderWorkerSet's pod webhook puts in the pod spec, not from the pod runner's own environment
(specdec_dev.podrunner.container_env). The workers (component runtime-worker) are not the runner's: kwok runs them."""

from __future__ import annotations

import copy

import pytest

from specdec.api.runtime_config import RUNTIME_CONFIG_KEY, RuntimeConfig
from specdec.render import render_objects
from specdec.runtime import config as cfg
from specdec.runtime import launch
from specdec_dev import podrunner
from tests.unit.helpers import SETTINGS, deployment, load_example

EXAMPLE = "deepseek-v3-mtp-2x8-h100"


def leader_pod(env: list[dict]) -> tuple[dict, RuntimeConfig]:
    """The example's leader as LeaderWorkerSet makes it from the leader template (the template's pod with the
    group's variables added to its container), and the runtime configuration its ConfigMap holds."""
    objects = render_objects(deployment(load_example(EXAMPLE)["spec"]), SETTINGS)
    lws = next(o for o in objects if o["kind"] == "LeaderWorkerSet")
    template = copy.deepcopy(lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"])
    template["spec"]["containers"][0].setdefault("env", []).extend(env)
    config_map = next(o for o in objects if o["kind"] == "ConfigMap" and RUNTIME_CONFIG_KEY in o.get("data", {}))
    pod = {"metadata": {"name": "sd-0", **template["metadata"]}, "spec": template["spec"]}
    return pod, cfg.parse(config_map["data"][RUNTIME_CONFIG_KEY])


LWS_ENV = [
    {"name": "LWS_LEADER_ADDRESS", "value": "sd-0.sd.ns"},
    {"name": "LWS_GROUP_SIZE", "value": "2"},
    {"name": "LWS_WORKER_INDEX", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}},
]


def test_the_leaders_launch_reads_its_group_from_the_pod_spec(tmp_path):
    pod, config = leader_pod(LWS_ENV)
    env = podrunner.container_env(pod)
    assert env["LWS_LEADER_ADDRESS"] == "sd-0.sd.ns" and env["LWS_GROUP_SIZE"] == "2"
    assert "LWS_WORKER_INDEX" not in env  # a fieldRef has no value in the spec
    plan = launch.plan_launch(config, str(tmp_path), read_engines=False, group_env=env)
    assert plan.argv[0] == "mpirun"
    assert plan.files[f"{tmp_path}/hostfile"] == "sd-0.sd.ns slots=8\nsd-0-1.sd.ns slots=8\n"


def test_a_leader_without_its_groups_variables_is_not_launched(tmp_path):
    pod, config = leader_pod([])
    with pytest.raises(cfg.ConfigError, match="LWS_LEADER_ADDRESS"):
        launch.plan_launch(config, str(tmp_path), read_engines=False, group_env=podrunner.container_env(pod))


def test_only_the_leaders_are_the_runners():
    assert "runtime-worker" not in podrunner.POD_SELECTOR and "runtime" in podrunner.POD_SELECTOR
