"""plan(): the pure heart of the operator. A SpeculativeDeployment in, everything it needs out.

No API calls here. The result says whether the spec is usable (the first failing check decides,
cert-manager style), which engines must exist (content-addressed EngineBuild specs), and the
runtime configuration the pods will run with.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from typing import Any

from specdec import modes
from specdec.admission.checks import Observed, admit, facts_awaited, fetched_checkpoints
from specdec.admission.gpu_nodes import node_selector
from specdec.admission.validation import CHECKS, check_name, parse_spec
from specdec.api import models
from specdec.api.runtime_config import (
    CACHE_MOUNT,
    MODELS_MOUNT,
    SSH_DIR,
    SSH_PORT,
    MultiNode,
    RuntimeConfig,
    RuntimeKvCache,
    RuntimeNone,
    RuntimeSpeculativeConfig,
    ServedModel,
)
from specdec.api.shared_objects import BuildPodSpec, EngineBuildSpec, EngineRecipe, ModelCacheSpec
from specdec.modes.mode import Chosen
from specdec.problem import Problem
from specdec.settings import Settings

KV_FRACTION_SHARED_GPU = 0.35  # the seeds' value when draft and target share a GPU
KV_FRACTION_ALONE = 0.9
MANAGED_CACHE_PREFIX = "specdec-engine-cache"


@dataclasses.dataclass(frozen=True)
class ModelCachePlan:
    name: str
    spec: ModelCacheSpec


@dataclasses.dataclass(frozen=True)
class EnginePlan:
    role: str  # "target" or "draft"
    name: str
    spec: EngineBuildSpec
    inputs: tuple[ModelCachePlan, ...] = ()  # checkpoints its build reads: fetched before it is created


@dataclasses.dataclass(frozen=True)
class CachePlan:
    claim_name: str
    managed: bool  # the operator creates the claim
    storage_class_name: str | None
    size: str


@dataclasses.dataclass(frozen=True)
class Plan:
    name: str
    namespace: str
    spec: models.SpeculativeDeploymentSpec
    mode: Chosen[Any]  # the spec's mode and its block, resolved once
    engines: tuple[EnginePlan, ...]
    cache: CachePlan
    runtime: RuntimeConfig
    gpus: int
    model_claims: tuple[str, ...]  # pvc:// claims the runtime pods mount read-only
    unchecked: tuple[str, ...] = ()  # admission checks skipped, and why (specdec.admission.checks)
    # Backend pytorch: the hf:// checkpoints the runtime pods read from the cache (no engines): the
    # runtime is applied only once every one is Fetched.
    runtime_inputs: tuple[ModelCachePlan, ...] = ()
    # Models admission has no facts of until their fetch (specdec.admission.checks.facts_awaited): until then the
    # operator creates no EngineBuild and no runtime (specdec.reconcile).
    facts_awaited: tuple[str, ...] = ()

    @property
    def engine_names(self) -> list[str]:
        return [e.name for e in self.engines]

    @property
    def model_caches(self) -> tuple[ModelCachePlan, ...]:
        """Every checkpoint the engines (or the runtime, on backend pytorch) read, once, in their order."""
        return tuple({c.name: c for c in (*(c for e in self.engines for c in e.inputs), *self.runtime_inputs)}.values())

    @property
    def spec_valid_message(self) -> str:
        return "spec accepted" + (f"; not checked: {'; '.join(self.unchecked)}" if self.unchecked else "")


def content_hash(value: Any, length: int = 10) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def slug(text: str, limit: int = 30) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "model"


def cache_path(uri: str, revision: str | None) -> str:
    """Where an hf:// checkpoint lives inside the cache claim: one directory per model and revision."""
    return f"models/{uri.split('://', 1)[1].replace('/', '--')}/{revision or 'main'}"


def model_dir(uri: str, revision: str | None) -> str:
    """Where a checkpoint is read from inside build and runtime pods."""
    scheme, rest = uri.split("://", 1)
    if scheme == "hf":
        return f"{CACHE_MOUNT}/{cache_path(uri, revision)}"
    claim, path = rest.split("/", 1)
    return f"{MODELS_MOUNT}/{claim}/{path}"


def model_claims(*uris: str) -> tuple[str, ...]:
    return tuple(sorted({u.split("://", 1)[1].split("/", 1)[0] for u in uris if u.startswith("pvc://")}))


# --- derivations ---------------------------------------------------------------------------------


def _cache_plan(spec: models.SpeculativeDeploymentSpec) -> CachePlan:
    cache = spec.cache
    if cache.claim_name:
        return CachePlan(cache.claim_name, False, None, cache.size)
    suffix = f"-{slug(cache.storage_class_name, 40)}" if cache.storage_class_name else ""
    return CachePlan(f"{MANAGED_CACHE_PREFIX}{suffix}", True, cache.storage_class_name, cache.size)


def cache_claim_name(spec: models.SpeculativeDeploymentSpec) -> str:
    return _cache_plan(spec).claim_name


def _recipe(
    source: models.ModelSource, spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any], image: str, role: str
) -> EngineRecipe:
    limits = spec.engine
    fields: dict[str, Any] = dict(
        model=source.model,
        revision=source.revision,
        family=source.family,
        dtype=source.dtype,
        quantization=source.quantization,
        kv_cache_dtype=source.effective_kv_cache_dtype,
        tensor_parallel_size=source.tensor_parallel_size,
        image=image,
        max_batch_size=limits.max_batch_size,
        max_input_len=limits.max_input_len,
        max_seq_len=limits.max_seq_len,
        max_num_tokens=limits.max_num_tokens,
    )
    fields.update((limits.tuning or models.EngineTuning()).recipe_fields(role, source))
    engine = mode.mode.engine
    if engine is not None:
        if role == "target":
            fields["speculative_decoding_mode"] = engine.decoding_mode
        fields.update(engine.recipe(mode.block, role))
    return EngineRecipe(**fields)


# The EngineRecipe's optional fields that its hash holds even when null: the names of the engines already
# built hash them so. Any field added since is left out while null, so that adding one (a new mode's part of
# the recipe, a new flag) renames no engine.
HASHED_WHEN_NULL = frozenset(
    {
        "revision",
        "max_draft_len",
        "redrafter",
        "max_batch_size",
        "max_input_len",
        "max_seq_len",
        "max_num_tokens",
        "gpt_attention_plugin",
        "use_fused_mlp",
        "multiple_profiles",
        "reduce_fusion",
    }
)


def engine_name(recipe: EngineRecipe, cache_claim: str) -> str:
    """Names the engine's bytes: its directory in the cache (and its EngineBuild, by default)."""
    model = recipe.model.split("://", 1)[1].rsplit("/", 1)[-1]
    identity = {k: v for k, v in recipe.model_dump(mode="json").items() if v is not None or k in HASHED_WHEN_NULL}
    return f"{slug(model)}-{content_hash([identity, cache_claim])}"


def model_cache(uri: str, revision: str | None, cache: CachePlan, pod: models.FetchSpec) -> ModelCachePlan:
    """A ModelCache is named, like an EngineBuild, by what it holds (model, revision, claim) plus how its
    pods are placed when the spec sets that: one deployment's fetch settings never decide whether
    another's checkpoint arrives. Fetches of one checkpoint with different placement write the same
    directory; the second finds it there."""
    revision = revision or "main"
    model = uri.split("://", 1)[1].rsplit("/", 1)[-1]
    name = f"{slug(model)}-{content_hash([uri, revision, cache.claim_name])}"
    if pod != models.FetchSpec():
        name = f"{name}-{content_hash(pod.model_dump(mode='json'), 6)}"
    return ModelCachePlan(
        name,
        ModelCacheSpec(
            model=uri, revision=revision, cache_claim=cache.claim_name, path=cache_path(uri, revision), pod=pod
        ),
    )


def recipe_models(recipe: EngineRecipe) -> list[tuple[str, str]]:
    """The checkpoints (uri, revision) an engine build reads: its model, and its mode's (EnginePath.engine_models)."""
    engine = modes.engine_path(recipe)
    extra = engine.engine_models(recipe) if engine else ()
    return [(recipe.model, recipe.revision or "main"), *((uri, "main") for uri in extra)]


def recipe_checkpoints(recipe: EngineRecipe) -> list[tuple[str, str]]:
    """The hf:// checkpoints (uri, revision) an engine build reads from the cache."""
    return [(uri, revision) for uri, revision in recipe_models(recipe) if uri.startswith("hf://")]


def _engine(
    role: str,
    source: models.ModelSource,
    spec: models.SpeculativeDeploymentSpec,
    mode: Chosen[Any],
    cache: CachePlan,
    settings: Settings,
) -> EnginePlan:
    """An EngineBuild's identity is the recipe plus how its pods are placed (spec.build): one
    deployment's build settings (a node selector nothing matches, a memory limit too small) must
    never decide whether another deployment's engine gets built. Deployments with the same build
    settings (most set none) share the build; builds of one recipe with different settings write the
    same engine directory, and whichever finishes second finds it there and reuses it."""
    recipe = _recipe(source, spec, mode, spec.build.image or settings.build_image, role)
    engine = engine_name(recipe, cache.claim_name)
    build = spec.build
    pod = BuildPodSpec(
        node_selector=build.node_selector,
        tolerations=build.tolerations,
        resources=build.resources,
        backoff_limit=build.backoff_limit,
        active_deadline_seconds=build.active_deadline_seconds,
        pod_labels=build.pod_labels,
        pod_annotations=build.pod_annotations,
    )
    name = engine if pod == BuildPodSpec() else f"{engine}-{content_hash(pod.model_dump(mode='json'), 6)}"
    inputs = tuple(model_cache(uri, rev, cache, spec.cache.fetch) for uri, rev in recipe_checkpoints(recipe))
    return EnginePlan(
        role,
        name,
        EngineBuildSpec(recipe=recipe, cache_claim=cache.claim_name, engine_path=f"engines/{engine}", pod=pod),
        inputs,
    )


def _runtime_checkpoints(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> dict[str, str | None]:
    """Every checkpoint the runtime reads and its revision: the target, the mode's draft, its other checkpoints."""
    draft = mode.draft()
    checkpoints: dict[str, str | None] = {spec.target.model: spec.target.revision}
    if draft is not None:  # the draft's revision wins: its speculative_model is the draft's copy
        checkpoints[draft.model] = draft.revision
    for uri in mode.runtime_checkpoints():
        checkpoints.setdefault(uri, None)
    return checkpoints


def _served(source: models.ModelSource, engine: EnginePlan | None) -> ServedModel:
    """Checkpoints are read from the cache (hf://, fetched by a ModelCache) or a pvc:// mount, on either
    backend: no runtime pod downloads from the Hub."""
    return ServedModel(
        engine_dir=f"{CACHE_MOUNT}/{engine.spec.engine_path}" if engine else None,
        checkpoint=model_dir(source.model, source.revision),
        devices=source.effective_devices,
        tensor_parallel_size=source.tensor_parallel_size,
    )


def _runtime(
    spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any], engines: dict[str, EnginePlan]
) -> tuple[RuntimeConfig, int]:
    target = _served(spec.target, engines.get("target"))
    source = mode.draft()
    draft = _served(source, engines.get("draft")) if source is not None else None
    if spec.target.pipeline_parallel_size > 1:
        target = target.model_copy(update={"pipeline_parallel_size": spec.target.pipeline_parallel_size})
    gpus = spec.target.gpus_per_node  # a pod's: one node's share of the ranks
    if draft is not None and spec.backend == "tensorrt":
        gpus = len(set(draft.devices) | set(target.devices))
    shared_gpu = draft is not None and (spec.backend == "pytorch" or bool(set(draft.devices) & set(target.devices)))
    kv = spec.runtime.kv_cache
    fraction = kv.free_gpu_memory_fraction or (KV_FRACTION_SHARED_GPU if shared_gpu else KV_FRACTION_ALONE)
    served_name = spec.target.model.split("://", 1)[1]
    if spec.target.model.startswith("pvc://"):
        served_name = served_name.rstrip("/").rsplit("/", 1)[-1]
    speculative_config = None
    pytorch, runtime = mode.mode.pytorch, mode.mode.runtime
    if spec.backend == "pytorch" and pytorch is not None:
        revisions = _runtime_checkpoints(spec, mode)
        speculative_config = pytorch.speculative_config(mode.block, lambda uri: model_dir(uri, revisions.get(uri)))
    if runtime is not None:
        speculation = runtime.make(mode.block, draft, speculative_config)
    elif speculative_config is not None:
        speculation = RuntimeSpeculativeConfig(mode=mode.mode.name, speculative_config=speculative_config)
    else:
        speculation = RuntimeNone()
    config = RuntimeConfig(
        backend=spec.backend,
        served_model_name=served_name,
        max_batch_size=spec.engine.max_batch_size,
        port=spec.runtime.port,
        target=target,
        kv_cache=RuntimeKvCache(free_gpu_memory_fraction=fraction, enable_block_reuse=kv.enable_block_reuse),
        speculation=speculation,
        front_limits=spec.runtime.front,
        multi_node=MultiNode(nodes=spec.target.nodes, gpus_per_node=gpus, ssh_port=SSH_PORT, ssh_dir=SSH_DIR)
        if spec.target.nodes > 1
        else None,
    )
    return config, gpus


def plan(obj: dict[str, Any], settings: Settings, observed: Observed = Observed()) -> Plan | Problem:
    """Everything a SpeculativeDeployment needs, or the first reason it cannot be served. `observed`:
    the model facts and GPU nodes admission checks the spec against (by default the catalog, no nodes)."""
    meta = obj["metadata"]
    spec = check_name(meta.get("name", "")) or parse_spec(obj.get("spec") or {})
    if isinstance(spec, Problem):
        return spec
    mode = modes.mode_of(spec.speculation)
    for check in CHECKS:
        problem = check(spec, mode)
        if problem:
            return problem
    cache = _cache_plan(spec)
    engines: dict[str, EnginePlan] = {}
    draft = mode.draft()
    if spec.backend == "tensorrt":
        engines["target"] = _engine("target", spec.target, spec, mode, cache, settings)
        if draft is not None:
            engines["draft"] = _engine("draft", draft, spec, mode, cache, settings)
    runtime, gpus = _runtime(spec, mode, engines)
    admitted = admit(
        spec,
        runtime.kv_cache.free_gpu_memory_fraction,
        gpus,
        node_selector(settings.gpu_node_selector, spec.runtime.node_selector),
        observed,
    )
    if isinstance(admitted, Problem):
        return dataclasses.replace(
            admitted,
            model_caches=tuple(
                model_cache(uri, rev, cache, spec.cache.fetch) for uri, rev in fetched_checkpoints(spec, observed)
            ),
        )
    checkpoints = _runtime_checkpoints(spec, mode)
    runtime_inputs: tuple[ModelCachePlan, ...] = ()
    if spec.backend == "pytorch":  # trtllm-serve reads the checkpoints themselves: fetched first
        runtime_inputs = tuple(
            {
                c.name: c
                for c in (
                    model_cache(uri, rev, cache, spec.cache.fetch)
                    for uri, rev in checkpoints.items()
                    if uri.startswith("hf://")
                )
            }.values()
        )
    return Plan(
        name=meta["name"],
        namespace=meta.get("namespace", "default"),
        spec=spec,
        mode=mode,
        engines=tuple(engines.values()),
        cache=cache,
        runtime=runtime,
        gpus=gpus,
        model_claims=model_claims(*checkpoints),
        unchecked=admitted,
        runtime_inputs=runtime_inputs,
        facts_awaited=facts_awaited(spec, observed),
    )
