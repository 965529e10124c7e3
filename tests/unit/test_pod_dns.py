"""specdec_dev.pod_dns: which pods a name resolves to, and the server's answers over UDP on loopback (the API
server's part is a lookup function here; tests/realnode/test_mpi.py resolves through the API server)."""

from __future__ import annotations

import socketserver

import pytest
from dnslib import RCODE, DNSRecord
from dnslib.server import DNSServer

from specdec_dev import pod_dns

HEADLESS = {"spec": {"clusterIP": "None", "selector": {"app": "mpi"}}}


def pod(name: str, ip: str | None, ready: bool = True, subdomain: str = "mpi", app: str = "mpi") -> dict:
    return {
        "metadata": {"name": name, "labels": {"app": app}},
        "spec": {"hostname": name, "subdomain": subdomain},
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}]},
    }


PODS = [pod("mpi-0", "10.88.0.5"), pod("mpi-1", "10.88.0.6", ready=False), pod("other", "10.88.0.7", app="x")]


def test_a_names_labels_below_the_domain():
    assert pod_dns.service_labels("mpi-0.mpi.ns.svc.cluster.local.") == ["mpi-0", "mpi", "ns"]
    assert pod_dns.service_labels("MPI.ns.svc.cluster.local") == ["mpi", "ns"]
    assert pod_dns.service_labels("ns.svc.cluster.local") is None
    assert pod_dns.service_labels("a.b.c.d.svc.cluster.local") is None
    assert pod_dns.service_labels("mpi.ns.svc.example.org") is None


def test_a_headless_service_names_its_ready_pods_and_each_by_hostname():
    assert pod_dns.addresses(["mpi", "ns"], HEADLESS, PODS) == ["10.88.0.5"]
    assert pod_dns.addresses(["mpi-0", "mpi", "ns"], HEADLESS, PODS) == ["10.88.0.5"]
    assert pod_dns.addresses(["mpi-1", "mpi", "ns"], HEADLESS, PODS) == []  # not Ready
    assert pod_dns.addresses(["other", "mpi", "ns"], HEADLESS, PODS) == []  # not selected


def test_publishing_not_ready_addresses_names_pods_before_they_are_ready():
    service = {"spec": {**HEADLESS["spec"], "publishNotReadyAddresses": True}}
    assert pod_dns.addresses(["mpi", "ns"], service, PODS) == ["10.88.0.5", "10.88.0.6"]
    assert pod_dns.addresses(["mpi-1", "mpi", "ns"], service, PODS) == ["10.88.0.6"]
    assert pod_dns.addresses(["mpi", "ns"], service, [pod("mpi-2", None)]) == []  # no IP yet


def test_only_headless_services_with_a_selector_name_pods():
    assert pod_dns.addresses(["mpi", "ns"], None, PODS) == []
    assert (
        pod_dns.addresses(["mpi", "ns"], {"spec": {"clusterIP": "10.96.0.9", "selector": {"app": "mpi"}}}, PODS) == []
    )
    assert pod_dns.addresses(["mpi", "ns"], {"spec": {"clusterIP": "None"}}, PODS) == []
    wrong_subdomain = pod("mpi-3", "10.88.0.8", subdomain="elsewhere")
    assert pod_dns.addresses(["mpi-3", "mpi", "ns"], HEADLESS, [wrong_subdomain]) == []


@pytest.fixture
def server():
    lookups = []

    def lookup(namespace: str, name: str):
        lookups.append((namespace, name))
        if name == "broken":
            raise OSError("the API server is unreachable")
        return (HEADLESS, PODS) if (namespace, name) == ("ns", "mpi") else (None, [])

    resolver = pod_dns.PodResolver(lookup, upstream=None)
    dns = DNSServer(resolver, address="127.0.0.1", port=0, server=socketserver.UDPServer, logger=pod_dns.QuietLogger())
    dns.start_thread()
    yield dns.server.server_address[1], lookups
    dns.stop()


def ask(port: int, name: str, qtype: str = "A") -> DNSRecord:
    return DNSRecord.parse(DNSRecord.question(name, qtype).send("127.0.0.1", port, timeout=5))


def test_the_server_answers_over_udp(server):
    port, lookups = server
    answer = ask(port, "mpi-0.mpi.ns.svc.cluster.local")
    assert answer.header.rcode == RCODE.NOERROR
    assert [(str(rr.rdata), rr.ttl) for rr in answer.rr] == [("10.88.0.5", pod_dns.TTL_SECONDS)]
    assert lookups == [("ns", "mpi")]
    assert ask(port, "mpi-0.mpi.ns.svc.cluster.local", "AAAA").rr == []  # a name with no IPv6 record
    assert ask(port, "gone.mpi.ns.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    assert ask(port, "kubernetes.default.svc.cluster.local").header.rcode == RCODE.NXDOMAIN
    assert ask(port, "x.broken.ns.svc.cluster.local").header.rcode == RCODE.SERVFAIL
    assert ask(port, "example.org").header.rcode == RCODE.SERVFAIL  # outside the domain, and no upstream here
