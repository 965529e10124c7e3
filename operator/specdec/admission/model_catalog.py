"""The model catalog: the real config.json values of the models our examples and tests name, with where
each was copied from, in `model_catalog.yaml` (package data, read once).

SIMULATED FETCH DATA: admission uses it for the models it lists until their fetch has read their own files,
and the local cluster's simulated fetch reports it as what it read (specdec_dev.simulated_fetch).
"""

from __future__ import annotations

import functools
from importlib import resources

import yaml

from specdec.admission.model_facts import CATALOG_SOURCE, ModelFacts

CATALOG_FILE = "model_catalog.yaml"


@functools.cache
def _entries() -> dict[str, tuple[dict, int, str]]:
    """Hub id -> (config.json excerpt, parameters per the model card, tokenizer family)."""
    data = yaml.safe_load(resources.files("specdec.admission").joinpath(CATALOG_FILE).read_text())
    return {hub_id: (m["config"], m["parameters"], m["tokenizer"]) for hub_id, m in data["models"].items()}


@functools.cache
def _by_id() -> dict[str, str]:
    """Hub ids are case-insensitive; Meta's repositories were renamed from "Meta-Llama-3.1-*" (the old names
    still resolve)."""
    by_id = {hub_id.lower(): hub_id for hub_id in _entries()}
    by_id.update(
        {
            hub_id.lower().replace("/llama-3.1-", "/meta-llama-3.1-"): hub_id
            for hub_id in _entries()
            if "/Llama-3.1-" in hub_id
        }
    )
    return by_id


def config_excerpt(hub_id: str) -> dict:
    return _entries()[hub_id][0]


def hub_ids() -> list[str]:
    return list(_entries())


def catalog_facts(hub_id: str) -> ModelFacts | None:
    """The catalog's facts of a Hub model (e.g. "meta-llama/Llama-3.1-8B-Instruct"), or None."""
    known = _by_id().get(hub_id.lower())
    if known is None:
        return None
    config, parameters, tokenizer = _entries()[known]
    return ModelFacts.from_config(known, config, parameters=parameters, tokenizer=tokenizer, source=CATALOG_SOURCE)


def smallest_of_family(tokenizer: str, besides: str) -> str | None:
    """The smallest catalog model with this tokenizer other than `besides`: a draft to suggest."""
    family = [(p, hub_id) for hub_id, (_, p, t) in _entries().items() if t == tokenizer and hub_id != besides]
    return min(family)[1] if family else None
