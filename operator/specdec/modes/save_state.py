"""SaveState: no speculation; the target serves as usual and writes its hidden states to files, the training
data of an EAGLE-3 head for it (PyTorch path, SaveHiddenStatesDecodingConfig). The files go to a claim:
the one the user names, else the deployment's cache claim; the runtime pod mounts only the capture
directory of it, writable (`capture_volume`), at CAPTURE_MOUNT, TensorRT-LLM's output_directory.

Fields, defaults and the literal as SaveHiddenStatesDecodingConfig has them in NVIDIA/TensorRT-LLM
`tensorrt_llm/llmapi/llm_args.py` @ 0004396720054fd8e205cbf616f21f0b57c6b412 and on the 1.3.0rc27 API
reference page (nvidia.github.io/TensorRT-LLM/1.3.0rc27/llm-api/reference/SaveHiddenStatesDecodingConfig.html):
decoding_type "SaveState"; output_directory str, required (created if missing); write_interval int = 20
(requests between writes); file_prefix str = "data" (files '<file_prefix>_<iteration>.pt' holding input_ids
and the hidden states); eagle3_layers_to_capture Optional[Set[int]] = None (-1: the final post-norm state;
None: EAGLE-3's three layers plus the post-norm state; non-empty when set). max_total_draft_tokens and
eagle_choices are init=False: never emitted. inferred: no 1.4.0rc1 page or source of this class is stored,
so that the pinned 1.4.0rc1 has the same fields is inferred from the releases on either side of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from specdec.modes.mode import Mode, PyTorchPath, Rule
from specdec.schema import k8s
from specdec.schema.base import ApiModel, cel, validations

DECODING_TYPE = "SaveState"  # speculative_config.decoding_type (specdec.modes.pytorch: the source)
CAPTURE_MOUNT = "/captures"  # in the runtime pod: output_directory
CAPTURE_VOLUME = "captures"
FILE_PREFIX = "data"  # file_prefix's default
POST_NORM = -1  # eagle3_layers_to_capture: the final post-norm hidden state

CapturedLayer = Annotated[int, Field(ge=POST_NORM, le=1023)]


class CaptureOutput(ApiModel):
    """Where the captured hidden states go."""

    claim_name: str | None = k8s.optional_object_name(
        "An existing ReadWriteMany claim in this namespace to write to. Default: the deployment's "
        "cache claim (spec.cache). The claim's size bounds what is captured."
    )
    path: str | None = k8s.optional_relative_path(
        "The capture directory inside the claim (created if missing); give each deployment its own: "
        "TensorRT-LLM numbers files from 1 on every start. Default: hidden-states/<deployment name>."
    )


class SaveStateSpec(ApiModel):
    """Hidden-state capture: no draft tokens; every write_interval requests, the target's hidden states at
    the captured layers and the requests' token ids are written to the capture directory."""

    model_config = validations(
        cel(
            "!has(self.eagle3LayersToCapture) || self.eagle3LayersToCapture.all(l, "
            "self.eagle3LayersToCapture.exists_one(m, m == l))",
            "eagle3LayersToCapture lists each layer once (a set in TensorRT-LLM)",
            ".eagle3LayersToCapture",
        ),
    )

    output: CaptureOutput = Field(default_factory=CaptureOutput, description="Where the files go.")
    write_interval: int = Field(
        20,
        ge=1,
        le=100000,
        description="Requests between two writes of the accumulated hidden states (write_interval).",
    )
    file_prefix: str = Field(
        FILE_PREFIX,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="File names are <filePrefix>_<iteration>.pt (file_prefix).",
    )
    eagle3_layers_to_capture: list[CapturedLayer] | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Target layers whose hidden states are written, -1 for the final post-norm state "
        "(eagle3_layers_to_capture). Default: EAGLE-3's three layers plus the post-norm state; "
        "set the layers the EAGLE-3 head to train reads.",
    )


def _speculative_config(block: SaveStateSpec, checkpoint: Callable[[str], str]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "decoding_type": DECODING_TYPE,
        "output_directory": CAPTURE_MOUNT,
        "write_interval": block.write_interval,
        "file_prefix": block.file_prefix,
    }
    if block.eagle3_layers_to_capture is not None:
        config["eagle3_layers_to_capture"] = sorted(block.eagle3_layers_to_capture)
    return config


def capture_place(block: SaveStateSpec, deployment: str, cache_claim: str) -> tuple[str, str]:
    """(claim, directory inside it) the hidden states are written to."""
    return block.output.claim_name or cache_claim, block.output.path or f"hidden-states/{deployment}"


def capture_volume(
    block: SaveStateSpec, deployment: str, cache_claim: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The runtime pod's writable volume and mount of the capture directory (only that directory of the claim)."""
    claim, path = capture_place(block, deployment, cache_claim)
    return [
        (
            {"name": CAPTURE_VOLUME, "persistentVolumeClaim": {"claimName": claim}},
            {"name": CAPTURE_VOLUME, "mountPath": CAPTURE_MOUNT, "subPath": path},
        )
    ]


# No drafting: nothing proposes draft tokens.
MODE = Mode(
    "saveState",
    "no speculation: the target writes its hidden states to files, the training data of an EAGLE-3 head",
    SaveStateSpec,
    rules=(
        Rule(
            "!has(self.runtime) || !has(self.runtime.replicas) || self.runtime.replicas <= 1",
            "saveState serves one runtime replica: every server numbers its files from 1 in the one "
            "capture directory, so a second would write over the first's",
            ".runtime.replicas",
        ),
    ),
    pytorch=PyTorchPath(_speculative_config, writable_volumes=capture_volume),
)
