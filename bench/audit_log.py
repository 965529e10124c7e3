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
            created[(ref["resource"], ref["name"])] = (
                _stamp(entry["requestReceivedTimestamp"]),
                _stamp(entry["stageTimestamp"]),
            )
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
