"""The real node's cluster DNS: the stable names headless Services give pods, answered from the API server.

A multi-node group's pods find each other by name (`<hostname>.<subdomain>.<namespace>`, the hostfile's and
LeaderWorkerSet's LWS_LEADER_ADDRESS), so the real node's pods need a cluster DNS. CoreDNS answers those names
from EndpointSlices, which this cluster cannot have: the simulated pods' IPs are loopback addresses, which the
API server refuses in them, so the EndpointSlice controller is off (specdec_dev.cluster). This server answers
the same records from the Services and Pods themselves, with dnslib for the wire format and the serving:

- `<service>.<namespace>.svc.<domain>`: the IPs of a headless Service's pods;
- `<hostname>.<service>.<namespace>.svc.<domain>`: the IP of its pod whose spec.hostname and spec.subdomain
  are those,

counting only Ready pods unless the Service publishes not-ready addresses, as the EndpointSlice controller
does. Other names in the domain get NXDOMAIN (no kube-proxy here: no ClusterIP Service is reachable anyway);
names outside it go to the host's own nameserver. It listens on the pods' gateway (the kubelet's clusterDNS).
"""

from __future__ import annotations

import argparse
import socket
import socketserver
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dnslib import QTYPE, RCODE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSServer
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from specdec_dev.node_config import CLUSTER_DOMAIN as DOMAIN

TTL_SECONDS = 5  # names follow pods that are recreated with new IPs
IP_FREEBIND = 15  # Linux's <netinet/in.h>; Python's socket module does not name it
UPSTREAM_TIMEOUT_SECONDS = 3.0

Obj = dict[str, Any]


def selects(service: Obj, pod: Obj) -> bool:
    selector = service.get("spec", {}).get("selector") or {}
    labels = pod.get("metadata", {}).get("labels") or {}
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def ready(pod: Obj) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def addresses(labels: list[str], service: Obj | None, pods: Iterable[Obj]) -> list[str]:
    """The A records of a name's labels below `svc.<domain>` (service and namespace last), given the named
    Service (None: there is none) and its namespace's pods."""
    if service is None or service.get("spec", {}).get("clusterIP") != "None":
        return []
    publish_not_ready = bool(service["spec"].get("publishNotReadyAddresses"))
    hostname = labels[0] if len(labels) == 3 else None
    found = []
    for pod in pods:
        ip, spec = pod.get("status", {}).get("podIP"), pod.get("spec", {})
        if not ip or not selects(service, pod) or not (publish_not_ready or ready(pod)):
            continue
        if hostname is None or (spec.get("hostname") == hostname and spec.get("subdomain") == labels[1]):
            found.append(ip)
    return sorted(found)


def service_labels(name: str, domain: str = DOMAIN) -> list[str] | None:
    """A queried name's labels before `.svc.<domain>`, when it is one of the two forms served (else None)."""
    suffix = f".svc.{domain}"
    name = name.rstrip(".").lower()
    if not name.endswith(suffix):
        return None
    labels = name[: -len(suffix)].split(".")
    return labels if len(labels) in (2, 3) else None


Lookup = Callable[[str, str], tuple[Obj | None, list[Obj]]]


def api_lookup(kubeconfig: Path) -> Lookup:
    """(service, its namespace's pods) from the API server, read at each query: names follow pods at once."""
    api = config.new_client_from_config(str(kubeconfig))
    core = client.CoreV1Api(api)

    def plain(obj: object) -> Obj:
        """The API's own JSON form (camelCase), which `addresses` reads."""
        result: Obj = api.sanitize_for_serialization(obj)
        return result

    def lookup(namespace: str, name: str) -> tuple[Obj | None, list[Obj]]:
        try:
            service = plain(core.read_namespaced_service(name, namespace))
        except ApiException as error:
            if error.status == 404:
                return None, []
            raise
        selector = ",".join(f"{k}={v}" for k, v in (service.get("spec", {}).get("selector") or {}).items())
        return service, plain(core.list_namespaced_pod(namespace, label_selector=selector))["items"]

    return lookup


def host_nameserver(resolv_conf: Path = Path("/etc/resolv.conf")) -> str | None:
    for line in resolv_conf.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            return parts[1]
    return None


class PodResolver(BaseResolver):
    def __init__(self, lookup: Lookup, upstream: str | None, domain: str = DOMAIN):
        self.lookup, self.upstream, self.domain = lookup, upstream, domain

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        name = str(request.q.qname)
        if not name.rstrip(".").lower().endswith(self.domain):
            return self._forward(request)
        reply = request.reply()
        labels = service_labels(name, self.domain)
        ips: list[str] = []
        if labels is not None:
            try:
                ips = addresses(labels, *self.lookup(labels[-1], labels[-2]))
            except (ApiException, OSError):
                reply.header.rcode = RCODE.SERVFAIL
                return reply
        if not ips:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype in (QTYPE.A, QTYPE.ANY):
            for ip in ips:
                reply.add_answer(RR(name, QTYPE.A, rdata=A(ip), ttl=TTL_SECONDS))
        return reply  # a name that exists, with no record of the asked type: NOERROR, no answer

    def _forward(self, request: DNSRecord) -> DNSRecord:
        if self.upstream:
            try:
                return DNSRecord.parse(request.send(self.upstream, 53, timeout=UPSTREAM_TIMEOUT_SECONDS))
            except OSError:
                pass
        reply = request.reply()
        reply.header.rcode = RCODE.SERVFAIL
        return reply


class FreeBindUDPServer(socketserver.ThreadingUDPServer):
    """Binds before its address exists: the pods' gateway is on a bridge the CNI plugin makes at the first pod."""

    allow_reuse_address = True

    def server_bind(self) -> None:
        self.socket.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        super().server_bind()


class QuietLogger:
    """dnslib logs every query to stdout; only errors are worth a line here."""

    def log_recv(self, handler: DNSHandler, data: bytes) -> None: ...
    def log_send(self, handler: DNSHandler, data: bytes) -> None: ...
    def log_request(self, handler: DNSHandler, request: DNSRecord) -> None: ...
    def log_reply(self, handler: DNSHandler, reply: DNSRecord) -> None: ...
    def log_truncated(self, handler: DNSHandler, reply: DNSRecord) -> None: ...

    def log_error(self, handler: DNSHandler, error: Exception) -> None:
        print(f"[pod-dns] {handler.client_address}: {error}", file=sys.stderr, flush=True)

    def log_data(self, dnsobj: DNSRecord) -> None: ...


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_dev.pod_dns", description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--address", required=True, help="where to listen (UDP port 53)")
    args = parser.parse_args(argv)
    resolver = PodResolver(api_lookup(args.kubeconfig), host_nameserver())
    server = DNSServer(resolver, address=args.address, port=53, server=FreeBindUDPServer, logger=QuietLogger())
    server.start_thread()
    print(f"[pod-dns] serving *.svc.{DOMAIN} on {args.address}:53", file=sys.stderr, flush=True)
    while server.isAlive():
        time.sleep(1)
    return 1


if __name__ == "__main__":
    sys.exit(main())
