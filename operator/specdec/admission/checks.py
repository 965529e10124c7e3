"""Admission from the models' own facts: refuse, before any GPU Job, a deployment that cannot work.

Four pure checks, in plan() after the spec's own: draft and target share their tokenizer (a draft of
another vocabulary proposes token ids that mean other text: ~0 % acceptance), the target has the layers a
mode reads (dflash, dspark, eagle3, saveState), the tensor-parallel size
splits the attention heads evenly, and weights plus a minimal KV cache of the target, its draft and the
drafter in its engine (Drafting.in_engine) fit the GPUs the runtime pod gets (specdec.admission.memory).
They read `ModelFacts` (specdec.admission.model_facts): those the fetch read from a checkpoint's own files (its
ModelCache's status) first, the catalog's second; and the GPU nodes (specdec.admission.gpu_nodes). What they lack
is not refused: `admit` returns notes saying which check was skipped and why, for SpecValid's message.
An hf:// model the catalog does not know has no facts until its fetch: `facts_awaited` names it, and the
operator starts no GPU work for the deployment before then (specdec.reconcile).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pydantic.alias_generators import to_camel

from specdec import modes
from specdec.admission import model_catalog
from specdec.admission.gpu_nodes import GpuNodes, candidates
from specdec.admission.memory import Served, check_gpu_memory
from specdec.admission.model_facts import CATALOG_SOURCE, HEAD_ESTIMATE, ModelFacts, estimated_head, same_tokenizer
from specdec.api.models import SpeculativeDeploymentSpec
from specdec.modes import dspark
from specdec.modes.mode import EngineDrafter
from specdec.problem import Problem
from specdec.schema.base import ModelSource

MAX_TENSOR_PARALLEL = 64  # ModelSource.tensor_parallel_size's bound


def checkpoint(source: ModelSource) -> tuple[str, str]:
    """(uri, revision) as a ModelCache's spec names the checkpoint."""
    return source.model, source.revision or "main"


def _catalog_facts(source: ModelSource) -> ModelFacts | None:
    if not source.model.startswith("hf://"):
        return None
    return model_catalog.catalog_facts(source.model.split("://", 1)[1])


@dataclasses.dataclass(frozen=True)
class Observed:
    """What admission knows beyond the spec. `fetched`: the facts of the namespace's Fetched ModelCaches,
    by checkpoint (None: fetched, but its files gave none)."""

    fetched: Mapping[tuple[str, str], ModelFacts | None] = dataclasses.field(default_factory=dict)
    gpu_nodes: GpuNodes = GpuNodes()

    def model_facts(self, source: ModelSource) -> ModelFacts | None:
        return self.fetched.get(checkpoint(source)) or _catalog_facts(source)

    def awaits_fetch(self, source: ModelSource) -> bool:
        """An hf:// model whose facts only its fetch can tell: not in the catalog, not fetched yet."""
        return (
            source.model.startswith("hf://")
            and checkpoint(source) not in self.fetched
            and _catalog_facts(source) is None
        )


def served_models(spec: SpeculativeDeploymentSpec, observed: Observed) -> list[Served]:
    """Target, draft and the drafter in the target's engine, placed as plan() places them: on backend
    tensorrt the draft by its device lists, in an engine of its own; on backend pytorch the draft runs in the
    target's process, on its GPUs with its tensor parallelism; a drafter in the target's engine always does."""
    target = spec.target
    fp8 = spec.backend == "tensorrt"
    served = [
        Served(
            "target",
            target,
            observed.model_facts(target),
            tuple(target.effective_devices),
            target.tensor_parallel_size,
            "spec.target.tensorParallelSize",
            fp8,
        )
    ]
    mode = modes.mode_of(spec.speculation)
    draft = mode.draft()
    if draft is not None:
        if spec.backend == "pytorch":
            served.append(
                Served(
                    "draft",
                    draft,
                    observed.model_facts(draft),
                    served[0].devices,
                    target.tensor_parallel_size,
                    "spec.target.tensorParallelSize (the draft's on backend pytorch)",
                )
            )
        else:
            served.append(
                Served(
                    "draft",
                    draft,
                    observed.model_facts(draft),
                    tuple(draft.effective_devices),
                    draft.tensor_parallel_size,
                    f"spec.speculation.{mode.mode.name}.draft.tensorParallelSize",
                    fp8,
                    engine="draft",
                )
            )
    drafter = mode.in_engine_drafter()
    if drafter is not None:
        served += _engine_drafter(drafter, served[0], observed)
    return served


def _engine_drafter(drafter: EngineDrafter, target: Served, observed: Observed) -> list[Served]:
    """A drafter in the target's engine: on its GPUs, with its tensor parallelism and dtype. One in the target
    checkpoint (MTP layers, a DSpark draft embedded in DeepSeek-V4) has its weights counted in the target's:
    it adds the KV cache of the layers its mode names, if any. A checkpoint of its own whose facts are unknown
    (and not awaited) is sized as a head from the target's (estimated_head)."""
    field = f"spec.target.tensorParallelSize (the {drafter.label}'s: it runs in the target's engine)"
    if drafter.checkpoint in (None, target.source.model):
        if drafter.kv_layers is None or target.facts is None:
            return []
        return [
            Served(
                "drafter",
                target.source,
                target.facts,
                target.devices,
                target.tensor_parallel_size,
                field,
                label=drafter.label,
                kv_layers=drafter.kv_layers,
                own_weights=False,
            )
        ]
    source = target.source.model_copy(update={"model": drafter.checkpoint, "revision": None, "quantization": "none"})
    facts = observed.model_facts(source)
    if facts is None and target.facts is not None and not observed.awaits_fetch(source):
        facts = estimated_head(drafter.checkpoint.removeprefix("hf://"), target.facts)
    return [
        Served(
            "drafter",
            source,
            facts,
            target.devices,
            target.tensor_parallel_size,
            field,
            label=drafter.label,
            kv_layers=drafter.kv_layers,
        )
    ]


def facts_awaited(spec: SpeculativeDeploymentSpec, observed: Observed) -> tuple[str, ...]:
    """The models whose facts come with their fetch (Observed.awaits_fetch)."""
    return tuple(m.source.model for m in served_models(spec, observed) if observed.awaits_fetch(m.source))


def fetched_checkpoints(spec: SpeculativeDeploymentSpec, observed: Observed) -> list[tuple[str, str]]:
    """The checkpoints (uri, revision) whose facts admission took from their fetch."""
    return [checkpoint(m.source) for m in served_models(spec, observed) if observed.fetched.get(checkpoint(m.source))]


def _why_no_facts(m: Served, observed: Observed) -> str:
    if observed.awaits_fetch(m.source):
        return "not in the operator's catalog: read from its files when its fetch finishes; no GPU work starts before"
    if m.source.model.startswith("hf://"):
        return "not in the operator's catalog, and its fetch found no config.json, safetensors or tokenizer to read"
    return "the operator reads the files of the hf:// checkpoints it fetches, not of pvc:// ones"


def _unchecked(m: Served, observed: Observed) -> list[str]:
    if m.facts is None:
        return [f"the vocabulary, attention heads and GPU memory of {m.source.model} ({_why_no_facts(m, observed)})"]
    if m.facts.source == HEAD_ESTIMATE:
        return [
            f"the exact size of the {m.name} {m.source.model} ({_why_no_facts(m, observed)}): its GPU memory "
            f"is {HEAD_ESTIMATE}"
        ]
    return []


def _origins(served: list[Served]) -> str:
    """Where the facts a message used came from."""
    known = list({m.facts.model: m.facts for m in served if m.facts is not None}.values())
    sources = {f.source for f in known}
    if len(sources) == 1:
        return f"facts of {' and '.join(f.model for f in known)}: {sources.pop()}"
    return "facts of " + "; ".join(f"{f.model}: {f.source}" for f in known)


def admit(
    spec: SpeculativeDeploymentSpec, kv_fraction: float, gpus: int, node_selector: dict[str, str], observed: Observed
) -> Problem | tuple[str, ...]:
    """The first Problem, or the notes of what could not be checked."""
    served = served_models(spec, observed)
    notes = [note for m in served for note in _unchecked(m, observed)]
    results = (
        check_vocabulary(served, modes.mode_of(spec.speculation).acceptance()),
        check_target_fits_mode(spec, served),
        check_tensor_parallel(served),
        check_gpu_memory(served, kv_fraction, gpus, node_selector, observed.gpu_nodes, spec.engine.max_seq_len),
        check_canary_fits(spec, gpus, node_selector, observed.gpu_nodes),
        check_group_fits(spec, gpus, node_selector, observed.gpu_nodes),
    )
    for result in results:
        if isinstance(result, Problem):
            return Problem(result.reason, f"{result.message} ({_origins(served)})")
        notes += result
    return tuple(notes)


def check_canary_fits(
    spec: SpeculativeDeploymentSpec, gpus: int, node_selector: dict[str, str], nodes: GpuNodes
) -> Problem | list[str]:
    """With spec.rollout.canary on, the runtime's replicas and the canary's must fit the allocatable GPUs of the
    nodes their pods may land on, together: a canary that can never be scheduled would never decide."""
    canary = spec.rollout.canary
    if not canary.enabled or gpus < 1:
        return []
    if nodes.nodes is None:
        return [f"the canary's GPUs, as {nodes.why_unknown}"]
    pool = candidates(nodes.nodes, node_selector, gpus)
    slots = sum(n.gpus // gpus for n in pool)
    wanted = spec.runtime.replicas + canary.replicas
    if slots >= wanted:
        return []
    return Problem(
        "CanaryDoesNotFit",
        (
            f"{spec.runtime.replicas} runtime and {canary.replicas} canary pod(s) of {gpus} GPU(s) each need "
            f"{wanted * gpus} GPUs; the {len(pool)} node(s) they may land on have room for {slots} such pod(s) "
            f"({sum(n.gpus for n in pool)} allocatable GPUs). Lower spec.rollout.canary.replicas or "
            "spec.runtime.replicas, or turn the canary off"
        ),
    )


def check_group_fits(
    spec: SpeculativeDeploymentSpec, gpus: int, node_selector: dict[str, str], nodes: GpuNodes
) -> Problem | list[str]:
    """A target spanning several nodes needs that many nodes with a pod's GPUs each: one group's pods on one node
    each (a group's pods could share a node only with twice its GPUs, which its pod count rules out)."""
    wanted = spec.target.nodes
    if wanted < 2:
        return []
    if nodes.nodes is None:
        return [f"the nodes of a group, as {nodes.why_unknown}"]
    pool = candidates(nodes.nodes, node_selector, gpus)
    if len(pool) >= wanted:
        return []
    return Problem(
        "NotEnoughGpuNodes",
        f"spec.target.nodes {wanted} needs {wanted} nodes with {gpus} allocatable GPU(s) each "
        f"(tensorParallelSize {spec.target.tensor_parallel_size} / {wanted} nodes); the runtime pods may land on "
        f"{len(pool)} such node(s)"
        + (f": {', '.join(n.name for n in pool)}" if pool else "")
        + ". Lower nodes, or add nodes (spec.runtime.nodeSelector)",
    )


# --- vocabulary ------------------------------------------------------------------------------------


def _tokenizer_name(facts: ModelFacts) -> str:
    kind, _, value = facts.tokenizer.partition(":")
    return f"the {value} tokenizer" if kind == "family" else f"tokenizer {facts.tokenizer}"


def check_vocabulary(served: list[Served], acceptance: str) -> Problem | list[str]:
    known = {m.role: m.facts for m in served if m.facts is not None}
    target, draft = known.get("target"), known.get("draft")
    if target is None or draft is None:
        return []
    numbers = (
        f"draft {draft.model}: {_tokenizer_name(draft)}, vocab_size {draft.vocab_size}; "
        f"target {target.model}: {_tokenizer_name(target)}, vocab_size {target.vocab_size}"
    )
    shared = same_tokenizer(draft, target)
    if shared is False:
        alternative = model_catalog.smallest_of_family(target.tokenizer, target.model)
        return Problem(
            "VocabularyMismatch",
            (
                f"the draft and the target do not share a tokenizer ({numbers}): a token id means different "
                "text to each, so the target would reject nearly every drafted token. Use a draft of the "
                "target's family" + (f", e.g. {alternative}" if alternative else "")
            ),
        )
    if acceptance == "logits" and draft.vocab_size != target.vocab_size:
        return Problem(
            "VocabularyMismatch",
            (
                f"acceptance: logits compares the draft's and the target's logits token by token, so their "
                f"vocab_size must be equal ({numbers}); use acceptance: tokens"
            ),
        )
    if shared is None:
        mixed = (draft.source == CATALOG_SOURCE) != (target.source == CATALOG_SOURCE)
        why = (
            f"the draft's facts come from {draft.source}, the target's from {target.source}: a catalog family "
            "and an identity read from files are not comparable"
            if mixed
            else "identities of different kinds"
        )
        return [f"the tokenizers of {draft.model} and {target.model} ({why}: {draft.tokenizer}, {target.tokenizer})"]
    # Same tokenizer, vocab_size may differ by padding (Qwen2.5-0.5B 151936, Qwen2.5-7B 152064):
    # tokens acceptance compares token ids only.
    return []


# --- the target a mode reads -----------------------------------------------------------------------

# Fields of a mode's block that name layers of the target (dflash and dspark target_layer_ids, eagle3 and
# saveState eagle3_layers_to_capture; -1: the last): TensorRT-LLM captures their hidden states, and a layer
# the target does not have fails the server at start.
LAYER_FIELDS = ("target_layer_ids", "eagle3_layers_to_capture")


def check_target_fits_mode(spec: SpeculativeDeploymentSpec, served: list[Served]) -> Problem | list[str]:
    target = served[0].facts
    chosen = modes.mode_of(spec.speculation)
    mode, block = chosen.mode, chosen.block
    if target is None or block is None:
        return []
    for field in LAYER_FIELDS:
        beyond = sorted(layer for layer in getattr(block, field, None) or () if layer >= target.layers)
        if beyond:
            return Problem(
                "InvalidSpec",
                (
                    f"spec.speculation.{mode.name}.{to_camel(field)}: {target.model} has {target.layers} layers "
                    f"(0 to {target.layers - 1}), not {', '.join(map(str, beyond))}: name the layers the draft was "
                    "trained on, or leave the field unset to read them from the draft's config"
                ),
            )
    if mode is dspark.MODE and block.draft_model == spec.target.model and target.architecture != dspark.EMBEDDED:
        return Problem(
            "InvalidSpec",
            (
                f"spec.speculation.dspark.draftModel is the target, but only a {dspark.EMBEDDED} target holds a DSpark "
                f"draft in its own weights; {target.model} is {target.architecture}: name a DSpark draft trained for it"
            ),
        )
    return []


# --- tensor parallelism ----------------------------------------------------------------------------


def valid_tensor_parallel_sizes(facts: ModelFacts) -> list[int]:
    """TensorRT-LLM gives each GPU num_attention_heads / tp heads, and splits the KV heads evenly or,
    when there are fewer KV heads than GPUs, copies them (models/llama/convert.py dup_kv_weight:
    `assert tp_size % num_head == 0`)."""
    heads, kv = facts.attention_heads, facts.kv_heads
    return [n for n in range(1, MAX_TENSOR_PARALLEL + 1) if heads % n == 0 and (kv % n == 0 or n % kv == 0)]


def check_tensor_parallel(served: list[Served]) -> Problem | list[str]:
    for m in served:
        f, tp = m.facts, m.tensor_parallel_size
        if f is None or tp in valid_tensor_parallel_sizes(f):
            continue
        valid = ", ".join(map(str, valid_tensor_parallel_sizes(f)))
        if f.attention_heads % tp:
            why = (
                f"does not divide the {f.attention_heads} attention heads of {f.model} "
                f"({f.attention_heads} / {tp} = {f.attention_heads / tp:.2f}): each GPU computes whole heads"
            )
        else:
            why = (
                f"and the {f.kv_heads} KV heads of {f.model} do not divide one another: KV heads are split "
                f"evenly across GPUs, or copied when there are fewer than GPUs"
            )
        return Problem(
            "TensorParallelDoesNotDivideHeads", f"{m.tensor_parallel_field} {tp} {why}; sizes that work for it: {valid}"
        )
    return []
