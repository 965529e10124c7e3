"""`specdec render`: what the operator would create for a SpeculativeDeployment on an empty cluster.

The same plan() and builders the operator runs; offline, no cluster. Owner UIDs, unknown until the
API server assigns them, are shown as a placeholder.
"""

from __future__ import annotations

from typing import Any

from specdec import yamlio
from specdec.builders.engine import build_engine_build, build_job
from specdec.builders.model_cache import build_fetch_job, build_model_cache
from specdec.builders.serving import build_cache_claim, build_config_map, build_deployment, build_service
from specdec.plan import Problem, plan
from specdec.settings import Settings

PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"


def _created(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the API server returns it, for the builders of the Jobs it owns."""
    return {**obj, "metadata": {**obj["metadata"], "uid": PLACEHOLDER_UID}}


def render_objects(obj: dict[str, Any], settings: Settings) -> list[dict[str, Any]] | Problem:
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    result = plan(obj, settings)
    if isinstance(result, Problem):
        return result
    uid = meta.get("uid", PLACEHOLDER_UID)
    objects: list[dict[str, Any]] = []
    if result.cache.managed:
        objects.append(build_cache_claim(result))
    # In the order the operator creates them: checkpoints are fetched before any engine is built.
    for cache in result.model_caches:
        model_cache = build_model_cache(result.namespace, cache)
        objects += [model_cache, build_fetch_job(_created(model_cache), settings)]
    for engine in result.engines:
        engine_build = build_engine_build(result.namespace, engine)
        objects += [engine_build, build_job(_created(engine_build), settings)]
    objects += [build_config_map(result, uid), build_deployment(result, uid, settings), build_service(result, uid)]
    return objects


def render_stream(documents: list[dict[str, Any]], settings: Settings) -> tuple[str, list[str]]:
    """YAML stream of every object for every SpeculativeDeployment in `documents`; plus errors."""
    out: list[dict[str, Any]] = []
    errors: list[str] = []
    for doc in documents:
        if not doc or doc.get("kind") != "SpeculativeDeployment":
            continue
        rendered = render_objects(doc, settings)
        if isinstance(rendered, Problem):
            errors.append(f"{doc['metadata'].get('name', '?')}: {rendered.reason}: {rendered.message}")
        else:
            out += rendered
    return yamlio.dump_all(out), errors
