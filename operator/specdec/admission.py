"""Admission from the models' own facts: refuse, before any GPU Job, a deployment that cannot work.

Four pure checks, in plan() after the spec's own: draft and target share their tokenizer (a draft of
another vocabulary proposes token ids that mean other text: ~0 % acceptance), the target has the layers a
mode reads (dflash, dspark, eagle3, saveState), the tensor-parallel size
splits the attention heads evenly, and weights plus a minimal KV cache fit the GPUs the runtime pod gets.
They read `ModelFacts` (specdec.model_facts): those the fetch read from a checkpoint's own files (its
ModelCache's status) first, the catalog's second; and the GPU nodes (specdec.gpu_nodes). What they lack
is not refused: `admit` returns notes saying which check was skipped and why, for SpecValid's message.
An hf:// model the catalog does not know has no facts until its fetch: `facts_awaited` names it, and the
operator starts no GPU work for the deployment before then (specdec.reconcile).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Mapping

from pydantic.alias_generators import to_camel

from specdec import model_catalog, modes
from specdec.modes import dspark
from specdec.schema.base import ModelSource
from specdec.api.models import SpeculativeDeploymentSpec
from specdec.gpu_nodes import LABEL_MEMORY, LABEL_PRODUCT, GpuNodes, candidates
from specdec.model_facts import BYTES_PER_PARAMETER, CATALOG_SOURCE, ModelFacts, same_tokenizer
from specdec.problem import Problem

# Of a GPU's memory, what weights and KV cache may use: the rest goes to the CUDA context, activations
# and the runtime's buffers (vLLM's default gpu_memory_utilization is 0.9 for the same reason).
USABLE_GPU_MEMORY_FRACTION = 0.9
# The KV cache must hold one sequence of this many tokens (fewer if the engine's maxSeqLen is smaller).
# Not the engine's maxSeqLen: TensorRT-LLM shortens the longest sequence to what the KV cache holds
# ("maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache.
# They are reduced to ...", trtGptModelInflightBatching.cpp and _torch/pyexecutor/resource_manager.py).
MINIMAL_KV_TOKENS = 4096
MAX_TENSOR_PARALLEL = 64  # ModelSource.tensor_parallel_size's bound
GIB = 1024 ** 3


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
        return (source.model.startswith("hf://") and checkpoint(source) not in self.fetched
                and _catalog_facts(source) is None)


@dataclasses.dataclass(frozen=True)
class Served:
    """A model with weights on the runtime pod's GPUs."""

    role: str  # "target" or "draft"
    source: ModelSource
    facts: ModelFacts | None
    devices: tuple[int, ...]
    tensor_parallel_size: int
    tensor_parallel_field: str  # where the spec sets it, for messages
    fp8_possible: bool = False  # quantization: fp8 is an option (backend tensorrt)


def served_models(spec: SpeculativeDeploymentSpec, observed: Observed) -> list[Served]:
    """Target and draft, placed as plan() places them: on backend tensorrt by their device lists; on
    backend pytorch the draft runs in the target's process, on its GPUs with its tensor parallelism."""
    target = spec.target
    fp8 = spec.backend == "tensorrt"
    served = [Served("target", target, observed.model_facts(target), tuple(target.effective_devices),
                     target.tensor_parallel_size, "spec.target.tensorParallelSize", fp8)]
    mode, block = modes.mode_of(spec.speculation)
    draft = mode.draft(block)
    if draft is not None:
        if spec.backend == "pytorch":
            served.append(Served("draft", draft, observed.model_facts(draft), served[0].devices,
                                 target.tensor_parallel_size,
                                 "spec.target.tensorParallelSize (the draft's on backend pytorch)"))
        else:
            served.append(Served("draft", draft, observed.model_facts(draft), tuple(draft.effective_devices),
                                 draft.tensor_parallel_size, f"spec.speculation.{mode.name}.draft.tensorParallelSize",
                                 fp8))
    return served


def facts_awaited(spec: SpeculativeDeploymentSpec, observed: Observed) -> tuple[str, ...]:
    """The models whose facts come with their fetch (Observed.awaits_fetch)."""
    return tuple(m.source.model for m in served_models(spec, observed) if observed.awaits_fetch(m.source))


def fetched_checkpoints(spec: SpeculativeDeploymentSpec, observed: Observed) -> list[tuple[str, str]]:
    """The checkpoints (uri, revision) whose facts admission took from their fetch."""
    return [checkpoint(m.source) for m in served_models(spec, observed) if observed.fetched.get(checkpoint(m.source))]


def _without_facts(m: Served, observed: Observed) -> str:
    if observed.awaits_fetch(m.source):
        why = "not in the operator's catalog: read from its files when its fetch finishes; no GPU work starts before"
    elif m.source.model.startswith("hf://"):
        why = "not in the operator's catalog, and its fetch found no config.json, safetensors or tokenizer to read"
    else:
        why = "the operator reads the files of the hf:// checkpoints it fetches, not of pvc:// ones"
    return f"the vocabulary, attention heads and GPU memory of {m.source.model} ({why})"


def _origins(served: list[Served]) -> str:
    """Where the facts a message used came from."""
    known = [m.facts for m in served if m.facts is not None]
    sources = {f.source for f in known}
    if len(sources) == 1:
        return f"facts of {' and '.join(f.model for f in known)}: {sources.pop()}"
    return "facts of " + "; ".join(f"{f.model}: {f.source}" for f in known)


def admit(spec: SpeculativeDeploymentSpec, kv_fraction: float, gpus: int, node_selector: dict[str, str],
          observed: Observed) -> Problem | tuple[str, ...]:
    """The first Problem, or the notes of what could not be checked."""
    served = served_models(spec, observed)
    notes = [_without_facts(m, observed) for m in served if m.facts is None]
    mode, block = modes.mode_of(spec.speculation)
    results = (check_vocabulary(served, mode.acceptance(block)),
               check_target_fits_mode(spec, served),
               check_tensor_parallel(served),
               check_gpu_memory(served, kv_fraction, gpus, node_selector, observed.gpu_nodes, spec.engine.max_seq_len))
    for result in results:
        if isinstance(result, Problem):
            return Problem(result.reason, f"{result.message} ({_origins(served)})")
        notes += result
    return tuple(notes)


# --- vocabulary ------------------------------------------------------------------------------------

def _tokenizer_name(facts: ModelFacts) -> str:
    kind, _, value = facts.tokenizer.partition(":")
    return f"the {value} tokenizer" if kind == "family" else f"tokenizer {facts.tokenizer}"


def check_vocabulary(served: list[Served], acceptance: str) -> Problem | list[str]:
    known = {m.role: m.facts for m in served if m.facts is not None}
    target, draft = known.get("target"), known.get("draft")
    if target is None or draft is None:
        return []
    numbers = (f"draft {draft.model}: {_tokenizer_name(draft)}, vocab_size {draft.vocab_size}; "
               f"target {target.model}: {_tokenizer_name(target)}, vocab_size {target.vocab_size}")
    shared = same_tokenizer(draft, target)
    if shared is False:
        alternative = model_catalog.smallest_of_family(target.tokenizer, target.model)
        return Problem("VocabularyMismatch", (
            f"the draft and the target do not share a tokenizer ({numbers}): a token id means different "
            "text to each, so the target would reject nearly every drafted token. Use a draft of the "
            "target's family" + (f", e.g. {alternative}" if alternative else "")))
    if acceptance == "logits" and draft.vocab_size != target.vocab_size:
        return Problem("VocabularyMismatch", (
            f"acceptance: logits compares the draft's and the target's logits token by token, so their "
            f"vocab_size must be equal ({numbers}); use acceptance: tokens"))
    if shared is None:
        mixed = (draft.source == CATALOG_SOURCE) != (target.source == CATALOG_SOURCE)
        why = (f"the draft's facts come from {draft.source}, the target's from {target.source}: a catalog family "
               "and an identity read from files are not comparable" if mixed else "identities of different kinds")
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
    mode, block = modes.mode_of(spec.speculation)
    if target is None or block is None:
        return []
    for field in LAYER_FIELDS:
        beyond = sorted(layer for layer in getattr(block, field, None) or () if layer >= target.layers)
        if beyond:
            return Problem("InvalidSpec", (
                f"spec.speculation.{mode.name}.{to_camel(field)}: {target.model} has {target.layers} layers "
                f"(0 to {target.layers - 1}), not {', '.join(map(str, beyond))}: name the layers the draft was "
                "trained on, or leave the field unset to read them from the draft's config"))
    if mode is dspark.MODE and block.draft_model == spec.target.model and target.architecture != dspark.EMBEDDED:
        return Problem("InvalidSpec", (
            f"spec.speculation.dspark.draftModel is the target, but only a {dspark.EMBEDDED} target holds a DSpark "
            f"draft in its own weights; {target.model} is {target.architecture}: name a DSpark draft trained for it"))
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
            why = (f"does not divide the {f.attention_heads} attention heads of {f.model} "
                   f"({f.attention_heads} / {tp} = {f.attention_heads / tp:.2f}): each GPU computes whole heads")
        else:
            why = (f"and the {f.kv_heads} KV heads of {f.model} do not divide one another: KV heads are split "
                   f"evenly across GPUs, or copied when there are fewer than GPUs")
        return Problem("TensorParallelDoesNotDivideHeads",
                       f"{m.tensor_parallel_field} {tp} {why}; sizes that work for it: {valid}")
    return []


# --- GPU memory ------------------------------------------------------------------------------------

def _weight_precision(m: Served) -> str:
    if m.source.quantization == "fp8":
        return "fp8"
    return m.facts.weight_quantization or m.source.dtype


def weight_bytes_per_gpu(m: Served) -> float:
    """Quantized weights at their precision, embeddings and LM head at the model dtype, split over TP."""
    f, precision = m.facts, _weight_precision(m)
    embedding = f.embedding_parameters if precision != m.source.dtype else 0
    quantized = (f.parameters - embedding) * BYTES_PER_PARAMETER[precision]
    return (quantized + embedding * BYTES_PER_PARAMETER[m.source.dtype]) / m.tensor_parallel_size


def _kv_element_bytes(m: Served) -> float:
    return 1.0 if m.source.effective_kv_cache_dtype == "fp8" else BYTES_PER_PARAMETER[m.source.dtype]


def kv_bytes_per_token(m: Served) -> float:
    """On one GPU of the model: keys and values of its share of KV heads (at least one) in every layer,
    or, with latent attention, the latent of every layer (not split by TP)."""
    f = m.facts
    if f.kv_latent_dim:
        return f.layers * f.kv_latent_dim * _kv_element_bytes(m)
    return f.layers * 2 * math.ceil(f.kv_heads / m.tensor_parallel_size) * f.head_dim * _kv_element_bytes(m)


def _kv_formula(m: Served) -> str:
    f, size = m.facts, _kv_element_bytes(m)
    per_token = f"{kv_bytes_per_token(m):g} bytes per token: {f.layers} layers × "
    unit = f"{size:g} byte{'s' if size != 1 else ''}"
    if f.kv_latent_dim:
        return per_token + f"{f.kv_latent_dim} (latent) × {unit}"
    heads = math.ceil(f.kv_heads / m.tensor_parallel_size)
    return per_token + f"2 (K, V) × {heads} KV heads × {f.head_dim} × {unit}"


def _weights_text(m: Served) -> str:
    f, precision = m.facts, _weight_precision(m)
    detail = precision if precision == m.source.dtype else f"{precision}, embeddings {m.source.dtype}"
    size = BYTES_PER_PARAMETER[precision]
    return (f"{m.role} {f.model}: {f.parameters / 1e9:.3g}B parameters × {size:g} byte{'s' if size != 1 else ''} "
            f"({detail}) / tensorParallelSize {m.tensor_parallel_size} = {weight_bytes_per_gpu(m) / GIB:.1f} GiB")


def _minimal_tokens(m: Served, max_seq_len: int | None) -> int:
    return min(MINIMAL_KV_TOKENS, max_seq_len or m.facts.max_position_embeddings or MINIMAL_KV_TOKENS)


def shortfall(served: list[Served], kv_fraction: float, max_seq_len: int | None, memory_mib: int,
              product: str) -> str | None:
    """Why the models do not fit GPUs of this size, or None. Each model's KV cache gets `kv_fraction` of
    what the weights on its GPU leave (the runtime's freeGpuMemoryFraction)."""
    usable = memory_mib * 2 ** 20 * USABLE_GPU_MEMORY_FRACTION
    gpu_text = (f"one {product} GPU ({memory_mib} MiB; {USABLE_GPU_MEMORY_FRACTION:.0%} usable = "
                f"{usable / GIB:.1f} GiB)")
    devices = sorted({d for m in served for d in m.devices})
    for gpu in devices:
        here = [m for m in served if gpu in m.devices]
        weights = sum(weight_bytes_per_gpu(m) for m in here)
        where = ("the GPU" if len(devices) == 1 else "each GPU" if all(len(m.devices) == len(devices) for m in served)
                 else f"GPU {gpu}")
        parts = " + ".join(_weights_text(m) for m in here)
        if weights > usable:
            fp8 = any(m.fp8_possible and BYTES_PER_PARAMETER[_weight_precision(m)] > 1 for m in here)
            total = f" (= {weights / GIB:.1f} GiB)" if len(here) > 1 else ""
            return (f"{where} cannot hold the weights: {parts}{total}, more than {gpu_text}. Use more GPUs "
                    "(tensorParallelSize), "
                    + ("quantization: fp8, " if fp8 else "") + "or nodes with larger GPUs")
        free = usable - weights
        for m in here:
            tokens = _minimal_tokens(m, max_seq_len)
            need = kv_bytes_per_token(m) * tokens
            if kv_fraction * free < need:
                return (f"{where} holds {weights / GIB:.1f} GiB of weights ({parts}), leaving {free / GIB:.2f} GiB "
                        f"of {gpu_text}; the {m.role}'s KV cache gets {kv_fraction:.0%} of that, "
                        f"{kv_fraction * free / GIB:.2f} GiB, less than one sequence of {tokens} tokens needs: "
                        f"{need / GIB:.2f} GiB ({_kv_formula(m)}). Raise runtime.kvCache.freeGpuMemoryFraction, "
                        + ("quantize the KV cache (fp8), " if _kv_element_bytes(m) > 1 and m.fp8_possible else "")
                        + "or use more GPUs")
    return None


def check_gpu_memory(served: list[Served], kv_fraction: float, gpus: int, node_selector: dict[str, str],
                     nodes: GpuNodes, max_seq_len: int | None) -> Problem | list[str]:
    known = [m for m in served if m.facts is not None]
    if not known:
        return []
    if nodes.nodes is None:
        return [f"GPU memory, as {nodes.why_unknown}"]
    pool = candidates(nodes.nodes, node_selector, gpus)
    if not pool:
        selector = ", ".join(f"{k}={v}" for k, v in node_selector.items()) or "none"
        return [f"GPU memory, as no node with a {LABEL_MEMORY} label matches the runtime pods' node selector "
                f"({selector}) and has {gpus} allocatable GPU(s)"]
    # Every node the pod may land on must do: a pod on the smallest GPUs would fail at load time.
    sizes = sorted({(n.memory_mib, n.product) for n in pool})
    verdicts = [(size, shortfall(known, kv_fraction, max_seq_len, *size)) for size in sizes]
    failing = [(size, why) for size, why in verdicts if why]
    if not failing:
        return []
    message = failing[0][1]
    fitting = sorted({product for (_, product), why in verdicts if not why})
    if fitting:
        message += (f". It fits the {', '.join(fitting)} GPUs of other nodes: select them with "
                    f"spec.runtime.nodeSelector ({LABEL_PRODUCT}: {fitting[-1]})")
    return Problem("ModelDoesNotFitGpu", message)
