"""helm and kubectl from the project's toolchain (~/.cache/specdec/bin), and rendering the chart.

The binaries are the ones `specdec dev tools` builds (helm v3.22.0, kubectl v1.36.3); `make test` builds
them before pytest runs. Without them the chart tests are skipped, or fail under CI=true.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from specdec_dev import toolchain

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdec-operator"
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
}


def binary(name: str) -> Path:
    path = toolchain.bin_dir() / name
    if not path.is_file():
        reason = f"{path} is missing (run `specdec dev tools` to build helm and kubectl)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return path


def _env(home: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if home is not None:  # keep helm's repositories, cache and plugins out of the user's home
        env.update(
            HELM_CACHE_HOME=str(home / "cache"),
            HELM_CONFIG_HOME=str(home / "config"),
            HELM_DATA_HOME=str(home / "data"),
        )
    return env


def run(
    tool: str,
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    input: str | None = None,
    home: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    command = [str(binary(tool)), *args]
    if kubeconfig is not None:
        command += ["--kubeconfig", str(kubeconfig)]
    result = subprocess.run(command, env=_env(home), input=input, text=True, capture_output=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(
            f"`{' '.join(command)}` failed (exit {result.returncode}):\n"
            f"{result.stderr.strip()}\n{result.stdout.strip()[-3000:]}"
        )
    return result


def helm(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return run("helm", *args, **kwargs)


def kubectl(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return run("kubectl", *args, **kwargs)


def set_args(values: dict[str, Any] | None) -> list[str]:
    """--set-json for each top-level value: exact types, no --set string coercion surprises."""
    import json

    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def template(
    values: dict[str, Any] | None = None,
    *extra: str,
    chart: Path = CHART,
    release: str = "rel",
    namespace: str = "ops",
    check: bool = True,
) -> subprocess.CompletedProcess:
    return helm("template", release, str(chart), "--namespace", namespace, *set_args(values), *extra, check=check)


def render(values: dict[str, Any] | None = None, *extra: str, **kwargs) -> list[dict[str, Any]]:
    """The chart's objects as parsed YAML (hooks and tests included, as `helm template` renders them)."""
    return [d for d in yaml.safe_load_all(template(values, *extra, **kwargs).stdout) if d]


def only(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


# What the downward API gives the pod of `template()`'s default release (rel, namespace ops).
POD_FIELDS = {"metadata.namespace": "ops", "metadata.name": "rel-specdec-operator-6c9f7d5b4-x2x7q"}


def env_of(container: dict[str, Any], fields: dict[str, str] = POD_FIELDS) -> dict[str, str]:
    """The container's environment as the pod sees it (fieldRefs resolved from `fields`)."""
    env = {}
    for e in container.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


# Pod Security Standards, "restricted" profile (latest), as far as a pod template shows it.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod_spec: dict[str, Any]) -> list[str]:
    """What in a pod spec the `restricted` profile forbids; [] when it passes."""
    problems = []
    pod_sc = pod_spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod_spec.get(flag):
            problems.append(f"{flag} is set")
    for volume in pod_spec.get("volumes") or []:
        kind = next(k for k in volume if k != "name")
        if kind not in RESTRICTED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} is {kind}")
    if pod_sc.get("runAsUser") == 0:
        problems.append("pod runAsUser 0")
    for container in (pod_spec.get("initContainers") or []) + pod_spec.get("containers", []):
        sc = container.get("securityContext") or {}
        name = container["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if not (
            sc.get("runAsNonRoot") is True
            or (pod_sc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)
        ):
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser") == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{name}: seccompProfile is {seccomp!r}")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities do not drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps['add']}")
        if any(p.get("hostPort") for p in container.get("ports") or []):
            problems.append(f"{name}: hostPort")
    return problems
