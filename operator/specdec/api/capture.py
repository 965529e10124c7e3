"""status.capture: what a saveState deployment captured (specdec.status.capture writes it)."""

from __future__ import annotations

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdec.schema.base import ApiModel


class CaptureStatus(ApiModel):
    """The capture directory as the runtime pods count it (their specdec_capture_* metrics), at most a scrape
    interval old; rewritten only when it changes."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    claim_name: str | None = Field(None, description="The claim the hidden states are written to.")
    path: str | None = Field(None, description="The capture directory inside the claim.")
    files: int | None = Field(None, description="<filePrefix>_<n>.pt files in it.")
    bytes: int | None = Field(None, description="Their size.")
    requests: int | None = Field(None, description="Requests whose hidden states the files hold.")
    tokens: int | None = Field(None, description="Token ids (input_ids) in the files: the training tokens.")
    last_write_at: str | None = Field(
        None, description="Modification time of the newest file: when the capture last grew."
    )
    claim_capacity_bytes: int | None = Field(None, description="The claim's capacity (its status.capacity.storage).")
    claim_used_percent: float | None = Field(
        None,
        description=(
            "bytes / claimCapacityBytes, in percent: from 90 the condition CaptureSpace is False (ClaimNearlyFull)."
        ),
    )
