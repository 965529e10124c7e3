"""The fault proxy itself: pure request classification, then requests through it to the real API server."""

from __future__ import annotations

import json
import random
import time

import pytest
import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from tests.faults.proxy import KINDS, REQUEST_FAULTS, FaultPlan, describe
from tests.kube_helpers import wait_for

# -- no cluster needed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,path,query,verb,resource,namespace,name,sub",
    [
        ("GET", "/api/v1/namespaces/a/pods", {}, "list", "pods", "a", None, None),
        ("GET", "/api/v1/namespaces/a/pods", {"watch": ["true"]}, "watch", "pods", "a", None, None),
        ("GET", "/api/v1/namespaces/a/pods/p", {}, "get", "pods", "a", "p", None),
        ("GET", "/api/v1/namespaces/a", {}, "get", "namespaces", None, "a", None),
        (
            "POST",
            "/apis/specdec.io/v1alpha1/namespaces/a/speculativedeployments",
            {},
            "create",
            "speculativedeployments",
            "a",
            None,
            None,
        ),
        (
            "PATCH",
            "/apis/specdec.io/v1alpha1/namespaces/a/enginebuilds/e/status",
            {},
            "patch",
            "enginebuilds",
            "a",
            "e",
            "status",
        ),
        ("DELETE", "/apis/batch/v1/namespaces/a/jobs", {}, "deletecollection", "jobs", "a", None, None),
        ("GET", "/apis/specdec.io/v1alpha1", {}, "list", None, None, None, None),
    ],
)
def test_describe_resolves_request_attributes(method, path, query, verb, resource, namespace, name, sub):
    info = describe(method, path, query)
    assert (info.verb, info.resource, info.namespace, info.name, info.subresource) == (
        verb,
        resource,
        namespace,
        name,
        sub,
    )


def test_fault_draws_are_seeded_and_respect_rate_kinds_and_predicate():
    watch = describe("GET", "/api/v1/namespaces/a/pods", {"watch": ["true"]})
    get = describe("GET", "/api/v1/namespaces/a/pods/p", {})
    plan = FaultPlan(0.3)

    def sequence(seed):
        rng = random.Random(seed)
        return [plan.draw(info, rng) for info in [watch, get] * 100]

    assert sequence(7) == sequence(7) != sequence(8)
    rng = random.Random(1)
    gets = [plan.draw(get, rng) for _ in range(4000)]
    assert 0.25 < sum(1 for g in gets if g) / len(gets) < 0.35
    assert {g for g in gets if g} == set(REQUEST_FAULTS)  # no watch fault on a plain get
    assert {plan.draw(watch, rng) for _ in range(4000)} - {None} == set(KINDS)
    only_creates = FaultPlan(1.0, only=lambda i: i.verb == "create")
    assert only_creates.draw(get, rng) is None
    assert only_creates.draw(describe("POST", "/api/v1/namespaces/a/pods", {}), rng) in REQUEST_FAULTS
    assert FaultPlan().draw(watch, rng) is None
    watch_only = FaultPlan(0.1, watch_rate=1.0, watch_kinds=("watch_gone",))
    assert {watch_only.draw(watch, rng) for _ in range(50)} == {"watch_gone"}
    assert {watch_only.draw(get, rng) for _ in range(500)} - {None} == set(REQUEST_FAULTS)


# -- through the proxy to the real API server --------------------------------------------------------


def core(fault_proxy) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(fault_proxy.kubeconfig), client_configuration=configuration)
    configuration.retries = False  # see each answer, not urllib3's retries of it
    return client.CoreV1Api(client.ApiClient(configuration))


LABEL = "specdec.io/proxy-test"  # the namespace has a ConfigMap of its own (kube-root-ca.crt): watch ours only


def configmap(name: str) -> dict:
    return {"metadata": {"name": name, "labels": {LABEL: "true"}}, "data": {"k": "v"}}


@pytest.mark.cluster
def test_pass_through_reads_and_writes(fault_proxy, kube, namespace):
    api = core(fault_proxy)
    api.create_namespaced_config_map(namespace, configmap("through"))
    assert kube.core.read_namespaced_config_map("through", namespace).data == {"k": "v"}  # really written
    assert [
        c.metadata.name for c in api.list_namespaced_config_map(namespace).items if c.metadata.name == "through"
    ] == ["through"]
    assert fault_proxy.injected() == {}
    assert fault_proxy.forwarded["create"] == 1 and fault_proxy.forwarded["list"] == 1


@pytest.mark.cluster
@pytest.mark.parametrize(
    "kind,status,reason",
    [
        ("throttle", 429, "TooManyRequests"),
        ("error500", 500, "InternalError"),
        ("unavailable503", 503, "ServiceUnavailable"),
    ],
)
def test_error_answers_carry_a_status_body(fault_proxy, namespace, kind, status, reason):
    fault_proxy.set_faults(FaultPlan(1.0, kinds=(kind,)))
    with pytest.raises(ApiException) as error:
        core(fault_proxy).create_namespaced_config_map(namespace, configmap("refused"))
    assert error.value.status == status
    body = json.loads(error.value.body)
    assert body["kind"] == "Status" and body["code"] == status and body["reason"] == reason
    if kind == "throttle":
        assert error.value.headers["Retry-After"] == "1"
    fault_proxy.set_faults(FaultPlan())  # the faulted create never reached the API server
    assert [
        c for c in core(fault_proxy).list_namespaced_config_map(namespace).items if c.metadata.name == "refused"
    ] == []
    assert fault_proxy.injected() == {kind: 1}


@pytest.mark.cluster
def test_reset_drops_the_connection_without_an_answer(fault_proxy, namespace):
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("reset",)))
    with pytest.raises(urllib3.exceptions.HTTPError) as error:
        core(fault_proxy).list_namespaced_config_map(namespace, _request_timeout=10)
    assert "reset" in str(error.value).lower() or "aborted" in str(error.value).lower()
    assert fault_proxy.injected() == {"reset": 1}


def watch_lines(api: client.CoreV1Api, namespace: str, timeout: float = 20):
    """Raw watch stream of ConfigMaps: one decoded event per line."""
    stream = api.list_namespaced_config_map(
        namespace, watch=True, label_selector=LABEL, _preload_content=False, _request_timeout=timeout
    )
    for line in stream:
        for part in line.splitlines():
            if part.strip():
                yield json.loads(part)


@pytest.mark.cluster
def test_watch_streams_events_as_they_happen(fault_proxy, kube, namespace):
    events = watch_lines(core(fault_proxy), namespace)
    kube.core.create_namespaced_config_map(namespace, configmap("seen"))  # directly, not through the proxy
    names = []
    for event in events:
        names.append(event["object"]["metadata"]["name"])
        if "seen" in names:
            break
    assert "seen" in names  # arrived while the stream stayed open: not buffered until its end


@pytest.mark.cluster
def test_injected_410_arrives_in_stream_then_the_stream_ends(fault_proxy, kube, namespace):
    kube.core.create_namespaced_config_map(namespace, configmap("before"))
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("watch_expired",), stream_seconds=(1.0, 1.0)))
    start = time.monotonic()
    events = list(watch_lines(core(fault_proxy), namespace))
    assert time.monotonic() - start < 10
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "before"
    assert events[-1]["type"] == "ERROR"
    assert events[-1]["object"]["code"] == 410 and events[-1]["object"]["reason"] == "Expired"


@pytest.mark.cluster
def test_watch_request_answered_with_410(fault_proxy, namespace):
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("watch_gone",)))
    with pytest.raises(ApiException) as error:
        next(watch_lines(core(fault_proxy), namespace))
    assert error.value.status == 410 and json.loads(error.value.body)["reason"] == "Expired"
    core(fault_proxy).list_namespaced_config_map(namespace)  # a list is no watch: untouched


@pytest.mark.cluster
def test_watch_close_and_abort_end_the_stream(fault_proxy, kube, namespace):
    kube.core.create_namespaced_config_map(namespace, configmap("one"))
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("watch_close",), stream_seconds=(0.5, 0.5)))
    assert [e["type"] for e in watch_lines(core(fault_proxy), namespace)] == ["ADDED"]  # clean end
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("watch_abort",), stream_seconds=(0.5, 0.5)))
    with pytest.raises(urllib3.exceptions.HTTPError):
        list(watch_lines(core(fault_proxy), namespace))


@pytest.mark.cluster
def test_outage_cuts_open_watches_and_refuses_everything_until_it_ends(fault_proxy, namespace):
    api = core(fault_proxy)
    events = watch_lines(api, namespace)
    api.create_namespaced_config_map(namespace, configmap("a"))
    assert next(events)["type"] == "ADDED"
    fault_proxy.outage(2.0)
    with pytest.raises(urllib3.exceptions.HTTPError):
        next(events)
    with pytest.raises(urllib3.exceptions.HTTPError):
        api.list_namespaced_config_map(namespace, _request_timeout=5)
    wait_for(lambda: not fault_proxy.down, "the outage to end", timeout=10)
    assert "a" in [c.metadata.name for c in api.list_namespaced_config_map(namespace).items]
    assert fault_proxy.injected()["outage"] >= 1


@pytest.mark.cluster
def test_faults_only_where_the_predicate_says(fault_proxy, namespace):
    fault_proxy.set_faults(FaultPlan(1.0, kinds=("unavailable503",), only=lambda i: i.verb == "create"))
    api = core(fault_proxy)
    api.list_namespaced_config_map(namespace)
    with pytest.raises(ApiException) as error:
        api.create_namespaced_config_map(namespace, configmap("x"))
    assert error.value.status == 503
    assert fault_proxy.injected() == {"unavailable503": 1}
