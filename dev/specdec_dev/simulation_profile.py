"""What the simulated backends of the local cluster do: `<cluster dir>/simulator.json`.

    {"default": {"acceptance": 0.7, ...}, "deployments": {"<namespace>/<name>": {"acceptance": 0.9}}}

A deployment's profile is the built-in defaults, overridden by "default", overridden by its own entry. The pods of
its canary arm (spec.rollout.canary) read "<namespace>/<name>/canary", over the deployment's own profile.
`specdec dev simulate` writes entries; the pod runner re-reads the file when it changes.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

FILE_NAME = "simulator.json"
CANARY_SUFFIX = "/canary"


def canary_key(deployment: str) -> str:
    """The profile key of a deployment's canary arm."""
    return deployment + CANARY_SUFFIX


class Profile(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    acceptance: float = Field(0.7, ge=0, le=1, description="Chance that each draft token is accepted.")
    cost_ratio: float = Field(0.05, ge=0, le=1, description="A draft token's cost, in target steps.")
    target_step_seconds: float = Field(
        0.02,
        gt=0,
        le=10,
        description="One step of the target model: the floor a of t(T) = a + b*T (specdec.speculation.load_model).",
    )
    # Simulated, chosen so a local deployment shows the effect: with the defaults speculation at draft length
    # 4 stops paying from 17 sequences in flight, at draft length 1 from 47 (specdec.speculation.load_model.break_even).
    step_seconds_per_token: float = Field(
        0.0008,
        ge=0,
        le=1,
        description=(
            "The slope b of the target's step time t(T) = a + b*T for T tokens in the batch (the simulated Triton "
            "batches the requests in flight; 0: a step costs the same at any load)."
        ),
    )
    requests_per_second: float = Field(1.0, ge=0, le=1000, description="Simulated clients' arrival rate, per pod.")
    max_tokens: int = Field(64, ge=1, le=32768, description="Tokens each simulated request asks for.")
    noise: float = Field(0.0, ge=0, le=1, description="Per-request jitter of the acceptance (uniform +-noise).")
    seed: int | None = Field(
        None,
        ge=0,
        description=(
            "Seeds a pod's random draws (its simulated backend's acceptance and its simulated clients' arrivals) "
            "with this and the pod's name, at the pod's start; none: unseeded."
        ),
    )
    drafting: bool = Field(
        True,
        description=(
            "Whether the simulated server proposes draft tokens; false simulates one that does not (its draft engine "
            "or speculative_config did not load, or TensorRT-LLM stopped speculating once its rolling acceptance "
            "fell below acceptance_rate_threshold): target steps only."
        ),
    )


def pod_seed(profile: Profile, namespace: str, pod: str) -> int | None:
    """A pod's seed: the profile's with the pod's name (pods of one profile draw apart), None when unseeded."""
    return None if profile.seed is None else zlib.crc32(f"{profile.seed}/{namespace}/{pod}".encode())


class ProfileError(ValueError):
    """A profile file or entry that cannot be used; the message says what to change."""


def _checked(values: dict[str, Any], where: str) -> Profile:
    try:
        return Profile.model_validate(values)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e['input']!r})" if e["loc"] else e["msg"]
            for e in error.errors()
        )
        raise ProfileError(f"{where}: {problems}") from None


def read(path: Path) -> dict[str, Any]:
    """The file's document ({} when there is none yet), every entry checked."""
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise ProfileError(f"cannot read {path}: {error}") from None
    shape = f'{path}: expected {{"default": {{...}}, "deployments": {{"<namespace>/<name>": {{...}}}}}}'
    if not isinstance(document, dict) or set(document) - {"default", "deployments"}:
        raise ProfileError(shape)
    default, entries = document.get("default", {}), document.get("deployments", {})
    if (
        not isinstance(default, dict)
        or not isinstance(entries, dict)
        or not all(isinstance(e, dict) for e in entries.values())
    ):
        raise ProfileError(shape)
    _checked(default, f"{path}: default")
    for key, entry in entries.items():
        _checked({**default, **entry}, f"{path}: deployments[{key!r}]")
    return document


def resolve(document: dict[str, Any], deployment: str) -> Profile:
    """The profile of `namespace/name` (or of its canary arm, `namespace/name/canary`) in a checked document."""
    return Profile.model_validate({**document.get("default", {}), **_entry(document, deployment)})


def _entry(document: dict[str, Any], deployment: str) -> dict[str, Any]:
    """A key's own entry; a canary arm's over its deployment's."""
    entry = document.get("deployments", {}).get(deployment, {})
    if deployment.endswith(CANARY_SUFFIX):
        return {**document.get("deployments", {}).get(deployment.removesuffix(CANARY_SUFFIX), {}), **entry}
    return entry


def update(path: Path, deployment: str, values: dict[str, Any]) -> Profile:
    """Set some of a deployment's keys (camelCase) in the file; returns its profile. The file is replaced
    in one step, so the pod runner never reads half of it."""
    document = read(path)
    entry = {**document.get("deployments", {}).get(deployment, {}), **values}
    profile = _checked({**document.get("default", {}), **_entry(document, deployment), **values}, deployment)
    document.setdefault("deployments", {})[deployment] = entry
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)
    return profile
