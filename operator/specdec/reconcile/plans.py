"""The plan memo: plan() of each deployment, kept while what it read is the same.

plan() is pure and costs ~2 ms (its models' validation rules), a shared build's change wakes all of its users
at once, and a fleet's namespace gets the facts of another fetched checkpoint a hundred times (re-planning
every deployment each time was a tenth of the operator's Python CPU at N=300, py-spy)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from specdec.admission.checks import Observed
from specdec.admission.gpu_nodes import GpuNodeInventory, GpuNodes
from specdec.admission.model_facts import ModelFacts
from specdec.plan import Plan, Problem, plan
from specdec.reconcile.ownership import ours
from specdec.settings import Settings
from specdec.status.shared import FETCHED, build_state_from_status

_ABSENT = object()  # a checkpoint not fetched (None: fetched, no facts)


def fetched(model_cache: dict[str, Any]) -> bool:
    """A ModelCache of ours whose checkpoint is in the cache."""
    return ours(model_cache) and build_state_from_status(model_cache).phase == FETCHED


class _LookUps(Mapping):
    """The namespace's fetched facts, recording the checkpoints read. plan() looks them up by key; going over
    them all (iterating, counting) would make a kept plan depend on checkpoints fetched later: refused, loudly."""

    def __init__(self, facts: Mapping[tuple[str, str], ModelFacts | None]):
        self._facts = facts
        self.read: dict[tuple[str, str], object] = {}

    def __getitem__(self, checkpoint: tuple[str, str]) -> ModelFacts | None:
        self.read[checkpoint] = self._facts.get(checkpoint, _ABSENT)
        return self._facts[checkpoint]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        raise TypeError("plan() looks the fetched facts up by checkpoint (see PlanMemo.plan)")

    def __len__(self) -> int:
        raise TypeError("plan() looks the fetched facts up by checkpoint (see PlanMemo.plan)")


class PlanMemo:
    """`model_caches(namespace)`: the namespace's ModelCaches as cached."""

    def __init__(
        self, settings: Settings, gpu_nodes: GpuNodeInventory, model_caches: Callable[[str], list[dict[str, Any]]]
    ):
        self.settings = settings
        self.gpu_nodes = gpu_nodes
        self.model_caches = model_caches
        self._plans: dict[tuple[str, ...], tuple[tuple, GpuNodes, dict, Plan | Problem]] = {}
        self._facts_by_namespace: dict[str, tuple[tuple, dict]] = {}

    def plan(self, sd: dict[str, Any], speculation: dict[str, Any] | None = None) -> Plan | Problem:
        """plan() of this deployment, kept while its spec (uid, generation), the GPU nodes and the facts of
        the checkpoints it looked up are the same. `speculation`: plan the spec with this speculation block
        instead of its own (the block the main runtime serves while a canary runs: specdec.canary.rollout)."""
        meta = sd["metadata"]
        nodes = self.gpu_nodes.snapshot()
        key: tuple[str, ...] = (meta["namespace"], meta["name"])
        version: tuple = (meta.get("uid"), meta.get("generation"))
        if speculation is not None:
            key, version = (*key, "served"), (*version, json.dumps(speculation, sort_keys=True))
            sd = {**sd, "spec": {**(sd.get("spec") or {}), "speculation": speculation}}
        facts = self.fetched_facts(meta["namespace"])
        known = self._plans.get(key)
        if (
            known is not None
            and known[0] == version
            and known[1] is nodes
            and all(facts.get(checkpoint, _ABSENT) == was for checkpoint, was in known[2].items())
        ):
            return known[3]
        looked_up = _LookUps(facts)
        result = plan(sd, self.settings, Observed(looked_up, nodes))
        self._plans[key] = (version, nodes, looked_up.read, result)
        return result

    def kept(self, namespace: str, name: str) -> Plan | Problem | None:
        """The plan last made of this deployment, if any (without planning)."""
        known = self._plans.get((namespace, name))
        return known[3] if known else None

    def forget(self, namespace: str, name: str) -> None:
        self._plans.pop((namespace, name), None)
        self._plans.pop((namespace, name, "served"), None)

    def fetched_facts(self, namespace: str) -> dict[tuple[str, str], ModelFacts | None]:
        """Admission's facts of the namespace's Fetched ModelCaches, by checkpoint (uri, revision); None:
        fetched, no facts. Of ModelCaches of one checkpoint (different fetch placement), one with facts.
        One dict per namespace while its ModelCaches are unchanged."""
        caches = sorted(self.model_caches(namespace), key=lambda mc: mc["metadata"]["name"])
        version = tuple((mc["metadata"]["name"], mc["metadata"].get("resourceVersion")) for mc in caches)
        known = self._facts_by_namespace.get(namespace)
        if known is not None and known[0] == version:
            return known[1]
        facts: dict[tuple[str, str], ModelFacts | None] = {}
        for mc in filter(fetched, caches):
            key, reported = (mc["spec"]["model"], mc["spec"]["revision"]), (mc.get("status") or {}).get("facts")
            if reported and facts.get(key) is None:
                facts[key] = ModelFacts.from_status(
                    key[0].split("://", 1)[1],
                    reported,
                    f"the files its fetch read ({key[0]}@{key[1]}, ModelCache {mc['metadata']['name']})",
                )
            facts.setdefault(key, None)
        self._facts_by_namespace[namespace] = (version, facts)
        return facts
