"""specdec_dev.images without building anything: what an image's key covers, and that each recipe's inputs
are what its Dockerfile copies."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import resource
import tarfile
from pathlib import Path

import pytest

from specdec_dev import base_image, images, mpi_image, podman

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "Dockerfile").write_text("FROM base\n")
    (tmp_path / "pkg" / "a.py").write_text("a = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("b = 2\n")
    return tmp_path


def key(root: Path, *extra: str) -> str:
    return images.inputs_key(root, images.input_files(root, ("Dockerfile", "pkg")), *extra)


def test_an_unchanged_tree_keeps_its_key(tree):
    assert key(tree) == key(tree)
    (tree / "pkg" / "a.py").write_text("a = 1\n")  # rewritten, same content
    assert key(tree) == key(tree)


def test_a_changed_added_or_removed_file_changes_the_key(tree):
    before = key(tree)
    (tree / "pkg" / "a.py").write_text("a = 3\n")
    changed = key(tree)
    assert changed != before
    (tree / "pkg" / "sub" / "c.py").write_text("")
    added = key(tree)
    assert added != changed
    (tree / "pkg" / "sub" / "c.py").unlink()
    assert key(tree) == changed
    (tree / "Dockerfile").write_text("FROM other\n")
    assert key(tree) != changed


def test_the_executable_bit_and_the_extra_values_count(tree):
    before = key(tree)
    (tree / "pkg" / "a.py").chmod(0o755)
    assert key(tree) != before
    assert key(tree, "base x") != key(tree, "base y")


def test_bytecode_caches_and_egg_info_are_not_inputs(tree):
    before = key(tree)
    (tree / "pkg" / "__pycache__").mkdir()
    (tree / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (tree / "pkg" / "x.egg-info").mkdir()
    (tree / "pkg" / "x.egg-info" / "PKG-INFO").write_text("x")
    (tree / "pkg" / "stray.pyc").write_bytes(b"\0")
    assert images.input_files(tree, ("pkg",)) == ["pkg/a.py", "pkg/sub/b.py"]
    assert key(tree) == before


def test_a_missing_input_is_an_error(tree):
    with pytest.raises(images.ImageBuildError, match="missing"):
        images.input_files(tree, ("Dockerfile", "nothere"))


def copied_sources(dockerfile: str) -> set[str]:
    """The build-context paths a Dockerfile's COPY lines name (not those of --from stages)."""
    sources = set()
    for line in (ROOT / dockerfile).read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources.update(w.rstrip("/") for w in words[1:-1] if not w.startswith("--"))
    return sources


@pytest.mark.parametrize("recipe", images.RECIPES, ids=lambda r: r.name)
def test_each_recipe_hashes_what_its_dockerfile_copies(recipe):
    files = recipe.files(ROOT)
    assert recipe.dockerfile in files
    for source in copied_sources(recipe.dockerfile):
        assert any(f == source or f.startswith(source + "/") for f in files), source
    assert re.search(rf"^ARG {recipe.base_arg}\b", (ROOT / recipe.dockerfile).read_text(), re.M)
    assert re.search(r"^ARG PIP_FIND_LINKS$", (ROOT / recipe.dockerfile).read_text(), re.M)


def test_the_operator_key_follows_the_package_not_the_tests(tmp_path):
    assert images.OPERATOR.key(ROOT) == images.OPERATOR.key(ROOT)
    assert not any(f.startswith("tests/") for f in images.OPERATOR.files(ROOT))
    assert "runtime_image/Dockerfile.test" not in images.OPERATOR.files(ROOT)
    assert "runtime_image/install-specdec-runtime.sh" in images.RUNTIME_TEST.files(ROOT)


def test_the_base_tag_names_its_recipe():
    assert base_image.BASE_IMAGE == f"localhost/specdec-base:{base_image.SUITE}-{base_image.base_key()[:12]}"
    assert base_image.base_key(base_image.BASE_PACKAGES) != base_image.base_key((*base_image.BASE_PACKAGES, "curl"))
    assert base_image.base_key(reversed(base_image.BASE_PACKAGES)) == base_image.base_key()


def test_a_debian_image_tag_names_its_packages_and_commands():
    mpi = mpi_image.MPI
    assert mpi_image.MPI_IMAGE == f"localhost/specdec-mpi:{base_image.SUITE}-{mpi.key()[:12]}"
    assert set(base_image.BASE_PACKAGES) < set(mpi.packages) and "openmpi-bin" in mpi.packages
    assert mpi.key() != base_image.DebianImage("specdec-mpi", mpi.packages).key()  # its commands count
    assert base_image.BASE.key() == base_image.base_key()  # the base has no commands: its key is its packages'


def test_the_wheelhouse_covers_the_build_backend_and_the_runtime_extra():
    names = {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0] for r in images.requirements(ROOT)}
    assert {"setuptools", "aiohttp", "tokenizers", "kopf"} <= names


def test_archives_live_in_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    assert podman.archive_path(images.OPERATOR_IMAGE) == tmp_path / "images" / "specdec-operator.oci.tar"
    assert podman.archive_path(images.BASE_IMAGE) == tmp_path / "images" / "specdec-base.oci.tar"
    assert podman.podman_command()[:3] == ["podman", "--root", str(tmp_path / "images" / "podman" / "storage")]


def test_ulimits_stay_within_the_hard_limits():
    args = podman.ulimit_args()
    limits = dict(value.split("=") for value in args[1::2])
    for name, which in (("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)):
        soft, hard = (int(v) for v in limits[name].split(":"))
        assert soft == hard and (
            resource.getrlimit(which)[1] == resource.RLIM_INFINITY or hard <= resource.getrlimit(which)[1]
        )


def test_missing_tools_say_what_to_install(monkeypatch):
    monkeypatch.setattr(
        podman.toolchain, "which", lambda name: None if name in ("runc", "mmdebstrap") else f"/usr/bin/{name}"
    )
    podman.require("podman")
    with pytest.raises(images.ImageBuildError, match="runc, mmdebstrap are not installed.*apt-get install"):
        podman.require("podman", "runc", "mmdebstrap")


def test_a_failed_step_reports_its_log_tail(tmp_path):
    log = tmp_path / "build.log"
    with pytest.raises(images.ImageBuildError) as failure:
        podman.run(["sh", "-c", "echo first; echo the reason; exit 3"], "a step", log)
    assert "a step failed (exit 3)" in str(failure.value) and "the reason" in str(failure.value)
    assert str(log) in str(failure.value)


def test_the_staged_context_has_the_checkouts_key(tmp_path):
    for recipe in images.RECIPES:
        context = tmp_path / recipe.name
        images._stage(ROOT, recipe.files(ROOT), context)
        assert recipe.files(context) == recipe.files(ROOT) and recipe.key(context) == recipe.key(ROOT)


def _oci_archive(path: Path, layers: list[dict[str, bytes]]) -> Path:
    """An OCI archive as `podman save --format oci-archive` writes one: index.json -> manifest -> layer blobs
    (the first gzipped, the others plain tars)."""
    blobs: dict[str, bytes] = {}

    def add(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return digest

    def tar_of(files: dict[str, bytes]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    digests = [add(gzip.compress(tar_of(files)) if i == 0 else tar_of(files)) for i, files in enumerate(layers)]
    manifest = add(json.dumps({"layers": [{"digest": d} for d in digests]}).encode())
    index = json.dumps({"manifests": [{"digest": manifest}]}).encode()
    contents = {"index.json": index, **{f"blobs/{d.replace(':', '/')}": b for d, b in blobs.items()}}
    path.write_bytes(tar_of(contents))
    return path


def test_image_files_lists_every_layer_s_files_of_an_oci_archive(tmp_path):
    archive = _oci_archive(
        tmp_path / "image.oci.tar",
        [{"etc/os-release": b"debian"}, {"./venv/lib/python3.12/site-packages/specdec/cli.py": b"", "tmp/x": b"1"}],
    )
    assert podman.image_files(archive) == {
        "etc/os-release",
        "venv/lib/python3.12/site-packages/specdec/cli.py",
        "tmp/x",
    }
