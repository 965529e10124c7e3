"""A real Prometheus for the local cluster (`specdec dev up --prometheus`) and for tests.

Pinned: Prometheus 3.16.0, built from the Go module github.com/prometheus/prometheus v0.316.0 (Prometheus'
Go module versions are 0.<major><minor>.<patch>) through the Go module proxy, the way specdec_dev.toolchain
builds the control plane (a wrapper module pinning it, CGO off, cached under ~/.cache/specdec/tools;
`ensure()`). Not Debian 12's `prometheus` package (2.42.0+ds): Debian builds it without the Kubernetes
service discovery (its promtool rejects `kubernetes_sd_configs`), which is what a PodMonitor is. The build
has no embedded web UI assets (they need npm); the HTTP API, which is all the tests and promtool use, is
complete, and the web UI is served from files when specdec_dev.prometheus_ui has built them (`ui_dir`).
promtool comes from the same build.

It scrapes what a prometheus-operator installation with the chart's ServiceMonitor and PodMonitor would:
the operator's /metrics (job `specdec-operator`), and every runtime pod found through the API server
(kubernetes_sd_configs, role pod, the cluster's kubeconfig) whose label app.kubernetes.io/component is
`runtime`, on its container port named `http`, with the labels namespace, pod, container and deployment
(the pod's app.kubernetes.io/instance). Its rules are specdec.observability.alerts'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from specdec.observability import alerts
from specdec_dev import toolchain
from specdec_dev.cluster import ClusterError, LocalCluster
from specdec_dev.processes import running_pid, start_process

PINNED_VERSION = "3.16.0"
MODULE = "github.com/prometheus/prometheus"
GROUP = toolchain.ToolGroup(
    name="prometheus",
    module=MODULE,
    version="v0.316.0",
    binaries={"prometheus": f"{MODULE}/cmd/prometheus", "promtool": f"{MODULE}/cmd/promtool"},
    ldflags=(f"-X github.com/prometheus/common/version.Version={PINNED_VERSION}",),
    linked=False,
)
OPERATOR_JOB = "specdec-operator"
RUNTIME_JOB = "specdec-runtime"


class PrometheusError(ClusterError):
    """Prometheus is missing or did not start; the message says why."""


def binary(name: str) -> Path:
    """prometheus or promtool of the pinned build (which may not be built yet)."""
    return toolchain.group_dir(GROUP) / name


def ensure() -> Path:
    """The directory of the pinned prometheus and promtool, built first when missing (minutes, once)."""
    try:
        return toolchain.build_group(GROUP)
    except toolchain.ToolchainError as error:
        raise PrometheusError(f"cannot build Prometheus {PINNED_VERSION}: {error}") from None


def ui_assets_dir() -> Path:
    """Where specdec_dev.prometheus_ui puts the web UI of the pinned version (static/mantine-ui, ...)."""
    return toolchain.group_dir(GROUP).with_name(f"prometheus-ui-{GROUP.version}") / "static"


def scrape_config(
    kubeconfig: Path,
    operator_targets: list[str],
    namespaces: list[str] | None = None,
    interval: str = "15s",
    rule_files: list[str] | None = None,
) -> dict[str, Any]:
    """prometheus.yml: the operator at `operator_targets` (host:port) and the runtime pods as a PodMonitor on
    `app.kubernetes.io/component: runtime`, port `http` would have them scraped."""
    discovery: dict[str, Any] = {"role": "pod", "kubeconfig_file": str(kubeconfig)}
    if namespaces:
        discovery["namespaces"] = {"names": list(namespaces)}
    label = "__meta_kubernetes_pod_label_"
    runtime = {
        "job_name": RUNTIME_JOB,
        "scrape_interval": interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [discovery],
        "relabel_configs": [
            {
                "source_labels": [label + "app_kubernetes_io_component"],
                "regex": "runtime|runtime-canary",
                "action": "keep",
            },
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "http", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "Succeeded|Failed", "action": "drop"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": [label + "app_kubernetes_io_instance"], "target_label": "deployment"},
        ],
    }
    operator = {
        "job_name": OPERATOR_JOB,
        "scrape_interval": interval,
        "static_configs": [{"targets": list(operator_targets)}],
    }
    for job in (operator, runtime):  # Prometheus 3 refuses a scrape without a Content-Type unless told what to assume
        job["fallback_scrape_protocol"] = "PrometheusText0.0.4"
    return {
        "global": {
            "scrape_interval": interval,
            "evaluation_interval": interval,
            "scrape_timeout": "5s" if _seconds(interval) > 5 else interval,
        },
        "rule_files": list(rule_files or []),
        "scrape_configs": [operator, runtime],
    }


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if duration.endswith(unit) and duration[: -len(unit)].isdigit():
            return int(duration[: -len(unit)]) * units[unit]
    raise ValueError(f"not a simple duration: {duration}")


class Prometheus:
    """One Prometheus server with its files under `directory` (prometheus.yml, rules.yaml, data/, log)."""

    def __init__(self, directory: Path, port: int):
        self.directory, self.port = directory, port
        self.url = f"http://127.0.0.1:{port}"

    @property
    def pid_file(self) -> Path:
        return self.directory / "prometheus.pid"

    @property
    def log(self) -> Path:
        return self.directory / "prometheus.log"

    def write(
        self,
        kubeconfig: Path,
        operator_targets: list[str],
        namespaces: list[str] | None = None,
        interval: str = "15s",
        windows: alerts.Windows = alerts.Windows(),
    ) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "rules.yaml").write_text(yaml.safe_dump(alerts.rule_file(windows), sort_keys=False))
        config = scrape_config(kubeconfig, operator_targets, namespaces, interval, ["rules.yaml"])
        (self.directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))

    def argv(self) -> list[str]:
        directory = self.directory.resolve()  # it may run elsewhere (ui_dir)
        return [
            str(binary("prometheus")),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=2d",
        ]

    def wait_ready(self, process: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise PrometheusError(f"prometheus exited with {process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise PrometheusError(f"prometheus did not become ready in {timeout:.0f}s; see {self.log}")

    def ui_dir(self) -> Path | None:
        """The working directory that makes this build serve the web UI, when its assets are built: a build
        without the `builtinassets` tag serves ./web/ui/static from a working directory named `prometheus`
        (web/ui/ui.go in the module)."""
        assets = ui_assets_dir()
        if not (assets / "mantine-ui" / "index.html").is_file():
            return None
        work = self.directory.resolve() / "ui" / "prometheus"
        link = work / "web" / "ui" / "static"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(assets, target_is_directory=True)
        return work

    def start(self) -> subprocess.Popen:
        """A process of its own (its session; pid file and log in the directory), with the web UI when built."""
        process = start_process(self.argv(), self.pid_file, self.log, dict(os.environ), cwd=self.ui_dir())
        self.wait_ready(process)
        return process

    def _get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector's series); an invalid query raises PrometheusError."""
        data = self._get("/api/v1/query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"value": data["result"]}]

    def targets(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/targets")["activeTargets"]

    def alerts(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/alerts")["alerts"]

    def firing(self) -> dict[str, list[dict[str, str]]]:
        """Alert name -> the label sets of its firing alerts."""
        out: dict[str, list[dict[str, str]]] = {}
        for alert in self.alerts():
            if alert["state"] == "firing":
                out.setdefault(alert["labels"]["alertname"], []).append(alert["labels"])
        return out


# --- the local cluster ------------------------------------------------------------------------------

DEV_PORT = 19090
DEV_OPERATOR_METRICS_PORT = 18081


def _log(message: str) -> None:
    print(f"[prometheus] {message}", file=sys.stderr, flush=True)


def dev_up(cluster: LocalCluster) -> Prometheus:
    """Start (or keep) the local cluster's Prometheus: files under <cluster dir>/prometheus (`specdec dev down`
    stops it with the cluster's other processes)."""
    server = Prometheus(cluster.prometheus_dir, DEV_PORT)
    if running_pid(server.pid_file):
        _log(f"prometheus already running at {server.url}")
        return server
    ensure()
    server.write(cluster.kubeconfig, [f"127.0.0.1:{DEV_OPERATOR_METRICS_PORT}"])
    process = server.start()
    _log(f"prometheus {PINNED_VERSION} running at {server.url} (pid {process.pid}, files in {server.directory})")
    return server
