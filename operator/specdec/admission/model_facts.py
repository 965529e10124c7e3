"""What admission knows about a model: the facts of its config.json and of its tokenizer.

`ModelFacts` is the interface between whoever reads a model's files and the checks (specdec.admission.checks).
The fetch Job reads them from the fetched files (specdec.admission.checkpoint_facts, its termination message), the
operator keeps them in the ModelCache's status (`to_status`, `from_status`); the catalog
(specdec.admission.model_catalog) supplies the facts of the Hub ids it lists before any fetch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from specdec.api.shared_objects import ModelCacheFacts

CATALOG_SOURCE = "the operator's model catalog (simulated fetch data)"

# Bytes per weight (or KV-cache element) by precision.
BYTES_PER_PARAMETER = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    model: str  # the Hub id (or URI) the facts describe, for messages
    architecture: str  # config.json `architectures[0]`
    vocab_size: int
    hidden_size: int
    layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    dtype: str  # config.json `torch_dtype`: how the checkpoint stores its weights
    parameters: int
    # Identity of the tokenizer, "<kind>:<value>": equal identities mean the same token ids. The catalog
    # names families ("family:llama3"); facts read from files may use another kind (a hash of
    # tokenizer.json, say), and identities of different kinds are not compared (`same_tokenizer`).
    tokenizer: str
    tied_embeddings: bool = False
    max_position_embeddings: int | None = None
    # Weights stored quantized in the checkpoint (config.json `quantization_config`), e.g. DeepSeek-R1's FP8.
    weight_quantization: str | None = None
    # Multi-head latent attention (DeepSeek): the KV cache holds one latent of this size per token and
    # layer (kv_lora_rank + qk_rope_head_dim) instead of keys and values per head.
    kv_latent_dim: int | None = None
    source: str = ""  # where the facts come from, for messages

    @classmethod
    def from_config(
        cls, model: str, config: dict[str, Any], *, parameters: int, tokenizer: str, source: str
    ) -> ModelFacts:
        """From a config.json as Hugging Face transformers writes it (LLaMA, Qwen2, DeepSeek-V3 keys)."""
        heads = config["num_attention_heads"]
        latent = config.get("kv_lora_rank")
        return cls(
            model=model,
            architecture=(config.get("architectures") or [config.get("model_type", "unknown")])[0],
            vocab_size=config["vocab_size"],
            hidden_size=config["hidden_size"],
            layers=config["num_hidden_layers"],
            attention_heads=heads,
            kv_heads=config.get("num_key_value_heads") or heads,
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            # transformers 4.56 renamed torch_dtype to dtype
            dtype=config.get("torch_dtype") or config.get("dtype") or "float16",
            parameters=parameters,
            tokenizer=tokenizer,
            # LlamaConfig's and Qwen2Config's default when the key is absent
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            max_position_embeddings=config.get("max_position_embeddings"),
            weight_quantization=_stored_quantization(config.get("quantization_config")),
            kv_latent_dim=latent + config.get("qk_rope_head_dim", 0) if latent else None,
            source=source,
        )

    def to_status(self) -> dict[str, Any]:
        """As a ModelCache's status.facts holds them (the model and source are the ModelCache's own)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("model", "source")}
        return ModelCacheFacts(**fields).model_dump(mode="json", by_alias=True, exclude_none=True)

    @classmethod
    def from_status(cls, model: str, facts: dict[str, Any], source: str) -> ModelFacts:
        return cls(model=model, source=source, **ModelCacheFacts.model_validate(facts).model_dump())

    @property
    def embedding_parameters(self) -> int:
        """Input embedding and LM head: kept at the model dtype by FP8 quantization (ModelOpt leaves the
        LM head out, and an embedding is a lookup, not a GEMM)."""
        return self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)


def _stored_quantization(config: dict[str, Any] | None) -> str | None:
    if not config:
        return None
    if config.get("quant_method") == "fp8":
        return "fp8"
    bits = config.get("bits")
    return f"int{bits}" if f"int{bits}" in BYTES_PER_PARAMETER else None


def same_tokenizer(a: ModelFacts, b: ModelFacts) -> bool | None:
    """Whether two models share their tokenizer; None when their identities are not comparable: one from
    the catalog (a family it names) and one from files (a digest), or of different kinds (a digest of
    tokenizer.json and one of tokenizer.model)."""
    if (a.source == CATALOG_SOURCE) != (b.source == CATALOG_SOURCE):
        return None
    if a.tokenizer.split(":", 1)[0] != b.tokenizer.split(":", 1)[0]:
        return None
    return a.tokenizer == b.tokenizer


# A draft head whose own facts are unknown (a pvc:// checkpoint, or files without a tokenizer), sized from its
# target's: one decoder layer (12·h²: attention 4·h², MLP 8·h²), EAGLE-3's fc fusing three target hidden
# states (3·h²) and an LM head over the target's vocabulary (h·vocab), at the target's dtype. An EAGLE-3 head
# with a reduced draft vocabulary is smaller; a full draft model (PARD, DFlash, DSpark) is larger.
HEAD_ESTIMATE = "an estimate from the target's hidden size h and vocabulary: 12·h² + 3·h² + h·vocab parameters"


def estimated_head(model: str, target: ModelFacts) -> ModelFacts:
    h = target.hidden_size
    return dataclasses.replace(
        target,
        model=model,
        architecture="unknown",
        layers=1,
        parameters=15 * h * h + h * target.vocab_size,
        tied_embeddings=True,
        weight_quantization=None,
        source=HEAD_ESTIMATE,
    )
