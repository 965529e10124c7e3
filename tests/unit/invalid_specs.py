"""One table of invalid SpeculativeDeployment specs, shared by the unit tests (pydantic, via
`specdec.plan.parse_spec`) and the cluster tests (the real API server, via the generated CRD's schema
and CEL rules).

Each entry is `(id, spec, field)`: `spec` is the `.spec` of a SpeculativeDeployment, `field` a
substring of the field path both validators must name in their error.

`CROSS_FIELD` lists the entries that break a rule relating two or more fields (pydantic validator
and CEL `x-kubernetes-validations`); `LIST_SET` those enforced by the API server through
`x-kubernetes-list-type: set`. All other entries are plain bound, enum or pattern violations.
"""

from __future__ import annotations

import copy
from typing import Any

TARGET = "hf://meta-llama/Llama-2-13b-hf"
DRAFT = "hf://meta-llama/Llama-2-7b-hf"


def spec(**overrides: Any) -> dict[str, Any]:
    """A valid minimal spec (mode none) with top-level blocks replaced by `overrides`."""
    base: dict[str, Any] = {"target": {"model": TARGET}}
    base.update(copy.deepcopy(overrides))
    return base


def draft_target(**fields: Any) -> dict[str, Any]:
    """A valid draftTarget speculation block; `fields` override draftTarget's fields."""
    block = {"draft": {"model": DRAFT}, "draftLen": 4, **fields}
    return {"mode": "draftTarget", "draftTarget": block}


def redrafter(**fields: Any) -> dict[str, Any]:
    block = {"drafterModel": "pvc://drafters/vicuna-7b-drafter", **fields}
    return {"mode": "redrafter", "redrafter": block}


INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    # --- bounds, enums, patterns --------------------------------------------------------------------
    ("zero-draft-len", spec(speculation=draft_target(draftLen=0)), "draftLen"),
    ("kv-fraction-above-one", spec(runtime={"kvCache": {"freeGpuMemoryFraction": 1.5}}), "freeGpuMemoryFraction"),
    ("unknown-mode-medusa", spec(speculation={"mode": "medusa"}), "mode"),
    ("negative-replicas", spec(runtime={"replicas": -1}), "replicas"),
    ("empty-model", spec(target={"model": ""}), "model"),
    ("model-bad-scheme", spec(target={"model": "s3://x/y"}), "model"),
    # --- cross-field rules (pydantic validator + CEL) -------------------------------------------------
    ("devices-longer-than-tp", spec(target={"model": TARGET, "tensorParallelSize": 1, "devices": [0, 1]}),
     "devices"),
    ("draft-target-without-block", spec(speculation={"mode": "draftTarget"}), "draftTarget"),
    ("draft-target-and-redrafter-blocks",
     spec(speculation={**draft_target(), "redrafter": redrafter()["redrafter"]}), "redrafter"),
    ("draft-len-above-max-draft-len", spec(speculation=draft_target(draftLen=8, maxDraftLen=4)), "draftLen"),
    ("temperature-with-greedy", spec(speculation=redrafter(greedy=True, temperature=0.7)), "temperature"),
    ("kv-cache-fp8-without-fp8-quantization",
     spec(target={"model": TARGET, "kvCacheDtype": "fp8"}), "kvCacheDtype"),
    ("draft-target-without-block-reuse",
     spec(speculation=draft_target(), runtime={"kvCache": {"enableBlockReuse": False}}), "enableBlockReuse"),
    ("claim-name-and-storage-class",
     spec(cache={"claimName": "engines", "storageClassName": "fast"}), "claimName"),
    ("max-input-len-not-below-max-seq-len", spec(engine={"maxInputLen": 4096, "maxSeqLen": 4096}), "maxInputLen"),
    ("pytorch-redrafter", spec(backend="pytorch", speculation=redrafter()), "mode"),
    ("port-reserved-by-the-backend", spec(runtime={"port": 8001}), "port"),
    # --- list-type set (API server) / pydantic validator ----------------------------------------------
    ("duplicate-devices", spec(target={"model": TARGET, "tensorParallelSize": 2, "devices": [0, 0]}), "devices"),
]

CROSS_FIELD: frozenset[str] = frozenset({
    "devices-longer-than-tp", "draft-target-without-block", "draft-target-and-redrafter-blocks",
    "draft-len-above-max-draft-len", "temperature-with-greedy", "kv-cache-fp8-without-fp8-quantization",
    "draft-target-without-block-reuse", "claim-name-and-storage-class", "max-input-len-not-below-max-seq-len",
    "pytorch-redrafter", "port-reserved-by-the-backend",
})

LIST_SET: frozenset[str] = frozenset({"duplicate-devices"})
