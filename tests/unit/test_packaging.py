"""The images install pinned versions of every direct dependency."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_constraints_pin_every_direct_dependency_of_the_images():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["runtime"]}
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert set(pins) == direct
    for dockerfile in ("Dockerfile", "runtime_image/Dockerfile"):
        assert "--constraint" in (ROOT / dockerfile).read_text() and "constraints.txt" in (ROOT / dockerfile).read_text()
