"""The real node's pause image: upstream's pause binary, built from the Kubernetes module's own source, in an
OCI archive written here (no registry can give us registry.k8s.io/pause)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile

from specdec_dev import toolchain
from specdec_dev.node_config import PAUSE_IMAGE


def pause_image_archive(pause_binary: bytes, reference: str = PAUSE_IMAGE) -> bytes:
    """An OCI image archive holding one file, /pause, run as 65535 (what upstream's pause image is). Written
    here rather than with podman: a one-layer image needs no build tool and no image store of its own."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("pause")
        info.size, info.mode = len(pause_binary), 0o755
        tar.addfile(info, io.BytesIO(pause_binary))
    layer_bytes = layer.getvalue()
    layer_digest = hashlib.sha256(layer_bytes).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer_bytes)],
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                **_descriptor("application/vnd.oci.image.manifest.v1+json", manifest),
                "annotations": {
                    "io.containerd.image.name": reference,
                    "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
                },
            }
        ],
    }
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name, data in (
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
            ("index.json", json.dumps(index).encode()),
            *((f"blobs/sha256/{hashlib.sha256(b).hexdigest()}", b) for b in (layer_bytes, config, manifest)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive.getvalue()


def _descriptor(media_type: str, data: bytes) -> dict:
    return {"mediaType": media_type, "digest": f"sha256:{hashlib.sha256(data).hexdigest()}", "size": len(data)}


def build_pause() -> bytes:
    """The pause binary from the Kubernetes module's own source (build/pause/linux/pause.c), static."""
    source = toolchain.module_dir("k8s.io/kubernetes", toolchain.KUBERNETES_VERSION) / "build/pause/linux/pause.c"
    out = toolchain.cache_root() / "tools" / f"pause-{toolchain.KUBERNETES_VERSION}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["gcc", "-Os", "-static", f"-DVERSION={toolchain.KUBERNETES_VERSION}", "-o", str(out), str(source)],
            check=True,
            capture_output=True,
        )
        subprocess.run(["strip", str(out)], check=True)
    return out.read_bytes()
