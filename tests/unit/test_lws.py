"""The local cluster's LeaderWorkerSet (specdec_dev.lws): what it takes from LWS's module and how it serves its
webhooks. The module's source comes from Go's module cache (downloaded from the module proxy when missing)."""

from __future__ import annotations

import base64
import ipaddress
import ssl
from pathlib import Path

import yaml
from cryptography import x509

from specdec_dev import lws

BASE_URL = "https://127.0.0.1:9443"


def test_both_crds_come_from_the_module() -> None:
    names = {yaml.safe_load(d)["metadata"]["name"] for d in lws.crd_documents(lws.source_dir())}
    assert names == set(lws.LWS_CRDS)


def test_webhooks_are_called_by_url_trusting_our_ca_and_pod_webhooks_see_only_lws_pods() -> None:
    configurations = lws.webhook_configurations(lws.source_dir(), BASE_URL, b"CA PEM")
    assert {c["kind"]: c["metadata"]["name"] for c in configurations} == {
        "MutatingWebhookConfiguration": "lws-mutating-webhook-configuration",
        "ValidatingWebhookConfiguration": "lws-validating-webhook-configuration",
    }
    webhooks = {w["name"]: w for c in configurations for w in c["webhooks"]}
    assert set(webhooks) == {
        "mleaderworkerset.kb.io",
        "mpod.kb.io",
        "vleaderworkerset.kb.io",
        "vpod.kb.io",
        "vdisaggregatedset.kb.io",
    }
    for webhook in webhooks.values():
        assert webhook["clientConfig"]["url"].startswith(BASE_URL + "/"), webhook
        assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == b"CA PEM"
        assert "service" not in webhook["clientConfig"]
    assert webhooks["mpod.kb.io"]["clientConfig"]["url"] == BASE_URL + "/mutate--v1-pod"
    # Every other pod is admitted without LWS (failurePolicy Fail would otherwise stop them when it is down).
    only_lws = {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
    assert webhooks["mpod.kb.io"]["objectSelector"] == only_lws
    assert webhooks["vpod.kb.io"]["objectSelector"] == only_lws


def test_serving_certificate_is_signed_by_the_ca_for_the_address(tmp_path: Path) -> None:
    ca_pem = lws.write_serving_certificate(tmp_path, "127.0.0.1")
    ca = x509.load_pem_x509_certificate(ca_pem)
    serving = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    serving.verify_directly_issued_by(ca)
    assert serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.IPAddress
    ) == [ipaddress.ip_address("127.0.0.1")]
    assert (tmp_path / "tls.key").stat().st_mode & 0o077 == 0
    context = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")  # the key matches the certificate


def test_manager_serves_only_its_webhooks_on_loopback_without_leader_election_or_its_own_certificates(
    tmp_path: Path,
) -> None:
    config = lws.manager_configuration(9443, tmp_path)
    assert config["webhook"] == {"host": "127.0.0.1", "port": 9443, "certDir": str(tmp_path)}
    assert config["health"] == {"healthProbeBindAddress": "0"} and config["metrics"] == {"bindAddress": "0"}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
