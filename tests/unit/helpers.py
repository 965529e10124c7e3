"""Helpers shared by the unit tests: examples, plans, parsed build commands, CRD schema walking."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from specdec.api.crd import crds
from specdec.builders.build_steps import Step, build_steps
from specdec.plan import EnginePlan, Plan, Problem, plan
from specdec.schema import cel
from specdec.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
EXAMPLE_13B = "llama-2-13b-draft-7b-logits"
EXAMPLE_70B = "llama-3.1-70b-fp8-draft-1b"
EXAMPLE_REDRAFTER = "vicuna-7b-redrafter"

SETTINGS = Settings()  # the defaults, never the environment: tests must not depend on SPECDEC_*
SD_CRD = "specdec.io_speculativedeployments.yaml"
EB_CRD = "specdec.io_enginebuilds.yaml"


def load_example(stem: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / f"{stem}.yaml").read_text())


def deployment(spec: dict[str, Any], name: str = "sd", namespace: str = "ns") -> dict[str, Any]:
    return {
        "apiVersion": "specdec.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def make_plan(spec: dict[str, Any], name: str = "sd") -> Plan:
    result = plan(deployment(spec, name), SETTINGS)
    assert isinstance(result, Plan), result
    return result


def make_problem(spec: dict[str, Any]) -> Problem:
    result = plan(deployment(spec), SETTINGS)
    assert isinstance(result, Problem), f"expected a Problem, got a plan with engines {result.engine_names}"
    return result


def engines(spec: dict[str, Any]) -> dict[str, EnginePlan]:
    """role ("target", "draft") -> EnginePlan."""
    return {e.role: e for e in make_plan(spec).engines}


def steps(engine: EnginePlan) -> list[Step]:
    return build_steps(engine.name, engine.spec, SETTINGS.calib_size)


def commands(step: Step) -> list[list[str]]:
    """The step's script as argv lists, one per line (bash quoting undone, ${VARS} kept literal)."""
    return [shlex.split(line) for line in step.script.splitlines() if line.strip()]


def command(step: Step, program: str) -> list[str]:
    """The one command line of `step` whose argv contains `program` (e.g. "trtllm-build", "quantize.py")."""
    found = [argv for argv in commands(step) if any(a == program or a.endswith("/" + program) for a in argv)]
    assert len(found) == 1, f"{program} in step {step.name}: {step.script}"
    return found[0]


def flag(argv: list[str], name: str) -> str:
    """The value following `name` in argv."""
    assert name in argv, f"{name} not in {argv}"
    return argv[argv.index(name) + 1]


def has_pairs(argv: list[str], *pairs: tuple[str, str | int]) -> bool:
    return all(name in argv and argv[argv.index(name) + 1] == str(value) for name, value in pairs)


# --- CRDs -------------------------------------------------------------------------------------------


def crd_schema(file_name: str) -> dict[str, Any]:
    return crds()[file_name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema_nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below (and including) `node`, with a dotted path."""
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from schema_nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from schema_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")


def schema_at(schema: dict[str, Any], json_path: str) -> dict[str, Any]:
    """The schema node of a simple JSON path such as `.spec.runtime.replicas`."""
    node = schema
    for part in json_path.strip(".").split("."):
        node = node["properties"][part]
    return node


def validations(schema: dict[str, Any]) -> list[tuple[str, dict[str, str]]]:
    """(node path, rule) for every x-kubernetes-validations entry in the schema."""
    return [(path, rule) for path, node in schema_nodes(schema) for rule in node.get("x-kubernetes-validations") or []]


def reported(rule: dict[str, str], spec: dict[str, Any], path: str) -> str:
    """The message `rule`, at the spec schema's node `path` (simple dotted), reports refusing `spec`."""
    node = spec
    for part in path.strip(".").split("."):
        node = (node.get(part) or {}) if part else node
    return cel.message(rule, node)


class Recorded:
    """A work queue that records the keys added (and whether urgent), and those added for later with
    their delay (`later`), and runs nothing."""

    def __init__(self):
        self.keys: list[tuple] = []
        self.urgent: list[bool] = []
        self.later: list[tuple[float, tuple]] = []

    def add(self, key: tuple, urgent: bool = False) -> None:
        self.keys.append(key)
        self.urgent.append(urgent)

    def add_after(self, seconds: float, key: tuple, urgent: bool = False) -> None:
        self.later.append((seconds, key))

    def urgent_waiting(self) -> bool:
        """Whether an urgent key was added (WorkQueue's: one still waits; these never run)."""
        return any(self.urgent)
