"""`specdec dev up|down|status`: a local Kubernetes control plane with simulated GPU nodes.

kwokctl's binary runtime runs our own etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (which plays every kubelet) as local processes, bound to 127.0.0.1, with
RBAC and the default admission plugins (Pod Security included) switched on, and LeaderWorkerSet's manager with
its webhooks (specdec_dev.lws). Beside them run the operator and the pod runner (specdec_dev.podrunner: the
runtime pods' servers, with simulated backends), each a process with its pid file and log in the cluster's
directory.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from specdec.api.crd import render_crds
from specdec_dev import lws, nodes, simulated_fetch, simulated_steps, simulation_profile, toolchain
from specdec_dev.processes import running_pid, start_process, stop_process

CLUSTER_NAME = "specdec"
DEFAULT_CPU_NODES = 2
# The multi-node example's group (2 nodes) and the one its rolling update surges beside it.
DEFAULT_GPU_NODES = 4
READY_TIMEOUT_SECONDS = 180
SAMPLE = "llama-3.1-70b-fp8-draft-1b.yaml"
OPERATOR_HEALTH_PORT = 18080
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))  # the `kubernetes` Service's ClusterIP
ENDPOINT_CONTROLLERS = ("endpoints-controller", "endpointslice-controller", "endpointslice-mirroring-controller")
# The local operator reads the pods' metrics more often than the production default (15 s), so
# `kubectl get sd` shows ACCEPT and SPEEDUP seconds after the sample's pod serves.
DEV_OPERATOR_ENV = {"SPECDEC_SPECULATION_SCRAPE_SECONDS": "5"}
POD_RUNNER_START_SECONDS = 1.0
# `specdec dev up`'s simulated Job steps when it creates a cluster: long enough that the sample's fetch,
# convert, quantize and build phases each show in `kubectl get` (the tests create theirs with 0 s).
QUICK_START_STEP_SECONDS = {"fetch": 6.0, "convert": 6.0, "quantize": 6.0, "build": 8.0}
OPTIONS_FILE = "specdec-options.json"


class ClusterError(RuntimeError):
    """The local cluster could not be brought up or queried; the message says why."""


@dataclasses.dataclass(frozen=True)
class LocalCluster:
    name: str = CLUSTER_NAME
    operator_port: int = OPERATOR_HEALTH_PORT  # the dev operator's liveness endpoint

    @property
    def workdir(self) -> Path:
        return toolchain.cache_root() / "kwok"

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig.yaml"

    def env(self) -> dict[str, str]:
        bins = toolchain.bin_dir()
        # The system dirs too: a real node's kubelet and containerd run iptables, mount and runc by name.
        return {
            **os.environ,
            "KWOK_WORKDIR": str(self.workdir),
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": toolchain.with_system_dirs(f"{bins}{os.pathsep}{os.environ.get('PATH', '')}"),
        }

    def run(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(list(args), env=self.env(), input=input, text=True, capture_output=True)
        if check and result.returncode != 0:
            raise ClusterError(
                f"`{' '.join(args)}` failed (exit {result.returncode}):\n"
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        return self.run(str(toolchain.bin_dir() / "kubectl"), *args, input=input, check=check)

    def exists(self) -> bool:
        return (self.directory / "kwok.yaml").is_file()

    def is_serving(self) -> bool:
        if not self.kubeconfig.is_file():
            return False
        result = self.kubectl("get", "--raw", "/readyz", "--request-timeout=5s", check=False)
        return result.returncode == 0 and result.stdout.strip() == "ok"

    @property
    def directory(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def operator_pid_file(self) -> Path:
        return self.directory / "specdec-operator.pid"

    @property
    def logs_dir(self) -> Path:
        return self.directory / "logs"

    @property
    def operator_log(self) -> Path:
        return self.directory / "specdec-operator.log"

    def operator_pid(self) -> int | None:
        """PID of the dev operator if it is running."""
        return running_pid(self.operator_pid_file)

    @property
    def pod_runner_pid_file(self) -> Path:
        return self.directory / "specdec-pod-runner.pid"

    @property
    def pod_runner_log(self) -> Path:
        return self.directory / "specdec-pod-runner.log"

    @property
    def simulator_profile(self) -> Path:
        return self.directory / simulation_profile.FILE_NAME

    @property
    def pki(self) -> Path:
        """kwokctl's CA and the one admin certificate every component uses (ca.crt, admin.crt, admin.key)."""
        return self.directory / "pki"

    @property
    def real_node_dir(self) -> Path:
        """The files of the cluster's real node (specdec_dev.real_node), when it has one."""
        return self.directory / "real-node"

    @property
    def lws(self) -> lws.LocalLws:
        """The cluster's LeaderWorkerSet manager (specdec_dev.lws)."""
        return lws.LocalLws(self.directory, self.kubectl)

    @property
    def prometheus_dir(self) -> Path:
        """The files of `dev up --prometheus`'s server (specdec_dev.prometheus)."""
        return self.directory / "prometheus"

    def options(self) -> dict:
        """How the cluster was created (OPTIONS_FILE), {} for a cluster created before it was written."""
        try:
            return json.loads((self.directory / OPTIONS_FILE).read_text())
        except (OSError, ValueError):
            return {}

    def server(self) -> str:
        """The API server's URL in the cluster's kubeconfig."""
        return yaml.safe_load(self.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]

    def exports(self) -> str:
        """Shell lines that give kubectl/helm (our builds) and this specdec (e.g. in .venv) the cluster."""
        return (
            f"export KUBECONFIG={self.kubeconfig}\n"
            f"export PATH={toolchain.bin_dir()}:{Path(sys.executable).parent}:$PATH"
        )

    @property
    def env_file(self) -> Path:
        """The exports as a file to `source` (a pasted command block then works in any new shell)."""
        return self.directory / "env.sh"

    def write_env_file(self, *extra: str) -> Path:
        self.env_file.write_text("\n".join([self.exports(), *extra]) + "\n")
        return self.env_file


def kwokctl_config(
    bins: Path,
    pki: Path,
    audit_policy: Path | None = None,
    step_seconds: Mapping[str, float] | None = None,
    real_node: bool = False,
) -> str:
    """The kwokctl configuration plus the kwok stages (kwok uses only ours once we give any);
    `step_seconds`: the Job pods' simulated step durations unless a pod's annotations say otherwise;
    `real_node`: the API server also listens beyond 127.0.0.1, for the pods of a real node (specdec_dev.real_node).
    `pki`: the cluster's certificates (kwokctl writes them; the API server shows its client one to kubelets)."""
    config: dict[str, Any] = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "securePort": True,
            "kubeAuthorization": True,
            "kubeAdmission": True,
            "kubeVersion": toolchain.KUBERNETES_VERSION,
            "etcdVersion": toolchain.ETCD_VERSION.lstrip("v"),
            "kwokVersion": toolchain.KWOK_VERSION,
            "etcdBinary": str(bins / "etcd"),
            "kubeApiserverBinary": str(bins / "kube-apiserver"),
            "kubeControllerManagerBinary": str(bins / "kube-controller-manager"),
            "kubeSchedulerBinary": str(bins / "kube-scheduler"),
            "kubectlBinary": str(bins / "kubectl"),
            "kwokControllerBinary": str(bins / "kwok"),
            # In-cluster clients reach the API server at the `kubernetes` Service's ClusterIP.
            "kubeApiserverCertSANs": [KUBERNETES_SERVICE_IP],
        },
    }
    # The API server's default service range is a /24: 254 Services, fewer than a fleet of deployments.
    # The controller manager's clients default to 20 requests/s (and 5 Deployment/ReplicaSet workers):
    # a fleet of a thousand Deployments would wait minutes on that throttle, not on the API server or
    # on us; clusters that run fleets raise it the same way.
    # No Endpoints/EndpointSlice controllers: our pods' IPs are loopback addresses (specdec_dev.nodes), which
    # the API server refuses in both; the controllers retried every Service's refused write and posted a
    # warning Event each time (the controller-manager's writes for a fleet of 1000: 20,799 with them, 13,171
    # without; none of those a real cluster makes). Nothing here reads them: no kube-proxy; pods by their IPs.
    # kwok manages only the nodes annotated as its own (kwokctl's binary runtime would manage every node, a
    # real one's too). The API server reaches kubelets by their InternalIP (a real node's name does not
    # resolve here) with the admin certificate, which the kubelets' webhook authentication accepts.
    apiserver = [
        {"key": "service-cluster-ip-range", "value": SERVICE_CIDR},
        {"key": "kubelet-preferred-address-types", "value": "InternalIP,Hostname"},
        {"key": "kubelet-client-certificate", "value": str(pki / "admin.crt")},
        {"key": "kubelet-client-key", "value": str(pki / "admin.key")},
    ]
    if real_node:  # a real node's pods reach it through the bridge; later flags win over kwokctl's own
        apiserver.append({"key": "bind-address", "value": "0.0.0.0"})
    config["componentsPatches"] = [
        {"name": "kube-apiserver", "extraArgs": apiserver},
        {
            "name": "kwok-controller",
            "extraArgs": [
                {"key": "manage-all-nodes", "value": "false"},
                {"key": "manage-nodes-with-annotation-selector", "value": "kwok.x-k8s.io/node=fake"},
            ],
        },
        {
            "name": "kube-controller-manager",
            "extraArgs": [
                {"key": "controllers", "value": f"*,{','.join('-' + c for c in ENDPOINT_CONTROLLERS)}"},
                {"key": "kube-api-qps", "value": "200"},
                {"key": "kube-api-burst", "value": "400"},
                {"key": "concurrent-deployment-syncs", "value": "10"},
                {"key": "concurrent-replicaset-syncs", "value": "10"},
            ],
        },
    ]
    if audit_policy:  # the API server then logs to <cluster dir>/logs/audit.log
        config["options"]["kubeAuditPolicy"] = str(audit_policy)
    stages = resources.files("specdec_dev").joinpath("stages")
    documents = [yaml.safe_dump(config)]
    for stage in sorted(stages.iterdir(), key=lambda p: p.name):
        document = yaml.safe_load(stage.read_text())
        if document.get("kind") == "Stage":
            delayed = simulated_steps.with_step_delays(document, step_seconds or {})
            documents.append(yaml.safe_dump(simulated_fetch.with_reports(delayed)))
    return "---\n".join(documents)


def cluster_objects(cpu_nodes: int, gpu_nodes: int) -> list[dict]:
    """What a real GPU cluster offers that kwok does not create by itself."""
    storage_class = yaml.safe_load(resources.files("specdec_dev").joinpath("stages", "storage-class.yaml").read_text())
    return [storage_class, *nodes.dev_nodes(cpu_nodes, gpu_nodes)]


def _log(message: str) -> None:
    print(f"[dev] {message}", file=sys.stderr, flush=True)


def up(
    cluster: LocalCluster,
    cpu_nodes: int = DEFAULT_CPU_NODES,
    gpu_nodes: int = DEFAULT_GPU_NODES,
    audit_policy: Path | None = None,
    step_seconds: Mapping[str, float] | None = None,
    real_node: bool = False,
) -> None:
    """`step_seconds` (simulated step durations) and `real_node` (an API server a real node's pods reach) are
    written into a cluster when it is created."""
    start = time.monotonic()
    bins = toolchain.ensure_tools()
    if cluster.exists() and not cluster.is_serving():
        _log(f"cluster {cluster.name!r} exists but does not answer; starting its processes")
        cluster.run(str(bins / "kwokctl"), "start", "cluster", "--name", cluster.name, "--wait", "2m")
    if cluster.exists() and step_seconds:
        _log(
            f"cluster {cluster.name!r} exists: its simulated step seconds stay as created "
            f"(`dev down` first, or set them per object with {simulated_steps.annotation('<step>')} annotations)"
        )
    if not cluster.exists():
        _log(f"creating cluster {cluster.name!r} (kwokctl binary runtime, 127.0.0.1)")
        config = cluster.workdir / f"{cluster.name}-kwokctl.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(kwokctl_config(bins, cluster.pki, audit_policy, step_seconds, real_node))
        cluster.run(
            str(bins / "kwokctl"), "create", "cluster", "--name", cluster.name, "--config", str(config), "--wait", "2m"
        )
        (cluster.directory / OPTIONS_FILE).write_text(json.dumps({"realNode": real_node}))
    objects, notes = nodes.keep_pod_cidrs(cluster_objects(cpu_nodes, gpu_nodes), pod_cidrs(cluster))
    for note in notes:
        _log(note)
    cluster.kubectl(
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        "-",
        input="\n---\n".join(yaml.safe_dump(o) for o in objects),
    )
    wait_nodes_ready(cluster, [o["metadata"]["name"] for o in objects if o["kind"] == "Node"])
    try:
        cluster.lws.up(cluster.env())
    except lws.LwsError as error:
        raise ClusterError(str(error)) from error
    _log(f"cluster {cluster.name!r} is up ({time.monotonic() - start:.1f}s)")


def install(cluster: LocalCluster, sample: bool = True, operator_metrics_port: int = 0) -> None:
    """CRDs, the operator (a local process: kwok pods run no containers; its /metrics on
    `operator_metrics_port`, 0 for none) and a sample deployment."""
    apply_crds(cluster)
    start_operator(cluster, operator_metrics_port)
    start_pod_runner(cluster)
    if sample:
        text = resources.files("specdec").joinpath("examples", SAMPLE).read_text()
        cluster.kubectl("apply", "-n", "default", "-f", "-", input=text)
        _log(f"applied sample {SAMPLE} in namespace default")


def apply_crds(cluster: LocalCluster) -> None:
    """Install (or update) the CRDs and wait until the API server serves them."""
    cluster.kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", input="\n---\n".join(render_crds().values())
    )
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/speculativedeployments.specdec.io",
        "crd/enginebuilds.specdec.io",
    )


def start_operator(cluster: LocalCluster, metrics_port: int = 0) -> None:
    if cluster.operator_pid():
        _log(f"operator already running (pid {cluster.operator_pid()}, log {cluster.operator_log})")
        return
    argv = [
        sys.executable,
        "-m",
        "specdec.cli",
        "operator",
        "--liveness",
        f"http://127.0.0.1:{cluster.operator_port}/healthz",
        "--metrics-port",
        str(metrics_port),
    ]
    process = start_process(
        argv, cluster.operator_pid_file, cluster.operator_log, {**DEV_OPERATOR_ENV, **cluster.env()}
    )
    problem = wait_healthy(process, cluster.operator_port)
    if problem:
        raise ClusterError(f"{problem}; see {cluster.operator_log}")
    _log(f"operator running (pid {process.pid}, log {cluster.operator_log})")


def wait_healthy(process: subprocess.Popen, port: int, timeout: float = 60.0) -> str | None:
    """Wait until a started operator answers on its liveness port; else say why it did not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return f"the operator exited with {process.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return None
        except OSError:
            time.sleep(0.2)
    return f"the operator did not become healthy in {timeout:.0f}s"


def stop_operator(cluster: LocalCluster) -> None:
    stop_process(cluster.operator_pid_file, "operator")


def start_pod_runner(cluster: LocalCluster) -> None:
    """The runtime pods' servers: the real front before a simulated backend, on each pod's IP."""
    pid = running_pid(cluster.pod_runner_pid_file)
    if pid:
        _log(f"pod runner already running (pid {pid}, log {cluster.pod_runner_log})")
        return
    process = start_process(
        [
            sys.executable,
            "-m",
            "specdec_dev.podrunner",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--cluster-dir",
            str(cluster.directory),
        ],
        cluster.pod_runner_pid_file,
        cluster.pod_runner_log,
        cluster.env(),
    )
    try:
        process.wait(POD_RUNNER_START_SECONDS)  # one that cannot start (a missing package) ends at once
    except subprocess.TimeoutExpired:
        _log(
            f"pod runner running (pid {process.pid}, log {cluster.pod_runner_log}); acceptance profiles: "
            f"`specdec dev simulate`"
        )
        return
    raise ClusterError(f"the pod runner exited with {process.returncode}; see {cluster.pod_runner_log}")


def pod_cidrs(cluster: LocalCluster) -> dict[str, list[str]]:
    """Each node's podCIDRs ([] when unset: nodes of clusters created before we set them, which get ours)."""
    listing = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)
    return {n["metadata"]["name"]: n.get("spec", {}).get("podCIDRs", []) for n in listing["items"]}


def wait_nodes_ready(cluster: LocalCluster, names: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while True:
        listing = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)
        ready = {
            n["metadata"]["name"]
            for n in listing["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n.get("status", {}).get("conditions", []))
        }
        missing = sorted(set(names) - ready)
        if not missing:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"nodes not Ready after {READY_TIMEOUT_SECONDS}s: {', '.join(missing)}")
        time.sleep(0.5)


def down(cluster: LocalCluster) -> None:
    """Stop the cluster's processes and delete it; a real node must be stopped first (specdec_dev.real_node)."""
    if any(running_pid(cluster.real_node_dir / f"{p}.pid") for p in ("kubelet", "containerd")):
        raise ClusterError(f"cluster {cluster.name!r} has a real node running: `specdec dev down` stops it first")
    stop_process(cluster.pod_runner_pid_file, "pod runner")
    stop_operator(cluster)
    stop_process(cluster.prometheus_dir / "prometheus.pid", "prometheus")  # `dev up --prometheus`
    cluster.lws.down()
    if not cluster.exists():
        _log(f"no cluster {cluster.name!r}; nothing to do")
        return
    cluster.run(str(toolchain.bin_dir() / "kwokctl"), "delete", "cluster", "--name", cluster.name)
    _log(f"cluster {cluster.name!r} deleted")


def status(cluster: LocalCluster) -> str:
    if not cluster.exists():
        return f"cluster {cluster.name!r}: not created (run `specdec dev up`)"
    if not cluster.is_serving():
        return f"cluster {cluster.name!r}: created but not serving (run `specdec dev up` to start it)"
    table = cluster.kubectl(
        "get",
        "nodes",
        "-o",
        "custom-columns=NAME:.metadata.name,STATUS:.status.conditions[?(@.type=='Ready')].status,"
        "GPU:.status.allocatable.nvidia\\.com/gpu,PRODUCT:.metadata.labels.nvidia\\.com/gpu\\.product",
    ).stdout
    processes = []
    for what, pid_file, log in (
        ("operator", cluster.operator_pid_file, cluster.operator_log),
        ("pod runner", cluster.pod_runner_pid_file, cluster.pod_runner_log),
        (f"LeaderWorkerSet {toolchain.LWS_VERSION}", cluster.lws.pid_file, cluster.lws.log),
    ):
        pid = running_pid(pid_file)
        processes.append(f"{what} " + (f"running (pid {pid}, log {log})" if pid else "not running"))
    return f"cluster {cluster.name!r}: serving; {'; '.join(processes)}\n{cluster.exports()}\n{table}"
