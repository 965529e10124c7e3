"""A small OpenAPI v3 (structural schema) check: what the API server's schema validation refuses
before CEL runs (types, enums, bounds, lengths, patterns, required and unknown fields).

pydantic runs it on `spec.runtime.affinity` against the very schema the CRD carries; the tests run
it on the whole generated CRD schema."""

from __future__ import annotations

import re
from typing import Any

_TYPES: dict[str, type | tuple[type, ...]] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "integer": int,
    "number": (int, float),
}


def matches(pattern: str, value: str) -> bool:
    """As Go's regexp (RE2) in the API server: a search, with `$` at the end of the text only (in
    Python it also matches before a trailing newline)."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def schema_errors(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Returns "path: problem" strings; [] when `value` fits `node`. Unknown fields are errors here
    (the API server prunes them instead, or refuses them with fieldValidation=Strict)."""
    if node.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)) or isinstance(value, bool):
            return [f"{path}: not int-or-string"]
    else:
        kind = node.get("type")
        if kind and (
            not isinstance(value, _TYPES[kind]) or (kind in ("integer", "number") and isinstance(value, bool))
        ):
            return [f"{path}: not {kind}"]
    errors = []
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: not one of {node['enum']}")
    if isinstance(value, (int, float)):
        if "minimum" in node and (
            value <= node["minimum"] if node.get("exclusiveMinimum") else value < node["minimum"]
        ):
            errors.append(f"{path}: below minimum")
        if "maximum" in node and (
            value >= node["maximum"] if node.get("exclusiveMaximum") else value > node["maximum"]
        ):
            errors.append(f"{path}: above maximum")
    if isinstance(value, str):
        if len(value) < node.get("minLength", 0) or len(value) > node.get("maxLength", len(value)):
            errors.append(f"{path}: length out of bounds")
        if "pattern" in node and not matches(node["pattern"], value):
            errors.append(f"{path}: does not match pattern")
    if isinstance(value, list):
        if len(value) > node.get("maxItems", len(value)):
            errors.append(f"{path}: too many items")
        for i, item in enumerate(value):
            errors += schema_errors(node.get("items") or {}, item, f"{path}[{i}]")
    if isinstance(value, dict) and not node.get("x-kubernetes-preserve-unknown-fields"):
        if len(value) > node.get("maxProperties", len(value)):
            errors.append(f"{path}: too many properties")
        props = node.get("properties") or {}
        errors += [f"{path}.{k}: required" for k in node.get("required") or [] if k not in value]
        for key, item in value.items():
            if key in props:
                errors += schema_errors(props[key], item, f"{path}.{key}")
            elif isinstance(node.get("additionalProperties"), dict):
                errors += schema_errors(node["additionalProperties"], item, f"{path}.{key}")
            else:
                errors.append(f"{path}.{key}: unknown field")
    return errors
