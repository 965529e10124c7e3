"""spec.drafter.learning and status.drafter: the opt-in loop that captures a sample of a deployment's completed
requests at the front, replays them through a SaveState server, trains an EAGLE-3 head on the hidden states and
keeps it only when its offline acceptance length beats the running draft's (docs/draft-learning.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdec.api.pod_fields import Annotations, Image, Labels, Quantity, Resources, Tolerations
from specdec.schema import k8s
from specdec.schema.base import ApiModel, cel, validations

SAMPLES_MOUNT = "/drafter-samples"  # in the runtime pod: the samples' directory of the claim
SAMPLES_VOLUME = "drafter-samples"
OPT_OUT_HEADER = "X-Specdec-No-Capture"
TRAFFIC_CLASS_HEADER = "X-Specdec-Traffic-Class"
HEADER_NAME = r"^[A-Za-z0-9][A-Za-z0-9-]*$"  # an HTTP field name as clients send them (RFC 9110 token, no symbols)
DURATION = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"  # Go's time.Duration, as metav1.Duration spells whole units
_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1}


def duration_seconds(text: str) -> int:
    """Seconds of a DURATION ("168h", "1h30m")."""
    return sum(int(n) * _UNIT_SECONDS[unit] for n, unit in re.findall(r"([0-9]+)([hms])", text))


class SamplesOutput(ApiModel):
    """Where the front writes the captured samples."""

    claim_name: str | None = k8s.optional_object_name(
        "An existing ReadWriteMany claim in this namespace. Default: the deployment's cache claim (spec.cache)."
    )
    path: str | None = k8s.optional_relative_path(
        "The samples' directory inside the claim. Default: drafter-samples/<deployment name>."
    )


class TrainerSpec(ApiModel):
    """The replay and train Jobs' pods."""

    image: Image | None = Field(None, description="The trainer image. Default: the operator's --runtime-image.")
    resources: Resources | None = Field(
        None, description="CPU, memory and GPUs of the train Job's pod (nvidia.com/gpu for a GPU trainer)."
    )
    node_selector: Labels | None = Field(None, description="Node selector for the Jobs' pods.")
    tolerations: Tolerations | None = Field(None, description="Tolerations for the Jobs' pods.")
    backoff_limit: int = Field(1, ge=0, le=20, description="Retries of a failed Job.")
    active_deadline_seconds: int | None = Field(None, ge=60, description="Deadline of each Job.")
    pod_labels: Labels | None = Field(None, description="Extra labels on the Jobs' pods.")
    pod_annotations: Annotations | None = Field(None, description="Extra annotations on the Jobs' pods.")


class LearningSpec(ApiModel):
    """Capture a sample of completed requests at the front (the prompt as the model saw it and the target's
    answer), and train an EAGLE-3 head on them. The samples are user data: docs/draft-learning.md says what is
    kept, where, for how long and who can read it."""

    model_config = validations(
        cel(
            "quantity(string(self.maxBytes)).isGreaterThan(quantity('0'))",
            "maxBytes must be more than 0",
            ".maxBytes",
        ),
        cel("self.retention != ''", "retention must name a duration, e.g. 168h", ".retention"),
    )

    enabled: bool = Field(False, description="Capture samples and run the loop. Default: off, nothing is captured.")
    sample_rate: float = Field(
        0.05, ge=0, le=1, description="The share of completed requests captured (0.05: one in twenty)."
    )
    max_bytes: Quantity = Field(
        "10Gi",
        description="The samples' bytes kept at most, per runtime pod; past it the front captures no more (counted "
        "as dropped, reason budget) until retention frees room.",
    )
    retention: str = Field(
        "168h",
        max_length=32,
        pattern=DURATION,
        description="How long a sample file is kept (Go duration, e.g. 168h); the front deletes its own older files.",
    )
    output: SamplesOutput = Field(default_factory=SamplesOutput, description="Where the samples go.")
    opt_out_header: str = Field(
        OPT_OUT_HEADER,
        min_length=1,
        max_length=128,
        pattern=HEADER_NAME,
        description="A request with this header (any value) is never captured.",
    )
    traffic_class_header: str = Field(
        TRAFFIC_CLASS_HEADER,
        min_length=1,
        max_length=128,
        pattern=HEADER_NAME,
        description="The request's traffic class, recorded with its sample and counted per class.",
    )
    traffic_class: str | None = Field(
        None,
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Train on the samples of this traffic class only (the traffic-class header's value). Default: all.",
    )
    min_samples: int = Field(
        2000, ge=1, le=100_000_000, description="New samples (of trafficClass) captured before a head is trained."
    )
    margin: float = Field(
        0.10,
        ge=0,
        le=10,
        description="How much longer the new head's offline acceptance length must be (0.10: 10 %) to be kept.",
    )
    keep_rounds: int = Field(
        3,
        ge=1,
        le=100,
        description="Rounds whose files (hidden states, hold-out, head) stay on the claim: the newest, counting the "
        "one starting. A round's replay Job deletes older rounds' directories, never the served head's.",
    )
    trainer: TrainerSpec = Field(default_factory=TrainerSpec, description="The replay and train Jobs.")


class DrafterSpec(ApiModel):
    learning: LearningSpec | None = Field(
        None, description="Opt-in: train the EAGLE-3 head on this deployment's own traffic (docs/draft-learning.md)."
    )


def enabled_learning(drafter: DrafterSpec | None) -> LearningSpec | None:
    """The learning block when it is on."""
    learning = drafter.learning if drafter is not None else None
    return learning if learning is not None and learning.enabled else None


def samples_place(learning: LearningSpec, deployment: str, cache_claim: str) -> tuple[str, str]:
    """(claim, directory inside it) the samples are written to."""
    return learning.output.claim_name or cache_claim, learning.output.path or f"drafter-samples/{deployment}"


class FrontCapture(ApiModel):
    """What the runtime front needs to capture samples (RuntimeConfig.drafter_capture)."""

    directory: str = Field(SAMPLES_MOUNT, description="The samples' directory, mounted writable.")
    sample_rate: float = Field(ge=0, le=1)
    max_bytes: int = Field(ge=1, description="The directory's samples files hold at most this many bytes.")
    retention_seconds: int = Field(ge=1, description="A samples file older than this is deleted.")
    opt_out_header: str
    traffic_class_header: str


def front_capture(learning: LearningSpec) -> FrontCapture:
    return FrontCapture(
        sample_rate=learning.sample_rate,
        max_bytes=int(k8s.parse_quantity(learning.max_bytes)),
        retention_seconds=duration_seconds(learning.retention),
        opt_out_header=learning.opt_out_header,
        traffic_class_header=learning.traffic_class_header,
    )


def samples_volume(learning: LearningSpec, deployment: str, cache_claim: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The runtime pod's writable volume and mount of the samples' directory (only that directory of the claim)."""
    claim, path = samples_place(learning, deployment, cache_claim)
    return (
        {"name": SAMPLES_VOLUME, "persistentVolumeClaim": {"claimName": claim}},
        {"name": SAMPLES_VOLUME, "mountPath": SAMPLES_MOUNT, "subPath": path},
    )


# On the whole spec (SpeculativeDeploymentSpec).
DRAFTER_RULES = (
    cel(
        "!has(self.drafter) || !has(self.drafter.learning) || !self.drafter.learning.enabled || "
        "self.speculation.mode == 'eagle3'",
        "drafter.learning trains an EAGLE-3 head: it needs speculation.mode eagle3",
        ".drafter.learning",
    ),
)


class ClassCounts(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    samples: int | None = Field(None, description="Samples captured of this class.")
    bytes: int | None = Field(None, description="Their bytes.")


class AcceptanceLength(ApiModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    baseline: float | None = Field(None, description="The running draft's, on the held-out samples.")
    candidate: float | None = Field(None, description="The new head's.")


class DrafterStatus(ApiModel):
    """What the front captured (the runtime pods' specdec_drafter_* metrics, at most a scrape interval old) and
    where the loop is; rewritten only when it changes."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    claim_name: str | None = Field(None, description="The claim the samples are written to.")
    path: str | None = Field(None, description="The samples' directory inside the claim.")
    samples: int | None = Field(None, description="Samples captured, all pods together.")
    bytes: int | None = Field(None, description="Their bytes.")
    classes: dict[str, ClassCounts] | None = Field(
        None, description="Per traffic class (the traffic-class header's value; '' without one)."
    )
    dropped: dict[str, int] | None = Field(None, description="Samples not captured, by reason.")
    round: int | None = Field(None, description="The loop's round: replay, train and decision once per round.")
    round_samples: int | None = Field(None, description="Samples when the round started.")
    round_basis: str | None = Field(None, description="A hash of spec.target and spec.speculation as the round began.")
    replay_job: str | None = Field(None, description="The replay Job's name.")
    replay_phase: str | None = Field(None, description="Pending, Running, Succeeded or Failed.")
    train_job: str | None = Field(None, description="The train Job's name.")
    train_phase: str | None = Field(None, description="Pending, Running, Succeeded or Failed.")
    acceptance_length: AcceptanceLength | None = Field(None, description="Offline acceptance length, old and new.")
    decision: str | None = Field(None, description="Promoted or NotBetter (offline, against the running draft).")
    decided_at: str | None = Field(None, description="When it was decided.")
    head: str | None = Field(
        None, description="The promoted head (pvc://<claim>/<path>): the draft served in place of the spec's."
    )
    trained_for: str | None = Field(
        None,
        description="The head's roundBasis: it serves only while spec.target and spec.speculation are unchanged.",
    )
