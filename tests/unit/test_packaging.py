"""The images install pinned versions of every direct dependency."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from specdec import versions

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower()


def test_constraints_pin_every_direct_dependency_of_the_images():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    direct = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["runtime"]}
    pins = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert set(pins) == direct
    installers = ("Dockerfile", "runtime_image/install-specdec-runtime.sh")
    for installer in installers:
        assert "--constraint" in (ROOT / installer).read_text() and "constraints.txt" in (ROOT / installer).read_text()
    for release in versions.RELEASES:  # each runtime image installs through the one script, with the pins
        text = (ROOT / release.dockerfile).read_text()
        assert "constraints.txt" in text and "RUN /opt/specdec/install-specdec-runtime.sh" in text


def _build_args(dockerfile: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"^ARG (\w+)=(\S+)$", (ROOT / dockerfile).read_text(), re.M))


def test_runtime_images_are_built_on_the_pinned_releases():
    engine = _build_args(versions.ENGINE.dockerfile)
    assert engine == {"TRITON_IMAGE": versions.ENGINE.base_image, "TRTLLM_GIT_REF": versions.ENGINE.git_ref}
    assert _build_args(versions.PYTORCH.dockerfile) == {"TRTLLM_IMAGE": versions.PYTORCH.base_image}
    assert versions.PYTORCH.base_image.endswith(":" + versions.PYTORCH.trtllm)


def test_each_backend_runs_its_routes_image():
    from specdec.builders.serving import build_deployment
    from specdec.settings import Settings
    from tests.unit.helpers import make_plan
    from tests.unit.invalid_specs import draft_target, spec

    settings = Settings()
    for backend in ("tensorrt", "pytorch"):
        deployment = build_deployment(make_plan(spec(backend=backend, speculation=draft_target())), "uid", settings)
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == settings.runtime_image_for(backend)
    assert settings.runtime_image_for("pytorch") == settings.runtime_image + versions.PYTORCH.image_suffix


def test_the_wheel_carries_every_data_file_of_the_package():
    """Package data (the model catalog, examples, templates) reaches the images only through package-data."""
    package = ROOT / "operator" / "specdec"
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["specdec"]
    shipped = {p for g in globs for p in package.glob(g) if p.is_file()}
    data = {p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")}
    assert package / "admission" / "model_catalog.yaml" in data
    assert data <= shipped, sorted(str(p.relative_to(package)) for p in data - shipped)
