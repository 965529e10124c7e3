"""The real node's pure parts: its pause image, its configurations, and the host-state bookkeeping."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

from specdec_dev import cluster, node_config, nodes, pause_image, real_node


def test_the_pause_image_is_an_oci_archive_containerd_names_by_its_reference():
    archive = tarfile.open(fileobj=io.BytesIO(pause_image.pause_image_archive(b"\x7fELF pause")))
    files = {m.name: archive.extractfile(m).read() for m in archive.getmembers()}
    index = json.loads(files["index.json"])
    (entry,) = index["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == node_config.PAUSE_IMAGE
    manifest = files[f"blobs/sha256/{entry['digest'].split(':')[1]}"]
    assert hashlib.sha256(manifest).hexdigest() == entry["digest"].split(":")[1] and len(manifest) == entry["size"]
    manifest = json.loads(manifest)
    config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'].split(':')[1]}"])
    assert config["config"] == {"Entrypoint": ["/pause"], "User": "65535:65535"}  # never root
    layer = files[f"blobs/sha256/{manifest['layers'][0]['digest'].split(':')[1]}"]
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    pause = tarfile.open(fileobj=io.BytesIO(layer)).getmember("pause")
    assert pause.mode == 0o755 and pause.size == len(b"\x7fELF pause")


def test_the_kubernetes_service_ip_is_the_first_of_the_service_range():
    assert cluster.SERVICE_CIDR == "10.96.0.0/16" and cluster.KUBERNETES_SERVICE_IP == "10.96.0.1"


def test_the_kubelet_is_configured_for_this_kind_of_host(tmp_path):
    config = node_config.kubelet_config(tmp_path, tmp_path / "ca.crt", tmp_path / "c.sock")
    assert config["failCgroupV1"] is False and config["cgroupDriver"] == "cgroupfs"
    assert config["authentication"]["anonymous"]["enabled"] is False and config["authorization"]["mode"] == "Webhook"
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'c.sock'}"
    taints = {t["key"] for t in config["registerWithTaints"]}
    assert taints == {nodes.GPU_RESOURCE, node_config.TAINT_KEY}  # no fetch or build pod lands there by chance


def test_containerd_keeps_its_state_and_runc_state_in_its_directory(tmp_path):
    text = node_config.containerd_config(tmp_path / "containerd", tmp_path / "cni")
    assert f'root = "{tmp_path}/containerd/root"' in text and f'Root = "{tmp_path}/containerd/runc"' in text
    assert "restrict_oom_score_adj = true" in text and f'sandbox = "{node_config.PAUSE_IMAGE}"' in text
    cni = node_config.cni_config(tmp_path / "ipam")
    bridge = cni["plugins"][0]
    assert bridge["bridge"] == node_config.BRIDGE and bridge["ipMasq"] is False  # no iptables rule of its own


def test_without_root_the_real_node_says_why_before_anything_starts(monkeypatch, tmp_path, capsys):
    from specdec import cli

    monkeypatch.setattr(real_node.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    assert any("needs root" in p for p in real_node.problems())
    assert cli.main(["dev", "up", "--real-node", "--name", "no-root"]) == 1
    assert "--real-node: a real node needs root" in capsys.readouterr().err
    assert not (tmp_path / "kwok").exists()  # no cluster was created
