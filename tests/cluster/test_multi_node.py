"""A target spanning two nodes on the local cluster: DeepSeek-V3 MTP on 2 simulated nodes of 8 H100s per
LeaderWorkerSet group, through a real LWS controller and its pod webhook (as `specdec dev up` runs them): the group
becomes Ready, and a worker deleted recreates the group, the status naming the missing worker meanwhile; its SSH
key Secret is refused when someone else made it and created again when deleted; with two groups serving, a spec
change rolls them one at a time while clients of the Service see no failed request. (Without LeaderWorkerSet served
the deployment says what to install: tests/unit/test_multinode.py, on the in-memory API server, since the local
cluster always serves it.)"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from specdec.api.models import GROUP, VERSION
from specdec.builders.common import LABEL_INSTANCE
from specdec.builders.multinode import ANNOTATION_SSH_SECRET_UID
from specdec.status.groups import GROUP_INDEX_LABEL, WORKER_INDEX_LABEL
from specdec.versions import LWS
from specdec_dev import nodes, simulation_profile, toolchain
from specdec_dev.pod_runner_thread import in_thread as pod_runner
from tests.cluster.test_canary import served_without_failures
from tests.cluster.test_operator import SD, example
from tests.kube_helpers import FAST_PROFILE, Kube, wait_for
from tests.service_clients import ServiceClients

pytestmark = pytest.mark.cluster

EXAMPLE = "deepseek-v3-mtp-2x8-h100.yaml"


def lws_served(kube: Kube) -> bool:
    groups = client.ApisApi(kube.custom.api_client).get_api_versions().groups
    return any(g.name == LWS.group and any(v.version == LWS.version for v in g.versions) for g in groups)


def status_written(
    kube: Kube, sd: SD, since: str, kind: str, matches: Callable[[dict], bool], timeout: int = 120
) -> dict | None:
    """The first `kind` condition matching `matches` written to `sd` after resourceVersion `since`, from a watch:
    LeaderWorkerSet recreates a group on kwok's nodes in under a second, a window that polling can miss."""
    stream = watch.Watch().stream(
        kube.custom.list_namespaced_custom_object,
        GROUP,
        VERSION,
        sd.namespace,
        "speculativedeployments",
        field_selector=f"metadata.name={sd.name}",
        resource_version=since,
        timeout_seconds=timeout,
    )
    for event in stream:
        conditions = (event["object"].get("status") or {}).get("conditions") or []
        found = next((c for c in conditions if c["type"] == kind and matches(c)), None)
        if found:
            return found
    return None


def group_pods(kube: Kube, namespace: str, name: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={name}").items


def needs_lws(kube: Kube) -> None:
    if not lws_served(kube):
        pytest.fail("this cluster serves no LeaderWorkerSet (specdec dev up runs its controller)")


def test_a_group_goes_ready_and_is_recreated_when_a_worker_goes(kube: Kube, namespace: str, operator):
    needs_lws(kube)
    sd = SD(kube, namespace, example(EXAMPLE))
    assert sd.wait_ready(timeout=300)["status"]["readyReplicas"] == 1
    pods = {p.metadata.name: p for p in group_pods(kube, namespace, sd.name)}
    assert set(pods) == {f"{sd.name}-0", f"{sd.name}-0-1"}, sorted(pods)
    worker = pods[f"{sd.name}-0-1"]
    # The runtime's Service (the leaders, at the endpoint) and the group's headless one (its pods' DNS names) apart.
    services = {s.metadata.name: s for s in kube.core.list_namespaced_service(namespace).items}
    assert services[sd.name].spec.cluster_ip != "None" and services[sd.name].metadata.labels[LABEL_INSTANCE] == sd.name
    assert services[f"{sd.name}-0"].spec.cluster_ip == "None" and worker.spec.subdomain == f"{sd.name}-0"
    since = sd.get()["metadata"]["resourceVersion"]
    kube.core.delete_namespaced_pod(worker.metadata.name, namespace)
    missing = status_written(kube, sd, since, "RuntimeAvailable", lambda c: c["status"] == "False")
    assert missing and "group 0" in missing["message"], missing
    assert missing["reason"] in ("GroupsNotReady", "RollingOut"), missing
    sd.wait_ready(timeout=300)
    recreated = {p.metadata.name: p.metadata.uid for p in group_pods(kube, namespace, sd.name)}
    assert recreated.get(f"{sd.name}-0-1") not in (None, worker.metadata.uid)


def secret_uid(kube: Kube, namespace: str, name: str) -> str | None:
    try:
        return kube.core.read_namespaced_secret(name, namespace).metadata.uid
    except ApiException as error:
        if error.status == 404:
            return None
        raise


def test_the_ssh_key_secret_is_the_deployments_own_refused_when_anothers_and_created_again_when_deleted(
    kube: Kube, namespace: str, operator
):
    """The operator may only create Secrets. A Secret of the key Secret's name made by someone else is refused in
    status and no group mounts it; once it is gone the operator creates its own, and creates it again when it is
    deleted, the LeaderWorkerSet recording which one it made."""
    needs_lws(kube)
    body = example(EXAMPLE)
    name = f"{body['metadata']['name']}-ssh"
    foreign = kube.core.create_namespaced_secret(namespace, {"metadata": {"name": name}, "stringData": {"k": "v"}})
    sd = SD(kube, namespace, body)
    refused = wait_for(
        lambda: (c := sd.condition("Ready")).get("reason") == "SshKeySecretNotOwned" and c, "the Secret refused"
    )
    assert refused["status"] == "False" and f"Secret {name} already exists" in refused["message"], refused
    assert not kube.custom.list_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural)["items"]
    untouched = kube.core.read_namespaced_secret(name, namespace)
    assert untouched.metadata.resource_version == foreign.metadata.resource_version
    assert not untouched.metadata.owner_references

    kube.core.delete_namespaced_secret(name, namespace)
    sd.wait_ready(timeout=300)

    def recorded() -> str:
        lws = kube.custom.get_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural, sd.name)
        return lws["metadata"]["annotations"][ANNOTATION_SSH_SECRET_UID]

    own = kube.core.read_namespaced_secret(name, namespace)
    assert own.metadata.owner_references[0].uid == sd.get()["metadata"]["uid"] and recorded() == own.metadata.uid
    kube.core.delete_namespaced_secret(name, namespace)
    again = wait_for(lambda: secret_uid(kube, namespace, name), "the Secret created again", timeout=60)
    assert again != own.metadata.uid
    wait_for(lambda: recorded() == again, "the new Secret recorded on the LeaderWorkerSet", timeout=60)
    assert sd.condition("Ready")["status"] == "True"


# LeaderWorkerSet's label with the revision of the template a group's pods were made from (api/leaderworkerset/v1).
REVISION_LABEL = "leaderworkerset.sigs.k8s.io/template-revision-hash"
GROUPS = 2
NODES_PER_GROUP = 2
# The rolling update surges one group (maxSurge 1) on nodes of its own: a group's pods never share a node.
ROLLOUT_GPU_NODES = (GROUPS + 1) * NODES_PER_GROUP


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@pytest.fixture
def gpu_nodes_for_a_rollout(kube: Kube, kubeconfig: Path) -> Iterator[None]:
    """As many simulated 8-GPU nodes as two groups and the surged one take (`specdec dev up` makes enough for one
    group and its surge), applied as `specdec dev up` applies them (the typed client wants a kubelet's nodeInfo);
    the nodes it adds go when the test ends."""
    present = {n.metadata.name for n in kube.core.list_node(label_selector=f"{nodes.GPU_RESOURCE}.present=true").items}
    added: list[dict] = []
    index = 0
    while len(present) + len(added) < ROLLOUT_GPU_NODES:
        node = nodes.gpu_node(index)
        if node["metadata"]["name"] not in present:
            added.append(node)
        index += 1
    names = [n["metadata"]["name"] for n in added]
    if added:
        kubectl = [str(toolchain.bin_dir() / "kubectl"), "--kubeconfig", str(kubeconfig)]
        subprocess.run(
            [*kubectl, "apply", "--server-side", "-f", "-"],
            input="\n---\n".join(yaml.safe_dump(n) for n in added),
            text=True,
            check=True,
            capture_output=True,
        )
    wait_for(
        lambda: all(
            any(c.type == "Ready" and c.status == "True" for c in kube.core.read_node(name).status.conditions or [])
            for name in names
        ),
        f"simulated GPU nodes {names} Ready",
    )
    yield
    for name in names:
        try:
            kube.core.delete_node(name)
        except ApiException as error:
            if error.status != 404:
                raise


@dataclasses.dataclass(frozen=True)
class Sample:
    """The groups after one change of one of their pods."""

    at: float
    event: str  # the change: "<watch event> <pod> <ready|not ready|deleting>" (a leader or a worker)
    serving: dict[str, int]  # leaders Ready and not terminating, by template revision
    groups: int  # leaders not terminating: the groups that exist


class GroupPods:
    """The deployment's group pods from a watch, sampled after every change: the leaders that serve, and when a
    group's leader was gone and its workers began to go."""

    def __init__(self, kube: Kube, namespace: str, name: str):
        self.kube, self.namespace = kube, namespace
        self.selector = f"{LABEL_INSTANCE}={name}"
        self.pods: dict[str, client.V1Pod] = {}  # by uid: a rolled group's pods take their predecessors' names
        self.samples: list[Sample] = []
        self.leaders_gone: dict[tuple[str, str], float] = {}  # (group index, revision) -> when its leader was gone
        self.workers_going: dict[tuple[str, str], float] = {}  # (group index, revision) -> when a worker began to go
        self._since = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> GroupPods:
        listed = self.kube.core.list_namespaced_pod(self.namespace, label_selector=self.selector)
        self.pods = {p.metadata.uid: p for p in listed.items}
        self._since = listed.metadata.resource_version
        self._sample("listed")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _sample(self, event: str) -> None:
        serving: dict[str, int] = {}
        leaders = [p for p in self.pods.values() if p.metadata.labels.get(WORKER_INDEX_LABEL) == "0"]
        for pod in leaders:
            if is_ready(pod) and not pod.metadata.deletion_timestamp:
                revision = pod.metadata.labels.get(REVISION_LABEL, "")
                serving[revision] = serving.get(revision, 0) + 1
        groups = sum(1 for p in leaders if not p.metadata.deletion_timestamp)
        self.samples.append(Sample(time.monotonic(), event, serving, groups))

    def _watch(self) -> None:
        while not self._stop.is_set():
            stream = watch.Watch().stream(
                self.kube.core.list_namespaced_pod,
                self.namespace,
                label_selector=self.selector,
                resource_version=self._since,
                timeout_seconds=2,
            )
            for event in stream:
                pod, now = event["object"], time.monotonic()
                self._since = pod.metadata.resource_version
                labels = pod.metadata.labels
                group = (labels.get(GROUP_INDEX_LABEL, ""), labels.get(REVISION_LABEL, ""))
                if event["type"] == "DELETED":
                    self.pods.pop(pod.metadata.uid, None)
                    if labels.get(WORKER_INDEX_LABEL) == "0":
                        self.leaders_gone.setdefault(group, now)
                else:
                    self.pods[pod.metadata.uid] = pod
                if pod.metadata.deletion_timestamp and labels.get(WORKER_INDEX_LABEL) != "0":
                    self.workers_going.setdefault(group, now)
                state = "deleting" if pod.metadata.deletion_timestamp else "ready" if is_ready(pod) else "not ready"
                self._sample(f"{event['type']} {pod.metadata.name} {state}")

    def steps(self, old: str) -> list[str]:
        """The rollout as the serving leaders changed: "+new" a leader of a new revision began serving, "-old" one
        of the old revision stopped."""
        steps = []
        for before, after in zip(self.samples, self.samples[1:], strict=False):
            new_before = sum(before.serving.values()) - before.serving.get(old, 0)
            new_after = sum(after.serving.values()) - after.serving.get(old, 0)
            steps += ["+new"] * max(0, new_after - new_before)
            steps += ["-old"] * max(0, before.serving.get(old, 0) - after.serving.get(old, 0))
        return steps

    def timeline(self, old: str) -> str:
        start = self.samples[0].at
        return "\n".join(
            f"{s.at - start:6.1f}s {s.event:45} serving: old {s.serving.get(old, 0)}, new "
            f"{sum(s.serving.values()) - s.serving.get(old, 0)}; groups {s.groups}"
            for s in self.samples
        )


def test_a_spec_change_rolls_the_groups_one_at_a_time_with_no_failed_request(
    kube: Kube, kubeconfig: Path, namespace: str, operator, gpu_nodes_for_a_rollout, tmp_path: Path
):
    needs_lws(kube)
    body = example(EXAMPLE)
    body["spec"]["runtime"]["replicas"] = GROUPS
    sd = SD(kube, namespace, body)
    simulation_profile.update(tmp_path / simulation_profile.FILE_NAME, f"{namespace}/{sd.name}", FAST_PROFILE)
    with pod_runner(kubeconfig, tmp_path, namespace):
        assert sd.wait_ready(timeout=300)["status"]["readyReplicas"] == GROUPS
        lws = kube.custom.get_namespaced_custom_object(LWS.group, LWS.version, namespace, LWS.plural, sd.name)
        rolling = lws["spec"]["rolloutStrategy"]["rollingUpdateConfiguration"]
        assert (rolling["maxSurge"], rolling["maxUnavailable"]) == (1, 0), rolling
        with (
            ServiceClients(kube, namespace, sd.name, clients=2) as clients,
            GroupPods(kube, namespace, sd.name) as seen,
        ):
            (old,) = seen.samples[0].serving
            wait_for(lambda: clients.ok > 10, "requests answered through the Service before the change")
            sd.patch({"spec": {"speculation": {"mtp": {"maxDraftLen": 2}}}})  # a new runtime: every pod rolls
            wait_for(
                lambda: (s := seen.samples[-1]).serving.get(old, 0) == 0 and s.groups == GROUPS,
                "every group rolled and the surged one gone",
                timeout=300,
            )
            sd.wait_ready(timeout=120)
            time.sleep(2)  # requests to the rolled groups
        timeline = seen.timeline(old)
        print(timeline)
        served_without_failures(clients)
    assert min(sum(s.serving.values()) for s in seen.samples) >= GROUPS, timeline  # never fewer groups serve
    assert max(s.groups for s in seen.samples) == GROUPS + 1, timeline  # one group surged, never more
    # Group by group: a new group serves before each old one goes.
    assert seen.steps(old)[: 2 * GROUPS] == ["+new", "-old"] * GROUPS, (seen.steps(old), timeline)
    # A rolled group's workers (its ranks) outlive its leader's drain: they go once the leader is gone.
    assert seen.workers_going, timeline
    for group, going in seen.workers_going.items():
        assert group in seen.leaders_gone and seen.leaders_gone[group] <= going, (group, timeline)
    pods = [p for p in group_pods(kube, namespace, sd.name) if not p.metadata.deletion_timestamp]
    assert len(pods) == GROUPS * NODES_PER_GROUP and old not in {p.metadata.labels[REVISION_LABEL] for p in pods}
    status = sd.get()["status"]
    assert status["readyReplicas"] == GROUPS and status["replicas"] == GROUPS
    runtime = json.loads(kube.core.read_namespaced_config_map(f"{sd.name}-runtime", namespace).data["runtime.json"])
    assert runtime["speculation"]["speculativeConfig"]["max_draft_len"] == 2
