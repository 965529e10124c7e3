"""SIMULATED DATA: what the local cluster's fetch pods report.

No container runs under kwok, so no fetch reads a checkpoint. The stage that ends Job pods
(stages/pod-complete.yaml) writes, as a fetch pod's termination message, the report a real fetch writes
(specdec.admission.checkpoint_facts) for the model it fetches (its SPECDEC_MODEL): the catalog's config.json excerpt,
parameter count and tokenizer family (specdec.admission.model_catalog), and a size of parameters × bytes of the
stored precision. The operator then reads the facts from the ModelCache's status, as in production.
A model the catalog lacks reports nothing (no facts: admission skips what it cannot check); a pod's
`simulation.specdec.io/fetch-report` annotation (spec.cache.fetch.podAnnotations) reports what it says.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from specdec.admission import model_catalog
from specdec.admission.model_facts import BYTES_PER_PARAMETER

STAGE = "pod-complete"
EMPTY_TABLE = "{{ $reports := dict }}"  # in the stage's template; replaced by the catalog's reports
REPORT_ANNOTATION = "simulation.specdec.io/fetch-report"


def simulated_report(hub_id: str) -> dict[str, Any]:
    facts = model_catalog.catalog_facts(hub_id)
    if facts is None:
        raise ValueError(f"{hub_id} is not in the model catalog: the simulated fetch reports only its models")
    precision = facts.weight_quantization or facts.dtype
    return {
        "sizeBytes": int(facts.parameters * BYTES_PER_PARAMETER[precision]),
        "config": model_catalog.config_excerpt(hub_id),
        "parameters": facts.parameters,
        "tokenizer": facts.tokenizer,
    }


def reports_table() -> str:
    """The Go template line that defines $reports: lowercased Hub id -> report JSON (JSON strings are Go
    string literals)."""
    pairs = " ".join(
        f"{json.dumps(hub_id.lower())} {json.dumps(json.dumps(simulated_report(hub_id)))}"
        for hub_id in model_catalog.hub_ids()
    )
    return f"{{{{ $reports := dict {pairs} }}}}"


def with_reports(stage: dict[str, Any]) -> dict[str, Any]:
    """The stage with the catalog's reports, if it is the one that ends fetch pods."""
    if stage["metadata"]["name"] != STAGE:
        return stage
    stage = copy.deepcopy(stage)
    template = stage["spec"]["next"]["statusTemplate"]
    if EMPTY_TABLE not in template:
        raise ValueError(f"stages/{STAGE}.yaml lost its {EMPTY_TABLE!r} line")
    stage["spec"]["next"]["statusTemplate"] = template.replace(EMPTY_TABLE, reports_table())
    return stage
