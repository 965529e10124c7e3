"""specdec.kube.leader without a cluster: settings, validation against the library's own checks, and a
candidate whose API server refuses every connection. The election itself: tests/cluster/test_leader.py."""

from __future__ import annotations

import itertools
import socket
import time

import pytest
from kubernetes import client
from kubernetes.leaderelection import electionconfig

from specdec.kube.leader import ElectionSettings, Leadership, default_identity, validate
from tests.kube_helpers import wait_for


def library_accepts(lease: float, renew: float, retry: float) -> bool:
    try:
        electionconfig.Config(object(), lease, renew, retry, lambda: None, None)
    except SystemExit:
        return False
    return True


@pytest.mark.parametrize(
    "lease, renew, retry", list(itertools.product([1, 2, 4, 15, 15.5], [1, 2.5, 3, 10, 15], [0.5, 1, 2, 3]))
)
def test_validation_is_the_librarys_as_value_errors(lease, renew, retry):
    """What we accept, the library's Config accepts (it would sys.exit otherwise); fractional lease
    durations are refused too (the Lease stores whole seconds)."""
    try:
        validate(lease, renew, retry)
    except ValueError:
        assert not library_accepts(lease, renew, retry) or lease != int(lease)
    else:
        assert library_accepts(lease, renew, retry)


@pytest.mark.parametrize(
    "lease, renew, retry, complaint",
    [
        (10, 10, 2, "lease duration (10s) must be greater than the renew deadline (10s)"),
        (15, 2, 2, "renew deadline (2s) must be greater than 1.2 × the retry period (2s)"),
        (15, 10, 0.5, "retry period must be at least 1 second"),
        (15.5, 10, 2, "whole number"),
    ],
)
def test_bad_timing_raises_a_value_error_naming_the_problem(lease, renew, retry, complaint):
    with pytest.raises(ValueError, match=complaint.replace("(", r"\(").replace(")", r"\)")):
        Leadership(client.ApiClient(), "ops", "lease", "me", lease, renew, retry)


def test_settings_default_to_off():
    assert ElectionSettings.from_env({}) == ElectionSettings(enabled=False)
    assert Leadership.from_env(client.ApiClient(), env={"SPECDEC_LEADER_ELECTION": "false"}) is None


def test_settings_from_the_environment():
    settings = ElectionSettings.from_env(
        {
            "SPECDEC_LEADER_ELECTION": "true",
            "POD_NAMESPACE": "ops",
            "POD_NAME": "op-7d9-x2",
            "SPECDEC_LEADER_ELECTION_NAME": "rel-specdec-operator",
            "SPECDEC_LEADER_ELECTION_LEASE_SECONDS": "30",
            "SPECDEC_LEADER_ELECTION_RENEW_DEADLINE_SECONDS": "20",
            "SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "4",
        }
    )
    assert (settings.enabled, settings.namespace, settings.name) == (True, "ops", "rel-specdec-operator")
    assert (settings.lease_seconds, settings.renew_deadline, settings.retry_period) == (30, 20, 4)
    assert settings.identity.startswith("op-7d9-x2_")
    # An explicit namespace wins over the pod's; the defaults are client-go's.
    settings = ElectionSettings.from_env(
        {"SPECDEC_LEADER_ELECTION": "True", "POD_NAMESPACE": "ops", "SPECDEC_LEADER_ELECTION_NAMESPACE": "leases"}
    )
    assert (settings.namespace, settings.name) == ("leases", "specdec-operator")
    assert (settings.lease_seconds, settings.renew_deadline, settings.retry_period) == (15, 10, 2)
    leadership = Leadership.from_env(
        client.ApiClient(), env={"SPECDEC_LEADER_ELECTION": "true", "POD_NAMESPACE": "ops"}
    )
    assert (leadership.namespace, leadership.name, leadership.lease_seconds) == ("ops", "specdec-operator", 15)
    assert not leadership.alive and not leadership.is_leader()


@pytest.mark.parametrize(
    "env, complaint",
    [
        ({"SPECDEC_LEADER_ELECTION": "yes"}, "SPECDEC_LEADER_ELECTION must be true or false"),
        ({"SPECDEC_LEADER_ELECTION_LEASE_SECONDS": "15s"}, "SPECDEC_LEADER_ELECTION_LEASE_SECONDS must be a number"),
        ({"SPECDEC_LEADER_ELECTION_RETRY_PERIOD_SECONDS": "9"}, "must be greater than 1.2 × the retry period"),
    ],
)
def test_bad_settings_say_which(env, complaint):
    with pytest.raises(ValueError, match=complaint):
        ElectionSettings.from_env({"SPECDEC_LEADER_ELECTION": "true", "POD_NAMESPACE": "ops", **env})


def test_no_namespace_outside_a_pod_is_an_error(monkeypatch, tmp_path):
    monkeypatch.setattr("specdec.kube.leader.SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    with pytest.raises(ValueError, match="SPECDEC_LEADER_ELECTION_NAMESPACE"):
        ElectionSettings.from_env({"SPECDEC_LEADER_ELECTION": "true"})
    (tmp_path / "namespace").write_text("ops\n")
    monkeypatch.setattr("specdec.kube.leader.SERVICE_ACCOUNT_NAMESPACE", tmp_path / "namespace")
    assert ElectionSettings.from_env({"SPECDEC_LEADER_ELECTION": "true"}).namespace == "ops"


def test_identities_are_unique_per_process_start():
    first, second = default_identity({"POD_NAME": "op-1"}), default_identity({"POD_NAME": "op-1"})
    assert first != second and first.startswith("op-1_") and second.startswith("op-1_")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: connections are refused


def test_an_unreachable_api_server_fails_attempts_not_the_election_thread():
    """The library catches only ApiException: without our lock a refused connection would end the thread."""
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{closed_port()}"
    api = client.ApiClient(configuration)
    leadership = Leadership(api, "ops", "lease", "me", lease_seconds=3, renew_deadline=2, retry_period=1)
    leadership.start()
    started = time.monotonic()
    # Several attempts fail (one per retry period); the thread keeps campaigning.
    while time.monotonic() - started < 2.5:
        assert leadership.alive and not leadership.is_leader()
        time.sleep(0.1)
    leadership.stop()  # nothing to release: it never held the Lease
    wait_for(lambda: not leadership.alive, "the election thread to end", timeout=3)
