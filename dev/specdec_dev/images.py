"""Build the project's container images on this machine, without any registry, cached by their inputs.

No container registry is reachable from our machines (only the package registries), so no base image can be
pulled. Instead, on the base from Debian's packages (specdec_dev.base_image):

- the operator image (OPERATOR_IMAGE) from the repository's own Dockerfile, only its base swapped
  (`--build-arg PYTHON_IMAGE=<base>`);
- the runtime test image (RUNTIME_TEST_IMAGE) from runtime_image/Dockerfile.test: the runtime images'
  install script, user and entrypoint on the base, with stand-ins for trtllm-serve and tritonserver
  (specdec_dev.standin_servers), since NVIDIA's base cannot be pulled here.

Each image is saved as an OCI archive in `~/.cache/specdec/images/` (specdec_dev.podman), for
`ctr -n k8s.io images import`. An image is rebuilt only when its inputs change: a hash of the files that go
into it (Dockerfile, pyproject.toml, constraints.txt, README.md, operator/**, runtime_image/**), of its base
and of its recipe here; otherwise its archive is reused, without calling podman at all.

Python packages come from a wheelhouse, `~/.cache/specdec/wheels/`, which the host's pip fills (pip download,
with the host's own index, proxy and certificate settings) once per dependency set. The builds mount it
read-only and install with PIP_FIND_LINKS and PIP_NO_INDEX (build ARGs of the Dockerfiles, unset by
default), so they need no network: on this machine pip inside a container cannot reach PyPI anyway, since
the egress proxy's certificate authority is the host's own (CERTIFICATE_VERIFY_FAILED). Builds use host
networking and never pull.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import stat
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from specdec_dev import toolchain
from specdec_dev.base_image import BASE_IMAGE, base_key, build_base
from specdec_dev.podman import (
    ImageBuildError,
    archive_path,
    cached,
    images_dir,
    key_file,
    locked,
    podman,
    podman_command,
    progress,
    require,
    run,
    save,
    ulimit_args,
)

OPERATOR_IMAGE = "localhost/specdec-operator:dev"
RUNTIME_TEST_IMAGE = "localhost/specdec-runtime-test:dev"

# Bump when a change here changes what a build produces: every image's key includes it.
RECIPE_VERSION = "1"

# The files of the repository that go into the images (a directory: everything under it but the ignored).
SOURCE_INPUTS = ("pyproject.toml", "README.md", "constraints.txt", "operator")
IGNORED_DIRS = {"__pycache__", ".pytest_cache"}
IGNORED_SUFFIXES = (".pyc", ".pyo", ".egg-info")

WHEELS_MOUNT = "/wheels"


# --- pure parts: inputs and keys -----------------------------------------------------------------------------


def repo_root() -> Path:
    """The checkout this package runs from (dev/specdec_dev/images.py)."""
    return Path(__file__).resolve().parents[2]


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
        return inputs_key(
            root,
            self.files(root),
            f"recipe {RECIPE_VERSION}",
            f"base {BASE_IMAGE}",
            f"dockerfile {self.dockerfile}",
            f"base-arg {self.base_arg}",
        )


OPERATOR = Recipe(OPERATOR_IMAGE, "Dockerfile", ("Dockerfile", *SOURCE_INPUTS), "PYTHON_IMAGE")
RUNTIME_TEST = Recipe(  # with the stand-ins of this distribution (dev/)
    RUNTIME_TEST_IMAGE, "runtime_image/Dockerfile.test", ("runtime_image", "dev", *SOURCE_INPUTS), "BASE_IMAGE"
)
RECIPES = (OPERATOR, RUNTIME_TEST)


def requirements(root: Path) -> list[str]:
    """What the images install from the index: the project's dependencies, its runtime extra and its build
    backend (pyproject.toml)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    project = pyproject["project"]
    return sorted(
        {
            *project.get("dependencies", []),
            *project.get("optional-dependencies", {}).get("runtime", []),
            *pyproject.get("build-system", {}).get("requires", []),
        }
    )


def wheel_platforms() -> list[str]:
    """Wheels that run on Debian 12 (glibc 2.36) on this machine's architecture."""
    machine = platform.machine()
    return [f"manylinux_2_{minor}_{machine}" for minor in range(36, 4, -1)] + [
        f"{legacy}_{machine}" for legacy in ("manylinux2014", "manylinux2010", "manylinux1")
    ]


def wheels_key(root: Path) -> str:
    recipe = {
        "requirements": requirements(root),
        "constraints": (root / "constraints.txt").read_text(),
        "python": "3.11",
        "platforms": wheel_platforms(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def wheels_dir() -> Path:
    return toolchain.cache_root() / "wheels"


# --- the images ----------------------------------------------------------------------------------------------


def ensure_wheels(root: Path, log: Path) -> Path:
    """The wheelhouse of every package the images install (for CPython 3.11 on this machine's architecture,
    glibc up to Debian 12's 2.36), downloaded by the host's pip once per dependency set."""
    directory, key = wheels_dir(), wheels_key(root)
    key_file = directory / ".key"
    if key_file.is_file() and key_file.read_text().strip() == key:
        return directory
    progress(f"downloading the wheels the images install into {directory}")
    start = time.monotonic()
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--dest",
        str(partial),
        "--constraint",
        str(root / "constraints.txt"),
        "--only-binary=:all:",
        "--python-version",
        "3.11",
        "--implementation",
        "cp",
        *[arg for tag in wheel_platforms() for arg in ("--platform", tag)],
        *requirements(root),
    ]
    try:
        run(command, "downloading wheels (pip download)", log)
    except ImageBuildError as error:
        raise ImageBuildError(
            f"{error}\nThe wheels come from the host's package index (pip's own settings: "
            "index, proxy, certificates); the builds install only from them."
        ) from None
    (partial / ".key").write_text(key + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(partial, directory)
    progress(f"  {sum(1 for _ in directory.glob('*.whl'))} wheels in {time.monotonic() - start:.0f}s")
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
    progress(f"building {recipe.reference} from {recipe.dockerfile} on {BASE_IMAGE}")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"context-{recipe.name}-", dir=images_dir()) as tmp:
        context = Path(tmp)
        _stage(root, recipe.files(root), context)
        key = recipe.key(context)  # of what is built, even if the checkout changes meanwhile
        podman(
            "build",
            "--pull=never",
            "--network=host",
            *ulimit_args(),
            "--build-arg",
            f"{recipe.base_arg}={BASE_IMAGE}",
            "--volume",
            f"{wheels}:{WHEELS_MOUNT}:ro",
            "--build-arg",
            f"PIP_FIND_LINKS={WHEELS_MOUNT}",
            "--build-arg",
            "PIP_NO_INDEX=1",
            "--file",
            str(context / recipe.dockerfile),
            "--tag",
            recipe.reference,
            str(context),
            label=f"building {recipe.reference}",
            log=log,
        )
    save(recipe.reference, archive, key, log)
    progress(f"built {recipe.reference} in {time.monotonic() - start:.0f}s ({archive.stat().st_size / 1e6:.0f} MB)")
    return archive


def build_images(*, force: bool = False) -> dict[str, Path]:
    """Every image's OCI archive, built when its inputs changed (`force`: all of them again):
    {OPERATOR_IMAGE: ..., RUNTIME_TEST_IMAGE: ..., BASE_IMAGE: ...}. Raises ImageBuildError."""
    root = repo_root()
    with locked():
        log = images_dir() / "build.log"
        stale = [r for r in RECIPES if force or not cached(archive_path(r.reference), r.key(root))]
        base_stale = force or not cached(archive_path(BASE_IMAGE), base_key())
        if stale or base_stale:
            require("podman", "runc")
            log.write_text("")
            start = time.monotonic()
            if force:
                for reference in (BASE_IMAGE, *(r.reference for r in RECIPES)):
                    key_file(archive_path(reference)).unlink(missing_ok=True)
            build_base(log)
            if stale:
                wheels = ensure_wheels(root, log)
                for recipe in stale:
                    build_image(recipe, root, wheels, log)
                # The replaced images and the build stages, now untagged: the archives are what is kept.
                podman("image", "prune", "--force", label="pruning untagged images", log=log)
            progress(f"images ready in {time.monotonic() - start:.0f}s")
        return {**{r.reference: archive_path(r.reference) for r in RECIPES}, BASE_IMAGE: archive_path(BASE_IMAGE)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specdec_dev.images", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild every image, even those up to date")
    args = parser.parse_args(argv)
    try:
        archives = build_images(force=args.force)
    except ImageBuildError as error:
        progress(f"error: {error}")
        return 1
    for reference, archive in archives.items():
        print(f"{reference} {archive}")
    progress(f"podman with these images: {' '.join(podman_command())} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
