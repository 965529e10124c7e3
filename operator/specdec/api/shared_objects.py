"""The shared objects' API (`specdec.io/v1alpha1`): EngineBuild and ModelCache, the content-addressed,
immutable objects that SpeculativeDeployments share, built or fetched once by one Job each.

The operator writes them from its plan (`specdec.plan`); nobody edits them. Their pod placement is made of
the Pod fields both kinds pass through (`specdec.api.pod_fields`); the status every kind has and the fetch
pods' placement are the SpeculativeDeployment's (`specdec.api.models`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, create_model
from pydantic.alias_generators import to_camel

from specdec import modes
from specdec.api.models import FetchSpec, StatusBase
from specdec.api.pod_fields import Annotations, Labels, Resources, Tolerations
from specdec.schema.base import ApiModel, cel
from specdec.schema.base import validations as _validations

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
