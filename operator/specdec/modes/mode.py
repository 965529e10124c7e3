"""What a speculation mode is: one unit the registry (`specdec.modes`) feeds to the API, the CRD,
`plan()`, the engine builds and the runtime. A `Mode` is generic over its block's type, so the functions it
declares are checked against that block; it declares only the records of what it serves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Generic, Literal, TypeVar, cast

from pydantic.alias_generators import to_snake

from specdec.schema.base import ApiModel, ModelSource, cel
from specdec.schema.cel import mode_guard
from specdec.schema.served_model import ServedModel

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
    # where the build pod finds a checkpoint by its hf:// or pvc:// address. (The EngineRecipe is Any here:
    # specdec.api builds that class from this registry.)
    args: Callable[[Any, str, str, Callable[[str], str]], list[str | int]]


@dataclasses.dataclass(frozen=True)
class EngineDrafter:
    """What drafts inside the target's engine, as admission counts it on the target's GPUs
    (specdec.admission.memory): a checkpoint of its own loaded beside the target's weights, and the layers
    whose K and V it caches in the target's KV-cache budget."""

    label: str  # for messages: "EAGLE-3 head"
    checkpoint: str | None = None  # hf:// or pvc://; None: its weights are the target checkpoint's (MTP)
    # Layers it caches K and V of: None, those of its checkpoint; for layers of the target checkpoint
    # (checkpoint None), this many of the target's shape.
    kv_layers: int | None = None


BlockT = TypeVar("BlockT")  # the mode's block (spec.speculation.<name>); None for a mode without one
RuntimeT = TypeVar("RuntimeT")  # the mode's block of the runtime configuration (RuntimeConfig.speculation)
Volumes = list[tuple[dict[str, Any], dict[str, Any]]]  # (volume, mount) pairs of the runtime pod


def _none(block: object) -> None:
    return None


def _no_models(source: object) -> tuple[str, ...]:
    return ()


def _by_tokens(block: object) -> Literal["tokens", "logits"]:
    return "tokens"


def _no_volumes(block: object, deployment: str, cache_claim: str) -> Volumes:
    return []


def _no_defaults(speculation: object) -> dict[str, Any]:
    return {}


@dataclasses.dataclass(frozen=True)
class AutoDraftLen(Generic[BlockT, RuntimeT]):
    """draftLen: auto, the operator choosing the draft length among those the pods run without a rebuild."""

    chosen: Callable[[BlockT], bool]  # whether the block asks for it
    range: Callable[[BlockT], tuple[int, int]]  # the lengths it may choose among
    # The runtime block at a chosen length and draft_len_schedule (largest batch size -> draft length), for a
    # route that takes them at start (trtllm-serve): the pods restart with it.
    served_at: Callable[[RuntimeT, int, dict[int, int] | None], RuntimeT]


@dataclasses.dataclass(frozen=True)
class Drafting(Generic[BlockT]):
    """How a mode that proposes draft tokens drafts (none and saveState have none: the speculation monitor and
    the conditions SpeculationEffective and SpeculationActive are for the modes that do)."""

    # What proposes the tokens, for the cost estimate when the route measures none (specdec.speculation):
    # "model" (a draft model of its own), "head" (layers on the target's), "lookup" (no model at all).
    drafter: Literal["model", "head", "lookup"]
    # A second model served beside the target (its own engine on the engine path).
    draft: Callable[[BlockT], ModelSource | None] = _none
    # A drafter inside the target's engine (not a `draft` served on its own), for admission's GPU memory.
    in_engine: Callable[[BlockT], EngineDrafter | None] = _none
    # How the target accepts draft tokens: "tokens" (compares them) or "logits" (rejection sampling on the
    # draft's and the target's logits: their vocabularies must be equal, and only the engine path has it).
    acceptance: Callable[[BlockT], Literal["tokens", "logits"]] = _by_tokens
    # Draft tokens per target step as configured (None: the runtime knows, e.g. an MTP checkpoint's layer count).
    draft_len: Callable[[BlockT], int | None] = _none
    auto: AutoDraftLen[BlockT, Any] | None = None


@dataclasses.dataclass(frozen=True)
class EnginePath(Generic[BlockT]):
    """The engine path (backend tensorrt): engines built by trtllm-build for the mode."""

    # trtllm-build's --speculative_decoding_mode of the target engine (EngineRecipe's field of that name).
    decoding_mode: str
    # The fields the mode adds to the target's and the draft's EngineRecipe, given the block and the role.
    recipe: Callable[[BlockT, str], dict[str, Any]]
    # The mode's own part of the target's EngineRecipe (EngineRecipe.<field>, set by `recipe`), the
    # checkpoints its build reads besides the model (given the EngineRecipe, Any as in BuildStep.args), and
    # its own build steps.
    engine_recipe: type[ApiModel] | None = None
    engine_models: Callable[[Any], tuple[str, ...]] = _no_models
    build_steps: tuple[BuildStep, ...] = ()
    # Served by Triton (its BLS model drives the draft's and the target's engines), else by trtllm-serve.
    triton: bool = False


@dataclasses.dataclass(frozen=True)
class PyTorchPath(Generic[BlockT]):
    """The PyTorch path (backend pytorch): trtllm-serve on the checkpoints."""

    # trtllm-serve's `speculative_config` (the --extra_llm_api_options YAML), given the block and where the
    # runtime finds the checkpoints named in it.
    speculative_config: Callable[[BlockT, Callable[[str], str]], dict[str, Any]]
    # Checkpoints the runtime reads besides the target and the draft (hf:// or pvc://).
    checkpoints: Callable[[BlockT], tuple[str, ...]] = _no_models
    # Volumes the runtime pod writes besides its own (given the block, the deployment's name and its cache
    # claim); the checkpoints are mounted read-only whatever the mode.
    writable_volumes: Callable[[BlockT, str, str], Volumes] = _no_volumes


@dataclasses.dataclass(frozen=True)
class RuntimeBlock(Generic[BlockT, RuntimeT]):
    """The runtime configuration's `speculation` of a mode with one of its own (tagged by the mode's name);
    without: RuntimeNone, or RuntimeSpeculativeConfig on the PyTorch path."""

    block: type[RuntimeT]
    # Made from the spec's block, the served draft and the rendered speculative_config.
    make: Callable[[BlockT, ServedModel | None, dict[str, Any] | None], RuntimeT]
    # Fields of a generation request the front sets where the client set none (or null).
    request_defaults: Callable[[RuntimeT], dict[str, Any]] = _no_defaults


@dataclasses.dataclass(frozen=True)
class Mode(Generic[BlockT]):
    """A mode declares what it serves: its API (name, block, rules), how it drafts, and its record of each
    path and of the runtime. A mode with neither path's record (none) is served by both backends."""

    name: str  # spec.speculation.mode, and the name of its block
    summary: str
    block: type[BlockT] | None = None  # spec.speculation.<name>: present exactly when this mode is chosen
    rules: tuple[Rule, ...] = ()
    drafting: Drafting[BlockT] | None = None  # None: proposes no draft tokens
    engine: EnginePath[BlockT] | None = None
    pytorch: PyTorchPath[BlockT] | None = None
    runtime: RuntimeBlock[BlockT, Any] | None = None

    @property
    def backends(self) -> tuple[str, ...]:
        served = (("tensorrt",) if self.engine else ()) + (("pytorch",) if self.pytorch else ())
        return served or BACKENDS

    @property
    def speculates(self) -> bool:
        return self.drafting is not None

    @property
    def field(self) -> str:
        """The Python name of the block's field in SpeculationSpec."""
        return to_snake(self.name)

    def block_of(self, speculation: Any) -> BlockT:
        return cast(BlockT, getattr(speculation, self.field, None) if self.block else None)

    def cel_rules(self) -> list[dict[str, str]]:
        """Its own rules on the whole spec, each decided at its mode guard for a deployment of another mode.
        The backends that serve it are checked by one rule for every mode (specdec.modes.backend_rule)."""
        chosen = mode_guard(self.name)
        return [cel(f"{chosen}({r.rule})", r.message, r.field_path) for r in self.rules]


@dataclasses.dataclass(frozen=True)
class Chosen(Generic[BlockT]):
    """The mode a spec chose, and its block: what the plan and its readers ask of the mode, the records a mode
    leaves out answered by their defaults."""

    mode: Mode[BlockT]
    block: BlockT

    def draft(self) -> ModelSource | None:
        return self.mode.drafting.draft(self.block) if self.mode.drafting else None

    def in_engine_drafter(self) -> EngineDrafter | None:
        return self.mode.drafting.in_engine(self.block) if self.mode.drafting else None

    def acceptance(self) -> Literal["tokens", "logits"]:
        return self.mode.drafting.acceptance(self.block) if self.mode.drafting else "tokens"

    def draft_len(self) -> int | None:
        return self.mode.drafting.draft_len(self.block) if self.mode.drafting else None

    def auto_draft_len(self) -> AutoDraftLen[BlockT, Any] | None:
        """draftLen: auto, when the block asks for it."""
        auto = self.mode.drafting.auto if self.mode.drafting else None
        return auto if auto is not None and auto.chosen(self.block) else None

    def draft_len_range(self) -> tuple[int, int] | None:
        """The lengths the pods could run without a rebuild or restart (None: only the configured one)."""
        auto = self.mode.drafting.auto if self.mode.drafting else None
        return auto.range(self.block) if auto is not None else None

    def runtime_checkpoints(self) -> tuple[str, ...]:
        return self.mode.pytorch.checkpoints(self.block) if self.mode.pytorch else ()

    def writable_volumes(self, deployment: str, cache_claim: str) -> Volumes:
        return self.mode.pytorch.writable_volumes(self.block, deployment, cache_claim) if self.mode.pytorch else []
