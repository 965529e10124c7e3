"""The API (`specdec.io/v1alpha1`): pydantic models are the single source of truth.
This module has the SpeculativeDeployment's, with the status base every kind shares; the shared objects'
(EngineBuild, ModelCache) are in `specdec.api.shared_objects`.

`crds/` is generated from these models (`specdec crds`), so every description, default, enum and
bound here is what the API server enforces. Cross-field rules are written once, as CEL
(`cel(...)`): the API server enforces them, and `ApiModel` evaluates the same expressions offline
(`specdec.schema.cel`) for `specdec render`, the operator's plan and the runtime.
`tests/unit/test_api_rules.py` runs one table of invalid specs through both. Pod fields passed through (labels,
images, tolerations, resources, affinity: `specdec.api.pod_fields`) follow Kubernetes' own rules, kept in
`specdec.schema.k8s`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdec import modes
from specdec.api.canary import CanaryStatus, RolloutSpec
from specdec.api.capture import CaptureStatus
from specdec.api.drafter import DRAFTER_RULES, DrafterSpec, DrafterStatus
from specdec.api.pod_fields import Affinity, Annotations, Image, Labels, Resources, Tolerations
from specdec.api.ports import RESERVED_PORTS
from specdec.api.rearm import REARM_RULES, RearmSpec, RearmStatus
from specdec.api.runtime_config import FrontLimits
from specdec.modes.pytorch import PYTORCH_FP8
from specdec.schema import k8s
from specdec.schema.base import (  # noqa: F401 - the API's names, read from here
    API_VERSION,
    GROUP,
    MODEL_SOURCE_RULES,
    MODEL_URI_HELP,
    MODEL_URI_PATTERN,
    NAME_MAX,
    NAME_RE,
    NAME_RULE_MESSAGE,
    VERSION,
    ApiModel,
    ModelSource,
    cel,
)
from specdec.schema.base import validations as _validations

SpeculationSpec = modes.speculation_spec(
    REARM_RULES,
    rearm=(
        RearmSpec | None,
        Field(
            None,
            description=(
                "Opt-in: a rolling restart of the runtime pods when they stopped drafting under traffic. Default: off."
            ),
        ),
    ),
)


class ReduceFusion(ApiModel):
    target: bool | None = Field(
        None, description="--reduce_fusion on the target engine. Default: no flag (TensorRT-LLM's default)."
    )
    draft: bool | None = Field(
        None, description="--reduce_fusion on the draft engine (draftTarget). Default: false, as in the blog."
    )


class EngineTuning(ApiModel):
    """trtllm-build plugin and fusion flags. The defaults reproduce the engines of NVIDIA's blog
    "TensorRT-LLM Speculative Decoding Boosts Inference Throughput by up to 3.6x" (the 2.86x/3.61x
    draft-target recipe): each default is resolved into the EngineRecipe by `recipe_fields`, so it is
    part of the engine's identity and rendered as an explicit flag."""

    gpt_attention_plugin: Literal["float16", "bfloat16", "float32"] | None = Field(
        None,
        description="--gpt_attention_plugin dtype. Default: each engine's dtype (the blog's float16 on float16 "
        "checkpoints).",
    )
    use_fused_mlp: bool | None = Field(
        None, description="--use_fused_mlp: one GEMM for the gate and up projections of the gated MLP. Default: true."
    )
    multiple_profiles: bool | None = Field(
        None,
        description="--multiple_profiles: several TensorRT optimization profiles (longer build, faster kernels). "
        "Default: true.",
    )
    low_latency_gemm_plugin: bool | None = Field(
        None,
        description="--low_latency_gemm_plugin fp8 on the target engine (FP8 kernels only, so FP8 targets only; "
        "TensorRT-LLM refuses it on SM100 GPUs such as B200: set false there). Default: true when "
        "the target has quantization fp8.",
    )
    reduce_fusion: ReduceFusion | None = Field(
        None,
        description="--reduce_fusion (AllReduce + residual add + norm in one kernel; acts with tensor parallelism) per "
        "engine.",
    )

    def recipe_fields(self, role: str, source: ModelSource) -> dict[str, Any]:
        """The EngineRecipe fields of the `role` engine ("target" or "draft") built from `source`;
        None leaves the flag out (TensorRT-LLM's default)."""
        reduce = self.reduce_fusion or ReduceFusion()
        fp8 = source.quantization == "fp8"
        return dict(
            gpt_attention_plugin=self.gpt_attention_plugin or source.dtype,
            use_fused_mlp=True if self.use_fused_mlp is None else self.use_fused_mlp,
            multiple_profiles=True if self.multiple_profiles is None else self.multiple_profiles,
            # The blog puts it on the target only.
            low_latency_gemm_plugin=role == "target"
            and (fp8 if self.low_latency_gemm_plugin is None else self.low_latency_gemm_plugin),
            reduce_fusion=reduce.target if role == "target" else (False if reduce.draft is None else reduce.draft),
        )


class EngineSpec(ApiModel):
    """Engine limits passed to trtllm-build (unset: TensorRT-LLM's default), and its tuning flags."""

    model_config = _validations(
        cel(
            "!has(self.maxInputLen) || !has(self.maxSeqLen) || self.maxInputLen < self.maxSeqLen",
            "maxInputLen must be less than maxSeqLen",
            ".maxInputLen",
        ),
    )

    max_batch_size: int | None = Field(None, ge=1, le=4096, description="--max_batch_size")
    max_input_len: int | None = Field(None, ge=1, le=1048576, description="--max_input_len")
    max_seq_len: int | None = Field(None, ge=2, le=1048576, description="--max_seq_len")
    max_num_tokens: int | None = Field(None, ge=1, le=1048576, description="--max_num_tokens")
    tuning: EngineTuning | None = Field(
        None,
        description="Plugin and fusion flags of trtllm-build (backend tensorrt). Unset fields take the "
        "defaults of NVIDIA's speculative-decoding blog recipe.",
    )


class KvCacheSpec(ApiModel):
    free_gpu_memory_fraction: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Share of free GPU memory for the KV cache (per model). Default: 0.35 with a draft on the target's "
        "GPU, else 0.9.",
    )
    enable_block_reuse: bool = Field(True, description="KV-cache block reuse; draftTarget requires it.")


class RuntimeSpec(ApiModel):
    model_config = _validations(
        cel(
            f"!(self.port in {RESERVED_PORTS})",
            f"port is taken inside the runtime pod by the serving backend; use another than {RESERVED_PORTS}",
            ".port",
        ),
    )

    replicas: int = Field(1, ge=0, le=1000, description="Runtime pods.")
    kv_cache: KvCacheSpec = Field(default_factory=KvCacheSpec, description="KV-cache settings.")
    image: Image | None = Field(None, description="Runtime image. Default: the operator's --runtime-image.")
    resources: Resources | None = Field(
        None, description="Extra CPU/memory resources; GPUs are derived from the device lists."
    )
    node_selector: Labels | None = Field(None, description="Node selector for runtime pods.")
    tolerations: Tolerations | None = Field(
        None, description="Tolerations besides the nvidia.com/gpu one the operator adds."
    )
    affinity: Affinity | None = Field(None, description="Pod affinity, as in a Pod spec (core/v1 Affinity).")
    port: int = Field(8000, ge=1, le=65535, description="HTTP port of the OpenAI-compatible front.")
    front: FrontLimits | None = Field(
        None,
        description="The front's limits on its clients (connections, request "
        "sizes and timeouts); nginx's defaults where unset.",
    )


class BuildSpec(ApiModel):
    image: Image | None = Field(None, description="Build image (TensorRT-LLM). Default: the operator's --build-image.")
    node_selector: Labels | None = Field(None, description="Node selector for build pods.")
    tolerations: Tolerations | None = Field(None, description="Tolerations besides the nvidia.com/gpu one.")
    resources: Resources | None = Field(None, description="CPU/memory for build pods; GPUs = tensorParallelSize.")
    backoff_limit: int = Field(2, ge=0, le=20, description="Retries of a failed build Job.")
    active_deadline_seconds: int | None = Field(None, ge=60, description="Deadline of a build Job.")
    pod_labels: Labels | None = Field(None, description="Extra labels on build pods.")
    pod_annotations: Annotations | None = Field(None, description="Extra annotations on build pods.")


class FetchSpec(ApiModel):
    """How the pods that download hf:// checkpoints into the cache are placed. They need no GPU: by
    default they request none and tolerate no GPU taint, so they run on CPU nodes."""

    node_selector: Labels | None = Field(None, description="Node selector for fetch pods (none by default).")
    tolerations: Tolerations | None = Field(None, description="Tolerations for fetch pods (none by default).")
    resources: Resources | None = Field(None, description="CPU/memory for fetch pods; GPUs are never requested.")
    backoff_limit: int = Field(2, ge=0, le=20, description="Retries of a failed fetch Job.")
    active_deadline_seconds: int | None = Field(None, ge=60, description="Deadline of a fetch Job.")
    pod_labels: Labels | None = Field(None, description="Extra labels on fetch pods.")
    pod_annotations: Annotations | None = Field(None, description="Extra annotations on fetch pods.")


class CacheSpec(ApiModel):
    model_config = _validations(
        cel(
            "!(has(self.claimName) && has(self.storageClassName))",
            "set claimName (an existing claim) or storageClassName (a claim the operator creates), not both",
            ".claimName",
        )
    )

    claim_name: str | None = k8s.optional_object_name("An existing ReadWriteMany claim holding the engine cache.")
    storage_class_name: str | None = k8s.optional_object_name(
        "Storage class of the claim the operator creates. Default: the cluster default."
    )
    size: str = Field(
        "500Gi", pattern=r"^[0-9]+(Ki|Mi|Gi|Ti|Pi)$", description="Size of the claim the operator creates."
    )
    fetch: FetchSpec = Field(
        default_factory=FetchSpec,
        description=(
            "Fetch Jobs: hf:// checkpoints are downloaded into the cache by ModelCaches, on CPU nodes, before "
            "any GPU build starts."
        ),
    )


# TensorRT-LLM's PyTorch executor refuses drafting with pipeline parallelism (NVIDIA/TensorRT-LLM#9009,
# tensorrt_llm/_torch/pyexecutor/py_executor.py).
PIPELINE_WITH_DRAFTING = (
    "pipelineParallelSize above 1 needs speculation mode none: TensorRT-LLM refuses drafting with pipeline "
    'parallelism ("Drafting is not supported for selected executor loop. Please disable disagg/pipeline '
    'parallelism scheduler.", NVIDIA/TensorRT-LLM#9009)'
)
MAX_NODES = 16


class TargetSource(ModelSource):
    """The model being served, and how many nodes its ranks span (specdec.builders.multinode)."""

    model_config = _validations(
        *MODEL_SOURCE_RULES,
        cel(
            "self.nodes == 1 || self.pipelineParallelSize == 1",
            "across nodes the target is split by tensor (and expert) parallelism only: set pipelineParallelSize 1",
            ".pipelineParallelSize",
        ),
        cel(
            "(self.tensorParallelSize * self.pipelineParallelSize) % self.nodes == 0",
            "tensorParallelSize × pipelineParallelSize must be a multiple of nodes: every node runs as many ranks",
            ".nodes",
        ),
        cel("self.nodes == 1 || !has(self.devices)", "devices apply to one node: remove them", ".devices"),
    )

    nodes: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="Nodes the target spans: one LeaderWorkerSet group of this many pods, each with "
        "tensorParallelSize / nodes GPUs (backend pytorch; needs LeaderWorkerSet installed). "
        "Default: 1 (a Deployment).",
    )
    pipeline_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_NODES,
        description="Pipeline-parallel stages (trtllm-serve --pp_size; backend pytorch, speculation mode none, one "
        "node). Default: 1.",
    )

    @property
    def ranks(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def gpus_per_node(self) -> int:
        return self.ranks // self.nodes


class SpeculativeDeploymentSpec(ApiModel):
    model_config = _validations(
        cel("self.backend != 'pytorch' || self.target.quantization == 'none'", PYTORCH_FP8, ".target.quantization"),
        cel(
            "self.backend == 'tensorrt' || !has(self.engine) || !has(self.engine.tuning)",
            "engine.tuning sets trtllm-build flags: backend tensorrt only",
            ".engine.tuning",
        ),
        cel(
            "!has(self.engine) || !has(self.engine.tuning) || !has(self.engine.tuning.lowLatencyGemmPlugin) || "
            "!self.engine.tuning.lowLatencyGemmPlugin || self.target.quantization == 'fp8'",
            "lowLatencyGemmPlugin has FP8 kernels only: it needs target.quantization fp8",
            ".engine.tuning.lowLatencyGemmPlugin",
        ),
        cel(
            "self.backend == 'pytorch' || (self.target.nodes == 1 && self.target.pipelineParallelSize == 1)",
            "nodes and pipelineParallelSize need backend pytorch: the engine path would build one engine per rank "
            "(docs/multi-node.md)",
            ".target.nodes",
        ),
        cel(
            "self.target.pipelineParallelSize == 1 || self.speculation.mode == 'none'",
            PIPELINE_WITH_DRAFTING,
            ".target.pipelineParallelSize",
        ),
        *modes.spec_rules(),
        *DRAFTER_RULES,
    )

    backend: Literal["tensorrt", "pytorch"] = Field(
        "tensorrt",
        description="tensorrt: engines built by trtllm-build Jobs; pytorch: trtllm-serve's PyTorch backend, no build.",
    )
    target: TargetSource = Field(description="The model being served.")
    speculation: SpeculationSpec = Field(  # type: ignore[valid-type]  # built at run time from the modes' registry
        default_factory=SpeculationSpec, description="Speculative decoding."
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="Engine limits and trtllm-build tuning.")
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec, description="Serving pods.")
    build: BuildSpec = Field(default_factory=BuildSpec, description="Build Jobs.")
    cache: CacheSpec = Field(default_factory=CacheSpec, description="Where checkpoints and engines are cached.")
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec, description="How a change of spec.speculation is rolled out (docs/canary.md)."
    )
    drafter: DrafterSpec | None = Field(
        None, description="The draft itself: learning it from this deployment's traffic (docs/draft-learning.md)."
    )


class Condition(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition_time: str | None = None


class StatusBase(ApiModel):
    """What every status of ours has; written by the operator only."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    observed_generation: int | None = None
    conditions: list[Condition] | None = Field(
        None, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    )


class SpeculationStatus(ApiModel):
    """Measured on the runtime pods' metrics over the last scrape window (specdec.speculation)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    acceptance_rate: float | None = Field(None, description="Accepted / proposed draft tokens.")
    accepted_tokens_per_step: float | None = Field(
        None, description="Mean tokens one target step produced, the bonus token included."
    )
    draft_len: int | None = Field(None, description="Draft tokens per step in effect.")
    estimated_speedup: float | None = Field(
        None,
        description=(
            "acceptedTokensPerStep / (1 + draftLen * costRatio): an estimate over the target alone for the "
            "traffic of the window, not a benchmark."
        ),
    )
    cost_ratio: float | None = Field(None, description="Cost of one draft token relative to one target step.")
    cost_ratio_source: str | None = Field(
        None,
        description=(
            "Measured (from the route's draft and target times), ParameterCounts (draft/target parameters stated in "
            "the model names), DraftHead (1/32: one decoder layer), NoDraftModel (a lookup, as NGram's) or Assumed "
            "(0.1)."
        ),
    )
    recommended_draft_len: int | None = Field(None, description="The draft length with the best estimated speedup.")
    break_even: int | None = Field(
        None,
        description=(
            "Requests in flight per pod from which no draft length up to draftLen pays (measured step time under "
            "load). "
            "Triton route: from there no draft tokens are sent, below it the best length for the load. trtllm-serve: "
            "with draftLen: auto the lengths by load are rolled out as a draft_len_schedule when that pays."
        ),
    )
    draft_tokens: int | None = Field(None, description="Draft tokens the window counted.")
    pods: int | None = Field(None, description="Runtime pods scraped.")
    window_seconds: float | None = Field(None, description="Length of the window measured.")
    measured_at: str | None = Field(None, description="When the window ended.")


class SpeculativeDeploymentStatus(StatusBase):
    phase: str | None = Field(None, description="Building, RollingOut, Ready, Failed or Invalid.")
    engine_builds: list[str] | None = Field(None, description="EngineBuilds this deployment uses.")
    replicas: int | None = None
    ready_replicas: int | None = None
    selector: str | None = Field(None, description="Label selector of the runtime pods (scale subresource).")
    endpoint: str | None = Field(None, description="In-cluster URL of the OpenAI-compatible API.")
    speculation: SpeculationStatus | None = Field(None, description="Is speculation paying off? (runtime metrics)")
    rearm: RearmStatus | None = Field(None, description="Restarts by speculation.rearm.")
    capture: CaptureStatus | None = Field(None, description="Mode saveState: what the capture directory holds.")
    canary: CanaryStatus | None = Field(None, description="The canary of a change of spec.speculation.")
    drafter: DrafterStatus | None = Field(None, description="spec.drafter.learning: the samples and the loop.")
