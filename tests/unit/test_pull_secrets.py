"""Private registries: the operator's pull secrets reach build and runtime pods, and nothing else does."""

from __future__ import annotations

import dataclasses

from specdec.render import render_objects
from specdec.settings import Settings
from tests.unit.helpers import load_example

SETTINGS = Settings()


def pod_specs(objects: list[dict]) -> dict[str, dict]:
    return {
        o["kind"] + "/" + o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Job", "Deployment")
    }


def test_pull_secrets_reach_every_build_and_runtime_pod():
    settings = dataclasses.replace(SETTINGS, image_pull_secrets=("ngc", "team-registry"))
    specs = pod_specs(render_objects(load_example("llama-2-13b-draft-7b-logits"), settings))
    assert len(specs) == 5  # two fetch Jobs, two build Jobs, one runtime Deployment
    assert all(s["imagePullSecrets"] == [{"name": "ngc"}, {"name": "team-registry"}] for s in specs.values())


def test_no_pull_secrets_by_default():
    specs = pod_specs(render_objects(load_example("llama-2-13b-draft-7b-logits"), SETTINGS))
    assert all("imagePullSecrets" not in s for s in specs.values())


def test_pull_secrets_from_the_environment():
    assert Settings.from_env({"SPECDEC_IMAGE_PULL_SECRETS": '["ngc"]'}).image_pull_secrets == ("ngc",)
    assert Settings.from_env({}).image_pull_secrets == ()
