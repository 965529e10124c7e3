"""The operator's distribution holds the operator only: its wheel (what the operator image installs, built from
the same files the Dockerfile copies) has no development code (specdec_dev, dev/ in the repository) and every
package-data pattern of pyproject.toml names files that exist."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from specdec_dev import images

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def dockerfile_copies(dockerfile: Path) -> list[str]:
    """The sources of the Dockerfile's COPY instructions from the build context (not --from another stage)."""
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from=") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


@pytest.fixture(scope="module")
def operator_wheel(tmp_path_factory) -> list[str]:
    """The file names in the wheel built from what the operator image's Dockerfile copies."""
    context = tmp_path_factory.mktemp("context")
    for source in dockerfile_copies(ROOT / "Dockerfile"):
        path = ROOT / source
        if path.is_dir():
            shutil.copytree(path, context / source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(path, context / source)
    out = tmp_path_factory.mktemp("wheel")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out)]
    result = subprocess.run([*build, str(context)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (wheel,) = out.glob("specdec_operator-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_operator_image_copies_only_the_operator_s_sources_and_installs_them():
    assert sorted(dockerfile_copies(ROOT / "Dockerfile")) == sorted(
        ["pyproject.toml", "README.md", "constraints.txt", "operator"]
    )
    assert re.search(r"pip install [^\n]*--constraint constraints.txt \.\s", (ROOT / "Dockerfile").read_text())
    # The local build of that image (specdec dev) hashes the same inputs, dev/ not among them.
    assert "dev" not in images.OPERATOR.inputs and "dev" in images.RUNTIME_TEST.inputs


def test_the_operator_wheel_holds_no_development_code(operator_wheel):
    packages = {name.split("/")[0] for name in operator_wheel if not name.startswith("specdec_operator-")}
    assert packages == {"specdec"}
    assert not [name for name in operator_wheel if name.startswith(("specdec/dev/", "specdec_dev/"))]
    assert "specdec/cli.py" in operator_wheel and "specdec/runtime/front.py" in operator_wheel


def test_every_package_data_pattern_names_files_and_they_are_in_the_wheel(operator_wheel):
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            files = sorted((ROOT / "operator" / package).glob(pattern))
            assert files, f"package data {package}: {pattern} names no file"
            for path in files:
                assert path.relative_to(ROOT / "operator").as_posix() in operator_wheel
