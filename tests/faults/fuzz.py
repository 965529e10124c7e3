"""A spec fuzzer for SpeculativeDeployments: seeded mutations of examples/*.yaml, judged twice.

1. `dry_run`: a server-side dry-run create of every mutant through the real API server sorts them
   into refused (the CRD schema or a CEL rule said no, with the API server's message) and accepted.
2. `create_and_settle`: a sample of the accepted ones is really created with the operator running;
   each must settle (`violation` is None): a fresh status (observedGeneration == generation), a
   phase, and Ready True, or False with a reason that names a cause (not progress) and a message.
   An accepted spec that no Pod can carry (a bad label, quantity, toleration, ...) must end in a
   reason that says so, not in "EnginesBuilding" forever.

Used by tests/cluster/test_fuzz.py (CI size) and bench/fuzz.py (any size); `run` does both steps.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.rest import ApiException

from specdec.api.models import GROUP, VERSION
from specdec.builders.build_steps import STEP_PHASES

PLURAL = "speculativedeployments"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# Ready reasons that say "not yet" rather than why: an SD left with one of them has not settled.
PROGRESS_REASONS = frozenset(
    {
        "EnginesBuilding",
        "RollingOut",
        "WaitingForEngines",
        "JobPending",
        "EngineBuildPending",
        "UpdatePending",
        "Pending",
        "Building",
        *STEP_PHASES.values(),
    }
)

Path_ = tuple[Any, ...]  # keys and list indices from the object's root


@dataclasses.dataclass
class Mutant:
    name: str
    category: str
    description: str  # what changed: a path and a value
    body: dict
    example: str
    path: Path_ = ()

    def label(self) -> str:
        name = self.name if len(self.name) <= 60 else f"{self.name[:40]}…({len(self.name)} chars)"
        return f"{name} [{self.category}] {self.description} (from {self.example})"


@dataclasses.dataclass
class Verdict:
    mutant: Mutant
    accepted: bool
    status: int | None = None  # HTTP status of a refusal
    message: str = ""


@dataclasses.dataclass
class Outcome:
    mutant: Mutant
    obj: dict | None  # the SpeculativeDeployment as last read
    problem: str | None  # why it has not settled (None: it has), or why it could not be created


def load_examples(directory: Path = EXAMPLES) -> dict[str, dict]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted(directory.glob("*.yaml"))}


# -- paths ----------------------------------------------------------------------------------------


def render_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part and all(c.isascii() and (c.isalnum() or c in "-_") for c in part) and part[0].isalpha():
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else f"{text[: limit - 15]}…({len(text)} chars)"


def nodes(obj: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    """Every node under `obj` (itself excluded) with its path, parents before children."""
    found = []
    children = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else []
    for key, value in children:
        found.append((path + (key,), value))
        found.extend(nodes(value, path + (key,)))
    return found


def get(obj: Any, path: Path_) -> Any:
    for part in path:
        obj = obj[part]
    return obj


def put(obj: dict, path: Path_, value: Any) -> None:
    """Set `path`, creating missing dicts on the way (a missing optional block is just added)."""
    for part in path[:-1]:
        if isinstance(obj, dict):
            obj = obj.setdefault(part, {})
        else:
            obj = obj[part]
    obj[path[-1]] = value


def _spec_nodes(body: dict, want: Callable[[Any], bool]) -> list[tuple[Path_, Any]]:
    return [(p, v) for p, v in nodes(body.get("spec") or {}, ("spec",)) if want(v)]


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# -- mutators: each changes `body` in place and returns (path, description), or None if it cannot --

Mutation = tuple[Path_, str] | None

HOSTILE_STRINGS = [
    "",
    " ",
    "  padded  ",
    "ünïcødé-模型-✓",
    "x" * 300,
    "-lead",
    "line\nbreak",
    "trailing-",
    "UPPER",
    "a.b.c",
    "tab\there",
    "semi;colon",
    "../../etc/passwd",
]
ODD_KEYS = ["unknownField", "key with spaces", "a/b", "ünï", "x" * 300, "-lead", "$ref"]


def wrong_type(rng: random.Random, body: dict) -> Mutation:
    path, value = rng.choice(_spec_nodes(body, lambda v: True))
    if isinstance(value, bool):
        options = ["true", 1, None]
    elif isinstance(value, int):
        options = [str(value), f"{value}x", value + 0.5, True, [value], None]
    elif isinstance(value, float):
        options = [str(value), True, {"v": value}, None]
    elif isinstance(value, str):
        options = [7, True, [value], {"v": value}, None]
    elif isinstance(value, list):
        options = [short(value), 3, {"0": value[0] if value else 1}, None]
    else:
        options = ["x", [1], 3, None]
    new = rng.choice(options)
    put(body, path, new)
    return path, f"{render_path(path)} = {short(new)} (was {type(value).__name__})"


def out_of_range(rng: random.Random, body: dict) -> Mutation:
    candidates = _spec_nodes(body, _is_number)
    if not candidates:
        return None
    path, value = rng.choice(candidates)
    new = rng.choice([0, -1, 10**9, 2**53 + 1, 2**63, 1e300, 0.0001, -0.5])
    put(body, path, new)
    return path, f"{render_path(path)} = {short(new)} (was {value})"


# Optional string fields the examples leave out: a hostile value may go there too.
OPTIONAL_STRINGS = [
    ("spec", "runtime", "image"),
    ("spec", "build", "image"),
    ("spec", "target", "revision"),
    ("spec", "cache", "claimName"),
    ("spec", "cache", "storageClassName"),
    ("spec", "cache", "size"),
]


def hostile_string(rng: random.Random, body: dict) -> Mutation:
    candidates = [p for p, _ in _spec_nodes(body, lambda v: isinstance(v, str))] + OPTIONAL_STRINGS
    path = rng.choice(candidates)
    if isinstance(get_or_none(body, path[:-1]), list):
        return None
    new = rng.choice(HOSTILE_STRINGS)
    if rng.random() < 0.3 and (old := get_or_none(body, path)):
        new = rng.choice([f" {old} ", f"{old}\n", old.upper(), old + "-ü"])  # almost right
    put(body, path, new)
    return path, f"{render_path(path)} = {short(new)}"


def get_or_none(obj: Any, path: Path_) -> Any:
    try:
        return get(obj, path)
    except (KeyError, IndexError, TypeError):
        return None


def odd_key(rng: random.Random, body: dict) -> Mutation:
    dicts = [(("spec",), body["spec"])] if isinstance(body.get("spec"), dict) else []
    dicts += _spec_nodes(body, lambda v: isinstance(v, dict))
    if not dicts:
        return None
    where, _ = rng.choice(dicts)
    key = rng.choice(ODD_KEYS)
    value = rng.choice(["v", 1, {"nested": True}, [1, 2]])
    path = where + (key,)
    put(body, path, value)
    return path, f"added {render_path(path)} = {short(value)}"


BAD_LABEL_KEYS = ["bad key", "-lead", "a/b/c", "x" * 64, "ünï", "trailing-", "example.com/", "/name"]
BAD_LABEL_VALUES = ["has space", "x" * 64, "-v-", "ünï", "a/b", "line\nbreak"]
BAD_QUANTITIES = ["lots", "1.5.5", "-1Gi", "1e100", "1Gb", "", " 1Gi", "0x10"]


def _pod_refuses_cases(rng: random.Random) -> list[tuple[Path_, Any]]:
    side = rng.choice(["build", "runtime"])
    quantity_resource = rng.choice(["cpu", "memory", "ephemeral-storage"])
    return [
        (("spec", "build", "podLabels"), {rng.choice(BAD_LABEL_KEYS): "v"}),
        (("spec", "build", "podLabels"), {"ok": rng.choice(BAD_LABEL_VALUES)}),
        (("spec", "build", "podAnnotations"), {rng.choice(BAD_LABEL_KEYS): "v"}),
        (("spec", "build", "podAnnotations"), {"big": "x" * (300 * 1024)}),  # over the 256 KiB limit
        (("spec", side, "nodeSelector"), {rng.choice(BAD_LABEL_KEYS): "v"}),
        (("spec", side, "nodeSelector"), {"ok": rng.choice(BAD_LABEL_VALUES)}),
        (("spec", side, "nodeSelector"), {"specdec.io/no-such-node": "true"}),  # valid, matches nothing
        (("spec", side, "resources"), {"limits": {quantity_resource: rng.choice(BAD_QUANTITIES)}}),
        (("spec", side, "resources"), {"limits": {"memory": "1Gi"}, "requests": {"memory": "2Gi"}}),
        (("spec", side, "resources"), {"limits": {"bad name!": "1"}}),
        (("spec", side, "resources"), {"requests": {"cpu": 100000}}),  # valid, fits no node
        (("spec", side, "tolerations"), [{"operator": "Exists", "value": "x"}]),
        (("spec", side, "tolerations"), [{"key": "bad key!", "operator": "Equal", "value": "v"}]),
        (("spec", side, "tolerations"), [{"operator": "Equal", "value": "v"}]),
        (("spec", side, "tolerations"), [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}]),
        (
            ("spec", side, "image"),
            rng.choice(["bad image", " registry.invalid/x:1", "UPPER/Case:tag", "img@sha256:short", "x:"]),
        ),
        (("spec", "runtime", "affinity"), {"nodeAffinity": {"junk": 1}}),
        (("spec", "runtime", "affinity"), {"nodeAffinity": "string"}),
        (("spec", "runtime", "affinity"), {"junkTop": {"a": 1}}),
        (
            ("spec", "runtime", "affinity"),
            {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": ""}]}},
        ),
        (
            ("spec", "runtime", "affinity"),
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        ),
        (("spec", "build", "activeDeadlineSeconds"), 2**62),
    ]


def pod_refuses(rng: random.Random, body: dict) -> Mutation:
    """Values the CRD lets through (free-form maps, strings) that a Pod or Job may not carry."""
    if not isinstance(body.get("spec"), dict):
        return None
    path, value = rng.choice(_pod_refuses_cases(rng))
    put(body, path, value)
    return path, f"{render_path(path)} = {short(value)}"


def delete_field(rng: random.Random, body: dict) -> Mutation:
    candidates = [(p, v) for p, v in nodes(body, ()) if p[0] == "spec" and not isinstance(p[-1], int)]
    candidates.append((("spec",), body.get("spec")))
    path, _ = rng.choice(candidates)
    parent = get(body, path[:-1])
    del parent[path[-1]]
    return path, f"deleted {render_path(path)}"


REDRAFTER = {"drafterModel": "pvc://drafters/vicuna-7b-drafter", "numBeams": 4, "draftLenPerBeam": 5}
DRAFT_TARGET = {"draft": {"model": "hf://meta-llama/Llama-2-7b-hf", "devices": [0]}, "draftLen": 4}


def swap_mode(rng: random.Random, body: dict) -> Mutation:
    speculation = (body.get("spec") or {}).get("speculation")
    if not isinstance(speculation, dict):
        return None
    mode = speculation.get("mode")
    other = "redrafter" if mode == "draftTarget" else "draftTarget"
    choice = rng.randrange(6)
    path = ("spec", "speculation")
    if choice == 0:
        speculation["mode"] = other
        return path + ("mode",), f"spec.speculation.mode = {other!r}, blocks kept"
    if choice == 1 and mode in speculation:
        speculation[other] = speculation.pop(mode)
        return path + (other,), f"spec.speculation.{mode} block moved under {other}"
    if choice == 2:
        speculation[other] = copy.deepcopy(REDRAFTER if other == "redrafter" else DRAFT_TARGET)
        return path + (other,), f"added the {other} block next to {mode}"
    if choice == 3:
        speculation["mode"] = "none"
        return path + ("mode",), "spec.speculation.mode = 'none', blocks kept"
    if choice == 4:
        body["spec"]["backend"] = "pytorch"
        return ("spec", "backend"), f"spec.backend = 'pytorch' (mode {mode})"
    body["spec"]["speculation"] = {
        "mode": other,
        other: copy.deepcopy(REDRAFTER if other == "redrafter" else DRAFT_TARGET),
    }
    return path, f"spec.speculation replaced by a valid {other} block"


def bad_name(rng: random.Random, body: dict) -> Mutation:
    """Names the API server takes (DNS-1123 subdomains) but the operator cannot name a Service after."""
    base = body["metadata"]["name"]
    new = rng.choice([f"{base}.dotted", f"{base}-" + "x" * 60, f"9{base}", base.upper(), f"{base}-", "x" * 254])
    body["metadata"]["name"] = new
    return ("metadata", "name"), f"metadata.name = {short(new)}"


MUTATORS: list[tuple[str, Callable[[random.Random, dict], Mutation], int]] = [
    ("wrong-type", wrong_type, 2),
    ("out-of-range", out_of_range, 2),
    ("hostile-string", hostile_string, 2),
    ("odd-key", odd_key, 1),
    ("pod-refuses", pod_refuses, 4),
    ("delete", delete_field, 1),
    ("swap-mode", swap_mode, 1),
    ("name", bad_name, 1),
]


def mutants(count: int, seed: int, examples: dict[str, dict] | None = None, prefix: str = "fz") -> list[Mutant]:
    """`count` mutants, each one mutation of one example; the same seed gives the same mutants."""
    examples = examples or load_examples()
    rng = random.Random(seed)
    weights = [w for _, _, w in MUTATORS]
    out = []
    while len(out) < count:
        example = rng.choice(sorted(examples))
        body = copy.deepcopy(examples[example])
        body["metadata"]["name"] = f"{prefix}-{len(out)}"
        category, mutate, _ = rng.choices(MUTATORS, weights)[0]
        result = mutate(rng, body)
        if result is None:
            continue
        path, description = result
        out.append(Mutant(body["metadata"]["name"], category, description, body, example, path))
    return out


def originals(examples: dict[str, dict] | None = None, prefix: str = "fz") -> list[Mutant]:
    examples = examples or load_examples()
    out = []
    for example, body in sorted(examples.items()):
        body = copy.deepcopy(body)
        body["metadata"]["name"] = f"{prefix}-ex-{example.split('.yaml')[0].replace('.', '-')}"[:50].rstrip("-")
        out.append(Mutant(body["metadata"]["name"], "example", "unmutated", body, example))
    return out


# -- step 1: what the API server accepts ---------------------------------------------------------


def _message(error: ApiException) -> str:
    try:
        return json.loads(error.body).get("message") or error.reason
    except (TypeError, ValueError):
        return f"{error.reason}: {error.body}"


def dry_run(kube, namespace: str, candidates: list[Mutant], workers: int = 4) -> list[Verdict]:
    def judge(mutant: Mutant) -> Verdict:
        try:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, mutant.body, dry_run="All")
        except ApiException as error:
            if error.status in (400, 413, 422) or (error.status == 500 and "too large" in (error.body or "")):
                return Verdict(mutant, False, error.status, _message(error))
            raise
        return Verdict(mutant, True)

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(judge, candidates))


# -- step 2: what the operator makes of what the API server accepted ------------------------------


def violation(obj: dict) -> str | None:
    """Why this SpeculativeDeployment's status is not a settled, explained one (None if it is)."""
    status = obj.get("status") or {}
    generation = obj["metadata"].get("generation")
    if not status:
        return "no status"
    if status.get("observedGeneration") != generation:
        return f"stale status: observedGeneration {status.get('observedGeneration')} != generation {generation}"
    if not status.get("phase"):
        return "no phase"
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    if ready is None:
        return "no Ready condition"
    if ready.get("status") == "True":
        return None
    if ready.get("status") != "False":
        return f"Ready={ready.get('status')}"
    if not ready.get("reason") or ready["reason"] in PROGRESS_REASONS:
        return f"Ready=False with a progress reason: {ready.get('reason')!r}: {ready.get('message', '')}"
    if not (ready.get("message") or "").strip():
        return f"Ready=False/{ready['reason']} without a message"
    return None


def describe_status(obj: dict | None) -> str:
    if obj is None:
        return "(not found)"
    status = obj.get("status") or {}
    conds = "; ".join(
        f"{c.get('type')}={c.get('status')}/{c.get('reason')}: {c.get('message', '')[:160]}"
        for c in status.get("conditions") or []
    )
    return (
        f"phase={status.get('phase')} generation={obj['metadata'].get('generation')} "
        f"observedGeneration={status.get('observedGeneration')} | {conds or 'no conditions'}"
    )


def prepare_for_creation(mutant: Mutant, index: int) -> Mutant:
    """A copy that holds no GPU it does not need and shares no engine with another mutant.

    Build pod placement (podLabels, nodeSelector, ...) is not part of an engine's recipe, so two
    deployments sharing an engine share one build: the second one's placement would go untested.
    A unique engine.maxBatchSize gives each its own. Runtime pods are scaled to 0 unless the mutation
    is about the runtime, so a few dozen deployments do not take every simulated GPU of a shared cluster.
    """
    body = copy.deepcopy(mutant.body)
    spec = body.get("spec")
    if isinstance(spec, dict):
        if mutant.path[:2] != ("spec", "engine") and isinstance(spec.get("engine", {}), dict):
            spec.setdefault("engine", {})["maxBatchSize"] = 1000 + index
        if mutant.path[:2] != ("spec", "runtime") and isinstance(spec.get("runtime", {}), dict):
            spec.setdefault("runtime", {})["replicas"] = 0
    return dataclasses.replace(mutant, body=body)


def too_costly(mutant: Mutant) -> bool:
    """Specs that would start hundreds of pods on a shared machine."""
    replicas = get_or_none(mutant.body, ("spec", "runtime", "replicas"))
    return _is_number(replicas) and replicas > 3


def sample(accepted: list[Mutant], count: int, seed: int, floor: int = 2) -> list[Mutant]:
    """Up to `count` mutants: `floor` of every category first (rare ones get created too), then the
    rest in proportion to what each category had accepted; within a category, distinct paths first."""
    rng = random.Random(seed)
    by_path: dict[str, dict[Path_, list[Mutant]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for m in accepted:
        if not too_costly(m):
            by_path[m.category][m.path].append(m)
    queues: dict[str, list[Mutant]] = {}
    for category, paths in by_path.items():
        groups = [paths[p] for p in sorted(paths, key=render_path)]
        for group in groups:
            rng.shuffle(group)
        rng.shuffle(groups)
        queues[category] = [g[i] for i in range(max(map(len, groups))) for g in groups if i < len(g)]
    sizes = {c: len(q) for c, q in queues.items()}
    taken: collections.Counter[str] = collections.Counter()
    chosen: list[Mutant] = []
    names: set[str] = set()

    def take(category: str) -> None:
        m = queues[category].pop(0)
        taken[category] += 1
        if m.name not in names:  # two name mutants may share a name
            names.add(m.name)
            chosen.append(m)

    for category in sorted(queues):
        while queues[category] and taken[category] < floor and len(chosen) < count:
            take(category)
    while len(chosen) < count and any(queues.values()):
        take(max((c for c in queues if queues[c]), key=lambda c: (sizes[c] / (taken[c] + 1), c)))
    return chosen


def create_and_settle(
    kube, namespace: str, chosen: list[Mutant], timeout: float, interval: float = 1.0
) -> list[Outcome]:
    """Create each, then poll until every one has settled or `timeout` passes; the last state of each."""
    created: list[Mutant] = []
    refused: list[Outcome] = []
    for index, mutant in enumerate(chosen):
        body = prepare_for_creation(mutant, index).body
        try:
            kube.custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
            created.append(mutant)
        except ApiException as error:  # accepted by the dry run: a real create should be too
            refused.append(
                Outcome(
                    mutant,
                    None,
                    f"real create refused after an accepted dry run: HTTP {error.status}: {_message(error)}",
                )
            )
    deadline = time.monotonic() + timeout
    while True:
        listing = kube.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        found = {o["metadata"]["name"]: o for o in listing}
        outcomes = [
            Outcome(m, found.get(m.name), violation(found[m.name]) if m.name in found else "deleted or never stored")
            for m in created
        ]
        if all(o.problem is None for o in outcomes) or time.monotonic() > deadline:
            return refused + outcomes
        time.sleep(interval)


# -- both steps, and what to print -----------------------------------------------------------------


@dataclasses.dataclass
class FuzzResult:
    verdicts: list[Verdict]
    outcomes: list[Outcome]
    seconds: dict[str, float]

    @property
    def accepted(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.accepted]

    @property
    def violations(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.problem]

    def report(self, refused_examples: int = 0) -> str:
        lines = []
        counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for v in self.verdicts:
            counts[v.mutant.category]["accepted" if v.accepted else "refused"] += 1
        for o in self.outcomes:
            counts[o.mutant.category]["created"] += 1
            counts[o.mutant.category]["violating"] += bool(o.problem)
        lines.append(f"{'category':<16}{'mutants':>9}{'refused':>9}{'accepted':>10}{'created':>9}{'violating':>11}")
        for category in sorted(counts):
            c = counts[category]
            lines.append(
                f"{category:<16}{c['accepted'] + c['refused']:>9}{c['refused']:>9}{c['accepted']:>10}"
                f"{c['created']:>9}{c['violating']:>11}"
            )
        total = sum(counts.values(), collections.Counter())
        lines.append(
            f"{'total':<16}{total['accepted'] + total['refused']:>9}{total['refused']:>9}"
            f"{total['accepted']:>10}{total['created']:>9}{total['violating']:>11}"
        )
        lines.append("time: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.seconds.items()))
        if refused_examples:
            lines.append(f"\nsome refusals (of {len(self.verdicts) - len(self.accepted)}):")
            for v in [v for v in self.verdicts if not v.accepted][:refused_examples]:
                lines.append(f"  {v.mutant.label()}\n    -> HTTP {v.status}: {v.message[:200]}")
        if self.violations:
            lines.append(f"\n{len(self.violations)} accepted deployment(s) did not settle:")
            for o in sorted(self.violations, key=lambda o: (o.mutant.category, o.mutant.name)):
                lines.append(f"  {o.mutant.label()}\n    problem: {o.problem}\n    status:  {describe_status(o.obj)}")
        return "\n".join(lines)


def run(
    kube, namespace: str, count: int, create: int, seed: int, timeout: float, with_examples: bool = True
) -> FuzzResult:
    seconds = {}
    start = time.monotonic()
    verdicts = dry_run(kube, namespace, mutants(count, seed))
    seconds["dry run"] = time.monotonic() - start
    chosen = sample([v.mutant for v in verdicts if v.accepted], create, seed)
    if with_examples:
        chosen = originals() + chosen
    start = time.monotonic()
    outcomes = create_and_settle(kube, namespace, chosen, timeout) if create or with_examples else []
    seconds["create and settle"] = time.monotonic() - start
    return FuzzResult(verdicts, outcomes, seconds)
