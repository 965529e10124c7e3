"""`specdec render` of every example, compared with a reviewed golden file in tests/golden/.

A golden file is the full YAML stream the operator would create for the example on an empty cluster
(default Settings, placeholder owner UIDs). When a change to the operator is intended to change that
output, regenerate the files and review the diff before committing:

    SPECDEC_UPDATE_GOLDEN=1 python -m pytest tests/unit/test_render_golden.py
"""

from __future__ import annotations

import os
import re

import pytest
import yaml

from specdec.plan import Problem
from specdec.render import render_objects, render_stream
from tests.unit.helpers import EXAMPLES, ROOT, SETTINGS

GOLDEN = ROOT / "tests" / "golden"
UPDATE = os.environ.get("SPECDEC_UPDATE_GOLDEN") == "1"


def render(path) -> str:
    stream, errors = render_stream(list(yaml.safe_load_all(path.read_text())), SETTINGS)
    assert errors == []
    return stream


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_render_matches_golden(example):
    golden = GOLDEN / f"{example.stem}.yaml"
    text = render(example)
    if UPDATE:
        golden.write_text(text)
    assert golden.is_file(), f"{golden} is missing: run with SPECDEC_UPDATE_GOLDEN=1 and review it"
    assert text == golden.read_text(), (
        f"render of examples/{example.name} differs from tests/golden/{golden.name}; if intended, "
        "regenerate with SPECDEC_UPDATE_GOLDEN=1 and review the diff"
    )


def test_every_golden_file_has_an_example():
    assert sorted(p.stem for p in GOLDEN.glob("*.yaml")) == sorted(p.stem for p in EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_render_is_deterministic(example):
    assert render(example) == render(example)


def test_render_reports_invalid_documents_and_skips_others():
    docs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}},
        None,
        {"kind": "SpeculativeDeployment", "metadata": {"name": "bad"}, "spec": {"target": {"model": "s3://x/y"}}},
    ]
    stream, errors = render_stream(docs, SETTINGS)
    assert stream == ""
    assert len(errors) == 1 and errors[0].startswith("bad: InvalidSpec: spec.target.model")


def test_golden_kinds():
    """What each example creates, in order (a quick read of the golden files)."""
    kinds = {p.stem: [d["kind"] for d in yaml.safe_load_all(render(p))] for p in EXAMPLES}
    # checkpoints fetched (ModelCache + its Job) before any engine is built (EngineBuild + its Job)
    two_engines = [
        "PersistentVolumeClaim",
        "ModelCache",
        "Job",
        "ModelCache",
        "Job",
        "EngineBuild",
        "Job",
        "EngineBuild",
        "Job",
        "ConfigMap",
        "Deployment",
        "Service",
    ]
    assert kinds["llama-2-13b-draft-7b-logits"] == two_engines
    assert kinds["llama-3.1-70b-fp8-draft-1b"] == two_engines
    assert kinds["vicuna-7b-redrafter"] == [
        "PersistentVolumeClaim",
        "ModelCache",
        "Job",  # the drafter: pvc://
        "EngineBuild",
        "Job",
        "ConfigMap",
        "Deployment",
        "Service",
    ]
    # backend pytorch: no engines; the runtime reads the target and the draft from the cache
    assert kinds["llama-3.1-8b-draft-1b-pytorch"] == [
        "PersistentVolumeClaim",
        "ModelCache",
        "Job",
        "ModelCache",
        "Job",
        "ConfigMap",
        "Deployment",
        "Service",
    ]


# --- names of rendered objects --------------------------------------------------------------------

DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def name_problems(objects: list[dict]) -> list[str]:
    """Names and label values the API server would refuse."""
    problems = []
    for obj in objects:
        name, kind = obj["metadata"]["name"], obj["kind"]
        if kind == "Service" and not (DNS1035.match(name) and len(name) <= 63):
            problems.append(f"Service name {name!r} is not a DNS-1035 label")
        if not (DNS1123_SUBDOMAIN.match(name) and len(name) <= 253):
            problems.append(f"{kind} name {name!r}")
        if kind == "Job" and len(name) > 63:  # the Job controller labels pods with job-name
            problems.append(f"Job name {name!r} longer than 63")
        pod_labels = ((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels", {})
        for key, value in {**obj["metadata"].get("labels", {}), **pod_labels}.items():
            if len(value) > 63 or not LABEL_VALUE.match(value):
                problems.append(f"{kind} {name}: label {key}={value!r}")
    return problems


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_rendered_names_are_valid(example):
    objects = [d for d in yaml.safe_load_all(render(example))]
    assert name_problems(objects) == []


def test_long_model_names_still_give_valid_engine_and_job_names():
    obj = yaml.safe_load((ROOT / "examples" / "vicuna-7b-redrafter.yaml").read_text())
    obj["spec"]["target"]["model"] = "hf://some-organisation/" + "A-Very.Long_Model-Name" * 6
    objects = render_objects(obj, SETTINGS)
    assert name_problems(objects) == []


@pytest.mark.parametrize("name", ["70b-spec", "llama.v2", "s" * 70], ids=["leading-digit", "dot", "long"])
def test_deployment_names_the_children_cannot_use_are_refused(name):
    obj = yaml.safe_load((ROOT / "examples" / "llama-2-13b-draft-7b-logits.yaml").read_text())
    obj["metadata"]["name"] = name
    result = render_objects(obj, SETTINGS)
    assert isinstance(result, Problem) or name_problems(result) == [], name_problems(result)
