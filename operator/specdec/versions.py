"""The TensorRT-LLM release each route runs, in one place.

The engine path (trtllm-build engines; Triton's TensorRT-LLM backend, trtllm-serve --backend tensorrt)
exists up to the 1.2.x releases; the PyTorch path (trtllm-serve --backend pytorch) pins the newest
release. The runtime images are built on these bases (runtime_image/, whose build arguments a test
checks against this module), the operator runs a deployment's pods on the image of its backend's route,
and the source-truth tables (tests/source_truth/) are extracted per release listed here.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Release:
    route: str  # "engine" (backend tensorrt) or "pytorch" (backend pytorch)
    trtllm: str  # the TensorRT-LLM version
    base_image: str  # NVIDIA's container our runtime image for this route is built on
    dockerfile: str  # ours, relative to the repository root
    image_suffix: str  # our runtime image's tag suffix for this route

    @property
    def git_ref(self) -> str:
        return f"v{self.trtllm}"


ENGINE = Release(
    "engine", "1.2.1", "nvcr.io/nvidia/tritonserver:26.07-trtllm-python-py3", "runtime_image/Dockerfile", ""
)
PYTORCH = Release(
    "pytorch",
    "1.4.0rc1",
    "nvcr.io/nvidia/tensorrt-llm/release:1.4.0rc1",
    "runtime_image/Dockerfile.pytorch",
    "-pytorch",
)
RELEASES = (ENGINE, PYTORCH)


def for_backend(backend: str) -> Release:
    return PYTORCH if backend == "pytorch" else ENGINE


@dataclasses.dataclass(frozen=True)
class CustomResource:
    """An API of another project that the operator creates objects of, at the version it writes."""

    group: str
    version: str
    kind: str
    plural: str
    install: str  # what to install when the cluster does not serve it

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


# LeaderWorkerSet (sigs.k8s.io/lws), which runs a target spanning several nodes (specdec.builders.multinode).
LWS = CustomResource(
    "leaderworkerset.x-k8s.io",
    "v1",
    "LeaderWorkerSet",
    "leaderworkersets",
    "LeaderWorkerSet (https://lws.sigs.k8s.io: its CRDs and controller, API leaderworkerset.x-k8s.io/v1)",
)
