"""Garbage collection of shared objects no deployment uses.

An EngineBuild or ModelCache no deployment needs is marked (ANNOTATION_UNUSED_SINCE) and deleted once unused
for longer than the retention. Deleting a ModelCache removes the object and its Job, not the checkpoint's
files (engines are kept the same way): a ModelCache made again finds them and finishes at once."""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kubernetes.client.rest import ApiException

from specdec.kube.client import Kube
from specdec.kube.errors import api_error_message
from specdec.plan import Plan
from specdec.reconcile.build_and_cache_jobs import SHARED
from specdec.reconcile.ownership import ours
from specdec.reconcile.plans import PlanMemo
from specdec.settings import Settings

log = logging.getLogger(__name__)

ANNOTATION_UNUSED_SINCE = "specdec.io/unused-since"  # on an EngineBuild or ModelCache no deployment needs


class GarbageCollector:
    def __init__(self, kube: Kube, settings: Settings, plans: PlanMemo):
        self.kube = kube
        self.settings = settings
        self.plans = plans

    def collect(self, namespace: str | None, now: datetime.datetime | None = None) -> list[str]:
        """Mark EngineBuilds and ModelCaches no deployment uses; delete those unused for longer than the
        retention. The names deleted."""
        now = now or datetime.datetime.now(datetime.UTC)
        used: set[tuple[str, str, str]] = set()
        for sd in self.kube.list("SpeculativeDeployment", namespace):
            ns = sd["metadata"]["namespace"]
            result = self.plans.plan(sd)
            names = set((sd.get("status") or {}).get("engineBuilds") or [])
            if isinstance(result, Plan):
                names |= set(result.engine_names)
            used |= {("ModelCache", ns, c.name) for c in result.model_caches}  # a refusal's too: see Problem
            used |= {("EngineBuild", ns, n) for n in names}
        deleted = []
        for kind in SHARED:
            for obj in self.kube.list(kind, namespace):
                meta = obj["metadata"]
                key = (kind, meta["namespace"], meta["name"])
                if not ours(obj):
                    continue
                try:
                    if self._collect(kind, obj, key in used, now):
                        deleted.append(meta["name"])
                except ApiException as error:  # the next pass tries again
                    log.warning("collecting %s %s/%s: %s", *key, api_error_message(error))
        return deleted

    def _collect(self, kind: str, obj: dict[str, Any], used: bool, now: datetime.datetime) -> bool:
        """Mark, unmark or delete one EngineBuild or ModelCache; True when deleted."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        since = (meta.get("annotations") or {}).get(ANNOTATION_UNUSED_SINCE)
        if used:
            if since:
                self.kube.patch(kind, *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: None}}})
            return False
        if not since:
            stamp = now.replace(microsecond=0).isoformat().replace("+00:00", "Z")
            self.kube.patch(kind, *key, {"metadata": {"annotations": {ANNOTATION_UNUSED_SINCE: stamp}}})
            return False
        unused_for = now - datetime.datetime.fromisoformat(since.replace("Z", "+00:00"))
        if unused_for.total_seconds() < self.settings.engine_retention_seconds:
            return False
        self.kube.delete(kind, *key)
        log.info("deleted %s %s/%s, unused for %s", kind, key[0], key[1], unused_for)
        return True
