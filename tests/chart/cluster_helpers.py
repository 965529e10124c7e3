"""Helpers for the chart's cluster tests: releases, ServiceAccount credentials, the operator run the
way the chart's Deployment runs it (its args and env), but as a local process (kwok runs no containers)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from specdec.api.models import GROUP, VERSION
from tests.chart.tools import CHART, EXAMPLES, helm, kubectl, set_args
from tests.conftest import free_port
from tests.kube_helpers import Kube, wait_for
from tests.operator_runner import OperatorProcess

EXAMPLE = "llama-2-13b-draft-7b-logits.yaml"
# the operator log's line prefix (logging's default asctime)
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


class Releases:
    """Installs releases with the project's helm; uninstalls whatever is left at teardown."""

    def __init__(self, kubeconfig: Path, home: Path):
        self.kubeconfig, self.home = kubeconfig, home
        self.installed: list[tuple[str, str]] = []

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return helm(*args, kubeconfig=self.kubeconfig, home=self.home, check=check)

    def install(
        self, name: str, namespace: str, values: dict[str, Any] | None = None, chart: Path = CHART
    ) -> subprocess.CompletedProcess:
        # --take-ownership: the CRDs may exist already (the session's `crds` fixture, an earlier
        # release that uninstall kept them from, or `make up`); the release adopts them.
        self.installed.append((name, namespace))
        return self.helm(
            "install",
            name,
            str(chart),
            "--namespace",
            namespace,
            "--take-ownership",
            "--wait",
            "--timeout",
            "120s",
            *set_args(values),
        )

    def upgrade(
        self, name: str, namespace: str, values: dict[str, Any] | None = None, chart: Path = CHART
    ) -> subprocess.CompletedProcess:
        return self.helm(
            "upgrade", name, str(chart), "--namespace", namespace, "--wait", "--timeout", "120s", *set_args(values)
        )

    def uninstall(self, name: str, namespace: str) -> subprocess.CompletedProcess:
        result = self.helm("uninstall", name, "--namespace", namespace, "--wait", "--timeout", "120s")
        self.installed.remove((name, namespace))
        return result

    def cleanup(self) -> None:
        for name, namespace in list(self.installed):
            self.helm("uninstall", name, "--namespace", namespace, "--wait", "--timeout", "120s", check=False)
        self.installed.clear()


def service_account_kubeconfig(
    kube: Kube, admin_kubeconfig: Path, namespace: str, service_account: str, path: Path
) -> Path:
    """A kubeconfig for the API server of `admin_kubeconfig` that authenticates as the ServiceAccount
    (a TokenRequest token, as the kubelet would mount it), with nothing of the admin's credentials."""
    token = kube.core.create_namespaced_service_account_token(
        service_account, namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = admin.get("current-context") or admin["contexts"][0]["name"]
    context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
    cluster = dict(next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"]))
    if "certificate-authority" in cluster:  # relative to the admin kubeconfig's directory
        cluster["certificate-authority"] = str((admin_kubeconfig.parent / cluster["certificate-authority"]).resolve())
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "cluster", "cluster": cluster}],
                "users": [{"name": service_account, "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "cluster", "user": service_account}}],
                "current-context": "sa",
            }
        )
    )
    return path


def allowed(api: client.ApiClient, group: str, resource: str, verb: str, namespace: str | None) -> bool:
    """SelfSubjectAccessReview as the credentials of `api` (namespace None = cluster scope)."""
    resource, _, subresource = resource.partition("/")
    attributes = {"group": group, "resource": resource, "verb": verb}
    if subresource:
        attributes["subresource"] = subresource
    if namespace:
        attributes["namespace"] = namespace
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
    )
    return bool(review.status.allowed)


def client_for(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def can_i_list(
    admin_kubeconfig: Path, namespace: str, service_account: str
) -> tuple[str, dict[tuple[str, str], set[str]]]:
    """`kubectl auth can-i --list` for the ServiceAccount: the raw table and its resource rows
    ({(group, resource): verbs}, without the self-review rights every account has)."""
    text = kubectl(
        "auth", "can-i", "--list", f"--as={service_account}", "-n", namespace, kubeconfig=admin_kubeconfig
    ).stdout
    rows: dict[tuple[str, str], set[str]] = {}
    for line in text.splitlines()[1:]:
        match = re.match(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$", line)
        if not match:
            continue  # non-resource URLs (no resource column)
        name, urls, names, verbs = match.groups()
        if name.startswith("selfsubject"):
            continue
        resource, _, group = name.partition(".")
        if "/" in group:  # e.g. enginebuilds.specdec.io/status
            group, _, sub = group.partition("/")
            resource = f"{resource}/{sub}"
        rows[(group, resource)] = set(verbs.split())
    return text, rows


class ChartOperator(OperatorProcess):
    """`specdec operator` with the args and env of the chart's Deployment, as a local child process."""

    def __init__(
        self, deployment: Any, kubeconfig: Path, log_path: Path, port: int, extra_args: list[str] | None = None
    ):
        (container,) = deployment.spec.template.spec.containers
        assert container.command == ["specdec"], container.command
        args = list(container.args)
        liveness = args.index("--liveness") + 1
        args[liveness] = re.sub(r"//0\.0\.0\.0:\d+/", f"//127.0.0.1:{port}/", args[liveness])
        args[args.index("--metrics-port") + 1] = str(free_port())  # several may run on this machine
        # The downward API's values for a pod of this Deployment (leader election reads them).
        fields = {
            "metadata.namespace": deployment.metadata.namespace,
            "metadata.name": f"{deployment.metadata.name}-local-{port}",
        }
        # An empty value comes back from the API server as no value; the kubelet sets it to "".
        env = {
            e.name: e.value or "" if e.value_from is None else fields[e.value_from.field_ref.field_path]
            for e in container.env or []
        }
        # `specdec` (the chart's command) is this package's console script for specdec.cli:main
        super().__init__(kubeconfig, log_path, port, args + (extra_args or []), env, isolated=True)

    def forbidden(self) -> list[str]:
        """Log lines where the API server refused the operator something: each is a missing RBAC rule
        (kopf's namespace/CRD scanning, which would need rights we do not grant, is switched off)."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        # the timestamp is left out: its milliseconds can read ",403"
        return [
            line
            for line in text.splitlines()
            if re.search(r"forbidden|\b403\b", TIMESTAMP.sub("", line), re.IGNORECASE)
        ]


class SD:
    """A SpeculativeDeployment applied as the user (admin credentials), read through the API server."""

    def __init__(self, kube: Kube, namespace: str, example: str = EXAMPLE):
        body = yaml.safe_load((EXAMPLES / example).read_text())
        self.kube, self.namespace, self.name = kube, namespace, body["metadata"]["name"]
        kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "speculativedeployments", body)

    def get(self) -> dict:
        return self.kube.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "speculativedeployments", self.name
        )

    def ready(self) -> dict | None:
        obj = self.get()
        status = obj.get("status") or {}
        cond = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        fresh = status.get("observedGeneration") == obj["metadata"]["generation"]
        return obj if fresh and cond.get("status") == "True" else None

    def wait_ready(self, timeout: float) -> dict:
        return wait_for(
            self.ready, f"SpeculativeDeployment {self.namespace}/{self.name} Ready=True", timeout=timeout, interval=0.5
        )

    def assert_untouched(self, seconds: float = 5.0) -> None:
        """Before our operator starts, nothing may reconcile this object: else another operator (e.g.
        `make up`'s, cluster-wide with admin rights) would do the work and prove nothing about RBAC."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            status = self.get().get("status")
            if status:
                reason = (
                    "another specdec operator reconciles this cluster (status appeared before the "
                    f"test's operator started: {status.get('phase')}); the chart's RBAC tests need a "
                    "cluster where only their operator acts: unset SPECDEC_TEST_KUBECONFIG (a fresh "
                    "cluster) or stop that operator"
                )
                if os.environ.get("CI", "").lower() == "true":
                    pytest.fail(reason, pytrace=False)
                pytest.skip(reason)
            time.sleep(0.25)

    def engine_builds(self) -> list[dict]:
        return self.kube.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "enginebuilds")["items"]
