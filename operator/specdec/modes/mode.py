"""What a speculation mode is: one unit the registry (`specdec.modes`) feeds to the API, the CRD,
`plan()`, the engine builds and the runtime."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from pydantic.alias_generators import to_snake

from specdec.schema.base import ApiModel, ModelSource, cel
from specdec.schema.cel import mode_guard

BACKENDS = ("tensorrt", "pytorch")


@dataclasses.dataclass(frozen=True)
class Rule:
    """A CEL rule on the whole spec (`self` is `.spec`) that applies when this mode is chosen."""

    rule: str
    message: str
    field_path: str


@dataclasses.dataclass(frozen=True)
class BuildStep:
    """A build step of the mode's own, between the checkpoint conversion and trtllm-build: one of
    TensorRT-LLM's example scripts, turning the converted checkpoint into the one trtllm-build reads."""

    name: str  # the build container's name
    phase: str  # the EngineBuild's phase while it runs
    reason: str  # the prefix of the EngineBuild's reason when it fails
    script: str  # under TensorRT-LLM's examples directory
    output: str  # its output directory, under the build's work directory
    # Its arguments, given the EngineRecipe, the checkpoint it reads and the directory it writes, and
    # where the build pod finds a checkpoint by its hf:// or pvc:// address.
    args: Callable[[Any, str, str, Callable[[str], str]], list[str | int]]


@dataclasses.dataclass(frozen=True)
class EngineDrafter:
    """What drafts inside the target's engine, as admission counts it on the target's GPUs
    (specdec.admission_memory): a checkpoint of its own loaded beside the target's weights, and the layers
    whose K and V it caches in the target's KV-cache budget."""

    label: str  # for messages: "EAGLE-3 head"
    checkpoint: str | None = None  # hf:// or pvc://; None: its weights are the target checkpoint's (MTP)
    # Layers it caches K and V of: None, those of its checkpoint; for layers of the target checkpoint
    # (checkpoint None), this many of the target's shape.
    kv_layers: int | None = None


@dataclasses.dataclass(frozen=True)
class Mode:
    name: str  # spec.speculation.mode, and the name of its block
    summary: str
    block: type[ApiModel] | None = None  # spec.speculation.<name>: present exactly when this mode is chosen
    backends: tuple[str, ...] = BACKENDS
    rules: tuple[Rule, ...] = ()
    # The engine path: a second model served beside the target (its own engine), and the fields the
    # mode adds to the target's and that model's EngineRecipe.
    draft: Callable[[Any], ModelSource | None] = lambda block: None
    recipe: Callable[[Any, str], dict[str, Any]] = lambda block, role: {}
    # A drafter inside the target's engine (not a `draft` served on its own), for admission's GPU memory.
    engine_drafter: Callable[[Any], EngineDrafter | None] = lambda block: None
    # trtllm-build's --speculative_decoding_mode of the target engine (EngineRecipe's field of that name).
    decoding_mode: str | None = None
    # The mode's own part of the target's EngineRecipe (EngineRecipe.<field>, set by `recipe`), the
    # checkpoints its build reads besides the model (given the EngineRecipe), and its own build steps.
    engine_recipe: type[ApiModel] | None = None
    engine_models: Callable[[Any], tuple[str, ...]] = lambda recipe: ()
    build_steps: tuple[BuildStep, ...] = ()
    # The runtime configuration's `speculation` of this mode (tagged by the mode's name), and how it is
    # made, given the block, the served draft and the rendered speculative_config. None: RuntimeNone, or
    # RuntimeSpeculativeConfig on the PyTorch path.
    runtime_block: type[ApiModel] | None = None
    runtime: Callable[[Any, Any, dict[str, Any] | None], Any] | None = None
    # Checkpoints the runtime reads besides the target and `draft` (hf:// or pvc://).
    extra_models: Callable[[Any], tuple[str, ...]] = lambda block: ()
    # The PyTorch path: trtllm-serve's `speculative_config` (the --extra_llm_api_options YAML), given
    # the block and where the runtime finds the checkpoints named in it.
    speculative_config: Callable[[Any, Callable[[str], str]], dict[str, Any]] | None = None
    # What proposes the tokens, for the cost estimate when the route measures none (specdec.speculation):
    # "model" (a draft model of its own), "head" (layers on the target's), "lookup" (no model at all).
    drafter: str = "head"
    # Whether the mode proposes draft tokens at all (none and saveState do not): the speculation monitor
    # and the conditions SpeculationEffective and SpeculationActive are for those that do.
    speculates: bool = True
    # How the target accepts draft tokens: "tokens" (compares them) or "logits" (rejection sampling on the
    # draft's and the target's logits: their vocabularies must be equal, and only the engine path has it).
    acceptance: Callable[[Any], str] = lambda block: "tokens"
    # Draft tokens per target step as configured (None: the runtime knows, e.g. an MTP checkpoint's
    # layer count); the lengths it could run without a rebuild or restart (None: only the configured
    # one); whether the operator chooses it among those (draftLen: auto).
    draft_len: Callable[[Any], int | None] = lambda block: None
    draft_len_range: Callable[[Any], tuple[int, int] | None] = lambda block: None
    auto_draft_len: Callable[[Any], bool] = lambda block: False
    # Volumes the runtime pod writes besides its own (given the block, the deployment's name and its cache
    # claim): (volume, mount) pairs; the checkpoints are mounted read-only whatever the mode.
    writable_volumes: Callable[[Any, str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = \
        lambda block, deployment, cache_claim: []

    @property
    def field(self) -> str:
        """The Python name of the block's field in SpeculationSpec."""
        return to_snake(self.name)

    def block_of(self, speculation: Any) -> Any:
        return getattr(speculation, self.field, None) if self.block else None

    def cel_rules(self) -> list[dict[str, str]]:
        """The rules on the whole spec: the backends that serve the mode, then its own."""
        chosen = mode_guard(self.name)
        rules = []
        if tuple(self.backends) != BACKENDS:
            served = ", ".join(self.backends)
            rules.append(cel(f"{chosen}self.backend in {list(self.backends)}",
                             f"{self.name} is served by backend {served} only", ".speculation.mode"))
        rules += [cel(f"{chosen}({r.rule})", r.message, r.field_path) for r in self.rules]
        return rules
