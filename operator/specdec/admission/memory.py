"""Admission's GPU memory check: the weights of every model on a GPU (the target, a draft served beside it,
a drafter in the target's engine) plus a minimal KV cache for each fit what the GPU can give them.

KV caches as TensorRT-LLM sizes them. Backend pytorch: one executor, one budget, freeGpuMemoryFraction of the
memory the weights leave, shared by the target's and the drafter's caches token for token (KvCacheCreator.
_get_kv_size_per_token in tensorrt_llm/_torch/pyexecutor/_util.py sums the target's and the draft's bytes per
token, for a draft model and for draft layers in the target's engine alike). Backend tensorrt: each engine's
executor takes freeGpuMemoryFraction of the memory free when it starts (Triton's
kv_cache_free_gpu_mem_fraction, one value for both engines); with two engines on one GPU either may start
first, so each must fit in the fraction of what the other left.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from specdec.admission.gpu_nodes import LABEL_MEMORY, LABEL_PRODUCT, GpuNodes, candidates
from specdec.admission.model_facts import BYTES_PER_PARAMETER, HEAD_ESTIMATE, ModelFacts
from specdec.api.models import MAX_NODES
from specdec.problem import Problem
from specdec.schema.base import ModelSource

# Of a GPU's memory, what weights and KV cache may use: the rest goes to the CUDA context, activations
# and the runtime's buffers (vLLM's default gpu_memory_utilization is 0.9 for the same reason).
USABLE_GPU_MEMORY_FRACTION = 0.9
# The KV cache must hold one sequence of this many tokens (fewer if the engine's maxSeqLen is smaller).
# Not the engine's maxSeqLen: TensorRT-LLM shortens the longest sequence to what the KV cache holds
# ("maxAttentionWindow and maxSequenceLen are too large for at least one sequence to fit in kvCache.
# They are reduced to ...", trtGptModelInflightBatching.cpp and _torch/pyexecutor/resource_manager.py).
MINIMAL_KV_TOKENS = 4096
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class Served:
    """A model with weights on the runtime pod's GPUs."""

    role: str  # "target", "draft" (a model served beside it) or "drafter" (in the target's engine)
    source: ModelSource
    facts: ModelFacts | None
    devices: tuple[int, ...]
    tensor_parallel_size: int
    tensor_parallel_field: str  # where the spec sets it, for messages
    fp8_possible: bool = False  # quantization: fp8 is an option (backend tensorrt)
    engine: str = "target"  # the executor it runs in, whose KV-cache budget it draws from
    label: str = ""  # for messages, e.g. "EAGLE-3 head"; default: the role
    kv_layers: int | None = None  # layers whose K and V it caches; None: all of its own
    own_weights: bool = True  # False: its weights are counted in the target's (MTP layers)

    @property
    def name(self) -> str:
        return self.label or self.role

    @property
    def known_facts(self) -> ModelFacts:
        """Its facts, for the memory check, which sees only the models whose facts are known."""
        if self.facts is None:
            raise ValueError(f"the {self.name}'s facts are unknown: the memory check cannot count it")
        return self.facts

    @property
    def owner(self) -> str:
        return f"the {self.name}'" + ("" if self.name.endswith("s") else "s")


def _weight_precision(m: Served) -> str:
    if m.source.quantization == "fp8":
        return "fp8"
    return m.known_facts.weight_quantization or m.source.dtype


def weight_bytes_per_gpu(m: Served) -> float:
    """Quantized weights at their precision, embeddings and LM head at the model dtype, split over TP."""
    if not m.own_weights:
        return 0.0
    f, precision = m.known_facts, _weight_precision(m)
    embedding = f.embedding_parameters if precision != m.source.dtype else 0
    quantized = (f.parameters - embedding) * BYTES_PER_PARAMETER[precision]
    return (quantized + embedding * BYTES_PER_PARAMETER[m.source.dtype]) / m.tensor_parallel_size


def _kv_element_bytes(m: Served) -> float:
    return 1.0 if m.source.effective_kv_cache_dtype == "fp8" else BYTES_PER_PARAMETER[m.source.dtype]


def _kv_layers(m: Served) -> int:
    return m.known_facts.layers if m.kv_layers is None else m.kv_layers


def kv_bytes_per_token(m: Served) -> float:
    """On one GPU of the model: keys and values of its share of KV heads (at least one) in every cached
    layer, or, with latent attention, the latent of every layer (not split by TP)."""
    f, layers = m.known_facts, _kv_layers(m)
    if f.kv_latent_dim:
        return layers * f.kv_latent_dim * _kv_element_bytes(m)
    return layers * 2 * math.ceil(f.kv_heads / m.tensor_parallel_size) * f.head_dim * _kv_element_bytes(m)


def _kv_formula(m: Served) -> str:
    f, size = m.known_facts, _kv_element_bytes(m)
    per_token = (
        f"{kv_bytes_per_token(m):g} bytes per token: {_kv_layers(m)} layer{'s' if _kv_layers(m) != 1 else ''} × "
    )
    unit = f"{size:g} byte{'s' if size != 1 else ''}"
    if f.kv_latent_dim:
        return per_token + f"{f.kv_latent_dim} (latent) × {unit}"
    heads = math.ceil(f.kv_heads / m.tensor_parallel_size)
    return per_token + f"2 (K, V) × {heads} KV heads × {f.head_dim} × {unit}"


def _weights_text(m: Served) -> str:
    f, precision = m.known_facts, _weight_precision(m)
    detail = precision if precision == m.source.dtype else f"{precision}, embeddings {m.source.dtype}"
    size = BYTES_PER_PARAMETER[precision]
    estimated = "estimated " if f.source == HEAD_ESTIMATE else ""
    return (
        f"{m.name} {f.model}: {f.parameters / 1e9:.3g}B {estimated}parameters × {size:g} "
        f"byte{'s' if size != 1 else ''} ({detail}) / tensorParallelSize {m.tensor_parallel_size} = "
        f"{weight_bytes_per_gpu(m) / GIB:.1f} GiB"
    )


def _minimal_tokens(m: Served, max_seq_len: int | None) -> int:
    return min(MINIMAL_KV_TOKENS, max_seq_len or m.known_facts.max_position_embeddings or MINIMAL_KV_TOKENS)


def _pools(here: list[Served]) -> list[list[Served]]:
    """The KV-cache budgets on one GPU: one per executor, holding the caches of every model in it."""
    pools: dict[str, list[Served]] = {}
    for m in here:
        if _kv_layers(m):
            pools.setdefault(m.engine, []).append(m)
    return list(pools.values())


def _kv_shortfall(pool: list[Served], budget: float, tokens: int) -> str | None:
    """Why one sequence of `tokens` does not fit this budget, or None."""
    needs = [(m, kv_bytes_per_token(m) * tokens) for m in pool]
    total = sum(need for _, need in needs)
    if total <= budget:
        return None
    parts = " + ".join(f"{m.name} {need / GIB:.2f} GiB ({_kv_formula(m)})" for m, need in needs)
    return (
        f"{budget / GIB:.2f} GiB, less than one sequence of {tokens} tokens needs: "
        + parts
        + (f" = {total / GIB:.2f} GiB" if len(needs) > 1 else "")
    )


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3g}%"


def _kv_pools_shortfall(
    pools: list[list[Served]], kv_fraction: float, free: float, max_seq_len: int | None
) -> str | None:
    """Why the KV caches do not fit what the weights leave on one GPU, or None. With several executors
    there, the one starting later gets the fraction of what the earlier left: refused when no order fits."""
    failures = []
    for order in itertools.permutations(pools):
        for started, pool in enumerate(order):
            budget = kv_fraction * (1 - kv_fraction) ** started * free
            why = _kv_shortfall(pool, budget, _minimal_tokens(pool[0], max_seq_len))
            if why:
                failures.append((order, pool, why))
                break
        else:
            return None
    order, pool, why = failures[0]
    names = " and ".join(m.owner for m in pool) + (" KV caches get" if len(pool) > 1 else " KV cache gets")
    if len(pools) == 1:
        return f"{names} {_percent(kv_fraction)} of that, {why}"
    engines = " and the ".join(p[0].name for p in order)
    return (
        f"the {engines} engines each take {_percent(kv_fraction)} of the memory free when they start, the later one "
        f"{_percent(kv_fraction)} of what the earlier left, in either order; with {order[0][0].owner} first, "
        f"{names} {why}"
    )


def shortfall(
    served: list[Served], kv_fraction: float, max_seq_len: int | None, memory_mib: int, product: str
) -> str | None:
    """Why the models do not fit GPUs of this size, or None."""
    usable = memory_mib * 2**20 * USABLE_GPU_MEMORY_FRACTION
    gpu_text = f"one {product} GPU ({memory_mib} MiB; {USABLE_GPU_MEMORY_FRACTION:.0%} usable = {usable / GIB:.1f} GiB)"
    devices = sorted({d for m in served for d in m.devices})
    for gpu in devices:
        here = [m for m in served if gpu in m.devices]
        weighed = [m for m in here if m.own_weights]
        weights = sum(weight_bytes_per_gpu(m) for m in weighed)
        where = (
            "the GPU"
            if len(devices) == 1
            else "each GPU"
            if all(len(m.devices) == len(devices) for m in served)
            else f"GPU {gpu}"
        )
        parts = " + ".join(_weights_text(m) for m in weighed)
        with_draft = len(weighed) > 1
        if weights > usable:
            fp8 = any(m.fp8_possible and BYTES_PER_PARAMETER[_weight_precision(m)] > 1 for m in weighed)
            total = f" (= {weights / GIB:.1f} GiB)" if len(weighed) > 1 else ""
            return (
                f"{where} cannot hold the weights: {parts}{total}, more than {gpu_text}. Use more GPUs "
                "(tensorParallelSize), "
                + ("quantization: fp8, " if fp8 else "")
                + ("a smaller draft, " if with_draft else "")
                + "or nodes with larger GPUs"
            )
        free = usable - weights
        why = _kv_pools_shortfall(_pools(here), kv_fraction, free, max_seq_len)
        if why:
            fp8_kv = any(_kv_element_bytes(m) > 1 and m.fp8_possible for m in here)
            return (
                f"{where} holds {weights / GIB:.1f} GiB of weights ({parts}), leaving {free / GIB:.2f} GiB "
                f"of {gpu_text}; {why}. Raise runtime.kvCache.freeGpuMemoryFraction, "
                + ("quantize the KV cache (fp8), " if fp8_kv else "")
                + ("use a smaller draft, " if with_draft else "")
                + "or use more GPUs"
            )
    return None


def check_gpu_memory(
    served: list[Served],
    kv_fraction: float,
    gpus: int,
    node_selector: dict[str, str],
    nodes: GpuNodes,
    max_seq_len: int | None,
) -> Problem | list[str]:
    known = [m for m in served if m.facts is not None]
    if not known:
        return []
    if nodes.nodes is None:
        return [f"GPU memory, as {nodes.why_unknown}"]
    pool = candidates(nodes.nodes, node_selector, gpus)
    if not pool:
        selector = ", ".join(f"{k}={v}" for k, v in node_selector.items()) or "none"
        return [
            f"GPU memory, as no node with a {LABEL_MEMORY} label matches the runtime pods' node selector "
            f"({selector}) and has {gpus} allocatable GPU(s)"
        ]
    # Every node the pod may land on must do: a pod on the smallest GPUs would fail at load time.
    sizes = sorted({(n.memory_mib, n.product) for n in pool})
    verdicts = [(size, shortfall(known, kv_fraction, max_seq_len, *size)) for size in sizes]
    failing = [(size, why) for size, why in verdicts if why]
    if not failing:
        return []
    message = failing[0][1]
    if "cannot hold the weights" in message:
        message += _node_count_hint(
            known, kv_fraction, max_seq_len, failing[0][0], _gpus_per_node(nodes, node_selector)
        )
    fitting = sorted({product for (_, product), why in verdicts if not why})
    if fitting:
        message += (
            f". It fits the {', '.join(fitting)} GPUs of other nodes: select them with "
            f"spec.runtime.nodeSelector ({LABEL_PRODUCT}: {fitting[-1]})"
        )
    return Problem("ModelDoesNotFitGpu", message)


def _gpus_per_node(nodes: GpuNodes, node_selector: dict[str, str]) -> int:
    """The most GPUs one node the runtime pods may land on has (0 if none)."""
    return max((n.gpus for n in candidates(nodes.nodes or (), node_selector, 1)), default=0)


def _spread(served: list[Served], ranks: int) -> list[Served]:
    """The models split over `ranks` GPUs: the target and whatever shares its tensor parallelism (a draft on backend
    pytorch, a drafter in its engine)."""
    target = served[0].tensor_parallel_size
    return [
        dataclasses.replace(m, tensor_parallel_size=ranks, devices=tuple(range(ranks)))
        if m.tensor_parallel_size == target
        else m
        for m in served
    ]


def _node_count_hint(
    served: list[Served], kv_fraction: float, max_seq_len: int | None, size: tuple[int, str], per_node: int
) -> str:
    """Whether the model would fit several whole nodes of these GPUs (spec.target.nodes), and on how many; or that
    it fits none up to MAX_NODES, with the size it would need."""
    if per_node < 1:
        return ""
    for nodes in range(1, MAX_NODES + 1):
        ranks = nodes * per_node
        if shortfall(_spread(served, ranks), kv_fraction, max_seq_len, *size) is None:
            if nodes == 1:
                return ""  # more GPUs of one node do: the message says so already
            return (
                f". It fits {nodes} nodes of {per_node} GPUs: set spec.target.nodes: {nodes} and "
                f"tensorParallelSize: {ranks} (backend pytorch)"
            )
    widest = _spread(served, MAX_NODES * per_node)
    weights = sum(weight_bytes_per_gpu(m) for m in widest if m.own_weights)
    return (
        f". It fits no node count up to {MAX_NODES} nodes of {per_node} GPUs: at tensorParallelSize "
        f"{MAX_NODES * per_node} each GPU would still need {weights / GIB:.1f} GiB of weights and its KV cache"
    )
