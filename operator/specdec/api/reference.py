"""The API reference page (docs/reference/api.md), generated from the CRDs.

    python -m specdec.api.reference > docs/reference/api.md

Walks each CRD's openAPIV3Schema: one table per object (its fields with type, default, constraints and
description) and the object's x-kubernetes-validations rules with their messages. The CRDs are read from
the repository's crds/*.yaml; outside a checkout, from what `specdec crds` would write (the same text: a
test keeps them identical). tests/unit/test_docs.py fails when the committed page differs from this output.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REGENERATE = "python -m specdec.api.reference > docs/reference/api.md"
CRD_DIR = Path(__file__).resolve().parents[3] / "crds"
# SpeculativeDeployment first: the kind users write; then the operator's own kinds.
KIND_ORDER = ("SpeculativeDeployment", "ModelCache", "EngineBuild")
MARKDOWN_CHARS = set("|[]()*_\\`!{}#~")


def load_crds(crd_dir: Path | None = None) -> list[dict]:
    """The CRD objects, from crd_dir (default: the checkout's crds/), else from the models."""
    directory = crd_dir or CRD_DIR
    if directory.is_dir() and any(directory.glob("*.yaml")):
        texts = [p.read_text(encoding="utf-8") for p in sorted(directory.glob("*.yaml"))]
    else:
        from specdec.api.crd import render_crds

        texts = [render_crds()[name] for name in sorted(render_crds())]
    objs = [yaml.safe_load(t) for t in texts]
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    return sorted(objs, key=lambda o: (rank.get(o["spec"]["names"]["kind"], len(rank)), o["spec"]["names"]["kind"]))


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped, no raw HTML (code spans kept as they are)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = html.escape(parts[i], quote=False).replace("|", "\\|")
    return "`".join(parts)


def _code(text: Any) -> str:
    """Inline code that is safe in a table cell on both mkdocs and GitHub (pipes as entities)."""
    s = text if isinstance(text, str) else json.dumps(text, separators=(", ", ": "))
    s = html.escape(" ".join(s.split()), quote=False)
    # Markdown would read [..](..), *, _ and \\ inside raw HTML: numeric entities render as the characters.
    s = "".join(f"&#{ord(c)};" if c in MARKDOWN_CHARS else c for c in s)
    return f"<code>{s}</code>"


def _anchor(kind: str, path: str) -> str:
    parts = [p for p in path.replace("[]", ".items").replace("{}", ".values").split(".") if p]
    return "-".join([kind.lower(), *[p.lower() for p in parts]]) if parts else kind.lower()


def _is_object(node: dict) -> bool:
    return bool(node.get("properties"))


def _child_objects(path: str, node: dict) -> Iterator[tuple[str, dict]]:
    """(path, node) of the objects with properties reached from node's field: itself, array items, map values."""
    if _is_object(node):
        yield path, node
    elif node.get("type") == "array" and isinstance(node.get("items"), dict):
        yield from _child_objects(path + "[]", node["items"])
    elif isinstance(node.get("additionalProperties"), dict):
        yield from _child_objects(path + "{}", node["additionalProperties"])


def _type(kind: str, path: str, node: dict) -> str:
    if node.get("x-kubernetes-int-or-string"):
        return "integer or string"
    if _is_object(node):
        return f"[object](#{_anchor(kind, path)})"
    t = node.get("type", "any")
    if t == "array" and isinstance(node.get("items"), dict):
        return f"array of {_type(kind, path + '[]', node['items'])}"
    if t == "object" and isinstance(node.get("additionalProperties"), dict):
        return f"map of string to {_type(kind, path + '{}', node['additionalProperties'])}"
    if t == "object" and node.get("x-kubernetes-preserve-unknown-fields"):
        return "object (any fields)"
    return t + (f" ({node['format']})" if node.get("format") else "")


def _constraints(node: dict) -> list[str]:
    out = []
    if "enum" in node:
        out.append("one of " + ", ".join(_code(v) for v in node["enum"]))
    for key, word, strict in (("minimum", "≥", ">"), ("maximum", "≤", "<")):
        if key in node:
            exclusive = node.get("exclusive" + key.capitalize()) is True  # OpenAPI v3.0: a boolean
            out.append(f"{strict if exclusive else word} {node[key]}")
    for key, word in (("exclusiveMinimum", ">"), ("exclusiveMaximum", "<")):
        if isinstance(node.get(key), (int, float)) and not isinstance(node.get(key), bool):
            out.append(f"{word} {node[key]}")
    for key, word in (
        ("minLength", "length ≥"),
        ("maxLength", "length ≤"),
        ("minItems", "items ≥"),
        ("maxItems", "items ≤"),
        ("minProperties", "keys ≥"),
        ("maxProperties", "keys ≤"),
    ):
        if key in node:
            out.append(f"{word} {node[key]}")
    if "pattern" in node:
        out.append("matches " + _code(node["pattern"]))
    if node.get("x-kubernetes-list-type"):
        keys = node.get("x-kubernetes-list-map-keys")
        out.append(f"list type {node['x-kubernetes-list-type']}" + (f" (keys: {', '.join(keys)})" if keys else ""))
    items = node.get("items")
    if node.get("type") == "array" and isinstance(items, dict) and not _is_object(items):
        inner = _constraints(items)
        if inner:
            out.append("each item: " + "; ".join(inner))
    values = node.get("additionalProperties")
    if isinstance(values, dict) and not _is_object(values):
        inner = _constraints(values)
        if inner:
            out.append("each value: " + "; ".join(inner))
    return out


def _rules(node: dict) -> list[dict]:
    rules = list(node.get("x-kubernetes-validations") or [])
    for sub in ("items", "additionalProperties"):
        if isinstance(node.get(sub), dict) and not _is_object(node[sub]):
            rules += _rules(node[sub])
    return rules


def _object_section(kind: str, path: str, node: dict) -> list[str]:
    lines = [f'<a id="{_anchor(kind, path)}"></a>', "", f"### {kind} `{path or '(root)'}`", ""]
    if node.get("description") and path:
        lines += [_cell(node["description"]), ""]
    required = set(node.get("required") or [])
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    rule_rows = [("(this object)", r) for r in node.get("x-kubernetes-validations") or []]
    for name, child in node["properties"].items():
        desc = []
        if name in required:
            desc.append("**Required.**")
        if child.get("description"):
            desc.append(_cell(child["description"]))
        constraints = _constraints(child)
        if constraints:
            desc.append("Constraints: " + "; ".join(constraints) + ".")
        default = _code(child["default"]) if "default" in child else ""
        child_path = f"{path}.{name}"
        lines.append(f"| `{name}` | {_type(kind, child_path, child)} | {default} | {' '.join(desc)} |")
        if not _is_object(child):
            rule_rows += [(f"`{name}`", r) for r in _rules(child)]
    if rule_rows:
        lines += [
            "",
            "Validation rules (CEL, checked by the API server):",
            "",
            "| on | rule | message |",
            "|---|---|---|",
        ]
        lines += _rule_rows(rule_rows)
    return lines + [""]


def _rule_rows(rule_rows: list[tuple[str, dict]]) -> list[str]:
    lines = []
    for where, rule in rule_rows:
        message = rule.get("message") or (
            f"(expression) {rule['messageExpression']}" if rule.get("messageExpression") else ""
        )
        reason = f" ({rule['reason']})" if rule.get("reason") else ""
        field = f" Field: {_code(rule['fieldPath'])}." if rule.get("fieldPath") else ""
        message = _cell(message)
        if message and message[-1] not in ".!?":
            message += "."
        lines.append(f"| {where} | {_code(rule['rule'])} | {message}{reason}{field} |")
    return lines


def _walk_objects(path: str, node: dict) -> Iterator[tuple[str, dict]]:
    """Every object with properties under node (depth first, in field order)."""
    yield path, node
    for name, child in node["properties"].items():
        for child_path, obj in _child_objects(f"{path}.{name}", child):
            yield from _walk_objects(child_path, obj)


def _kind_section(crd: dict) -> list[str]:
    spec = crd["spec"]
    names = spec["names"]
    kind = names["kind"]
    lines = [f'<a id="{kind.lower()}"></a>', "", f"## {kind}", ""]
    for version in spec["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        short = ", ".join(f"`{s}`" for s in names.get("shortNames") or [])
        subresources = ", ".join(f"`{s}`" for s in version.get("subresources") or {})
        lines += [
            "| | |",
            "|---|---|",
            f"| API version | `{spec['group']}/{version['name']}` |",
            f"| scope | {spec['scope']} |",
            f"| plural, short names | `{names['plural']}`{', ' + short if short else ''} |",
            f"| subresources | {subresources or 'none'} |",
            "",
        ]
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            lines += [
                "`kubectl get` columns (`-o wide` adds those with priority 1):",
                "",
                "| column | type | from | priority |",
                "|---|---|---|---|",
            ]
            lines += [
                f"| {c['name']} | {c['type']} | {_code(c['jsonPath'])} | {c.get('priority', 0)} |" for c in columns
            ]
            lines.append("")
        root_rules = [("(the object)", r) for r in schema.get("x-kubernetes-validations") or []]
        root_rules += [
            (f"`{name}`", r)
            for name, node in schema.get("properties", {}).items()
            if name not in ("spec", "status")
            for r in node.get("x-kubernetes-validations") or []
        ]
        if root_rules:
            lines += [
                f"Validation rules on the whole {kind} (CEL, checked by the API server):",
                "",
                "| on | rule | message |",
                "|---|---|---|",
                *_rule_rows(root_rules),
                "",
            ]
        top = {k: v for k, v in schema.get("properties", {}).items() if k in ("spec", "status")}
        for name, node in top.items():
            for path, obj in _child_objects(f".{name}", node):
                for obj_path, obj_node in _walk_objects(path, obj):
                    lines += _object_section(kind, obj_path, obj_node)
    return lines


def render(crd_dir: Path | None = None) -> str:
    crds = load_crds(crd_dir)
    lines = [
        "<!-- Generated from crds/*.yaml by `" + REGENERATE + "`. Do not edit. -->",
        "",
        "# API reference",
        "",
        "Every field of the operator's custom resources, generated from the CRDs (`crds/`, themselves generated "
        "from the pydantic models by `specdec crds`). `kubectl explain` shows the same from a cluster. "
        "Cross-field rules are CEL rules: the API server refuses an object that breaks one, with its message.",
        "",
    ]
    lines += [f"- [{c['spec']['names']['kind']}](#{c['spec']['names']['kind'].lower()})" for c in crds]
    lines.append("")
    for crd in crds:
        lines += _kind_section(crd)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the API reference (Markdown) from the CRDs to stdout.")
    parser.add_argument("--crds", type=Path, default=None, help="directory of CRD YAML files (default: crds/)")
    args = parser.parse_args(argv)
    sys.stdout.flush()
    sys.stdout.buffer.write(render(args.crds).encode("utf-8"))  # UTF-8 whatever the locale
    return 0


if __name__ == "__main__":
    sys.exit(main())
