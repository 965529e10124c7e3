"""What every API model shares: the group and version, the CEL helpers, `ApiModel` (camelCase on the
wire, unknown fields refused, its CEL rules evaluated offline) and `ModelSource` (a checkpoint).

Below both the speculation modes (`specdec.modes`), which define their API blocks with these pieces, and
`specdec.api.models`, which builds the speculation union from the modes' registry.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from specdec.schema import cel as cel_rules

GROUP = "specdec.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

MODEL_URI_PATTERN = (
    r"^(hf://[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|pvc://[a-z0-9]([-a-z0-9]*[a-z0-9])?/.+)$"
)
# Children (the runtime Service above all) are named after the deployment: a DNS-1035 label, with
# room for the longest suffix we add ("-runtime").
NAME_MAX = 55
NAME_RE = re.compile(rf"[a-z]([-a-z0-9]{{0,{NAME_MAX - 2}}}[a-z0-9])?")
NAME_RULE_MESSAGE = (
    f"must be a DNS-1035 label of at most {NAME_MAX} characters (lowercase letters, digits "
    "and '-', starting with a letter): the runtime Service is named after it"
)
MODEL_URI_HELP = "`hf://org/name` (fetched from the Hugging Face Hub) or `pvc://claim/path` (a claim in this namespace)"


def cel(
    rule: str, message: str, field_path: str | None = None, message_expression: str | None = None
) -> dict[str, str]:
    """One x-kubernetes-validations entry; `field_path` makes the API server name the field; a
    `message_expression` (CEL, a string) is the message a refusal shows, `message` its fallback."""
    entry = {"rule": rule, "message": message}
    if message_expression:
        entry["messageExpression"] = message_expression
    if field_path:
        entry["fieldPath"] = field_path
    return entry


class ApiModel(BaseModel):
    """Camel-case on the wire, snake_case in Python; unknown fields are errors, as in the CRD; and
    the model's CEL rules hold, evaluated on its wire form with defaults applied, as the API server
    sees `self`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    @model_validator(mode="after")
    def _cel_rules(self):
        if rules_of(type(self)):
            wire = self.model_dump(mode="json", by_alias=True, exclude_none=True)
            broken = _broken(type(self), json.dumps(wire, sort_keys=True))
            if broken:
                raise ValueError("; ".join(f"{path}: {message}" if path else message for path, message in broken))
        return self


@functools.lru_cache(maxsize=4096)
def _broken(model: type[ApiModel], wire: str) -> tuple[tuple[str, str], ...]:
    """The rules of `model` its wire form breaks, by value: a fleet's deployments derive the same
    EngineBuild and ModelCache recipes again and again, and converting each to CEL values was half of
    plan()'s CPU (cProfile, 200 deployments of bench/run.py's fleet)."""
    return tuple(cel_rules.violations(rules_of(model), json.loads(wire)))


def rules_of(model: type[BaseModel]) -> list[dict[str, str]]:
    """The CEL rules `validations` gave the model (x-kubernetes-validations); [] without."""
    extra = model.model_config.get("json_schema_extra")
    return extra.get("x-kubernetes-validations", []) if isinstance(extra, dict) else []  # type: ignore[return-value]  # what validations() wrote


def validations(*rules: dict[str, str]) -> ConfigDict:
    return ConfigDict(json_schema_extra={"x-kubernetes-validations": list(rules)})  # type: ignore[arg-type]  # str values are JSON values


# A checkpoint's address: the target's, a draft's, a drafter's or a draft head's.
ModelUri = Annotated[str, Field(min_length=1, max_length=512, pattern=MODEL_URI_PATTERN)]


# ModelSource's rules, which a subclass (the target's) extends: a subclass's model_config replaces its parent's.
MODEL_SOURCE_RULES = (
    cel(
        "!has(self.devices) || size(self.devices) == self.tensorParallelSize",
        "the device list must have exactly tensorParallelSize entries",
        ".devices",
    ),
    cel(
        "!has(self.kvCacheDtype) || self.kvCacheDtype != 'fp8' || self.quantization == 'fp8'",
        "kvCacheDtype fp8 needs quantization fp8",
        ".kvCacheDtype",
    ),
)


class ModelSource(ApiModel):
    """A model checkpoint and how to turn it into an engine."""

    model_config = validations(*MODEL_SOURCE_RULES)

    model: ModelUri = Field(description=f"The checkpoint: {MODEL_URI_HELP}.")
    revision: str | None = Field(
        None, min_length=1, max_length=128, description="Hub revision (branch, tag or commit) to fetch; hf:// only."
    )
    family: Literal["llama", "qwen"] = Field(
        "llama", description="Model family: selects TensorRT-LLM's examples/models/core/<family>/convert_checkpoint.py."
    )
    dtype: Literal["float16", "bfloat16"] = Field("float16", description="Activation and weight dtype.")
    quantization: Literal["none", "fp8"] = Field(
        "none",
        description="Weight quantization; fp8 runs quantize.py --qformat fp8 (and quantizes the KV cache unless "
        "kvCacheDtype says otherwise).",
    )
    kv_cache_dtype: Literal["auto", "fp8"] | None = Field(
        None,
        description="KV-cache dtype: auto (the model dtype) or fp8. Default: fp8 when quantization is fp8, else auto.",
    )
    tensor_parallel_size: int = Field(1, ge=1, le=64, description="Tensor-parallel size (GPUs per engine).")
    devices: list[Annotated[int, Field(ge=0, le=63)]] | None = Field(
        None,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "set"},
        description="GPU indices (within the runtime pod) this model runs on, each once; length = tensorParallelSize. "
        "Default: 0..tensorParallelSize-1.",
    )

    @model_validator(mode="after")
    def _devices_once(self) -> ModelSource:
        """The API server's twin is `x-kubernetes-list-type: set`, which CEL does not express."""
        if self.devices is not None and len(set(self.devices)) != len(self.devices):
            raise ValueError("devices: each device may appear once")
        return self

    @property
    def effective_kv_cache_dtype(self) -> str:
        if self.kv_cache_dtype:
            return self.kv_cache_dtype
        return "fp8" if self.quantization == "fp8" else "auto"

    @property
    def effective_devices(self) -> list[int]:
        return list(self.devices) if self.devices is not None else list(range(self.tensor_parallel_size))
