"""A real node in the local cluster, beside kwok's simulated ones: a kubelet (built from the pinned Kubernetes
modules) with containerd 2.x, Debian's runc and the CNI bridge plugin, joined to the same control plane, with
the project's images imported into containerd (no registry: `ctr images import` of OCI archives).

So what kwok cannot show runs for real here: the kubelet's Pod Security checks at container start
(`runAsNonRoot` against the image's user), read-only root filesystems, ConfigMap volumes and their refresh,
probes, restarts and the pod network. What stays simulated, and why:
- GPUs: none on this machine. The node advertises `nvidia.com/gpu` (GPU_STAND_INS of them) through its
  status, Kubernetes' documented way to advertise an extended resource without a device plugin, and the GPU
  labels NVIDIA's feature discovery sets; the kubelet admits GPU pods, no device is handed to them.
- TensorRT-LLM and Triton: the runtime test image runs stand-ins behind their command lines (see
  runtime_image/Dockerfile.test).
- Services: there is no kube-proxy; one DNAT rule routes the `kubernetes` Service's ClusterIP to the API
  server, so in-cluster clients (the operator's pod) work as on any cluster. Pods are reached by their IPs,
  or by the names headless Services give them, which specdec_dev.pod_dns answers.

It needs root, cgroups, iptables and runc (Debian packages: DEBIAN_PACKAGES), and one per machine: the
kubelet's device-plugin directory is a fixed host path. Everything it changes on the host is recorded
first and undone by `stop` (specdec_dev.host_changes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from specdec_dev import cluster as local_cluster
from specdec_dev import host_changes, images, nodes, toolchain
from specdec_dev.cluster import KUBERNETES_SERVICE_IP, ClusterError, LocalCluster, wait_nodes_ready
from specdec_dev.node_config import (
    BRIDGE,
    GATEWAY,
    PAUSE_IMAGE,
    TAINT_KEY,
    cni_config,
    containerd_config,
    kubelet_config,
)
from specdec_dev.pause_image import build_pause, pause_image_archive
from specdec_dev.processes import running_pid, start_process, stop_process

NODE_NAME = "real-0"
POD_DNS_START_SECONDS = 1.0  # it fails at once if it cannot listen
GPU_STAND_INS = 4
DEBIAN_PACKAGES = {
    "runc": "runc",
    "iptables": "iptables",
    "ip": "iproute2",
    "podman": "podman",
    "mmdebstrap": "mmdebstrap",
    "gcc": "gcc",
    "nft": "nftables",
}
# One real node per machine: who has it (the kubelet's device-plugin socket dir is fixed).
OWNER_FILE = Path("/run/specdec-real-node.owner")
DNAT_COMMENT = "specdec real node: the kubernetes Service"
# The sample whose runtime pod runs on the real node: a PyTorch-backend deployment (no engine builds; its
# checkpoints are fetched on simulated CPU nodes), in the runtime test image.
SAMPLE = "llama-3.1-8b-draft-1b-pytorch.yaml"
SAMPLE_NAME = "llama8b-real-node"


def problems() -> list[str]:
    """Why a real node cannot start on this machine ([] when it can)."""
    found = []
    if sys.platform != "linux":
        found.append("a real node needs Linux")
        return found
    if os.geteuid() != 0:
        found.append("a real node needs root (containerd, the kubelet, iptables and cgroups)")
    if not (Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").is_file()):
        found.append("no cgroup memory controller is mounted under /sys/fs/cgroup")
    missing = toolchain.missing_packages(DEBIAN_PACKAGES)
    if missing:
        found.append(
            f"missing Debian packages: {' '.join(missing)} (`apt-get install {' '.join(missing)}`; "
            f"`specdec dev tools --real-node` installs them as root)"
        )
    return found


def install_packages() -> None:
    """The Debian packages a real node and the image builds need, when root and apt-get are there."""
    toolchain.install_packages(DEBIAN_PACKAGES, "a real node")


def _log(message: str) -> None:
    print(f"[real-node] {message}", file=sys.stderr, flush=True)


class RealNode:
    """The real node of one local cluster: its processes, files and what it changed on the host."""

    def __init__(self, cluster: LocalCluster):
        self.cluster = cluster
        self.directory = cluster.real_node_dir

    @property
    def socket(self) -> Path:
        return self.directory / "containerd" / "containerd.sock"

    def _file(self, name: str) -> Path:
        return self.directory / name

    def kubelet_pid(self) -> int | None:
        return running_pid(self._file("kubelet.pid"))

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.cluster.run(
            str(toolchain.bin_dir() / "ctr"), "--address", str(self.socket), "-n", "k8s.io", *args, check=check
        )

    def crictl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.cluster.run(
            str(toolchain.bin_dir() / "crictl"), "--runtime-endpoint", f"unix://{self.socket}", *args, check=check
        )

    def exports(self) -> str:
        return f"export CONTAINER_RUNTIME_ENDPOINT=unix://{self.socket}"

    def apply_sample(self, namespace: str = "default") -> None:
        deployment = on_real_node(yaml.safe_load(resources.files("specdec").joinpath("examples", SAMPLE).read_text()))
        deployment["metadata"]["name"] = SAMPLE_NAME
        self.cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(deployment))
        _log(f"applied sample {SAMPLE_NAME} ({SAMPLE}, its runtime pod on {NODE_NAME}) in namespace {namespace}")

    # --- start -------------------------------------------------------------------------------------------

    def start(self, images: dict[str, Path]) -> None:
        """Start containerd and the kubelet (unless running), import `images` (reference -> OCI archive) and
        the pause image, and wait until the node is Ready with its GPU stand-ins advertised."""
        found = problems()
        if found:
            raise ClusterError("no real node here: " + "; ".join(found))
        if not self.cluster.options().get("realNode"):
            raise ClusterError(
                f"cluster {self.cluster.name!r} was created without a real node's settings (its API "
                f"server listens on 127.0.0.1 only): `specdec dev down`, then `specdec dev up "
                f"--real-node`"
            )
        self._claim_machine()
        self.directory.mkdir(parents=True, exist_ok=True)
        state_file = self._file("host-state.json")
        if not state_file.exists():  # a restart keeps the first record: the host as it was before any node
            host_changes.record().save(state_file)
        self._start_containerd()
        self.import_images(images)
        self._route_kubernetes_service()
        self._start_dns()
        self._start_kubelet()
        wait_nodes_ready(self.cluster, [NODE_NAME])
        self._advertise_gpus()
        _log(
            f"node {NODE_NAME} Ready (containerd {toolchain.CONTAINERD_VERSION}, kubelet "
            f"{toolchain.KUBERNETES_VERSION}); crictl: {self.exports()}"
        )

    def _claim_machine(self) -> None:
        try:
            owner = json.loads(OWNER_FILE.read_text())
        except (OSError, ValueError):
            owner = None
        if owner and owner.get("directory") != str(self.directory) and running_pid(Path(owner["pidFile"])):
            raise ClusterError(
                f"the real node of cluster {owner['cluster']!r} runs on this machine; one kubelet per "
                f"machine (its device-plugin directory is fixed): `specdec dev down --name "
                f"{owner['cluster']}` first"
            )
        OWNER_FILE.write_text(
            json.dumps(
                {
                    "cluster": self.cluster.name,
                    "directory": str(self.directory),
                    "pidFile": str(self._file("kubelet.pid")),
                }
            )
        )

    def _start_containerd(self) -> None:
        if running_pid(self._file("containerd.pid")):
            return
        directory = self.socket.parent
        for sub in (directory, self.directory / "cni" / "conf", self.directory / "cni" / "ipam"):
            sub.mkdir(parents=True, exist_ok=True)
        config = directory / "config.toml"
        config.write_text(containerd_config(directory, toolchain.group_dir(toolchain.CNI_GROUP)))
        (self.directory / "cni" / "conf" / "10-specdec.conflist").write_text(
            json.dumps(cni_config(self.directory / "cni" / "ipam"), indent=1)
        )
        process = start_process(
            [str(toolchain.bin_dir() / "containerd"), "--config", str(config)],
            self._file("containerd.pid"),
            self._file("containerd.log"),
            self.cluster.env(),
        )
        deadline = time.monotonic() + 30
        while self.ctr("version", check=False).returncode != 0:
            if process.poll() is not None or time.monotonic() > deadline:
                raise ClusterError(f"containerd did not start; see {self._file('containerd.log')}")
            time.sleep(0.3)

    def import_images(self, images: dict[str, Path]) -> None:
        """Import `images` (reference -> OCI archive) into containerd, each unless already imported from that
        archive; the pause image first when missing."""
        have = set(self.ctr("images", "list", "-q").stdout.split())
        pause = self._file("pause.oci.tar")
        if PAUSE_IMAGE not in have:
            pause.write_bytes(pause_image_archive(build_pause()))
            images = {PAUSE_IMAGE: pause, **images}
        for reference, archive in images.items():
            digest_file = archive.with_suffix(".imported")
            stamp = f"{archive.stat().st_mtime_ns}:{self.socket}"
            if reference in have and digest_file.is_file() and digest_file.read_text() == stamp:
                continue
            start = time.monotonic()
            self.ctr("images", "import", str(archive))
            if reference not in set(self.ctr("images", "list", "-q").stdout.split()):
                raise ClusterError(f"importing {archive} did not give image {reference}")
            digest_file.write_text(stamp)
            _log(f"imported {reference} into containerd ({time.monotonic() - start:.1f}s)")

    def _route_kubernetes_service(self) -> None:
        """The one Service rule kube-proxy would make that in-cluster clients need: the `kubernetes` Service's
        ClusterIP:443 to the API server, for traffic from the pods' bridge."""
        rule = self._dnat_rule()
        iptables = toolchain.which("iptables") or "iptables"
        if subprocess.run([iptables, "-w", "-t", "nat", "-C", *rule], capture_output=True).returncode != 0:
            subprocess.run([iptables, "-w", "-t", "nat", "-A", *rule], check=True, capture_output=True)

    def _dnat_rule(self) -> list[str]:
        port = urlsplit(self.cluster.server()).port
        return [
            "PREROUTING",
            "-i",
            BRIDGE,
            "-d",
            f"{KUBERNETES_SERVICE_IP}/32",
            "-p",
            "tcp",
            "--dport",
            "443",
            "-m",
            "comment",
            "--comment",
            DNAT_COMMENT,
            "-j",
            "DNAT",
            "--to-destination",
            f"{GATEWAY}:{port}",
        ]

    def pod_dns_pid(self) -> int | None:
        return running_pid(self._file("pod-dns.pid"))

    def _start_dns(self) -> None:
        """The pods' cluster DNS (specdec_dev.pod_dns), on the gateway the kubelet gives pods as clusterDNS."""
        pid_file = self._file("pod-dns.pid")
        if running_pid(pid_file):
            return
        argv = [sys.executable, "-m", "specdec_dev.pod_dns", f"--kubeconfig={self.cluster.kubeconfig}"]
        log = self._file("pod-dns.log")
        process = start_process([*argv, f"--address={GATEWAY}"], pid_file, log, self.cluster.env())
        time.sleep(POD_DNS_START_SECONDS)
        if process.poll() is not None:
            raise ClusterError(f"the pods' DNS (specdec_dev.pod_dns) exited at start; see {log}")

    def _start_kubelet(self) -> None:
        if self.kubelet_pid():
            return
        root = self.directory / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        config = self._file("kubelet.yaml")
        config.write_text(yaml.safe_dump(kubelet_config(self.directory, self.cluster.pki / "ca.crt", self.socket)))
        labels = ",".join(f"{k}={v}" for k, v in {**nodes.gpu_labels(GPU_STAND_INS), TAINT_KEY: "true"}.items())
        argv = [
            str(toolchain.bin_dir() / "kubelet"),
            f"--config={config}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--root-dir={root}",
            f"--cert-dir={root / 'pki'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-labels={labels}",
        ]
        start_process(argv, self._file("kubelet.pid"), self._file("kubelet.log"), self.cluster.env())

    def _advertise_gpus(self) -> None:
        """nvidia.com/gpu in the node's capacity; the kubelet copies it to allocatable at its next status sync."""
        patch = [
            {
                "op": "add",
                "path": f"/status/capacity/{nodes.GPU_RESOURCE.replace('/', '~1')}",
                "value": str(GPU_STAND_INS),
            }
        ]
        self.cluster.kubectl("patch", "node", NODE_NAME, "--subresource=status", "--type=json", "-p", json.dumps(patch))
        deadline = time.monotonic() + 60
        while True:
            node = json.loads(self.cluster.kubectl("get", "node", NODE_NAME, "-o", "json").stdout)
            if node["status"].get("allocatable", {}).get(nodes.GPU_RESOURCE) == str(GPU_STAND_INS):
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"node {NODE_NAME} did not take its {nodes.GPU_RESOURCE} stand-ins in 60s")
            time.sleep(1)

    # --- stop --------------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the kubelet, every pod sandbox and containerd; undo what they changed on the host."""
        if not self.directory.exists():
            return
        stop_process(self._file("kubelet.pid"), "kubelet")
        stop_process(self._file("pod-dns.pid"), "pod-dns")
        if running_pid(self._file("containerd.pid")):
            for sandbox in self.crictl("pods", "-q", check=False).stdout.split():
                self.crictl("stopp", sandbox, check=False)
                self.crictl("rmp", "--force", sandbox, check=False)
        stop_process(self._file("containerd.pid"), "containerd")
        self._kill_shims()
        subprocess.run(
            [toolchain.which("iptables") or "iptables", "-w", "-t", "nat", "-D", *self._dnat_rule()],
            capture_output=True,
        )
        notes = host_changes.unmount_under(self.directory)
        state_file = self._file("host-state.json")
        if state_file.exists():
            notes += host_changes.restore(host_changes.HostState.load(state_file), [self.directory], BRIDGE)
        else:
            shutil.rmtree(self.directory, ignore_errors=True)
        try:
            if json.loads(OWNER_FILE.read_text()).get("directory") == str(self.directory):
                OWNER_FILE.unlink()
        except (OSError, ValueError):
            pass
        for note in notes:
            _log(f"left on the host: {note}")
        _log(f"node {NODE_NAME} stopped; the host's changes undone")

    def _kill_shims(self) -> None:
        """Shims whose containerd is gone (one outlives containerd when a container did not stop)."""
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(self.socket).encode() in argv:
                os.kill(int(proc.name), signal.SIGKILL)


def on_real_node(deployment: dict, image: str = images.RUNTIME_TEST_IMAGE) -> dict:
    """A SpeculativeDeployment whose runtime pods run on the real node, in `image`."""
    spec = deployment["spec"]
    runtime = spec.setdefault("runtime", {})
    runtime["image"] = image
    runtime["nodeSelector"] = {"kubernetes.io/hostname": NODE_NAME}
    runtime["tolerations"] = [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    return deployment


def up(cluster: LocalCluster) -> RealNode:
    """What a real node needs (Debian packages, binaries, images), then the node itself."""
    install_packages()
    toolchain.ensure_tools(real_node=True)
    node = RealNode(cluster)
    node.start(images.build_images())
    return node


def down(cluster: LocalCluster) -> None:
    """The cluster's real node (if any), then the cluster."""
    RealNode(cluster).stop()
    local_cluster.down(cluster)
