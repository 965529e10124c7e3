"""Write accounting from the API server's audit log: the operator's writes, every client's, and where apply →
first Job goes on the API server's clock."""

from __future__ import annotations

import datetime
import json
import math
from pathlib import Path

from bench.timing import summary

from specdec.kube.client import USER_AGENT

WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}


AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
"""


def _audit_entries(path: Path, offset: int):
    """Each entry of the API server's audit log (writes only: AUDIT_POLICY) from `offset` on."""
    with path.open() as log:
        log.seek(offset)
        for line in log:
            yield json.loads(line)


def _audited_writes(path: Path, offset: int, since: float = 0.0, until: float = math.inf):
    """(user agent, verb, resource) of each write in the API server's audit log from `offset` on, answered
    between `since` and `until` (wall clock)."""
    for entry in _audit_entries(path, offset):
        if entry.get("verb") in WRITE_VERBS and since <= _stamp(entry["stageTimestamp"]) < until:
            yield entry.get("userAgent", ""), entry["verb"], entry["objectRef"].get("resource", "?")


def _stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _times(entry: dict) -> tuple[float, float]:
    """When the API server received a request and when it answered (wall clock)."""
    return _stamp(entry["requestReceivedTimestamp"]), _stamp(entry["stageTimestamp"])


def apply_chain(
    path: Path, offset: int, namespace: str, first_jobs: dict[str, str], sent_at: dict[str, float]
) -> dict[str, dict]:
    """Where apply → first Job goes, from the API server's own clock (the audit log), for the deployments
    whose first Job is their ModelCache's fetch Job (`first_jobs`: deployment → Job): the operator's part
    (from the SD's create answered to the ModelCache's create received, and from that answered to the
    Job's create received) and the API server's (each create's own seconds). And apply → first Job ending
    where the loaded floor's chain ends, at the API server's answer to the Job's create (from `sent_at`, the
    wall clock before each SD's create was sent): the bench's own figure ends when its watch hears of the Job,
    a delivery the floor's direct writes do not wait for."""
    created: dict[tuple[str, str], tuple[float, float]] = {}  # (resource, name) -> (received, answered)
    for entry in _audit_entries(path, offset):
        ref = entry["objectRef"]
        if entry.get("verb") == "create" and ref.get("namespace") == namespace and ref.get("name"):
            created[(ref["resource"], ref["name"])] = _times(entry)
    parts: dict[str, list[float]] = {
        "operator: SD created → ModelCache create sent": [],
        "ModelCache create": [],
        "operator: ModelCache created → Job create sent": [],
        "Job create": [],
        "SD create received → Job created": [],
        "SD create sent → Job created": [],
    }
    for sd, job in first_jobs.items():
        steps = [
            created.get(key)
            for key in (("speculativedeployments", sd), ("modelcaches", job.removesuffix("-fetch")), ("jobs", job))
        ]
        if None in steps:
            continue
        (sd_in, sd_out), (mc_in, mc_out), (job_in, job_out) = steps
        values = (
            mc_in - sd_out,
            mc_out - mc_in,
            job_in - mc_out,
            job_out - job_in,
            job_out - sd_in,
            job_out - sent_at[sd],
        )
        for key, value in zip(parts, values, strict=True):
            parts[key].append(value)
    return {key: summary(values) for key, values in parts.items()}


SHARED_OF_JOB = {"-build": "enginebuilds", "-fetch": "modelcaches"}  # a Job's name suffix -> its owner's resource


def release_chain(path: Path, offset: int, namespace: str, released_by: dict[str, str]) -> dict[str, dict]:
    """Where Jobs done → Deployment goes for the deployments a Job's end released (`released_by`: deployment →
    that Job), from the API server's clock (the audit log): from the Job's last status write to the operator's
    last status patch of the Job's EngineBuild (or ModelCache) received before the deployment's ConfigMap
    create, that patch, to the ConfigMap's create received, that create, to the Deployment's create received,
    that create. The loaded floor's chain is the last four."""
    received: dict[tuple[str, str, str], list[tuple[float, float]]] = {}  # (verb kind, resource, name) -> times
    for entry in _audit_entries(path, offset):
        ref = entry["objectRef"]
        if ref.get("namespace") != namespace or not ref.get("name"):
            continue
        kind = "create" if entry.get("verb") == "create" else "status" if ref.get("subresource") == "status" else ""
        if kind:
            received.setdefault((kind, ref["resource"], ref["name"]), []).append(_times(entry))
    parts: dict[str, list[float]] = {
        "Job's last status write → operator's status patch of its owner received": [],
        "that status patch": [],
        "operator: status patched → ConfigMap create received": [],
        "ConfigMap create": [],
        "operator: ConfigMap created → Deployment create received": [],
        "Deployment create": [],
    }
    for sd, job in released_by.items():
        suffix = next((s for s in SHARED_OF_JOB if job.endswith(s)), None)
        config_map = received.get(("create", "configmaps", f"{sd}-runtime"))
        deployment = received.get(("create", "deployments", sd))
        if suffix is None or not config_map or not deployment:
            continue
        (cm_in, cm_out), (dep_in, dep_out) = config_map[0], deployment[0]
        owner = received.get(("status", SHARED_OF_JOB[suffix], job.removesuffix(suffix)), [])
        patched = [t for t in owner if t[0] < cm_in]
        if not patched:
            continue
        owner_in, owner_out = patched[-1]
        job_written = [t for t in received.get(("status", "jobs", job), []) if t[1] <= owner_in]
        if not job_written:
            continue
        job_out = job_written[-1][1]
        values = (owner_in - job_out, owner_out - owner_in, cm_in - owner_out, cm_out - cm_in, dep_in - cm_out)
        for key, value in zip(parts, (*values, dep_out - dep_in), strict=True):
            parts[key].append(value)
    return {key: summary(values) for key, values in parts.items()}


def audit_writes(path: Path, offset: int, since: float = 0.0, until: float = math.inf) -> dict[str, int]:
    """The operator's writes, by verb and resource."""
    counts: dict[str, int] = {}
    for agent, verb, resource in _audited_writes(path, offset, since, until):
        if agent.startswith(USER_AGENT) or agent.startswith("kopf"):
            counts[f"{verb} {resource}"] = counts.get(f"{verb} {resource}", 0) + 1
    return counts


def writes_by_client(path: Path, offset: int) -> dict[str, int]:
    """Every client's writes (the operator's share of the API server's work), by user agent's program."""
    counts: dict[str, int] = {}
    for agent, _, _ in _audited_writes(path, offset):
        program = agent.split("/", 1)[0] or "?"
        counts[program] = counts.get(program, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
