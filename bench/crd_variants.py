"""The SpeculativeDeployment CRD as generated, and variants of it to measure what its writes cost by part.

    PYTHONPATH=operator:. .venv/bin/python -m bench.crd_variants VARIANT   # prints the CRD as JSON

- `full`: the CRD of `crds/`;
- `no-cel`: the same without any x-kubernetes-validations;
- `one-mode`: generated from a registry of the example's mode (draftTarget) and `none` (the default mode);
- `plus-toy`: generated from the registry and one more mode, `toy` (a block with rules of its own and a
  rule on the whole spec, as the modes have), which exists here only: what one more mode costs a write.

The API models are built from the registry (`specdec.modes.MODES`) when `specdec.api.models` is imported, so
each registry's CRD is generated in a Python process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import Field

from specdec.modes.mode import Drafting, Mode, PyTorchPath, Rule
from specdec.schema.base import ApiModel, cel, validations

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("full", "no-cel", "one-mode", "plus-toy")
SD_CRD = "specdec.io_speculativedeployments.yaml"
ONE_MODE = ("none", "draftTarget")  # the example's mode; none is the default of spec.speculation.mode


class ToySpec(ApiModel):
    """A made-up mode's block, shaped like the PyTorch modes' blocks."""

    model_config = validations(
        cel(
            "!has(self.maxMatching) || self.maxMatching <= self.maxDraftLen",
            "maxMatching must not exceed maxDraftLen",
            ".maxMatching",
        ),
        cel("!has(self.layers) || self.layers.all(l, l >= 0)", "layers are not negative", ".layers"),
    )

    max_draft_len: int = Field(4, ge=1, le=32, description="Draft tokens per step.")
    max_matching: int | None = Field(None, ge=1, le=32, description="Longest match.")
    layers: list[int] | None = Field(None, max_length=16, description="Layers read.")


TOY = Mode(
    "toy",
    "a made-up mode that only the cost bench registers",
    ToySpec,
    rules=(
        Rule(
            "self.runtime.kvCache.enableBlockReuse",
            "toy needs runtime.kvCache.enableBlockReuse",
            ".runtime.kvCache.enableBlockReuse",
        ),
    ),
    drafting=Drafting("lookup", draft_len=lambda block: block.max_draft_len),
    pytorch=PyTorchPath(lambda block, checkpoint: {"decoding_type": "Toy", "max_draft_len": block.max_draft_len}),
)


def _without_rules(node: Any) -> Any:
    if isinstance(node, list):
        return [_without_rules(item) for item in node]
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    return node


def _generate(variant: str) -> dict[str, Any]:
    """In a fresh process only: changes the registry before the API models are built from it."""
    from specdec import modes

    if variant == "one-mode":
        for name in [n for n in modes.MODES if n not in ONE_MODE]:
            del modes.MODES[name]
    elif variant == "plus-toy":
        modes.MODES[TOY.name] = TOY
    from specdec.api.crd import crds

    crd = crds()[SD_CRD]
    return _without_rules(crd) if variant == "no-cel" else crd


def evaluated_rules(schema: dict[str, Any], obj: Any, path: str = "") -> list[tuple[str, dict[str, str]]]:
    """(path, rule) of each CEL rule the API server evaluates on a write of `obj` (defaults applied): those
    of the schema nodes `obj` has a value at (a rule on an absent field does not run)."""
    if obj is None:
        return []
    found = [(path, rule) for rule in schema.get("x-kubernetes-validations") or []]
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = (schema.get("properties") or {}).get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                found += evaluated_rules(sub, value, f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(obj):
            found += evaluated_rules(schema["items"], item, f"{path}[{i}]")
    return found


def openapi_schema(crd: dict[str, Any]) -> dict[str, Any]:
    """A CRD's schema (its one version's)."""
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def as_stored(body: dict[str, Any]) -> dict[str, Any]:
    """A SpeculativeDeployment as the API server stores it: its spec with every default applied."""
    from specdec.api.models import SpeculativeDeploymentSpec
    from specdec.plan import parse_spec

    spec = parse_spec(body["spec"])
    assert isinstance(spec, SpeculativeDeploymentSpec), spec
    return {**body, "spec": spec.model_dump(mode="json", by_alias=True, exclude_none=True)}


def sd_crd(variant: str) -> dict[str, Any]:
    """The SpeculativeDeployment CRD of `variant` (one of VARIANTS)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown CRD variant {variant!r}: one of {', '.join(VARIANTS)}")
    out = subprocess.run(
        [sys.executable, "-m", "bench.crd_variants", variant],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{ROOT / 'operator'}:{ROOT}", "PATH": "/usr/bin:/bin"},
    )
    return json.loads(out.stdout)


if __name__ == "__main__":
    print(json.dumps(_generate(sys.argv[1])))
