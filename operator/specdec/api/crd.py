"""Generate the CustomResourceDefinitions in `crds/` from the pydantic models.

pydantic emits JSON Schema; the API server wants a *structural* OpenAPI v3.0 schema: no `$ref`, no
`anyOf` with null, no `title`, boolean exclusive bounds, int-or-string marked with
`x-kubernetes-int-or-string`, and defaults
on every object whose fields have defaults (so nested defaults apply when the user omits a block).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from specdec import yamlio
from specdec.api import models, shared_objects

DROP_KEYS = {"title", "additionalProperties"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        resolved = dict(defs[node["$ref"].rsplit("/", 1)[-1]])
        resolved.update({k: v for k, v in node.items() if k != "$ref"})
        return _structural(resolved, defs)
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        if len(options) == 1:
            return _structural({**options[0], **rest}, defs)
        if sorted(o.get("type") for o in options) == ["integer", "string"]:
            # Each option's bounds apply to values of its type only (minimum to ints, pattern to strings).
            bounds = {k: v for o in options for k, v in o.items() if k != "type"}
            return _structural({**bounds, **rest, "x-kubernetes-int-or-string": True}, defs)
        raise ValueError(f"cannot express anyOf {options} in a structural schema")
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROP_KEYS and not (key == "additionalProperties" and isinstance(value, dict)):
            continue
        if key == "default" and value is None:
            continue
        out[key] = value if key in ("default", "enum", "x-kubernetes-validations") else _structural(value, defs)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
        out["type"] = "object"
    if isinstance(out.get("additionalProperties"), dict) and not out["additionalProperties"]:
        out.pop("additionalProperties")
        out["x-kubernetes-preserve-unknown-fields"] = True
    if "const" in out:
        out["enum"] = [out.pop("const")]
    # JSON Schema gives exclusive bounds as numbers; OpenAPI v3.0 as a flag on minimum/maximum.
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(out.get(flag), (int, float)) and not isinstance(out[flag], bool):
            out[bound] = out.pop(flag)
            out[flag] = True
    return out


def _default_objects(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Default nested blocks built by a default factory to their fully defaulted value.

    Not `{}`: the API server checks a default against the CEL rules as written, before the
    defaults inside it apply, so rules reading e.g. `self.mode` need the filled-in object."""
    for name, field in model.model_fields.items():
        sub = schema.get("properties", {}).get(field.alias or name)
        annotation = field.annotation
        if sub is None or not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            continue
        if field.default_factory is not None:
            sub["default"] = field.default_factory().model_dump(  # type: ignore[call-arg]  # ours take no arguments
                mode="json", by_alias=True, exclude_none=True
            )
        _default_objects(sub, annotation)


def openapi_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _structural({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))
    _default_objects(schema, model)
    return schema


def _crd(
    kind: str,
    plural: str,
    short_names: list[str],
    spec: type[BaseModel],
    status: type[BaseModel],
    description: str,
    columns: list[dict[str, Any]],
    scale: dict[str, str] | None = None,
    root_rules: list[dict[str, str]] | None = None,
) -> dict:
    subresources: dict[str, Any] = {"status": {}}
    if scale:
        subresources["scale"] = scale
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{models.GROUP}", "labels": {"app.kubernetes.io/part-of": "specdec-operator"}},
        "spec": {
            "group": models.GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["specdec"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": openapi_schema(spec),
                                "status": openapi_schema(status),
                            },
                            **({"x-kubernetes-validations": root_rules} if root_rules else {}),
                        }
                    },
                }
            ],
        },
    }


def _condition_column(name: str, field: str, condition: str = "Ready") -> dict[str, Any]:
    return {"name": name, "type": "string", "jsonPath": f'.status.conditions[?(@.type=="{condition}")].{field}'}


AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def crds() -> dict[str, dict]:
    """File name -> CRD object."""
    return {
        "specdec.io_speculativedeployments.yaml": _crd(
            "SpeculativeDeployment",
            "speculativedeployments",
            ["sd", "specdeploy"],
            models.SpeculativeDeploymentSpec,
            models.SpeculativeDeploymentStatus,
            "A TensorRT-LLM model served with speculative decoding: engines are built, cached and rolled out by the "
            "operator.",
            [
                {"name": "Mode", "type": "string", "jsonPath": ".spec.speculation.mode"},
                _condition_column("Ready", "status"),
                _condition_column("Reason", "reason"),
                {"name": "Replicas", "type": "integer", "jsonPath": ".status.readyReplicas"},
                {"name": "Accept", "type": "number", "jsonPath": ".status.speculation.acceptanceRate"},
                {"name": "Speedup", "type": "number", "jsonPath": ".status.speculation.estimatedSpeedup"},
                {"name": "DraftLen", "type": "integer", "jsonPath": ".status.speculation.draftLen", "priority": 1},
                {**_condition_column("Drafting", "reason", "SpeculationActive"), "priority": 1},
                _condition_column("Canary", "reason", "Canary"),
                AGE,
            ],
            scale={
                "specReplicasPath": ".spec.runtime.replicas",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
            root_rules=[
                models.cel(
                    f"self.metadata.name.matches('^{models.NAME_RE.pattern}$')",
                    f"metadata.name {models.NAME_RULE_MESSAGE}",
                )
            ],
        ),
        "specdec.io_enginebuilds.yaml": _crd(
            "EngineBuild",
            "enginebuilds",
            ["eb"],
            shared_objects.EngineBuildSpec,
            shared_objects.EngineBuildStatus,
            "One TensorRT-LLM engine recipe, content-addressed and immutable, built once by a Job and shared.",
            [
                {"name": "Model", "type": "string", "jsonPath": ".spec.recipe.model"},
                {"name": "Mode", "type": "string", "jsonPath": ".spec.recipe.speculativeDecodingMode"},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Step", "type": "string", "jsonPath": ".status.failedStep", "priority": 1},
                AGE,
            ],
        ),
        "specdec.io_modelcaches.yaml": _crd(
            "ModelCache",
            "modelcaches",
            ["mc"],
            shared_objects.ModelCacheSpec,
            shared_objects.ModelCacheStatus,
            "One hf:// checkpoint at one revision, fetched into a cache claim by a Job on a CPU node before any "
            "GPU build reads it; content-addressed, immutable and shared.",
            [
                {"name": "Model", "type": "string", "jsonPath": ".spec.model"},
                {"name": "Revision", "type": "string", "jsonPath": ".spec.revision", "priority": 1},
                {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                {"name": "Size", "type": "integer", "jsonPath": ".status.sizeBytes", "priority": 1},
                AGE,
            ],
        ),
    }


def render_crds() -> dict[str, str]:
    header = "# Generated by `specdec crds` from operator/specdec/api/models.py. Do not edit.\n"
    return {name: header + yamlio.dump(crd) for name, crd in crds().items()}
