"""Build the project's container images on this machine, without any registry, cached by their inputs.

No container registry is reachable from our machines (only the package registries), so no base image can be
pulled. Instead:

- the base: a Debian root filesystem made by mmdebstrap from Debian's packages (minbase plus what the
  Dockerfiles need: Python with venv and pip, useradd, CA certificates), imported into podman as BASE_IMAGE.
  Its tag carries a hash of its recipe (suite, packages, options), so it is built once per recipe. It runs as
  root, as a base image does;
- the operator image (OPERATOR_IMAGE) from the repository's own Dockerfile, only its base swapped
  (`--build-arg PYTHON_IMAGE=<base>`);
- the runtime test image (RUNTIME_TEST_IMAGE) from runtime_image/Dockerfile.test: the runtime images'
  install script, user and entrypoint on the base, with stand-ins for trtllm-serve and tritonserver
  (specdec.dev.standin_servers), since NVIDIA's base cannot be pulled here.

Each image is saved as an OCI archive in `~/.cache/specdec/images/`, for `ctr -n k8s.io images import`.
An image is rebuilt only when its inputs change: a hash of the files that go into it (Dockerfile,
pyproject.toml, constraints.txt, README.md, operator/**, runtime_image/**), of its base and of its recipe
here; otherwise its archive is reused, without calling podman at all.

Python packages come from a wheelhouse, `~/.cache/specdec/wheels/`, which the host's pip fills (pip download,
with the host's own index, proxy and certificate settings) once per dependency set. The builds mount it
read-only and install with PIP_FIND_LINKS and PIP_NO_INDEX (build ARGs of the Dockerfiles, unset by
default), so they need no network: on this machine pip inside a container cannot reach PyPI anyway, since
the egress proxy's certificate authority is the host's own (CERTIFICATE_VERIFY_FAILED).

Podman keeps these images in a store of its own under the cache (`--root`, `--runroot`, `--tmpdir`), not the
user's default one: nothing here touches the user's images, two different tags cannot collide with theirs,
and deleting `~/.cache/specdec` removes everything. `podman_command()` is the podman to look at them with.
Builds use runc (crun refuses this host's cgroup layout), host networking, never pull, and set explicit
ulimits: podman's own defaults exceed what root may set here (no CAP_SYS_RESOURCE).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from specdec.dev import toolchain

OPERATOR_IMAGE = "localhost/specdec-operator:dev"
RUNTIME_TEST_IMAGE = "localhost/specdec-runtime-test:dev"

# Bump when a change here changes what a build produces: every image's key includes it.
RECIPE_VERSION = "1"

SUITE = "bookworm"  # Debian 12: Python 3.11, like the hosts the wheelhouse is downloaded on
DEBIAN_MIRROR = os.environ.get("SPECDEC_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DEBIAN_SECURITY_MIRROR = os.environ.get("SPECDEC_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security")
# What the Dockerfiles need on top of minbase (which already has bash, util-linux and coreutils): `python`
# (the operator's Dockerfile), venv and pip (both), useradd (passwd), CA certificates.
BASE_PACKAGES = ("bash", "ca-certificates", "passwd", "python-is-python3", "python3", "python3-pip", "python3-venv",
                 "util-linux")
# Like the slim Python images: no manuals, docs (but their copyright files) or translations.
DPKG_OPTIONS = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*",
                "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/locale/*",
                "path-exclude=/usr/share/info/*", "force-unsafe-io")
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")  # merged /usr without the usrmerge package (perl)
# An imported root filesystem has no image configuration: give it what a base image has.
BASE_CONFIG = ("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "ENV LANG=C.UTF-8",
               'CMD ["/bin/bash"]')

# The files of the repository that go into the images (a directory: everything under it but the ignored).
SOURCE_INPUTS = ("pyproject.toml", "README.md", "constraints.txt", "operator")
IGNORED_DIRS = {"__pycache__", ".pytest_cache"}
IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info")

WHEELS_MOUNT = "/wheels"
# Podman 4.3 itself runs with RLIMIT_NPROC 32768 here, and runc cannot give a container more than that.
NPROC_LIMIT = 32768


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says what to install or what failed, with the log's tail."""


def _log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


# --- pure parts: inputs and keys -----------------------------------------------------------------------------

def repo_root() -> Path:
    """The checkout this package runs from (operator/specdec/dev/images.py)."""
    return Path(__file__).resolve().parents[3]


def _ignored(path: Path) -> bool:
    return any(part in IGNORED_DIRS or part.endswith(IGNORED_SUFFIXES) for part in path.parts)


def input_files(root: Path, inputs: Iterable[str]) -> list[str]:
    """The files (relative POSIX paths, sorted) of `inputs`: files, or directories walked without the ignored
    (bytecode, caches, egg-info). A missing input is an error: the Dockerfile would fail on it too."""
    files: set[str] = set()
    for name in inputs:
        path = root / name
        if path.is_file():
            files.add(Path(name).as_posix())
        elif path.is_dir():
            for child in path.rglob("*"):
                relative = child.relative_to(root)
                if child.is_file() and not _ignored(relative):
                    files.add(relative.as_posix())
        else:
            raise ImageBuildError(f"{path} is missing: images are built from a checkout of the repository")
    return sorted(files)


def inputs_key(root: Path, files: Iterable[str], *extra: str) -> str:
    """A hash of the files' names, executable bits and contents, and of `extra` (base, recipe)."""
    digest = hashlib.sha256()
    for value in extra:
        digest.update(b"extra\0" + value.encode() + b"\0")
    for name in files:
        path = root / name
        executable = bool(path.stat().st_mode & stat.S_IXUSR)
        digest.update(f"file\0{name}\0{int(executable)}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def base_key(packages: Iterable[str] = BASE_PACKAGES) -> str:
    """The base image's recipe: suite, variant, packages and options."""
    recipe = {"suite": SUITE, "variant": "minbase", "packages": sorted(packages), "dpkg": list(DPKG_OPTIONS),
              "config": list(BASE_CONFIG), "merged-usr": "hook", "security": True}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


BASE_IMAGE = f"localhost/specdec-base:{SUITE}-{base_key()[:12]}"


@dataclass(frozen=True)
class Recipe:
    """An image built from one of the repository's Dockerfiles with the base swapped."""

    reference: str
    dockerfile: str  # relative to the repository root
    inputs: tuple[str, ...]  # what the build context holds (the Dockerfile among them)
    base_arg: str  # the Dockerfile's ARG naming its base image

    @property
    def name(self) -> str:
        return self.reference.rsplit("/", 1)[-1].split(":", 1)[0]

    def files(self, root: Path) -> list[str]:
        return input_files(root, self.inputs)

    def key(self, root: Path) -> str:
        return inputs_key(root, self.files(root), f"recipe {RECIPE_VERSION}", f"base {BASE_IMAGE}",
                          f"dockerfile {self.dockerfile}", f"base-arg {self.base_arg}")


OPERATOR = Recipe(OPERATOR_IMAGE, "Dockerfile", ("Dockerfile", *SOURCE_INPUTS), "PYTHON_IMAGE")
RUNTIME_TEST = Recipe(RUNTIME_TEST_IMAGE, "runtime_image/Dockerfile.test", ("runtime_image", *SOURCE_INPUTS),
                      "BASE_IMAGE")
RECIPES = (OPERATOR, RUNTIME_TEST)


def requirements(root: Path) -> list[str]:
    """What the images install from the index: the project's dependencies, its runtime extra and its build
    backend (pyproject.toml)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    project = pyproject["project"]
    return sorted({*project.get("dependencies", []), *project.get("optional-dependencies", {}).get("runtime", []),
                   *pyproject.get("build-system", {}).get("requires", [])})


def wheel_platforms() -> list[str]:
    """Wheels that run on Debian 12 (glibc 2.36) on this machine's architecture."""
    machine = platform.machine()
    return ([f"manylinux_2_{minor}_{machine}" for minor in range(36, 4, -1)]
            + [f"{legacy}_{machine}" for legacy in ("manylinux2014", "manylinux2010", "manylinux1")])


def wheels_key(root: Path) -> str:
    recipe = {"requirements": requirements(root), "constraints": (root / "constraints.txt").read_text(),
              "python": "3.11", "platforms": wheel_platforms()}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


# --- where things are ----------------------------------------------------------------------------------------

def images_dir() -> Path:
    return toolchain.cache_root() / "images"


def wheels_dir() -> Path:
    return toolchain.cache_root() / "wheels"


def archive_path(reference: str) -> Path:
    """The OCI archive of an image: `<name>.oci.tar` (one per image; its key beside it in `.key`)."""
    name = reference.rsplit("/", 1)[-1].split(":", 1)[0]
    return images_dir() / f"{name}.oci.tar"


def _key_file(archive: Path) -> Path:
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
    return ["podman", "--root", str(store / "storage"), "--runroot", str(run / "runroot"),
            "--tmpdir", str(run / "libpod"), "--runtime", "runc"]


def ulimit_args() -> list[str]:
    """Explicit limits at or below this process's hard limits (podman's defaults would raise them)."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    nofile = 1048576 if nofile == resource.RLIM_INFINITY else min(nofile, 1048576)
    nproc = NPROC_LIMIT if nproc == resource.RLIM_INFINITY else min(nproc, NPROC_LIMIT)
    return ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]


# --- running things ------------------------------------------------------------------------------------------

def _env() -> dict[str, str]:
    return {**os.environ, "PATH": toolchain.with_system_dirs(os.environ.get("PATH", ""))}


def _require(*names: str) -> None:
    missing = [name for name in names if not toolchain.which(name)]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed; the images are built "
            f"without a registry with podman (and runc: crun refuses this host's cgroup layout), the base from "
            f"Debian's packages with mmdebstrap. Debian: apt-get install podman buildah runc mmdebstrap")


def _run(args: list[str], label: str, log: Path, env: dict[str, str] | None = None) -> None:
    """Run a command with its output appended to `log`; fail with the log's tail."""
    try:
        status, tail = toolchain.run_logged(args, label, log, env or _env(), _log, tail_lines=30)
    except OSError as error:
        raise ImageBuildError(f"{label}: cannot run {args[0]}: {error.strerror or error}") from None
    if status:
        raise ImageBuildError(f"{label} failed (exit {status}); full log: {log}\n" + "\n".join(tail))


def _podman(*args: str, label: str, log: Path) -> None:
    _run([*podman_command(), *args], label, log)


def _podman_has(reference: str) -> bool:
    return subprocess.run([*podman_command(), "image", "exists", reference], env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """One build at a time per cache (another process may be building the same images)."""
    images_dir().mkdir(parents=True, exist_ok=True)
    with (images_dir() / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _cached(archive: Path, key: str) -> bool:
    key_file = _key_file(archive)
    return archive.is_file() and key_file.is_file() and key_file.read_text().strip() == key


def _save(reference: str, archive: Path, key: str, log: Path) -> None:
    """The image as an OCI archive, replaced in one step, then its key."""
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    _podman("save", "--format", "oci-archive", "-o", str(partial), reference, label=f"saving {reference}", log=log)
    _key_file(archive).unlink(missing_ok=True)
    os.replace(partial, archive)
    _key_file(archive).write_text(key + "\n")


def _scratch_dir() -> str | None:
    """mmdebstrap's chroot on tmpfs when there is room: 75 -> 55 s here (dpkg's many small writes)."""
    with contextlib.suppress(OSError):
        shm = os.statvfs("/dev/shm")
        if shm.f_bavail * shm.f_frsize > 2 * 1024 ** 3 and os.access("/dev/shm", os.W_OK):
            return "/dev/shm"
    return None


# --- the images ----------------------------------------------------------------------------------------------

def build_base(log: Path) -> Path:
    """BASE_IMAGE in podman's store and as an OCI archive; mmdebstrap only when there is no archive yet."""
    archive, key = archive_path(BASE_IMAGE), base_key()
    if _cached(archive, key):
        if not _podman_has(BASE_IMAGE):
            _log(f"loading {BASE_IMAGE} from {archive}")
            _podman("load", "-i", str(archive), label=f"loading {BASE_IMAGE}", log=log)
        return archive
    _require("mmdebstrap")
    _log(f"building the base root filesystem {BASE_IMAGE} from Debian {SUITE}'s packages (mmdebstrap; about "
         "a minute, once)")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="base-", dir=images_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        command = ["mmdebstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                   *[f"--dpkgopt={option}" for option in DPKG_OPTIONS]]
        if MERGED_USR_HOOK.is_dir():
            command.append(f"--hook-dir={MERGED_USR_HOOK}")
        command += [SUITE, str(rootfs), f"deb {DEBIAN_MIRROR} {SUITE} main",
                    f"deb {DEBIAN_MIRROR} {SUITE}-updates main",
                    f"deb {DEBIAN_SECURITY_MIRROR} {SUITE}-security main"]
        env = _env()
        scratch = _scratch_dir()
        if scratch:
            env["TMPDIR"] = scratch
        _run(command, "mmdebstrap", log, env)
        _log(f"  root filesystem built ({time.monotonic() - start:.0f}s); importing it into podman")
        changes = [arg for change in BASE_CONFIG for arg in ("--change", change)]
        _podman("import", *changes, str(rootfs), BASE_IMAGE, label=f"importing {BASE_IMAGE}", log=log)
    _save(BASE_IMAGE, archive, key, log)
    _log(f"built {BASE_IMAGE} in {time.monotonic() - start:.0f}s")
    return archive


def ensure_wheels(root: Path, log: Path) -> Path:
    """The wheelhouse of every package the images install (for CPython 3.11 on this machine's architecture,
    glibc up to Debian 12's 2.36), downloaded by the host's pip once per dependency set."""
    directory, key = wheels_dir(), wheels_key(root)
    key_file = directory / ".key"
    if key_file.is_file() and key_file.read_text().strip() == key:
        return directory
    _log(f"downloading the wheels the images install into {directory}")
    start = time.monotonic()
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--dest", str(partial),
               "--constraint", str(root / "constraints.txt"), "--only-binary=:all:", "--python-version", "3.11",
               "--implementation", "cp", *[arg for tag in wheel_platforms() for arg in ("--platform", tag)],
               *requirements(root)]
    try:
        _run(command, "downloading wheels (pip download)", log)
    except ImageBuildError as error:
        raise ImageBuildError(f"{error}\nThe wheels come from the host's package index (pip's own settings: "
                              "index, proxy, certificates); the builds install only from them.") from None
    (partial / ".key").write_text(key + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(partial, directory)
    _log(f"  {sum(1 for _ in directory.glob('*.whl'))} wheels in {time.monotonic() - start:.0f}s")
    return directory


def _stage(root: Path, files: list[str], context: Path) -> None:
    """The build context: exactly the hashed files (modes kept), nothing else of the checkout."""
    for name in files:
        target = context / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)


def build_image(recipe: Recipe, root: Path, wheels: Path, log: Path) -> Path:
    """Build one recipe on BASE_IMAGE and save its archive (the caller checked that it is out of date)."""
    archive = archive_path(recipe.reference)
    _log(f"building {recipe.reference} from {recipe.dockerfile} on {BASE_IMAGE}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"context-{recipe.name}-", dir=images_dir()) as tmp:
        context = Path(tmp)
        _stage(root, recipe.files(root), context)
        key = recipe.key(context)  # of what is built, even if the checkout changes meanwhile
        _podman("build", "--pull=never", "--network=host", *ulimit_args(),
                "--build-arg", f"{recipe.base_arg}={BASE_IMAGE}",
                "--volume", f"{wheels}:{WHEELS_MOUNT}:ro",
                "--build-arg", f"PIP_FIND_LINKS={WHEELS_MOUNT}", "--build-arg", "PIP_NO_INDEX=1",
                "--file", str(context / recipe.dockerfile), "--tag", recipe.reference, str(context),
                label=f"building {recipe.reference}", log=log)
    _save(recipe.reference, archive, key, log)
    _log(f"built {recipe.reference} in {time.monotonic() - start:.0f}s ({archive.stat().st_size / 1e6:.0f} MB)")
    return archive


def build_images(*, force: bool = False) -> dict[str, Path]:
    """Every image's OCI archive, built when its inputs changed (`force`: all of them again):
    {OPERATOR_IMAGE: ..., RUNTIME_TEST_IMAGE: ..., BASE_IMAGE: ...}. Raises ImageBuildError."""
    root = repo_root()
    with _locked():
        log = images_dir() / "build.log"
        stale = [r for r in RECIPES if force or not _cached(archive_path(r.reference), r.key(root))]
        base_stale = force or not _cached(archive_path(BASE_IMAGE), base_key())
        if stale or base_stale:
            _require("podman", "runc")
            log.write_text("")
            start = time.monotonic()
            if force:
                for reference in (BASE_IMAGE, *(r.reference for r in RECIPES)):
                    _key_file(archive_path(reference)).unlink(missing_ok=True)
            build_base(log)
            if stale:
                wheels = ensure_wheels(root, log)
                for recipe in stale:
                    build_image(recipe, root, wheels, log)
                # The replaced images and the build stages, now untagged: the archives are what is kept.
                _podman("image", "prune", "--force", label="pruning untagged images", log=log)
            _log(f"images ready in {time.monotonic() - start:.0f}s")
        return {**{r.reference: archive_path(r.reference) for r in RECIPES}, BASE_IMAGE: archive_path(BASE_IMAGE)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec.dev.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild every image, even those up to date")
    args = parser.parse_args(argv)
    try:
        archives = build_images(force=args.force)
    except ImageBuildError as error:
        _log(f"error: {error}")
        return 1
    for reference, archive in archives.items():
        print(f"{reference} {archive}")
    _log(f"podman with these images: {' '.join(podman_command())} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
