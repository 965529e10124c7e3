"""spec.speculation.rearm and status.rearm: the opt-in rolling restart of runtime pods that stopped drafting
under traffic (specdec.rearm decides it, specdec.reconcile.serving applies it)."""

from __future__ import annotations

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdec import modes
from specdec.modes.pytorch import DynamicSpeculation
from specdec.schema.base import ApiModel, cel


class RearmSpec(ApiModel):
    """Restart the runtime pods when they stopped drafting under traffic (condition SpeculationActive, reason
    NotDrafting) for longer than `cooldownSeconds`: TensorRT-LLM turns speculation off for good once the mean
    accepted draft tokens per step over its last acceptance_rate_window_size requests falls below
    acceptance_rate_threshold, and only a new process drafts again."""

    enabled: bool = Field(False, description="Restart the runtime Deployment (one rolling restart) on NotDrafting.")
    cooldown_seconds: int = Field(
        900,
        ge=60,
        le=86400,
        description=("How long NotDrafting must last before a restart, and the least time between two restarts."),
    )


class RearmStatus(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    restarts: int | None = Field(None, description="Rolling restarts speculation.rearm made.")
    last_restart_at: str | None = Field(
        None,
        description=("When the last one was asked for: the runtime pod template's specdec.io/rearmed-at annotation."),
    )


_DYNAMIC = [m.name for m in modes.MODES.values() if m.block and issubclass(m.block, DynamicSpeculation)]

# On spec.speculation, where everything they read is: a rule on the whole spec would pay for reading
# `speculation` out of it at every write (docs/performance).
REARM_RULES = (
    cel(
        f"!has(self.rearm) || !self.rearm.enabled || !(self.mode in {modes.not_speculating()})",
        "restarts pods that stopped drafting: only for a mode that speculates (not none or saveState)",
        ".rearm",
    ),
    *(
        [
            cel(
                "!has(self.rearm) || !self.rearm.enabled || "
                + " && ".join(
                    f"(!has(self.{name}) || (!has(self.{name}.maxConcurrency) && !has(self.{name}.draftLenSchedule)))"
                    for name in _DYNAMIC
                ),
                "with maxConcurrency or draftLenSchedule the pods stop drafting under load on purpose: a restart would "
                "only drop the requests in flight; enable rearm without them",
                ".rearm",
            )
        ]
        if _DYNAMIC
        else []
    ),
)
