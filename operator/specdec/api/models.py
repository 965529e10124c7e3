"""The API (`specdec.io/v1alpha1`): pydantic models are the single source of truth.

`crds/` is generated from these models (`specdec crds`), so every description, default, enum and
bound here is what the API server enforces. Cross-field rules are written once, as CEL
(`cel(...)`): the API server enforces them, and `ApiModel` evaluates the same expressions offline
(`specdec.schema.cel`) for `specdec render`, the operator's plan and the runtime.
`tests/unit/test_api_rules.py` runs one table of invalid specs through both. Pod fields passed through (labels,
images, tolerations, resources, affinity) follow Kubernetes' own rules, kept in `specdec.schema.k8s`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model
from pydantic.alias_generators import to_camel

from specdec import modes
from specdec.api.canary import CanaryStatus, RolloutSpec
from specdec.api.capture import CaptureStatus
from specdec.api.ports import RESERVED_PORTS
from specdec.api.rearm import REARM_RULES, RearmSpec, RearmStatus
from specdec.modes.pytorch import PYTORCH_FP8
from specdec.schema import k8s
from specdec.schema.base import (  # noqa: F401 - the API's names, read from here
    API_VERSION,
    GROUP,
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
    rearm=(
        RearmSpec | None,
        Field(
            None,
            description=(
                "Opt-in: a rolling restart of the runtime pods when they stopped drafting under traffic. Default: off."
            ),
        ),
    )
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


# Pod fields passed through to build and runtime pods, bounded as a Pod's validation bounds them
# (`k8s` has the rules and their sources); the map and list sizes also bound the CEL cost estimate.
LabelValue = Annotated[str, Field(max_length=k8s.LABEL_VALUE_MAX, pattern=k8s.LABEL_VALUE)]
Labels = Annotated[dict[str, LabelValue], Field(max_length=k8s.MAX_MAP_ENTRIES), k8s.LABEL_KEYS]
Annotations = Annotated[
    dict[str, Annotated[str, Field(max_length=k8s.ANNOTATION_VALUE_MAX)]],
    Field(max_length=k8s.MAX_ANNOTATIONS),
    k8s.ANNOTATION_KEYS,
]
Image = Annotated[str, Field(min_length=1, max_length=k8s.IMAGE_MAX, pattern=k8s.IMAGE)]
Quantity = (
    Annotated[int, Field(ge=0)] | Annotated[str, Field(min_length=1, max_length=k8s.QUANTITY_MAX, pattern=k8s.QUANTITY)]
)
ResourceList = Annotated[dict[str, Quantity], Field(max_length=16), k8s.RESOURCE_NAMES]
Affinity = Annotated[dict[str, Any], k8s.FitsSchema(k8s.affinity_schema, "core/v1 Affinity")]
MAX_TOLERATIONS = 32

TOLERATION_KEY_MESSAGE = "key must be empty or a label key (an optional DNS subdomain prefix and '/', then a name)"


class Toleration(ApiModel):
    """A toleration, refused here when a Pod would refuse it (ValidateTolerations)."""

    model_config = _validations(
        cel(
            f"!has(self.key) || self.key == '' || ({k8s.LABEL_KEYS.cel_expr('self.key')})",
            TOLERATION_KEY_MESSAGE,
            ".key",
        ),
        cel(
            "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
            "operator must be Exists when key is empty (which tolerates every taint)",
            ".operator",
        ),
        cel(
            "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
            "value must be empty when operator is Exists",
            ".value",
        ),
        cel(
            "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
            "tolerationSeconds needs effect NoExecute",
            ".tolerationSeconds",
        ),
    )

    key: str | None = Field(
        None,
        max_length=k8s.KEY_MAX,
        description="Taint key to tolerate; empty (with operator Exists) tolerates every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (the default).")
    value: LabelValue | None = Field(None, description="Taint value to match (operator Equal).")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; unset matches all."
    )
    toleration_seconds: int | None = Field(None, description="How long a NoExecute taint is tolerated before eviction.")


Tolerations = Annotated[list[Toleration], Field(max_length=MAX_TOLERATIONS)]

REQUESTS_WITHIN_LIMITS = "requests must not exceed limits of the same resource"


class Resources(ApiModel):
    """Container resources, as in a Pod (limits and requests by resource name)."""

    model_config = _validations(
        cel(
            "!has(self.limits) || !has(self.requests) || self.requests.all(k, !(k in self.limits) || "
            "!quantity(string(self.requests[k])).isGreaterThan(quantity(string(self.limits[k]))))",
            REQUESTS_WITHIN_LIMITS,
            ".requests",
        ),
    )

    limits: ResourceList | None = None
    requests: ResourceList | None = None


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

    claim_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=k8s.DNS_SUBDOMAIN,
        description="An existing ReadWriteMany claim holding the engine cache.",
    )
    storage_class_name: str | None = Field(
        None,
        min_length=1,
        max_length=253,
        pattern=k8s.DNS_SUBDOMAIN,
        description="Storage class of the claim the operator creates. Default: the cluster default.",
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
        *modes.spec_rules(),
        *REARM_RULES,
    )

    backend: Literal["tensorrt", "pytorch"] = Field(
        "tensorrt",
        description="tensorrt: engines built by trtllm-build Jobs; pytorch: trtllm-serve's PyTorch backend, no build.",
    )
    target: ModelSource = Field(description="The model being served.")
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


# --- EngineBuild ---------------------------------------------------------------------------------


class _RecipeModel(ApiModel):
    model: str
    revision: str | None = None
    family: str = "llama"
    dtype: str
    quantization: str
    kv_cache_dtype: str
    tensor_parallel_size: int
    speculative_decoding_mode: Literal[modes.decoding_modes()] = "none"  # type: ignore[valid-type]  # the registry's
    max_draft_len: int | None = None
    gather_generation_logits: bool = False


# The engine-path modes' own parts (EnginePath.engine_recipe, e.g. `redrafter`), between the speculation
# fields and the limits: the field order is the EngineBuild's on the wire.
_RecipeSpeculation = create_model("_RecipeSpeculation", __base__=_RecipeModel, **modes.engine_recipe_fields())


class EngineRecipe(_RecipeSpeculation):
    """Everything that changes an engine's bytes; its hash names the EngineBuild."""

    max_batch_size: int | None = None
    max_input_len: int | None = None
    max_seq_len: int | None = None
    max_num_tokens: int | None = None
    # trtllm-build plugin and fusion flags (EngineTuning.recipe_fields); None (and a false
    # low_latency_gemm_plugin): no flag, TensorRT-LLM's default.
    gpt_attention_plugin: str | None = None
    use_fused_mlp: bool | None = None
    multiple_profiles: bool | None = None
    low_latency_gemm_plugin: bool = False
    reduce_fusion: bool | None = None
    image: str


class BuildPodSpec(ApiModel):
    """How a build pod is placed; not part of the recipe (same engine wherever it is built)."""

    node_selector: Labels | None = None
    tolerations: Tolerations | None = None
    resources: Resources | None = None
    backoff_limit: int = 2
    active_deadline_seconds: int | None = None
    pod_labels: Labels | None = None
    pod_annotations: Annotations | None = None


class EngineBuildSpec(ApiModel):
    model_config = _validations(cel("self == oldSelf", "EngineBuild spec is immutable"))

    recipe: EngineRecipe = Field(description="What to build; content-addressed.")
    cache_claim: str = Field(min_length=1, description="Claim holding the engine cache.")
    engine_path: str = Field(min_length=1, description="Directory of the engine inside the cache claim.")
    pod: BuildPodSpec = Field(default_factory=BuildPodSpec, description="Build pod placement.")


class JobStatus(StatusBase):
    """The status of a shared kind whose work is one Job (written by the same code for both)."""

    job_name: str | None = None
    attempts: int | None = None
    message: str | None = None


class EngineBuildStatus(JobStatus):
    phase: str | None = Field(None, description="Pending, Converting, Quantizing, Building, Succeeded or Failed.")
    failed_step: str | None = None


# --- ModelCache ----------------------------------------------------------------------------------


class ModelCacheSpec(ApiModel):
    model_config = _validations(cel("self == oldSelf", "ModelCache spec is immutable"))

    model: str = Field(min_length=1, description="The hf:// checkpoint to download.")
    revision: str = Field(min_length=1, description="Its revision (branch, tag or commit).")
    cache_claim: str = Field(min_length=1, description="Claim holding the cache.")
    path: str = Field(min_length=1, description="Directory of the checkpoint inside the cache claim.")
    pod: FetchSpec = Field(default_factory=FetchSpec, description="Fetch pod placement.")


class ModelCacheFacts(ApiModel):
    """What admission checks, as the fetch read it from the checkpoint's own files (specdec.model_facts)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    architecture: str = Field(description="config.json architectures[0].")
    vocab_size: int
    hidden_size: int
    layers: int = Field(description="num_hidden_layers.")
    attention_heads: int = Field(description="num_attention_heads.")
    kv_heads: int = Field(description="num_key_value_heads (the attention heads when absent).")
    head_dim: int
    dtype: str = Field(description="How the checkpoint stores its weights (torch_dtype).")
    parameters: int = Field(description="Elements of every tensor in the safetensors files.")
    tokenizer: str = Field(
        description=(
            "Identity of the tokenizer: vocab-sha256:<digest of tokenizer.json's id-to-token table> or "
            "sentencepiece-sha256:<digest of tokenizer.model>; equal identities mean the same token ids."
        )
    )
    tied_embeddings: bool = False
    max_position_embeddings: int | None = None
    weight_quantization: str | None = Field(None, description="Weights stored quantized (quantization_config).")
    kv_latent_dim: int | None = Field(
        None, description="Multi-head latent attention: KV latent size per token and layer."
    )


class ModelCacheStatus(JobStatus):
    phase: str | None = Field(None, description="Pending, Fetching, Fetched or Failed.")
    size_bytes: int | None = Field(None, description="Size of the fetched checkpoint, when the fetch reported it.")
    facts: ModelCacheFacts | None = Field(
        None,
        description=(
            "The model's facts, when the fetch could read them (config.json, safetensors headers, tokenizer): "
            "admission checks deployments of this model and revision against them."
        ),
    )
