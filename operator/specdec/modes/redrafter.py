"""ReDrafter: a recurrent drafter head built into the target engine (explicit_draft_tokens), engine
path only (examples/redrafter/convert_checkpoint.py, TensorRT-LLM 1.2.x)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from specdec.modes.mode import BuildStep, Drafting, EngineDrafter, EnginePath, Mode, RuntimeBlock
from specdec.schema.base import MODEL_URI_HELP, ApiModel, ModelUri, cel, validations


class ReDrafterSpec(ApiModel):
    """ReDrafter: a recurrent drafter head built into the target engine (explicit_draft_tokens)."""

    model_config = validations(
        cel("!has(self.temperature) || !self.greedy", "temperature applies only when greedy is false", ".temperature"),
    )

    drafter_model: ModelUri = Field(description=f"The drafter checkpoint: {MODEL_URI_HELP}.")
    num_beams: int = Field(5, ge=1, le=32, description="Beams explored per step (--redrafter_num_beams).")
    draft_len_per_beam: int = Field(
        5,
        ge=1,
        le=32,
        description="Tokens drafted per beam (--redrafter_draft_len_per_beam); at most the drafter's training draft "
        "length.",
    )
    greedy: bool = Field(
        True,
        description="Greedy token selection in the drafter's beam search; false builds with "
        "--redrafter_no_greedy_search.",
    )
    temperature: float | None = Field(
        None, gt=0, le=10, description="Default sampling temperature; only when greedy is false."
    )


# The target EngineRecipe's `redrafter`: what the drafter conversion builds into the engine.
class ReDrafterRecipe(ApiModel):
    drafter_model: str
    num_beams: int
    draft_len_per_beam: int
    greedy: bool


class RuntimeReDrafter(ApiModel):
    """What the runtime needs of ReDrafter: the beams are the engine's (built in), the default temperature
    is the front's, for requests that set none."""

    mode: Literal["redrafter"] = "redrafter"
    temperature: float | None = None


def _recipe(block: ReDrafterSpec, role: str) -> dict[str, Any]:
    return {
        "redrafter": ReDrafterRecipe(
            drafter_model=block.drafter_model,
            num_beams=block.num_beams,
            draft_len_per_beam=block.draft_len_per_beam,
            greedy=block.greedy,
        )
    }


def _convert_args(recipe: Any, base: str, out: str, checkpoint: Callable[[str], str]) -> list[str | int]:
    rd = recipe.redrafter
    args: list[str | int] = [
        "--base_model_checkpoint_dir",
        base,
        "--drafter_model_dir",
        checkpoint(rd.drafter_model),
        "--output_dir",
        out,
        "--dtype",
        recipe.dtype,
        "--tp_size",
        recipe.tensor_parallel_size,
        "--redrafter_num_beams",
        rd.num_beams,
        "--redrafter_draft_len_per_beam",
        rd.draft_len_per_beam,
    ]
    if not rd.greedy:
        args.append("--redrafter_no_greedy_search")
    return args


def _runtime(block: ReDrafterSpec, draft: Any, speculative_config: dict[str, Any] | None) -> RuntimeReDrafter:
    return RuntimeReDrafter(temperature=block.temperature)


def _request_defaults(speculation: RuntimeReDrafter) -> dict[str, Any]:
    """The default temperature, for requests that set none."""
    return {} if speculation.temperature is None else {"temperature": speculation.temperature}


MODE = Mode(
    "redrafter",
    "a recurrent drafter head in the target engine proposes beams of tokens",
    ReDrafterSpec,
    # A recurrent drafter over the target's last hidden state: weights, and no KV cache of its own.
    drafting=Drafting(
        "head", in_engine=lambda block: EngineDrafter("ReDrafter drafter", block.drafter_model, kv_layers=0)
    ),
    engine=EnginePath(
        "explicit_draft_tokens",
        _recipe,  # the drafter is built into the engine
        engine_recipe=ReDrafterRecipe,
        engine_models=lambda recipe: (recipe.redrafter.drafter_model,),
        build_steps=(
            BuildStep(
                "redrafter-convert",
                "Converting",
                "RedrafterConvert",
                "redrafter/convert_checkpoint.py",
                "redrafter",
                _convert_args,
            ),
        ),
    ),
    runtime=RuntimeBlock(RuntimeReDrafter, _runtime, request_defaults=_request_defaults),
)
