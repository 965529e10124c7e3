"""kube.Kube's request retries against a local HTTP server that answers from a script: what is
retried (429, 5xx, dropped connections), what is not (4xx, the same 500 twice), and the Event poster
surviving every failure."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from specdec.kube import client as kube_client
from specdec.kube import events as kube_events
from specdec.kube.cache import Store
from specdec.kube.client import Kube
from specdec.kube.errors import CONNECTION_FAILED, api_error_message, permanent
from specdec.kube.workqueue import DelayQueue


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next entry of `script`: (status, headers, body) or "reset"."""

    script: list = []
    seen: list = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append((self.command, self.path, self.rfile.read(length)))
        step = self.script.pop(0) if self.script else (200, {}, {})
        if step == "reset":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        status, headers, body = step
        data = json.dumps(body).encode()
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server(monkeypatch):
    monkeypatch.setattr(kube_client, "BACKOFF_BASE", 0.01)
    Scripted.script, Scripted.seen = [], []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{httpd.server_port}")
    configuration.retries = False  # urllib3's own retries would hide the resets from Kube
    yield Kube(client.ApiClient(configuration))
    httpd.shutdown()


def status(code: int, message: str, reason: str = "Failure") -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns"}}


def test_dropped_connections_and_5xx_are_retried(server: Kube):
    Scripted.script = ["reset", (503, {}, status(503, "unavailable")), "reset", (201, {}, CM)]
    obj, created = server.create(CM)
    assert created and obj["metadata"]["name"] == "x"
    assert [s[0] for s in Scripted.seen] == ["POST"] * 4


def test_retry_after_is_honoured(server: Kube):
    Scripted.script = [(429, {"Retry-After": "1"}, status(429, "slow down")), (200, {}, CM)]
    start = time.monotonic()
    assert server.get_live("ConfigMap", "ns", "x")["metadata"]["name"] == "x"
    assert time.monotonic() - start >= 1.0


def test_client_errors_are_permanent_and_not_retried(server: Kube):
    Scripted.script = [(422, {}, status(422, "spec.x: Invalid value", "Invalid"))]
    with pytest.raises(ApiException) as raised:
        server.apply(CM, None)
    assert permanent(raised.value) and len(Scripted.seen) == 1
    assert api_error_message(raised.value) == "HTTP 422 Invalid: spec.x: Invalid value"


def test_the_same_500_twice_is_permanent(server: Kube):
    Scripted.script = [(500, {}, status(500, ".spec.x: field not declared in schema"))] * 3
    with pytest.raises(ApiException) as raised:
        server.apply(CM, None)
    assert permanent(raised.value) and len(Scripted.seen) == 2


def test_an_unreachable_server_is_transient(server: Kube):
    Scripted.script = ["reset"] * kube_client.RETRIES
    with pytest.raises(ApiException) as raised:
        server.get_live("ConfigMap", "ns", "x")
    assert raised.value.status == CONNECTION_FAILED and not permanent(raised.value)
    assert "no answer from the API server" in api_error_message(raised.value)


def test_the_event_poster_survives_failures(server: Kube):
    Scripted.script = ["reset"] * kube_client.RETRIES + [(201, {}, {})]
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", "uid": "u"}}
    server.event(owner, "First", "lost: the server is down")
    server.event(owner, "Second", "posted")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(b"Second" in s[2] for s in Scripted.seen):
        time.sleep(0.05)
    assert any(b"Second" in s[2] for s in Scripted.seen) and server.events.alive


def test_an_event_says_when_it_happened_not_when_the_poster_got_to_it(server: Kube, monkeypatch):
    monkeypatch.setattr(kube_client, "BACKOFF_BASE", 0.5)  # the first Event's retry keeps the second waiting
    clock = ["2026-11-25T14:00:00Z"]
    monkeypatch.setattr(kube_events.conditions, "now", lambda: clock[0])
    Scripted.script = ["reset", (201, {}, {}), (201, {}, {})]
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", "uid": "u"}}
    server.event(owner, "First", "retried")
    server.event(owner, "Second", "waits for the first")
    clock[0] = "2026-11-25T14:01:00Z"  # before the poster's retry (0.25 s on)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any(b"Second" in s[2] for s in Scripted.seen):
        time.sleep(0.05)
    second = json.loads(next(s[2] for s in Scripted.seen if b"Second" in s[2]))
    assert second["firstTimestamp"] == second["lastTimestamp"] == "2026-11-25T14:00:00Z"


def test_delay_queue_runs_the_earliest_entry_per_key_and_survives_errors():
    queue = DelayQueue()
    ran: list[str] = []
    done = threading.Event()
    queue.after(0.3, "k", lambda: ran.append("late"))
    queue.after(0.05, "k", lambda: ran.append("early"))  # supersedes the later one
    queue.after(0.1, "boom", lambda: 1 / 0)
    queue.after(0.2, "other", lambda: (ran.append("other"), done.set()))
    assert done.wait(5)
    time.sleep(0.3)  # the superseded entry's due time passes without running it
    assert ran == ["early", "other"] and queue.alive


def test_a_resync_refreshes_the_cache_and_a_conflict_check_reads_through(server: Kube):
    Scripted.script = [(200, {}, {"items": [CM]}), (404, {}, status(404, "not found"))]
    server.refresh("ConfigMap", "ns", "app=x")
    assert server.store.get("ConfigMap", "ns", CM["metadata"]["name"]) is not None
    assert server.get_live("ConfigMap", "ns", "y") is None  # a name taken by someone else must be seen
    (_, listed, _), (_, read, _) = Scripted.seen
    assert "labelSelector=app%3Dx" in listed and "resourceVersion" not in read


def test_a_list_is_read_in_pages_and_slimmed(server):
    def pod(name: str) -> dict:
        return {"metadata": {"name": name, "namespace": "ns", "managedFields": [{"manager": "kubelet"}]}}

    Scripted.script = [
        (200, {}, {"metadata": {"continue": "next-1", "resourceVersion": "7"}, "items": [pod("a")]}),
        (200, {}, {"metadata": {"resourceVersion": "9"}, "items": [pod("b")]}),
    ]
    items, version = server._list("Pod", "ns", "app=x")
    assert [i["metadata"]["name"] for i in items] == ["a", "b"] and version == "9"
    assert all("managedFields" not in i["metadata"] and i["kind"] == "Pod" for i in items)
    first, second = (path for _, path, _ in Scripted.seen)
    assert "limit=500" in first and "resourceVersion" not in first and "continue" not in first
    assert "continue=next-1" in second and "resourceVersion" not in second and "labelSelector=app%3Dx" in second


def test_a_resync_keeps_the_cached_copy_of_what_did_not_change(server: Kube):
    def cm(name: str, version: str) -> dict:
        return {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": "ns",
                "resourceVersion": version,
                "labels": {"app": "x"},
                "managedFields": [{"manager": "kubectl"}],
            },
        }

    Scripted.script = [
        (200, {}, {"metadata": {"resourceVersion": "5"}, "items": [cm("same", "3"), cm("moved", "4")]}),
        (200, {}, {"metadata": {"resourceVersion": "9"}, "items": [cm("same", "3"), cm("moved", "8")]}),
    ]
    server.refresh("ConfigMap", "ns", "app=x")
    same, moved = (server.store.get("ConfigMap", "ns", name) for name in ("same", "moved"))
    server.refresh("ConfigMap", "ns", "app=x")
    assert server.store.get("ConfigMap", "ns", "same") is same  # not a second copy of an unchanged object
    now = server.store.get("ConfigMap", "ns", "moved")
    assert now is not moved and now["metadata"]["resourceVersion"] == "8" and "managedFields" not in now["metadata"]


def test_a_first_write_is_a_create_and_a_name_taken_by_another_is_not_cached(server: Kube):
    server.store = Store(["ConfigMap"], selectors={"ConfigMap": "managed=us"})
    conflict = (409, {}, status(409, 'configmaps "x" already exists', "AlreadyExists"))
    foreign = {**CM, "metadata": {**CM["metadata"], "labels": {"app": "someone-else"}}}
    Scripted.script = [conflict, (200, {}, foreign)]
    obj, written = server.apply(CM, None)
    assert not written and obj == foreign
    assert server.store.get("ConfigMap", "ns", "x") is None  # outside the watch: it would stay once gone
    (post, path, _), (get, _, _) = Scripted.seen
    assert post == "POST" and "fieldManager=specdec-operator" in path and get == "GET"
    ours = {**CM, "metadata": {**CM["metadata"], "labels": {"managed": "us"}}}
    Scripted.script = [conflict, (200, {}, ours)]  # ours, created by another worker: cached, asked no more
    assert server.apply(CM, None) == (ours, False) and server.store.get("ConfigMap", "ns", "x") == ours


def managed(manager: str, operation: str, fields: dict, **more) -> dict:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": "v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        **more,
    }


def test_a_change_first_makes_the_fields_our_create_set_applied_fields(server: Kube):
    """A create records our fields under operation Update; an apply is another manager, so a field it leaves
    out would stay. Before the first apply they become our applied fields (client-go's csaupgrade)."""
    ours_created = managed("specdec-operator", "Update", {"f:data": {"f:a": {}, "f:b": {}}})
    ours_applied = managed("specdec-operator", "Apply", {"f:data": {"f:c": {}}, "f:metadata": {"f:labels": {}}})
    theirs = managed("kubectl-annotate", "Update", {"f:metadata": {"f:annotations": {}}})
    entries = [ours_created, theirs, ours_applied]
    live = {
        **CM,
        "data": {"a": "1", "b": "2", "c": "3"},
        "metadata": {**CM["metadata"], "resourceVersion": "7", "managedFields": entries},
    }
    desired = {**CM, "data": {"a": "1"}}
    Scripted.script = [(200, {}, live), (200, {}, live), (200, {}, desired)]
    assert server.apply(desired, {**CM, "data": {"a": "0", "b": "2"}}) == (desired, True)
    (get, _, _), (patch, _, body), (apply, query, applied) = Scripted.seen
    assert (get, patch, apply) == ("GET", "PATCH", "PATCH")
    test, replace = json.loads(body)
    assert test == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}  # else refused: read again
    assert replace["path"] == "/metadata/managedFields"
    assert replace["value"] == [
        theirs,
        managed(
            "specdec-operator", "Apply", {"f:data": {"f:a": {}, "f:b": {}, "f:c": {}}, "f:metadata": {"f:labels": {}}}
        ),
    ]
    assert "force=true" in query and json.loads(applied) == desired

    Scripted.seen.clear()  # written meanwhile (the test op fails: 422): read again
    changed = {**live, "metadata": {**live["metadata"], "resourceVersion": "8"}}
    Scripted.script = [
        (200, {}, live),
        (422, {}, status(422, "rejected", "Invalid")),
        (200, {}, changed),
        (200, {}, changed),
        (200, {}, desired),
    ]
    assert server.apply(desired, {**CM, "data": {"a": "0"}}) == (desired, True)
    assert [s[0] for s in Scripted.seen] == ["GET", "PATCH", "GET", "PATCH", "PATCH"]
    assert json.loads(Scripted.seen[3][2])[0]["value"] == "8"

    Scripted.seen.clear()  # once adopted, a change is the apply alone (after the read that shows it)
    live["metadata"]["managedFields"] = replace["value"]
    Scripted.script = [(200, {}, live), (200, {}, desired)]
    server.apply(desired, {**CM, "data": {"a": "2"}})
    assert [s[0] for s in Scripted.seen] == ["GET", "PATCH"]
