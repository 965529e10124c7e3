"""The documentation site: built by mkdocs in strict mode, and its generated pages up to date."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

from specdec.api import reference

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "reference" / "api.md"


def test_site_builds_in_strict_mode(tmp_path):
    """A broken link or anchor, a page missing from the nav or a nav entry without a page fails the build."""
    assert importlib.util.find_spec("mkdocs") and importlib.util.find_spec("material"), (
        "mkdocs-material is not installed: .venv/bin/pip install -e '.[test]' (the docs extra is part of it)"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # material's banner about MkDocs 2
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()


def test_api_reference_is_generated_from_the_crds():
    assert API_PAGE.is_file(), f"{API_PAGE} is missing: run `{reference.REGENERATE}`"
    assert API_PAGE.read_text(encoding="utf-8") == reference.render(), (
        f"docs/reference/api.md differs from the CRDs (crds/*.yaml): run `{reference.REGENERATE}`"
    )


def test_api_reference_covers_every_field_and_rule():
    """Every object of every CRD has its table, every field its row and every CEL rule its line."""
    page = API_PAGE.read_text(encoding="utf-8")
    for crd in reference.load_crds():
        kind = crd["spec"]["names"]["kind"]
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for top in ("spec", "status"):
            for path, obj in reference._child_objects(f".{top}", schema["properties"][top]):
                for obj_path, node in reference._walk_objects(path, obj):
                    assert f"### {kind} `{obj_path}`" in page
                    for name in node["properties"]:
                        assert f"| `{name}` |" in page
        for rule in _rules(schema):
            assert reference._code(rule["rule"]) in page, f"{kind}: rule {rule['rule']!r} is not on the page"


def _rules(node):
    if isinstance(node, dict):
        yield from node.get("x-kubernetes-validations") or []
        for value in node.values():
            yield from _rules(value)
    elif isinstance(node, list):
        for value in node:
            yield from _rules(value)


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md is longer than 250 lines: move the detail into docs/"
    for text in [readme] + [p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")]:
        assert not re.search(r"session [0-9]|\(issue [0-9]+\)", text, re.I), "history labels belong in git log"


def test_site_front_page_is_the_readme():
    """docs/index.md is README.md with its links made relative to docs/: one front door, two places."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (ROOT / "docs" / "index.md").read_text(encoding="utf-8") == readme.replace("](docs/", "]("), (
        "docs/index.md differs from README.md: run `sed 's|](docs/|](|g' README.md > docs/index.md`"
    )


def test_readme_links_into_docs_exist():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links
    for link in links:
        assert (ROOT / link).is_file(), f"README.md links to {link}, which does not exist"
