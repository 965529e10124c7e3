"""A spec's own rules that its schema cannot state, in the order they decide SpecValid: parsed as the API server
validates it (parse_spec), then the checks over the chosen mode (CHECKS: ordered, small, pure; the first Problem
decides). Pure."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from specdec.api import models
from specdec.modes.mode import Chosen
from specdec.problem import Problem


def _sources(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> list[tuple[str, models.ModelSource]]:
    """The models with an engine of their own: the target, and the mode's draft model if it has one."""
    sources: list[tuple[str, models.ModelSource]] = [("spec.target", spec.target)]
    draft = mode.draft()
    if draft is not None:
        sources.append((f"spec.speculation.{mode.mode.name}.draft", draft))
    return sources


def _check_devices_contiguous(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> Problem | None:
    if spec.backend != "tensorrt":
        return None
    used = sorted({d for _, source in _sources(spec, mode) for d in source.effective_devices})
    if used != list(range(len(used))):
        return Problem(
            "DevicesNotContiguous",
            f"the device lists use GPUs {used}; a runtime pod sees its GPUs as "
            f"0..{len(used) - 1}, so use those indices",
        )
    return None


def _check_pytorch_devices(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> Problem | None:
    if spec.backend == "pytorch" and any(source.devices is not None for _, source in _sources(spec, mode)):
        return Problem(
            "DeviceListsUnsupported",
            "backend pytorch places the models itself (draft and target in one process); remove "
            "the devices lists (they apply to backend tensorrt)",
        )
    return None


def _check_revisions(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> Problem | None:
    for path, source in _sources(spec, mode):
        if source.revision and not source.model.startswith("hf://"):
            return Problem("RevisionNeedsHubModel", f"{path}.revision applies to hf:// models only")
    return None


def _check_pytorch_acceptance(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> Problem | None:
    if spec.backend == "pytorch" and mode.acceptance() == "logits":
        return Problem(
            "LogitsAcceptanceUnsupported",
            "trtllm-serve's PyTorch backend accepts draft tokens by comparing tokens; use "
            "acceptance: tokens, or backend: tensorrt for logits-based acceptance",
        )
    return None


def _check_multi_node_rollout(spec: models.SpeculativeDeploymentSpec, mode: Chosen[Any]) -> Problem | None:
    """A group of nodes rolls out by LeaderWorkerSet's rolling update: no canary arm (a second group of its own)
    and no speculation.rearm restarts (which restart a Deployment's pods)."""
    if spec.target.nodes < 2:
        return None
    if spec.rollout.canary.enabled:
        return Problem(
            "CanaryUnsupported", "spec.rollout.canary runs a Deployment beside the runtime: not with spec.target.nodes"
        )
    rearm = getattr(spec.speculation, "rearm", None)
    if rearm is not None and rearm.enabled:
        return Problem("RearmUnsupported", "speculation.rearm restarts a Deployment's pods: not with spec.target.nodes")
    return None


CHECKS: tuple[Callable[[models.SpeculativeDeploymentSpec, Chosen[Any]], Problem | None], ...] = (
    _check_revisions,
    _check_pytorch_devices,
    _check_pytorch_acceptance,
    _check_devices_contiguous,
    _check_multi_node_rollout,
)


def parse_spec(raw: dict[str, Any]) -> models.SpeculativeDeploymentSpec | Problem:
    """Validate as the API server does: wire (camelCase) names only, no type coercion."""
    return _parse_canonical(json.dumps(raw, sort_keys=True))


@functools.lru_cache(maxsize=4096)
def _parse_canonical(text: str) -> models.SpeculativeDeploymentSpec | Problem:
    """Memoised: every reconcile plans, specs rarely change, and evaluating the CEL rules offline
    (specdec.schema.cel) takes milliseconds. The results are immutable (frozen models, dataclasses)."""
    try:
        return models.SpeculativeDeploymentSpec.model_validate(
            json.loads(text), strict=True, by_alias=True, by_name=False
        )
    except ValidationError as error:
        details = "; ".join(
            f"spec{''.join(f'.{p}' for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        )
        return Problem("InvalidSpec", details)


def check_name(name: str) -> Problem | None:
    """The runtime Service is named after the deployment, so the name must be a DNS-1035 label."""
    if not models.NAME_RE.fullmatch(name):
        return Problem("InvalidName", f"metadata.name {name!r}: {models.NAME_RULE_MESSAGE}")
    return None
