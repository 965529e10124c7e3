"""spec.rollout.canary and status.canary: a change of spec.speculation first serves beside the current draft as a
canary, and is promoted only when the paired test of specdec.canary.decision says it is faster (docs/canary.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdec.schema.base import ApiModel

ANNOTATION_CANARY_RETRY = "specdec.io/canary-retry"  # a new value retries a Rejected or Inconclusive canary


class CanarySpec(ApiModel):
    """The defaults are specdec.canary.decision.CanaryPolicy's."""

    enabled: bool = Field(
        False,
        description=(
            "Run a change of spec.speculation as a canary beside the draft that serves, and promote it only when it "
            "is measurably faster. A first deployment has nothing to compare with: it starts with its own draft."
        ),
    )
    replicas: int = Field(1, ge=1, le=100, description="Canary pods (each with the GPUs of a runtime pod).")
    min_effect: float = Field(0.05, gt=0, le=10, description="The TPOT gain worth promoting (0.05: 5 % faster).")
    false_promotion: float = Field(
        0.05, gt=0, lt=0.5, description="The chance of promoting a canary that is not faster (alpha)."
    )
    missed_promotion: float = Field(
        0.2, gt=0, lt=0.5, description="The chance of not promoting a canary faster by exactly minEffect (beta)."
    )
    request_budget: int = Field(
        2000, ge=1, le=10_000_000, description="Requests of the smaller arm after which the test ends Inconclusive."
    )
    on_inconclusive: Literal["Rejected", "Promoted"] = Field(
        "Rejected", description="What a canary that spent its budget without a decision becomes."
    )
    not_serving_seconds: int = Field(
        900,
        ge=10,
        le=86_400,
        description=(
            "Seconds the canary may serve no request (its pods not ready, or no traffic reaching them) before it ends "
            "Inconclusive (NotServing), its pods removed and the current draft kept."
        ),
    )


class RolloutSpec(ApiModel):
    canary: CanarySpec = Field(default_factory=CanarySpec, description="A canary for changes of spec.speculation.")


class CanaryArmStatus(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    draft: str | None = Field(None, description="The arm's mode and draft.")
    replicas: int | None = Field(None, description="The arm's pods.")
    requests: int | None = Field(None, description="Requests the arm served since the canary started.")
    windows: int | None = Field(None, description="Scrape windows in which the arm served requests.")
    acceptance_rate: float | None = Field(None, description="Accepted / proposed draft tokens, last window.")
    accepted_tokens_per_step: float | None = Field(None, description="Accepted draft tokens per step, last window.")
    tpot_seconds: float | None = Field(None, description="Mean time per output token, last window.")
    output_tokens_per_second_per_replica: float | None = Field(None, description="Last window.")
    errors: int | None = Field(None, description="Failed requests since the canary started.")


class CanaryCurrent(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    speculation: dict[str, Any] | None = Field(
        None,
        description="The speculation block the main runtime serves; a spec whose block differs runs as a canary.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class CanaryTest(ApiModel):
    """specdec.canary.decision.CanaryState: what the test has read, so a restarted operator resumes it."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    windows: int = 0
    pairs: int = 0
    sum_d: float = 0.0
    sum_d2: float = 0.0
    current_requests: float = 0.0
    canary_requests: float = 0.0


class CanaryDecisionStatus(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    outcome: str | None = Field(None, description="Promoted, Rejected or Inconclusive.")
    reason: str | None = Field(
        None, description="Faster, NotFaster, BudgetSpent, NotServing, PodsFailed, AcceptanceCollapsed, ..."
    )
    message: str | None = Field(None, description="The numbers behind it.")
    promote: bool | None = Field(None, description="Whether the canary's draft replaces the current one.")
    at: str | None = Field(None, description="When it was decided.")


class CanaryStatus(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    current: CanaryCurrent | None = Field(None, description="What the main runtime serves.")
    state: str | None = Field(None, description="InProgress, Promoted, Rejected or Inconclusive.")
    generation: int | None = Field(None, description="The spec's generation the canary tests.")
    retry: str | None = Field(None, description="The specdec.io/canary-retry annotation it started with.")
    started_at: str | None = None
    arms: dict[str, CanaryArmStatus] | None = Field(None, description="current and canary.")
    window_seconds: float | None = Field(None, description="The scrape window of the arms' last figures.")
    test: CanaryTest | None = Field(None, description="The sequential test's running sums.")
    decision: CanaryDecisionStatus | None = None
