"""Leader election (specdec.kube.leader) against a real API server: candidates in this process, and one in a
child process that is killed the way a dead node's pod is. Short timings so that failover is quick."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specdec.kube.leader import Leadership
from tests.kube_helpers import Kube, wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
LEASE = "specdec-operator"
TIMING = {"lease_seconds": 4, "renew_deadline": 3, "retry_period": 1}
RETRY = TIMING["retry_period"]


class Candidate:
    """A Leadership on its own ApiClient, recording when its terms start and end."""

    def __init__(self, kubeconfig: Path, namespace: str, identity: str):
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.started: list[float] = []
        self.stopped: list[float] = []
        self.leadership = Leadership(
            self.api,
            namespace,
            LEASE,
            identity,
            **TIMING,
            on_started=lambda: self.started.append(time.monotonic()),
            on_stopped=lambda: self.stopped.append(time.monotonic()),
        )

    @property
    def identity(self) -> str:
        return self.leadership.identity

    def is_leader(self) -> bool:
        return self.leadership.is_leader()


@pytest.fixture
def candidates(kubeconfig: Path, namespace: str):
    made: list[Candidate] = []

    def make(identity: str, start: bool = True) -> Candidate:
        candidate = Candidate(kubeconfig, namespace, identity)
        made.append(candidate)
        if start:
            candidate.leadership.start()
        return candidate

    yield make
    for candidate in made:
        candidate.leadership.stop()
        candidate.api.close()


def holder(kube: Kube, namespace: str) -> str | None:
    return client.CoordinationV1Api(kube.api).read_namespaced_lease(LEASE, namespace).spec.holder_identity


def wait_for_renewal(kube: Kube, namespace: str) -> None:
    """Until the holder has renewed the Lease once more: by then a standby started before has tried it."""
    coordination = client.CoordinationV1Api(kube.api)
    before = coordination.read_namespaced_lease(LEASE, namespace).metadata.resource_version
    wait_for(
        lambda: coordination.read_namespaced_lease(LEASE, namespace).metadata.resource_version != before,
        "a renewal of the Lease",
        timeout=3 * RETRY + 2,
        interval=0.05,
    )


def leader_of(*candidates: Candidate) -> Candidate | None:
    leading = [c for c in candidates if c.is_leader()]
    assert len(leading) <= 1, f"two leaders: {[c.identity for c in leading]}"
    return leading[0] if leading else None


def watch_for_two_leaders(candidates: list[Candidate], stop: threading.Event, seen: list[str]) -> None:
    while not stop.wait(0.02):
        leading = [c.identity for c in candidates if c.is_leader()]
        if len(leading) > 1:
            seen.append(", ".join(leading))


def test_exactly_one_of_two_candidates_leads(kube: Kube, namespace: str, candidates):
    a, b = candidates("a"), candidates("b")
    leader = wait_for(lambda: leader_of(a, b), "a leader", timeout=10, interval=0.05)
    standby = b if leader is a else a
    assert holder(kube, namespace) == leader.identity
    # Through more than a lease duration of renewals, the leader stays leader and the standby idle.
    deadline = time.monotonic() + TIMING["lease_seconds"] + 2 * RETRY
    while time.monotonic() < deadline:
        assert leader_of(a, b) is leader
        time.sleep(0.05)
    assert (len(leader.started), len(leader.stopped)) == (1, 0)
    assert (standby.started, standby.stopped) == ([], [])
    assert holder(kube, namespace) == leader.identity
    # Stopping the standby leaves the Lease alone.
    standby.leadership.stop()
    assert holder(kube, namespace) == leader.identity and leader.is_leader()
    wait_for(lambda: not standby.leadership.alive, "the standby's election thread to end", timeout=3 * RETRY)
    assert leader.leadership.alive


def test_stop_releases_the_lease_and_the_standby_takes_over_within_a_retry_period(
    kube: Kube, namespace: str, candidates
):
    a = candidates("a")
    wait_for(a.is_leader, "a to lead", timeout=10, interval=0.05)
    b = candidates("b")
    wait_for_renewal(kube, namespace)  # b is a standby that has seen the Lease held
    assert not b.is_leader()
    stopped = time.monotonic()
    a.leadership.stop()
    assert not a.is_leader() and len(a.stopped) == 1  # on_stopped ran before stop() returned
    wait_for(b.is_leader, "b to lead", timeout=TIMING["lease_seconds"], interval=0.02)
    handover = time.monotonic() - stopped
    print(f"handover after stop(): {handover:.2f}s")
    # A release, not an expiry: the standby takes the Lease at its next attempt, well before lease_seconds.
    assert handover < RETRY + 1.0 < TIMING["lease_seconds"]
    assert holder(kube, namespace) == b.identity


CHILD = textwrap.dedent("""
    import sys, threading
    from kubernetes import config
    from specdec.kube.leader import Leadership
    kubeconfig, namespace, lease, identity, timing = sys.argv[1:6]
    lease_seconds, renew_deadline, retry_period = map(float, timing.split(","))
    leadership = Leadership(config.new_client_from_config(config_file=kubeconfig), namespace, lease, identity,
                            lease_seconds, renew_deadline, retry_period,
                            on_started=lambda: print("leading", flush=True))
    leadership.start()
    threading.Event().wait()
""")


def test_a_killed_leader_is_replaced_once_its_lease_expires(kube: Kube, namespace: str, kubeconfig: Path, candidates):
    timing = ",".join(str(TIMING[k]) for k in ("lease_seconds", "renew_deadline", "retry_period"))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "operator"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(kubeconfig), namespace, LEASE, "victim", timing],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "leading"
        assert holder(kube, namespace) == "victim"
        b = candidates("b")
        for _ in range(2):  # b has seen the victim renew before the kill
            wait_for_renewal(kube, namespace)
        assert not b.is_leader() and holder(kube, namespace) == "victim"
        child.send_signal(signal.SIGKILL)  # no release: as when the node dies
        killed = time.monotonic()
        child.wait(10)
        wait_for(b.is_leader, "b to lead", timeout=TIMING["lease_seconds"] + 3 * RETRY, interval=0.05)
        failover = time.monotonic() - killed
        print(f"failover after SIGKILL: {failover:.2f}s")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
    # Not before the victim's last renewal has expired (b saw it at most a retry period before the kill) ...
    assert failover >= TIMING["lease_seconds"] - RETRY - 0.5
    # ... and no later than the first attempt of b after that.
    assert failover <= TIMING["lease_seconds"] + RETRY + 1.0
    assert holder(kube, namespace) == b.identity


def test_a_leader_that_sees_another_holder_stops_leading_at_once_then_campaigns_again(
    kube: Kube, namespace: str, candidates
):
    a = candidates("a")
    wait_for(a.is_leader, "a to lead", timeout=10, interval=0.05)
    coordination = client.CoordinationV1Api(kube.api)
    lease = coordination.read_namespaced_lease(LEASE, namespace)
    lease.spec.holder_identity = "intruder"  # another holder, renewing once
    coordination.replace_namespaced_lease(LEASE, namespace, lease)
    taken = time.monotonic()
    wait_for(lambda: a.stopped, "a's on_stopped", timeout=TIMING["renew_deadline"], interval=0.02)
    assert not a.is_leader()
    # It noticed at its next renewal, not after the renew deadline.
    assert a.stopped[0] - taken < RETRY + 1.0
    # The intruder never renews: a, campaigning again, takes the Lease once it has expired.
    wait_for(
        lambda: len(a.started) == 2 and a.is_leader(),
        "a to lead again",
        timeout=TIMING["lease_seconds"] + 3 * RETRY + 2,
    )
    assert a.started[1] - a.stopped[0] >= TIMING["lease_seconds"] - 0.5
    assert holder(kube, namespace) == a.identity


def test_a_leader_cut_off_from_the_api_server_stops_leading_within_the_renew_deadline(
    kube: Kube, namespace: str, candidates
):
    a, b = candidates("a"), candidates("b", start=False)
    wait_for(a.is_leader, "a to lead", timeout=10, interval=0.05)
    b.leadership.start()
    wait_for(lambda: b.leadership.alive, "b to campaign")
    a.api.configuration.host = "https://127.0.0.1:1"  # nothing listens: every renewal is refused
    cut = time.monotonic()
    # is_leader() turns false by itself once the last renewal is renew_deadline old ...
    wait_for(lambda: not a.is_leader(), "a to stop leading", timeout=TIMING["renew_deadline"] + 1, interval=0.02)
    assert time.monotonic() - cut <= TIMING["renew_deadline"] + 0.5
    # ... before b may take over (lease_seconds after its last sight of a renewal), and a's term ends.
    wait_for(lambda: a.stopped, "a's on_stopped", timeout=TIMING["renew_deadline"] + 3 * RETRY)
    wait_for(b.is_leader, "b to lead", timeout=TIMING["lease_seconds"] + 3 * RETRY)
    assert a.stopped[0] < b.started[0]
    assert a.leadership.alive  # network errors fail attempts; they do not end the election thread
    assert holder(kube, namespace) == b.identity


def test_a_deleted_lease_is_recreated_by_its_leader_and_the_standby_stays_idle(kube: Kube, namespace: str, candidates):
    """The library creates a missing Lease at once: without our guard the standby would take a deleted
    Lease while the leader still leads (until its next attempt)."""
    a, b = candidates("a"), candidates("b")
    leader = wait_for(lambda: leader_of(a, b), "a leader", timeout=10, interval=0.05)
    standby = b if leader is a else a
    wait_for_renewal(kube, namespace)  # the standby has seen the Lease held
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=watch_for_two_leaders, args=([a, b], stop, seen), daemon=True)
    watcher.start()
    try:
        for _ in range(3):
            client.CoordinationV1Api(kube.api).delete_namespaced_lease(LEASE, namespace)
            wait_for(
                lambda: holder_or_none(kube, namespace) == leader.identity,
                "the leader to re-create the Lease",
                timeout=3 * RETRY,
                interval=0.05,
            )
    finally:
        stop.set()
        watcher.join()
    assert seen == []
    assert leader.is_leader() and (len(leader.started), leader.stopped) == (1, [])
    assert (standby.started, standby.stopped) == ([], [])


def holder_or_none(kube: Kube, namespace: str) -> str | None:
    try:
        return holder(kube, namespace)
    except ApiException as error:
        if error.status == 404:
            return None
        raise
