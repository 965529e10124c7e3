"""The fleet bench's release chain: a Job-released deployment's time split on the API server's clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.audit_log import release_chain


def _entry(verb: str, resource: str, name: str, received: float, answered: float, subresource: str = "") -> dict:
    def stamp(seconds: float) -> str:
        return f"2026-11-28T00:00:{seconds:09.6f}Z"

    ref = {
        "resource": resource,
        "namespace": "ns",
        "name": name,
        **({"subresource": subresource} if subresource else {}),
    }
    return {
        "verb": verb,
        "objectRef": ref,
        "requestReceivedTimestamp": stamp(received),
        "stageTimestamp": stamp(answered),
    }


def test_release_chain_takes_the_owner_patch_before_the_configmap_and_the_job_write_before_that(tmp_path: Path):
    log = tmp_path / "audit.log"
    entries = [
        _entry("update", "jobs", "eb-1-build", 1.0, 1.1, "status"),  # a step
        _entry("update", "jobs", "eb-1-build", 2.0, 2.1, "status"),  # its end
        _entry("patch", "enginebuilds", "eb-1", 2.3, 2.4, "status"),  # Succeeded
        _entry("create", "configmaps", "sd-1-runtime", 2.6, 2.7),
        _entry("create", "deployments", "sd-1", 2.8, 3.0),
        _entry("patch", "enginebuilds", "eb-1", 4.0, 4.1, "status"),  # later, not the release
        _entry("update", "jobs", "eb-1-build", 5.0, 5.1, "status"),
        _entry("create", "configmaps", "sd-2-runtime", 2.6, 2.7),  # released by a Job whose owner has no patch
    ]
    log.write_text("".join(json.dumps(e) + "\n" for e in entries))
    chain = release_chain(log, 0, "ns", {"sd-1": "eb-1-build", "sd-2": "mc-2-fetch"})
    values = [row["p50"] for row in chain.values()]
    assert [row["n"] for row in chain.values()] == [1] * 6
    assert values == pytest.approx([0.2, 0.1, 0.2, 0.1, 0.1, 0.2], abs=1e-5)  # epoch seconds: µs
