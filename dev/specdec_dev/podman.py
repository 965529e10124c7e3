"""The local image store: podman on a store of its own under the cache, and the OCI archives of its images.

Podman keeps these images in a store of its own under the cache (`--root`, `--runroot`, `--tmpdir`), not the
user's default one: nothing here touches the user's images, two different tags cannot collide with theirs,
and deleting `~/.cache/specdec` removes everything. `podman_command()` is the podman to look at them with.
Builds use runc (crun refuses this host's cgroup layout) and explicit ulimits: podman's own defaults exceed
what root may set here (no CAP_SYS_RESOURCE). Each image is saved as an OCI archive with its key beside it, so
an image whose inputs did not change is reused without calling podman at all.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from specdec_dev import toolchain

# Podman 4.3 itself runs with RLIMIT_NPROC 32768 here, and runc cannot give a container more than that.
NPROC_LIMIT = 32768


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says what to install or what failed, with the log's tail."""


def progress(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def images_dir() -> Path:
    return toolchain.cache_root() / "images"


def archive_path(reference: str) -> Path:
    """The OCI archive of an image: `<name>.oci.tar` (one per image; its key beside it in `.key`)."""
    name = reference.rsplit("/", 1)[-1].split(":", 1)[0]
    return images_dir() / f"{name}.oci.tar"


def key_file(archive: Path) -> Path:
    return archive.with_name(archive.name + ".key")


def _runroot_base() -> Path:
    # Podman's run state belongs on a directory cleared at boot; it must be the same on every call (podman
    # refuses a store whose recorded paths changed), so not $XDG_RUNTIME_DIR, which some shells lack.
    if os.geteuid() == 0:
        return Path("/run/specdec-podman")
    return Path(tempfile.gettempdir()) / f"specdec-podman-{os.getuid()}"


def podman_command() -> list[str]:
    """podman on this module's own image store, with runc. The store's real path: podman records it and refuses
    the store under another spelling (a symlinked cache dir, a SPECDEC_CACHE through a link)."""
    images_dir().mkdir(parents=True, exist_ok=True)
    store = images_dir().resolve() / "podman"
    run = _runroot_base()
    return [
        "podman",
        "--root",
        str(store / "storage"),
        "--runroot",
        str(run / "runroot"),
        "--tmpdir",
        str(run / "libpod"),
        "--runtime",
        "runc",
    ]


def ulimit_args() -> list[str]:
    """Explicit limits at or below this process's hard limits (podman's defaults would raise them)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else min(nofile, 1048576)
    nproc = NPROC_LIMIT if nproc == resource.RLIM_INFINITY else min(nproc, NPROC_LIMIT)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


def command_env() -> dict[str, str]:
    return {**os.environ, "PATH": toolchain.with_system_dirs(os.environ.get("PATH", ""))}


def require(*names: str) -> None:
    missing = [name for name in names if not toolchain.which(name)]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed; the images are built "
            f"without a registry with podman (and runc: crun refuses this host's cgroup layout), the base from "
            f"Debian's packages with mmdebstrap. Debian: apt-get install podman buildah runc mmdebstrap"
        )


def run(args: list[str], label: str, log: Path, env: dict[str, str] | None = None) -> None:
    """Run a command with its output appended to `log`; fail with the log's tail."""
    try:
        status, tail = toolchain.run_logged(args, label, log, env or command_env(), progress, tail_lines=30)
    except OSError as error:
        raise ImageBuildError(f"{label}: cannot run {args[0]}: {error.strerror or error}") from None
    if status:
        raise ImageBuildError(f"{label} failed (exit {status}); full log: {log}\n" + "\n".join(tail))


def podman(*args: str, label: str, log: Path) -> None:
    run([*podman_command(), *args], label, log)


def podman_has(reference: str) -> bool:
    return (
        subprocess.run(
            [*podman_command(), "image", "exists", reference],
            env=command_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ).returncode
        == 0
    )


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One build at a time per cache (another process may be building the same images)."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with (images_dir() / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached(archive: Path, key: str) -> bool:
    recorded = key_file(archive)
    return archive.is_file() and recorded.is_file() and recorded.read_text().strip() == key


def image_files(archive: Path) -> set[str]:
    """The paths (without a leading /) of the files and links in an OCI archive's image: every layer of its
    first manifest, read without podman (a layer's deletions are not applied: a path any layer holds is listed)."""
    with tarfile.open(archive) as outer:

        def blob(digest: str) -> bytes:
            member = outer.extractfile("blobs/" + digest.replace(":", "/", 1))
            if member is None:
                raise ImageBuildError(f"{archive}: no blob {digest}")
            return member.read()

        def read_json(name: str) -> dict:
            member = outer.extractfile(name)
            if member is None:
                raise ImageBuildError(f"{archive}: no {name}")
            return json.loads(member.read())

        manifest = json.loads(blob(read_json("index.json")["manifests"][0]["digest"]))
        files: set[str] = set()
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"])), mode="r:*") as tar:
                files.update(m.name.removeprefix("./") for m in tar.getmembers() if not m.isdir())
        return files


def save(reference: str, archive: Path, key: str, log: Path) -> None:
    """The image as an OCI archive, replaced in one step, then its key."""
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    podman("save", "--format", "oci-archive", "-o", str(partial), reference, label=f"saving {reference}", log=log)
    key_file(archive).unlink(missing_ok=True)
    os.replace(partial, archive)
    key_file(archive).write_text(key + "\n")
