"""Kubernetes' own rules (`specdec.schema.k8s`), case by case: what they accept and refuse, and the
affinity schema built from the kubernetes client's models."""

from __future__ import annotations

from decimal import Decimal

import pytest

from specdec.admission.validation import parse_spec
from specdec.plan import Problem
from specdec.schema import k8s
from specdec.schema.openapi import matches, schema_errors
from tests.unit.helpers import SD_CRD, crd_schema, schema_at
from tests.unit.invalid_specs import DIGEST, spec


@pytest.mark.parametrize(
    "key,ok",
    [
        ("team", True),
        ("example.com/team", True),
        ("nvidia.com/gpu.product", True),
        ("a", True),
        ("app.kubernetes.io/name", True),
        ("A_b-C.d", True),
        ("example.com/" + "a" * 63, True),
        ("a" * 253 + "/x", True),
        ("", False),
        ("-team", False),
        ("team-", False),
        ("my team", False),
        ("example.com/", False),
        ("/team", False),
        ("Example.com/team", False),
        ("a/b/c", False),
        ("example.com/" + "a" * 64, False),
        ("a" * 254 + "/x", False),
        ("team\n", False),
    ],
)
def test_label_keys(key, ok):
    assert k8s.LABEL_KEYS.ok(key) is ok


def test_annotation_keys_allow_capitals_in_the_prefix():
    """ValidateAnnotations lowercases keys before checking them; labels do not."""
    assert k8s.ANNOTATION_KEYS.ok("Example.com/Note") and not k8s.LABEL_KEYS.ok("Example.com/Note")
    assert not k8s.ANNOTATION_KEYS.ok("example.com/-note")


@pytest.mark.parametrize(
    "value,ok",
    [
        ("", True),
        ("a", True),
        ("a-b_c.d", True),
        ("A1", True),
        ("a" * 63, True),
        ("-a", False),
        ("a-", False),
        ("a b", False),
        ("a" * 64, False),
        ("a\n", False),
        ("é", False),
    ],
)
def test_label_values(value, ok):
    assert (matches(k8s.LABEL_VALUE, value) and len(value) <= k8s.LABEL_VALUE_MAX) is ok


@pytest.mark.parametrize(
    "name,ok",
    [
        ("cpu", True),
        ("memory", True),
        ("ephemeral-storage", True),
        ("hugepages-2Mi", True),
        ("nvidia.com/gpu", True),
        ("example.com/nic", True),
        ("gpu", False),
        ("storage", False),
        ("hugepages-", False),
        ("nvidia.com/", False),
        ("CPU", False),
    ],
)
def test_resource_names(name, ok):
    assert k8s.RESOURCE_NAMES.ok(name) is ok


@pytest.mark.parametrize(
    "text,value",
    [
        ("0", 0),
        ("1", 1),
        ("+1", 1),
        ("1.", 1),
        (".5", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("500m", Decimal("0.5")),
        ("1000m", 1),
        ("250u", Decimal("0.00025")),
        ("3n", Decimal("3e-9")),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("1.5Gi", 3 * 2**29),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e999999999999999999", Decimal("1e999999999999999999")),
        ("1e+3", 1000),
        ("1e-3", Decimal("0.001")),
        ("12e6", 12 * 10**6),
    ],
)
def test_quantities_and_their_values(text, value):
    assert matches(k8s.QUANTITY, text)
    assert k8s.parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".",
        "-1",
        "1 ",
        " 1",
        "1 Gi",
        "1ki",
        "1KI",
        "1i",
        "Gi",
        "e3",
        "1e",
        "1e1.5",
        "1.1.1",
        "1e1234567890123456789",
        "0x10",
        "1Gi\n",
        "1m1",
    ],
)
def test_invalid_quantities(text):
    assert not matches(k8s.QUANTITY, text)


@pytest.mark.parametrize(
    "image,ok",
    [
        ("ubuntu", True),
        ("ubuntu:24.04", True),
        ("nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3", True),
        ("ghcr.io/specdec-io/specdec-runtime:0.1.0", True),
        (f"registry:5000/a/b@{DIGEST}", True),
        (f"localhost:5000/a/b:v1@{DIGEST}", True),
        ("a/b__c/d-e/f.g:TAG_1", True),
        ("10.0.0.1:5000/x", True),
        (" padded ", False),
        ("ubuntu ", False),
        ("a b", False),
        ("", False),
        ("nvidia/Triton", False),
        ("a/b:", False),
        ("a/b@sha256:abc", False),
        ("a/b:-tag", False),
        ("a//b", False),
        ("a/b/", False),
        ("a:" + "t" * 129, False),
        ("ubuntu\n", False),
    ],
)
def test_images(image, ok):
    assert matches(k8s.IMAGE, image) is ok


def test_affinity_schema_is_the_client_model_inlined():
    """Typed from the kubernetes client's V1Affinity: wire names, required fields, no unknown fields kept."""
    affinity = schema_at(crd_schema(SD_CRD), ".spec.runtime.affinity")
    assert set(affinity["properties"]) == {"nodeAffinity", "podAffinity", "podAntiAffinity"}
    node = affinity["properties"]["nodeAffinity"]["properties"]
    selector = node["requiredDuringSchedulingIgnoredDuringExecution"]
    assert selector["required"] == ["nodeSelectorTerms"]
    requirement = selector["properties"]["nodeSelectorTerms"]["items"]["properties"]["matchExpressions"]["items"]
    assert set(requirement["required"]) == {"key", "operator"}
    term = affinity["properties"]["podAntiAffinity"]["properties"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["items"]["required"] == ["topologyKey"]
    assert term["items"]["properties"]["labelSelector"]["properties"]["matchLabels"]["additionalProperties"] == {
        "type": "string"
    }
    assert '"x-kubernetes-preserve-unknown-fields"' not in str(affinity).replace("'", '"')


def test_affinity_unknown_fields_are_refused_offline():
    """The API server prunes them (or refuses them: kubectl's default fieldValidation=Strict); kept,
    they made every server-side apply of the runtime Deployment fail with HTTP 500."""
    problem = parse_spec(spec(runtime={"affinity": {"podAffinity": {"x": 1}}}))
    assert isinstance(problem, Problem) and "podAffinity.x: unknown field" in problem.message
    assert schema_errors(k8s.affinity_schema(), {"nodeAffinity": {}, "podAffinity": {}}) == []


def test_annotation_bounds_fit_the_pod_annotation_size_limit():
    assert k8s.MAX_ANNOTATIONS * (k8s.KEY_MAX + k8s.ANNOTATION_VALUE_MAX) <= 256 * 1024


@pytest.mark.parametrize(
    "limit,request_,ok",
    [
        ("1", "1000m", True),
        ("1Gi", "1073741824", True),
        ("1e3", "1k", True),
        ("1Ki", "1.024k", True),
        (2, "2", True),
        ("1Gi", "1073741825", False),
        ("2", "2001m", False),
        (2, 3, False),
    ],
)
def test_requests_compare_with_limits_across_units(limit, request_, ok):
    """The cases checked against the API server's CEL quantity() (Kubernetes 1.36) give the same answers."""
    parsed = parse_spec(spec(runtime={"resources": {"limits": {"cpu": limit}, "requests": {"cpu": request_}}}))
    assert isinstance(parsed, Problem) is not ok, parsed
