"""LeaderWorkerSet on the local cluster: its CRDs, its controller manager as a local process and its webhooks.

Everything comes from LWS's Go module at toolchain.LWS_VERSION: the manager built by the toolchain, the CRDs from
config/crd/bases and the webhook configurations from config/webhook. In a cluster LWS serves its webhooks behind a
Service with a certificate it rotates itself; here the manager runs beside the API server on 127.0.0.1, so the
webhooks are registered by URL with a CA of our own (LWS's internal certificate management off: it writes a
Secret for a Service that does not exist here). Leader election is off: one manager per cluster.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from specdec_dev import toolchain
from specdec_dev.processes import running_pid, start_process, stop_process

WEBHOOK_HOST = "127.0.0.1"
READY_TIMEOUT_SECONDS = 60
CERTIFICATE_DAYS = 365
LWS_CRDS = ("leaderworkersets.leaderworkerset.x-k8s.io", "disaggregatedsets.disaggregatedset.x-k8s.io")
# config/default's kustomization prefixes every name with this.
NAME_PREFIX = "lws-"
WEBHOOK_PATCHES = {
    "MutatingWebhookConfiguration": "mutating-patch.yaml",
    "ValidatingWebhookConfiguration": "validating-patch.yaml",
}


class LwsError(RuntimeError):
    """LeaderWorkerSet could not be installed or started; the message says why."""


def source_dir() -> Path:
    """LWS's module source (config/ holds its CRDs and webhook configurations), from Go's module cache."""
    try:
        return toolchain.module_dir(toolchain.LWS_MODULE, toolchain.LWS_VERSION)
    except toolchain.ToolchainError as error:
        raise LwsError(f"LeaderWorkerSet's sources: {error}") from error


def crd_documents(source: Path) -> list[str]:
    """LWS's CRDs (the manager watches both kinds, so both must be served). Its kustomization's conversion webhook
    patch is left out: each CRD has one version, so the API server never converts."""
    paths = sorted((source / "config" / "crd" / "bases").glob("*.yaml"))
    if not paths:
        raise LwsError(f"no CRDs in {source / 'config' / 'crd' / 'bases'}")
    return [p.read_text() for p in paths]


def _apply_patches(configuration: dict[str, Any], patch: list[dict[str, Any]]) -> None:
    """config/webhook's JSON patches, which only replace whole webhooks (`/webhooks/<index>`)."""
    for op in patch:
        parts = op["path"].split("/")
        if op["op"] != "replace" or len(parts) != 3 or parts[1] != "webhooks":
            raise LwsError(f"unexpected patch in LWS's config/webhook: {op}")
        configuration["webhooks"][int(parts[2])] = op["value"]


def webhook_configurations(source: Path, base_url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """LWS's Mutating/ValidatingWebhookConfiguration as config/default renders them (patched so the Pod webhooks
    only see LWS's pods, names prefixed), each webhook called at `base_url` + its path and trusting `ca_bundle`."""
    directory = source / "config" / "webhook"
    configurations = []
    for document in yaml.safe_load_all((directory / "manifests.yaml").read_text()):
        if not document:
            continue
        _apply_patches(document, yaml.safe_load((directory / WEBHOOK_PATCHES[document["kind"]]).read_text()))
        document["metadata"]["name"] = NAME_PREFIX + document["metadata"]["name"]
        for webhook in document["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": base_url + path, "caBundle": base64.b64encode(ca_bundle).decode()}
        configurations.append(document)
    return configurations


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def write_serving_certificate(directory: Path, host: str) -> bytes:
    """A CA and a certificate it signs for `host` (an IP address) in `directory` (tls.crt, tls.key: where
    controller-runtime's webhook server reads them); returns the CA's PEM, the webhooks' caBundle."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "specdec local LeaderWorkerSet webhook CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERTIFICATE_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CERTIFICATE_DAYS))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(host))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (directory / "ca.crt").write_bytes(ca_pem)
    (directory / "tls.crt").write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    key_file = directory / "tls.key"
    key_file.touch(mode=0o600)
    key_file.write_bytes(_pem_key(key))
    return ca_pem


def manager_configuration(webhook_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's --config (config.lws.x-k8s.io/v1alpha1 Configuration): webhooks on 127.0.0.1 (its defaults
    bind every address at fixed ports, which two local clusters would share), no metrics or probe endpoints (we
    wait on the webhooks themselves), no leader election, no internal certificate management."""
    return {
        "apiVersion": "config.lws.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": WEBHOOK_HOST, "port": webhook_port, "certDir": str(cert_dir)},
        "health": {"healthProbeBindAddress": "0"},
        "metrics": {"bindAddress": "0"},
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((WEBHOOK_HOST, 0))
        return int(s.getsockname()[1])


class LocalLws:
    """The LWS manager of one local cluster: its files in <cluster dir>/lws."""

    def __init__(self, cluster_dir: Path, kubectl: Callable[..., subprocess.CompletedProcess]) -> None:
        self.directory = cluster_dir / "lws"
        self._kubectl = kubectl  # LocalCluster.kubectl

    @property
    def pid_file(self) -> Path:
        return self.directory / "lws-manager.pid"

    @property
    def log(self) -> Path:
        return self.directory / "lws-manager.log"

    def pid(self) -> int | None:
        return running_pid(self.pid_file)

    def up(self, env: dict[str, str]) -> None:
        """Apply the CRDs, start the manager (unless it runs) and register its webhooks at its port."""
        source = source_dir()
        self._kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input="\n---\n".join(crd_documents(source))
        )
        self._wait_established()
        if self.pid():
            _log(f"LeaderWorkerSet manager already running (pid {self.pid()}, log {self.log})")
            return
        webhook_port = _free_port()
        cert_dir = self.directory / "certs"
        ca_pem = write_serving_certificate(cert_dir, WEBHOOK_HOST)
        config = self.directory / "config.yaml"
        config.write_text(yaml.safe_dump(manager_configuration(webhook_port, cert_dir)))
        binary = toolchain.group_dir(_lws_group()) / toolchain.LWS_MANAGER
        process = start_process([str(binary), f"--config={config}"], self.pid_file, self.log, env)
        base_url = f"https://{WEBHOOK_HOST}:{webhook_port}"
        configurations = webhook_configurations(source, base_url, ca_pem)
        paths = [w["clientConfig"]["url"].removeprefix(base_url) for c in configurations for w in c["webhooks"]]
        self._wait_serving(process, base_url, paths, cert_dir / "ca.crt")
        self._kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(_as_list(configurations))
        )
        _log(f"LeaderWorkerSet {toolchain.LWS_VERSION} manager running (pid {process.pid}, log {self.log})")

    def _wait_established(self) -> None:
        """Until the API server serves LWS's CRDs (`kubectl wait` fails on a CRD that has no conditions yet)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        query = '{.items[*].status.conditions[?(@.type=="Established")].status}'
        while True:
            result = self._kubectl("get", "crd", *LWS_CRDS, "-o", f"jsonpath={query}", check=False)
            if result.returncode == 0 and result.stdout.split() == ["True"] * len(LWS_CRDS):
                return
            if time.monotonic() > deadline:
                raise LwsError(f"LeaderWorkerSet's CRDs not Established in {READY_TIMEOUT_SECONDS}s: {result.stdout}")
            time.sleep(0.2)

    def _wait_serving(self, process: subprocess.Popen, base_url: str, paths: list[str], ca_file: Path) -> None:
        """Until every webhook path answers (the manager registers its webhooks after it starts serving: a path
        it has not registered yet answers 404, which the API server would take for a failed admission). Each
        probe has no body, so the manager logs one "request body is empty" per path as it starts."""
        context = ssl.create_default_context(cafile=str(ca_file))
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        waiting = list(paths)
        while waiting:
            if process.poll() is not None:
                raise LwsError(f"the LeaderWorkerSet manager exited with {process.returncode}; see {self.log}")
            if time.monotonic() > deadline:
                raise LwsError(
                    f"the LeaderWorkerSet manager did not serve {', '.join(waiting)} in {READY_TIMEOUT_SECONDS}s; "
                    f"see {self.log}"
                )
            try:
                with urllib.request.urlopen(base_url + waiting[0], timeout=1, context=context):
                    waiting.pop(0)
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    waiting.pop(0)
                else:
                    time.sleep(0.2)
            except OSError:
                time.sleep(0.2)

    def down(self) -> None:
        stop_process(self.pid_file, "lws")


def _lws_group() -> toolchain.ToolGroup:
    return next(g for g in toolchain.GROUPS if g.name == "lws")


def _as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _log(message: str) -> None:
    print(f"[lws] {message}", file=sys.stderr, flush=True)
