"""What the real node's containerd, CNI bridge and kubelet are configured with (specdec_dev.real_node). Pure."""

from __future__ import annotations

from pathlib import Path

from specdec_dev import nodes, toolchain

# A taint only pods meant for the real node tolerate: simulated GPU work (engine builds) stays on kwok's nodes.
TAINT_KEY = "specdec.io/real-node"
TAINTS = [
    {"key": nodes.GPU_RESOURCE, "value": "present", "effect": "NoSchedule"},
    {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"},
]
BRIDGE = "specdec0"
POD_SUBNET = "10.88.0.0/24"
GATEWAY = "10.88.0.1"
CLUSTER_DOMAIN = "cluster.local"  # the pods' DNS (specdec_dev.pod_dns) listens on GATEWAY
PAUSE_IMAGE = f"localhost/specdec-pause:{toolchain.KUBERNETES_VERSION}"
# The kubelet refreshes a pod's ConfigMap volumes when it syncs the pod: once a minute by default. Ten seconds
# here, so a draft length the operator changes reaches a pod's front within seconds in the local cluster.
SYNC_FREQUENCY = "10s"


def containerd_config(directory: Path, cni_bin: Path) -> str:
    """containerd's configuration: everything under `directory`, runc (cgroupfs), our CNI dirs, our pause image.
    restrict_oom_score_adj: the CRI gives sandboxes a negative OOM score, which needs CAP_SYS_RESOURCE; without
    it (containers in containers, some CI machines) every sandbox fails with runc's "can't get final child's
    PID from pipe". Clamping costs Guaranteed pods their negative OOM scores, nothing else."""
    runc = toolchain.which("runc") or "runc"
    return f"""version = 3
root = "{directory}/root"
state = "{directory}/state"
[grpc]
  address = "{directory}/containerd.sock"
[ttrpc]
  address = "{directory}/containerd.sock.ttrpc"
[debug]
  address = "{directory}/debug.sock"
[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "{PAUSE_IMAGE}"
  [plugins."io.containerd.cri.v1.runtime"]
    restrict_oom_score_adj = true
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          SystemdCgroup = false
          Root = "{directory}/runc"
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["{cni_bin}"]
      conf_dir = "{directory.parent}/cni/conf"
"""


def cni_config(ipam_dir: Path) -> dict:
    """One bridge (no masquerade, no port maps: neither adds an iptables rule), addresses from host-local."""
    return {
        "cniVersion": "1.0.0",
        "name": "specdec",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(ipam_dir),
                },
            }
        ],
    }


def kubelet_config(directory: Path, ca_file: Path, socket: Path) -> dict:
    """A KubeletConfiguration for this machine: cgroup v1 allowed (the kubelet refuses it unless told), the
    cgroupfs driver (no systemd here), webhook authentication and authorization against the API server (whose
    kubelet client certificate the cluster's CA signed), no swap check, eviction thresholds a shared dev disk
    does not trip, the pods' DNS on their gateway (specdec_dev.pod_dns)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "containerRuntimeEndpoint": f"unix://{socket}",
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "failSwapOn": False,
        "healthzBindAddress": "127.0.0.1",
        "readOnlyPort": 0,
        "maxPods": 20,
        "evictionHard": {
            "memory.available": "50Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 99,
        "imageGCLowThresholdPercent": 98,
        "podLogsDir": str(directory / "pod-logs"),
        "syncFrequency": SYNC_FREQUENCY,
        "registerWithTaints": TAINTS,
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
    }
