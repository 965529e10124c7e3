"""Operator-wide settings: defaults a SpeculativeDeployment does not have to repeat.

Read from the environment (`SPECDEC_*`), which the Helm chart sets from its values.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

from specdec import versions

GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_RUNTIME_IMAGE = "ghcr.io/specdec-io/specdec-runtime:0.1.0"


@dataclasses.dataclass(frozen=True)
class Settings:
    runtime_image: str = DEFAULT_RUNTIME_IMAGE  # the engine path's (specdec.versions.ENGINE)
    # The PyTorch path's runtime image (specdec.versions.PYTORCH); default: runtime_image + "-pytorch".
    pytorch_runtime_image: str = ""
    # The runtime image carries TensorRT-LLM and its examples, so it is the build image too.
    build_image: str = DEFAULT_RUNTIME_IMAGE
    trtllm_examples_dir: str = "/app/tensorrt_llm/examples"
    gpu_tolerations: tuple[dict, ...] = ({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},)
    gpu_node_selector: tuple[tuple[str, str], ...] = ((f"{GPU_RESOURCE}.present", "true"),)
    # Secrets (in each deployment's namespace) for pulling the build and runtime images.
    image_pull_secrets: tuple[str, ...] = ()
    engine_retention_seconds: int = 24 * 3600
    resync_seconds: float = 300.0
    calib_size: int = 512
    # How often the runtime pods' metrics are read for status.speculation, and the longest a published
    # measurement stays when its numbers do not move (specdec.feedback.monitor).
    speculation_scrape_seconds: float = 15.0
    speculation_refresh_seconds: float = 300.0
    # draftLen: auto on trtllm-serve (a change is a surge rollout): the least time between two changes.
    draft_len_rollout_seconds: float = 900.0
    # Read the nodes' GPU labels (list nodes, cluster-scoped) for the GPU-memory admission check.
    read_gpu_nodes: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        base = cls()
        tolerations = env.get("SPECDEC_GPU_TOLERATIONS")
        selector = env.get("SPECDEC_GPU_NODE_SELECTOR")
        pull_secrets = env.get("SPECDEC_IMAGE_PULL_SECRETS")
        return cls(
            runtime_image=env.get("SPECDEC_RUNTIME_IMAGE", base.runtime_image),
            pytorch_runtime_image=env.get("SPECDEC_PYTORCH_RUNTIME_IMAGE", base.pytorch_runtime_image),
            build_image=env.get("SPECDEC_BUILD_IMAGE", env.get("SPECDEC_RUNTIME_IMAGE", base.build_image)),
            trtllm_examples_dir=env.get("SPECDEC_TRTLLM_EXAMPLES_DIR", base.trtllm_examples_dir),
            gpu_tolerations=tuple(json.loads(tolerations)) if tolerations else base.gpu_tolerations,
            gpu_node_selector=tuple(json.loads(selector).items()) if selector else base.gpu_node_selector,
            image_pull_secrets=tuple(json.loads(pull_secrets)) if pull_secrets else base.image_pull_secrets,
            engine_retention_seconds=int(env.get("SPECDEC_ENGINE_RETENTION_SECONDS", base.engine_retention_seconds)),
            resync_seconds=float(env.get("SPECDEC_RESYNC_SECONDS", base.resync_seconds)),
            calib_size=int(env.get("SPECDEC_CALIB_SIZE", base.calib_size)),
            speculation_scrape_seconds=float(
                env.get("SPECDEC_SPECULATION_SCRAPE_SECONDS", base.speculation_scrape_seconds)
            ),
            speculation_refresh_seconds=float(
                env.get("SPECDEC_SPECULATION_REFRESH_SECONDS", base.speculation_refresh_seconds)
            ),
            draft_len_rollout_seconds=float(
                env.get("SPECDEC_DRAFT_LEN_ROLLOUT_SECONDS", base.draft_len_rollout_seconds)
            ),
            read_gpu_nodes=env.get("SPECDEC_READ_GPU_NODES", str(base.read_gpu_nodes)).lower() == "true",
        )

    def runtime_image_for(self, backend: str) -> str:
        """The runtime image of the route that serves `backend`."""
        if backend == "pytorch":
            return self.pytorch_runtime_image or self.runtime_image + versions.PYTORCH.image_suffix
        return self.runtime_image
