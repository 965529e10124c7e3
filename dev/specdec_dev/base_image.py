"""The base image: a Debian root filesystem made by mmdebstrap from Debian's packages, imported into podman.

No container registry is reachable from our machines (only the package registries), so no base image can be
pulled: minbase plus what the Dockerfiles need (Python with venv and pip, useradd, CA certificates). Its tag
carries a hash of its recipe (suite, packages, options), so it is built once per recipe. It runs as root, as
a base image does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shlex
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from specdec_dev.podman import (
    archive_path,
    cached,
    command_env,
    images_dir,
    podman,
    podman_has,
    progress,
    require,
    run,
    save,
)

SUITE = "bookworm"  # Debian 12: Python 3.11, like the hosts the wheelhouse is downloaded on
DEBIAN_MIRROR = os.environ.get("SPECDEC_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SECURITY_MIRROR = os.environ.get("SPECDEC_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
# What the Dockerfiles need on top of minbase (which already has bash, util-linux and coreutils): `python`
# (the operator's Dockerfile), venv and pip (both), useradd (passwd), CA certificates.
BASE_PACKAGES = (
    "bash",
    "ca-certificates",
    "passwd",
    "python-is-python3",
    "python3",
    "python3-pip",
    "python3-venv",
    "util-linux",
)
# Like the slim Python images: no manuals, docs (but their copyright files) or translations.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/info/*",
    "force-unsafe-io",
)
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")  # merged /usr without the usrmerge package (perl)
# An imported root filesystem has no image configuration: give it what a base image has.
BASE_CONFIG = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    'CMD ["/bin/bash"]',
)


def base_key(packages: Iterable[str] = BASE_PACKAGES, customize: Iterable[str] = ()) -> str:
    """A Debian image's recipe: suite, variant, packages, options and the commands run in its root."""
    recipe: dict[str, object] = {
        "suite": SUITE,
        "variant": "minbase",
        "packages": sorted(packages),
        "dpkg": list(DPKG_OPTIONS),
        "config": list(BASE_CONFIG),
        "merged-usr": "hook",
        "security": True,
    }
    commands = list(customize)
    if commands:  # absent for the base, whose key (and so its tag and cached archive) stays as it was
        recipe["customize"] = commands
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class DebianImage:
    """An image made from Debian's packages alone: `packages` on minbase, then `customize`, shell commands
    run in its root filesystem (chroot) as root. Its tag carries its recipe's hash."""

    name: str
    packages: tuple[str, ...]
    customize: tuple[str, ...] = ()

    def key(self) -> str:
        return base_key(self.packages, self.customize)

    @property
    def reference(self) -> str:
        return f"localhost/{self.name}:{SUITE}-{self.key()[:12]}"


BASE = DebianImage("specdec-base", BASE_PACKAGES)
BASE_IMAGE = BASE.reference


def _scratch_dir() -> str | None:
    """mmdebstrap's chroot on tmpfs when there is room: 75 -> 55 s here (dpkg's many small writes)."""
    with contextlib.suppress(OSError):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize > 2 * 1024**3 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    return None


def build_base(log: Path) -> Path:
    """BASE_IMAGE in podman's store and as an OCI archive; mmdebstrap only when there is no archive yet."""
    return build_debian_image(BASE, log)


def build_debian_image(image: DebianImage, log: Path) -> Path:
    """`image` in podman's store and as an OCI archive; mmdebstrap only when there is no archive yet."""
    reference = image.reference
    archive, key = archive_path(reference), image.key()
    if cached(archive, key):
        if not podman_has(reference):
            progress(f"loading {reference} from {archive}")
            podman("load", "-i", str(archive), label=f"loading {reference}", log=log)
        return archive
    require("mmdebstrap")
    progress(
        f"building the root filesystem {reference} from Debian {SUITE}'s packages (mmdebstrap; about a minute, once)"
    )
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"{image.name}-", dir=images_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        command = [
            "mmdebstrap",
            "--variant=minbase",
            f"--include={','.join(image.packages)}",
            *[f"--dpkgopt={option}" for option in DPKG_OPTIONS],
            *[f'--customize-hook=chroot "$1" sh -ec {shlex.quote(c)}' for c in image.customize],
        ]
        if MERGED_USR_HOOK.is_dir():
            command.append(f"--hook-dir={MERGED_USR_HOOK}")
        command += [
            SUITE,
            str(rootfs),
            f"deb {DEBIAN_MIRROR} {SUITE} main",
            f"deb {DEBIAN_MIRROR} {SUITE}-updates main",
            f"deb {DEBIAN_SECURITY_MIRROR} {SUITE}-security main",
        ]
        env = command_env()
        scratch = _scratch_dir()
        if scratch:
            env["TMPDIR"] = scratch
        run(command, "mmdebstrap", log, env)
        progress(f"  root filesystem built ({time.monotonic() - start:.0f}s); importing it into podman")
        changes = [arg for change in BASE_CONFIG for arg in ("--change", change)]
        podman("import", *changes, str(rootfs), reference, label=f"importing {reference}", log=log)
    save(reference, archive, key, log)
    progress(f"built {reference} in {time.monotonic() - start:.0f}s")
    return archive
