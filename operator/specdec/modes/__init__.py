"""The speculation modes: one module each, and this registry, which feeds the API union
(`spec.speculation`), the EngineRecipe's speculation fields, the CRD, `plan()`, the engine builds and the
runtime configuration's union (`speculation`).

Adding a mode = one module with a `MODE`, one line in `MODES` below, its example and its tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field, create_model

from specdec.modes import auto, dflash, draft_target, dspark, eagle3, mtp, ngram, none, pard, redrafter, sa, save_state
from specdec.modes.mode import BACKENDS, Chosen, EnginePath, Mode
from specdec.schema.base import ApiModel, cel, validations

MODES: dict[str, Mode[Any]] = {
    m.name: m
    for m in (
        none.MODE,
        draft_target.MODE,
        redrafter.MODE,
        eagle3.MODE,
        mtp.MODE,
        ngram.MODE,
        sa.MODE,
        auto.MODE,
        pard.MODE,
        dflash.MODE,
        dspark.MODE,
        save_state.MODE,
    )
}


def speculation_spec(rules: Sequence[dict[str, str]] = (), **fields: Any) -> type[ApiModel]:
    """`spec.speculation`: the mode, exactly the chosen mode's block, and `fields` that apply to every mode
    (pydantic create_model field definitions), with their CEL `rules` on this object."""
    with_block = [m for m in MODES.values() if m.block]
    base = type(
        "SpeculationRules",
        (ApiModel,),
        {
            "model_config": validations(
                *(
                    cel(
                        f"self.mode == '{m.name}' ? has(self.{m.name}) : !has(self.{m.name})",
                        f"the {m.name} block is required when mode is {m.name} and forbidden otherwise",
                        f".{m.name}",
                    )
                    for m in with_block
                ),
                *rules,
            )
        },
    )
    summary = "; ".join(f"{m.name}: {m.summary}" for m in MODES.values())
    return create_model(  # type: ignore[call-overload]  # fields computed from the registry
        "SpeculationSpec",
        __base__=base,
        __doc__="Which speculative decoding method to use; exactly the chosen mode's block is set.",
        mode=(Literal[tuple(MODES)], Field("none", description=summary + ".")),
        **{
            m.field: (
                m.block | None,  # type: ignore[operator]  # with_block: the modes that have one
                Field(None, description=f"Settings for mode {m.name} (backend {' or '.join(m.backends)})."),
            )
            for m in with_block
        },
        **fields,
    )


def spec_rules() -> list[dict[str, str]]:
    """The modes' CEL rules on the whole spec (SpeculativeDeploymentSpec)."""
    return [*backend_rule(), *(rule for m in MODES.values() for rule in m.cel_rules())]


def backend_rule() -> list[dict[str, str]]:
    """One rule for every mode that one backend alone serves, its message naming the chosen mode. Each rule
    reading `spec.speculation` costs the API server a copy of that object's schema, a property per mode, at
    every write (docs/performance): with a rule per mode, each mode more made every deployment's write dearer."""
    served = {m.name: list(m.backends) for m in MODES.values() if tuple(m.backends) != BACKENDS}
    if not served:
        return []
    names = {name: ", ".join(backends) for name, backends in served.items()}
    by_backend = {b: ", ".join(n for n in names if names[n] == b) for b in names.values()}
    mode = "self.speculation.mode"
    return [
        cel(
            f"!({mode} in {served}) || self.backend in {served}[{mode}]",
            "the chosen mode is served by one backend only: " + "; ".join(f"{n} by {b}" for b, n in by_backend.items()),
            ".speculation.mode",
            message_expression=f"{mode} + ' is served by backend ' + {names}[{mode}] + ' only'",
        )
    ]


def not_speculating() -> list[str]:
    """The modes that propose no draft tokens (Mode.speculates)."""
    return [m.name for m in MODES.values() if not m.speculates]


def mode_of(speculation: Any) -> Chosen[Any]:
    """The chosen mode of a parsed `spec.speculation`, and its block (None for mode none)."""
    mode = MODES[speculation.mode]
    return Chosen(mode, mode.block_of(speculation))


def decoding_modes() -> tuple[str, ...]:
    """EngineRecipe.speculative_decoding_mode's values: none, and the engine-path modes' own."""
    return ("none", *(m.engine.decoding_mode for m in MODES.values() if m.engine))


def engine_recipe_fields() -> dict[str, Any]:
    """EngineRecipe's field of each mode with a part of its own in the target's recipe."""
    return {
        m.field: (m.engine.engine_recipe | None, None) for m in MODES.values() if m.engine and m.engine.engine_recipe
    }


def engine_path(recipe: Any) -> EnginePath[Any] | None:
    """The engine path of the mode an EngineRecipe's engine is built for: the one of its speculative_decoding_mode."""
    decoding_mode = recipe.speculative_decoding_mode
    return next((m.engine for m in MODES.values() if m.engine and m.engine.decoding_mode == decoding_mode), None)


def runtime_blocks() -> dict[str, type]:
    """The runtime configuration's `speculation` class of each mode with one of its own, by mode name."""
    return {m.name: m.runtime.block for m in MODES.values() if m.runtime}
